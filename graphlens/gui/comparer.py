"""File › Compare with…: compare the open model with another in a worker, and show or close the compare view.

The workspace's compare job runs on a copy of the open model (it may change meanwhile; the workspace
drops a result for a model that changed, and says so), with progress and Cancel in the status bar; a
file that cannot be read is one line in a dialog and whatever was shown stays. The workspace's
``compared`` event shows the :class:`~graphlens.gui.compare_view.CompareView`; ``compared`` with None (a new model, an
edit) closes it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QObject, QSize, Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QFileDialog

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.gui import workers
from graphlens.gui.compare_view import CompareView


class Comparer(QObject):
    """File › Compare with…: runs the comparison in a worker and shows or hides the :class:`CompareView`."""

    def __init__(self, window: Any) -> None:
        super().__init__(window)
        self.window, self.workspace = window, window.workspace
        self.jobs = workers.WorkerSlot()
        self.view: CompareView | None = None
        self._layout: tuple[QByteArray, QSize] | None = None
        """The window's docks and size before the comparison made room for itself, put back when it closes."""
        K = QKeySequence
        self.act_next = window.add_action("Next Change", lambda: self.step(1), K("F8"),
                                          tip="The next change of the comparison")
        self.act_prev = window.add_action("Previous Change", lambda: self.step(-1), K("Shift+F8"))
        self.act_close = window.add_action("Close Comparison", self.escape, K("Esc"),
                                           tip="Back to the open model alone (Esc: clears the selection first)")
        self._enable(False)
        self.workspace.comparison.events.result.connect(self._on_compared)
        self.workspace.events.opened.connect(lambda _opened: self.jobs.cancel())
        window.cancel_button.clicked.connect(self.cancel)

    def actions(self) -> list[QAction]:
        return [self.act_next, self.act_prev, self.act_close]

    # ================================================================ scripting API
    def compare_with(self, other: str | os.PathLike[str] | Model, *, background: bool = True) -> Any:
        """Compare the open model (A) with ``other`` (B: a path or a Model) and show both; in a worker
        with progress and Cancel, or here and now with ``background=False`` (then the Comparison is
        returned). A file that cannot be read is one line in a dialog, and the view shown stays."""
        model = self.workspace.model
        if model is None:
            self.window.show_error("open a model first; the comparison shows it beside the other one")
            return None
        name = other.name if isinstance(other, Model) else Path(other).name

        def failed(message: str | None) -> None:
            self._end_busy()
            if message:
                first = " ".join(message.splitlines()[:1])
                self.window.show_error(first if name in first else f"{name}: {first}")

        if not background:
            try:
                return self.workspace.comparison.run(other)  # its result event shows the view
            except GraphLensError as exc:
                failed(str(exc))
            except Exception as exc:  # a bug while reading a hostile file: say so, keep what is shown
                failed(f"could not be compared (internal error: {type(exc).__name__}: {exc})")
            return None
        job = self.workspace.comparison.job(other, scratch=True)  # the model may change meanwhile
        window = self.window
        window.progress.setRange(0, 100)
        window.progress.setValue(0)
        window.progress.show()
        window.cancel_button.show()
        window.statusBar().showMessage(f"Comparing {model.name} with {name}…")
        return self.jobs.start_job(job, lambda comparison, kept: None, failed, progress=self._progress,
                                   ended=self._end_busy)

    def close(self) -> None:
        """Back to the single view of the open model (the comparison stays in the workspace)."""
        view, self.view = self.view, None
        self._enable(False)
        if view is None:
            return
        window = self.window
        panel = view.release()
        window.takeCentralWidget()
        window.setCentralWidget(panel)
        panel.show()
        window.layout().activate()
        view.deleteLater()
        if self._layout is not None:
            state, size = self._layout
            self._layout = None
            window.restoreState(state)
            window.resize(size)
        window.canvas.update()

    def step(self, delta: int) -> int | None:
        return self.view.step(delta) if self.view is not None else None

    def escape(self) -> None:
        """Esc while comparing: clears a selection first, then closes the comparison."""
        view = self.view
        if view is None:
            return
        if view.panel_a.canvas.marks.selected or view.panel_b.canvas.marks.selected:
            view.panel_a.canvas.select([])
            view.panel_b.canvas.select([])
            return
        self.close()

    def cancel(self) -> None:
        if self.jobs.busy:
            self.jobs.cancel()
            self._end_busy()

    def ask(self) -> None:
        """The file dialog of File › Compare with…."""
        model = self.workspace.model
        if model is None:
            self.window.show_error("open a model first; the comparison shows it beside the other one")
            return
        start = str(model.path.parent) if model.path else ""
        path, _ = QFileDialog.getOpenFileName(self.window, "Compare with", start, "ONNX models (*.onnx);;All files (*)")
        if path:
            self.compare_with(path)

    # ================================================================ reactions
    def _on_compared(self, comparison: Any) -> None:
        self.close()
        if comparison is None:
            return
        window = self.window
        self._layout = (window.saveState(), window.size())
        self.view = CompareView(window, comparison)
        window.takeCentralWidget()  # A's panel moves into the view; the window does not delete it
        window.setCentralWidget(self.view)
        self.view.show()  # now, not when the event loop gets to it: the canvases need their sizes to fit
        self._enable(True)
        bottom = [d for d in window.findChildren(QDockWidget) if d.isVisible() and not d.isFloating()
                  and window.dockWidgetArea(d) == Qt.DockWidgetArea.BottomDockWidgetArea]
        if bottom:  # the two canvases and the changes list need the height more than the bottom panels
            window.resizeDocks(bottom[:1], [int(window.height() * 0.15)], Qt.Orientation.Vertical)
        window.layout().activate()  # the canvases take their new sizes now, and A fits its half
        self.view.fit()
        lines = comparison.summary_lines()
        window.statusBar().showMessage(lines[0] if lines else "Compared", 8000)

    def _progress(self, value: Any) -> None:
        if isinstance(value, (int, float)):
            self.window.progress.setValue(int(value * 100))

    def _end_busy(self) -> None:
        self.window.progress.hide()
        self.window.cancel_button.hide()
        self.window.statusBar().clearMessage()

    def _enable(self, on: bool) -> None:
        for action in self.actions():
            action.setEnabled(on)
