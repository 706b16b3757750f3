"""The GraphLens window: canvas in the centre, Inspector on the right, Outline/Search on the left.

The window is layout and wiring: the open model, its undo history and every job's results live
in a :class:`~graphlens.workspace.Workspace`; the window turns user actions into workspace calls
and its panels follow the workspace's events. Every action is a method scripts can call too
(``open_model``, ``save_as``, ``export_image``, ``undo``, …).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import partial
from pathlib import Path

from PySide6.QtCore import QPoint, QSettings, Qt
from PySide6.QtGui import QAction, QCloseEvent, QDragEnterEvent, QDropEvent, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QWidget,
)

from graphlens.core.bulk import release_kept
from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model, load_model
from graphlens.gui import workers
from graphlens.gui.commands import WindowCommands
from graphlens.gui.comparer import Comparer
from graphlens.gui.graph_panel import GraphPanel
from graphlens.gui.inspector import Inspector
from graphlens.gui.menus import (
    ContextEntry,
    build_window_actions,
    context_actions,
    popup_context_menu,
    refresh_actions,
)
from graphlens.gui.outline import OutlinePanel
from graphlens.gui.overlay_panel import OverlayPanel
from graphlens.gui.plain import escaped
from graphlens.gui.render import render_scene
from graphlens.gui.window_layout import WindowLayout
from graphlens.gui.workflows import Workflows
from graphlens.rewrites.edit import EditHistory
from graphlens.workspace import Opened, Saved, Step, Workspace

MAX_RECENT = 10


class MainWindow(WindowLayout, Workflows, WindowCommands, QMainWindow):
    """GraphLens's window. Scriptable: the menu actions call these same methods."""

    actions_by_name: dict[str, QAction]
    """The menu table's actions (:data:`graphlens.gui.menus.ACTIONS`), also ``act_<name>``."""
    recent_menu: QMenu
    docks_menu: QMenu

    def __init__(self, workspace: Workspace | None = None) -> None:
        super().__init__()
        self.workspace = workspace or Workspace()
        self.load_jobs = workers.WorkerSlot()
        self.last_error: str | None = None
        self.error_box: QMessageBox | None = None
        self.settings = QSettings()
        self.panel = GraphPanel()
        self.canvas = self.panel.canvas
        self.setCentralWidget(self.panel)
        self.inspector = Inspector()
        self.outline = OutlinePanel()
        self.add_dock(self.inspector, "Inspector", Qt.DockWidgetArea.RightDockWidgetArea)
        self.add_dock(self.outline, "Outline / Search", Qt.DockWidgetArea.LeftDockWidgetArea)
        self.overlay_panel = OverlayPanel(self.workspace, self.panel, self.show_error)
        self.add_dock(self.overlay_panel, "Overlay", Qt.DockWidgetArea.RightDockWidgetArea)
        self._build_status_bar()
        self.comparer = Comparer(self)  # File › Compare with…: this model beside another (gui/comparer.py)
        self._build_actions()
        self._build_workflows()
        self.overlay_panel.filled.connect(self._open_overlay)  # closed until it is used
        self._connect()
        events = self.workspace.events
        events.opened.connect(self._on_opened)
        events.edited.connect(self._on_model_edited)
        events.saved.connect(self._on_saved)
        self.setAcceptDrops(True)
        self._size_to_screen()
        self._restore_layout()
        self._refresh_title()

    # ================================================================ construction
    def add_dock(self, widget: QWidget, title: str, area: Qt.DockWidgetArea) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(title.replace(" ", "").replace("/", "").replace("?", ""))
        widget.setMinimumSize(160, 80)  # panels squeeze on small screens instead of pushing the window wider
        dock.setWidget(widget)
        self.addDockWidget(area, dock)
        return dock

    def _build_status_bar(self) -> None:
        self.status_nodes = QLabel()
        self.status_graph = QLabel()
        self.status_zoom = QLabel()
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.progress.setMaximumWidth(160)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self._cancel_busy)
        for widget in (self.progress, self.cancel_button):
            widget.hide()
            self.statusBar().addPermanentWidget(widget)
        for label in (self.status_graph, self.status_nodes, self.status_zoom):
            label.setTextFormat(Qt.TextFormat.PlainText)
            self.statusBar().addPermanentWidget(label)

    def add_action(self, text: str, slot: Callable[..., object],
                   shortcut: QKeySequence | list[QKeySequence] | None = None,
                   checkable: bool = False, checked: bool = False, tip: str = "") -> QAction:
        """An action outside the menu table (a panel's own: the comparison's, the pattern workflows')."""
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcuts(shortcut if isinstance(shortcut, list) else [shortcut])
        action.setCheckable(checkable)
        if checkable:
            action.setChecked(checked)
            action.toggled.connect(slot)
        else:
            action.triggered.connect(slot)
        action.setStatusTip(tip)
        self.addAction(action)  # shortcuts work even when menus are hidden
        return action

    def _build_actions(self) -> None:
        build_window_actions(self)

    def context_actions(self, index: int | None) -> list[ContextEntry]:
        """What right-clicking item ``index`` offers, as (label, callback); the menu shows these."""
        return context_actions(self, index)

    def _context_menu(self, index: int | None, global_pos: QPoint) -> None:
        popup_context_menu(self, index, global_pos)

    def _connect(self) -> None:
        self.canvas.selection_changed.connect(self._on_selection)
        self.canvas.context_requested.connect(self._context_menu)
        self.canvas.zoom_changed.connect(lambda s: self.status_zoom.setText(f"{s * 100:.0f}%"))
        self.inspector.link_activated.connect(self._on_link)
        self.outline.hits_changed.connect(self._on_hits)
        self.outline.current_changed.connect(self._on_current_hit)
        self.outline.leave_requested.connect(lambda: self.canvas.setFocus(Qt.FocusReason.ShortcutFocusReason))
        self.panel.graph_changed.connect(self._on_graph_changed)
        self.panel.layout_started.connect(self._layout_started)
        self.panel.layout_progress.connect(lambda f: self.progress.setValue(int(f * 100)))
        self.panel.layout_done.connect(self._layout_finished)
        self.panel.layout_failed.connect(self._layout_failed)

    # ================================================================ scripting API
    @property
    def model(self) -> Model | None:
        return self.workspace.model

    @property
    def session(self) -> EditHistory | None:
        return self.workspace.session

    def open_model(self, path: str | os.PathLike[str]) -> bool:
        """Open ``path``; on failure show the reason in a dialog and keep the current model."""
        if not self._may_discard():
            return False
        QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            model = load_model(path)
        except GraphLensError as exc:
            self.show_error(" ".join(str(exc).splitlines()))  # one line, as the command line prints it
            return False
        except Exception as exc:  # a bug while reading a hostile file: say so, keep the model we have
            self.show_error(f"{path}: could not be opened (internal error: {type(exc).__name__}: "
                            f"{' '.join(str(exc).splitlines())})")
            return False
        finally:
            QApplication.restoreOverrideCursor()
        self.set_model(model)
        self._remember(Path(path))
        return True

    def open_model_async(self, path: str | os.PathLike[str]) -> workers.Worker | None:
        """Open ``path`` in a worker thread (the menu's way): the window stays responsive while a
        large file is read; the result, or the error dialog, arrives when it is done."""
        if not self._may_discard():
            return None
        target = Path(path)

        def done(model: Model) -> None:
            self.end_busy()
            self.set_model(model)
            self._remember(target)

        def failed(message: str | None) -> None:
            self.end_busy()
            if message:
                self.show_error(message)

        self.progress.setRange(0, 0)
        self.progress.show()
        self.cancel_button.show()
        self.statusBar().showMessage(f"Opening {target.name}…")
        return self.load_jobs.start(lambda task: load_model(target), done, failed)

    def _layout_failed(self, message: str) -> None:
        self._layout_finished()
        self.show_error(message.splitlines()[0])

    def end_busy(self) -> None:
        self.progress.setRange(0, 100)
        self._layout_finished()

    def _cancel_busy(self) -> None:
        if self.load_jobs.busy:
            self.load_jobs.cancel()
            self.end_busy()
        if self.match_jobs.busy:
            self._cancel_matching()
        self.panel.cancel_layout()

    def set_model(self, model: Model) -> None:
        """Show ``model`` (already read): it becomes the workspace's model."""
        if self.model is not None and self.model is not model:
            release_kept()  # the previous model's objects may be collected now
        self.workspace.set_model(model)

    def _on_opened(self, opened: Opened) -> None:
        self.inspector.set_model(opened.model)
        self._reset_job_panels()
        self.panel.show_root(opened.model.graph)
        self._refresh_title()

    def save(self) -> bool:
        """Save over the model's file (Ctrl+S); asks for a name if it has none."""
        if self.model is None:
            return False
        if self.model.path is None:
            return self.ask_save_as()
        return self._save_to(self.model.path, overwrite_source=True)

    def save_as(self, path: str | os.PathLike[str]) -> bool:
        return self._save_to(Path(path), overwrite_source=True)

    def export_image(self, path: str | os.PathLike[str], *, visible_only: bool = False) -> Path | None:
        """Write the graph as shown (with its highlights and legend) to a .png or .svg: all of it, or
        with ``visible_only`` the part the canvas shows now, at full size."""
        if self.canvas.renderer is None:
            return None
        region = self.canvas.visible_scene_rect() if visible_only else None
        try:
            return render_scene(self.canvas.renderer, path, self.canvas.marks, region=region,
                                legend=self.canvas.legend_painter)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None

    def undo(self) -> None:
        if self.model is None:
            return
        self.before_edit()
        step = self.workspace.undo()
        if step is not None:
            self.statusBar().showMessage(f"Undone: {step.label}", 3000)

    def redo(self) -> None:
        if self.model is None:
            return
        self.before_edit()
        step = self.workspace.redo()
        if step is not None:
            self.statusBar().showMessage(f"Redone: {step.label}", 3000)

    def select_nodes(self, names: list[str], *, center: bool = True) -> None:
        self.panel.select_nodes(names, center=center)

    def current_graph(self) -> Graph | None:
        return self.panel.graph

    def show_error(self, message: str) -> None:
        """Tell the user, without blocking scripts or tests that drive the window."""
        self.last_error = message
        box = QMessageBox(QMessageBox.Icon.Warning, "GraphLens", message, QMessageBox.StandardButton.Ok, self)
        box.setTextFormat(Qt.TextFormat.PlainText)  # messages quote names from the model
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    # ================================================================ reactions
    def _on_model_edited(self, step: Step) -> None:
        """The workspace dropped what described the model as it was (each panel heard); redraw it where the user
        is, ask the panels' questions again, and show the inspected node as it is now (or nothing, if it went)."""
        self._refresh_title()
        self.inspector.set_model(self.model)
        self.panel.relayout(keep_view=True)
        self._ask_again()
        self._on_selection(sorted(self.canvas.marks.selected))

    def _on_saved(self, saved: Saved) -> None:
        self._remember(saved.path)
        self._refresh_title()
        self.statusBar().showMessage(f"Saved {saved.path}", 5000)

    def _on_graph_changed(self, graph: Graph | None) -> None:
        self.outline.set_graph(graph)
        refresh_actions(self)
        if graph is None:
            self.status_graph.setText("")
            self.status_nodes.setText("")
            return
        self.status_graph.setText("main graph" if graph.parent is None else graph.path)
        self.status_nodes.setText(f"{len(graph.nodes):,} nodes" + (f" ({self.model.node_count():,} in model)"
                                                                   if self.model and graph.parent is not None else ""))

    def _on_selection(self, indices: list[int]) -> None:
        view, graph = self.panel.view, self.panel.graph
        if view is None or graph is None or len(indices) != 1:
            if not indices:
                self.inspector.clear()
            return
        item = view.items[indices[0]]
        if item.kind == "node" and item.node is not None:
            self.inspector.show_node(graph, graph.by_name[item.node])
        elif item.kind == "group":
            self.inspector.show_group(item.key.removeprefix("group:"), item.members)
        elif item.kind in ("input", "output"):
            self.inspector.show_tensor(graph, item.title)

    def _on_link(self, kind: str, name: str) -> None:
        graph = self.panel.graph
        if graph is None:
            return
        if kind == "node" and name in graph.by_name:
            self.panel.select_nodes([name], center=True)
        elif kind == "tensor":
            self.inspector.show_tensor(graph, name)

    def _on_hits(self, names: list[str]) -> None:
        self.canvas.marks.hits = {i for i in (self.panel.item_of(n) for n in names) if i is not None}
        self.canvas.marks.current_hit = None
        self.canvas.update()

    def _on_current_hit(self, name: str) -> None:
        index = self.panel.item_of(name)
        if index is not None:
            self.canvas.select([index])  # selected too: the Menu key and the Explain menu act on it
            self.canvas.marks.current_hit = index
            self.canvas.center_on(index)
            graph = self.panel.graph
            if graph is not None and name in graph.by_name:
                self.inspector.show_node(graph, graph.by_name[name])

    def _layout_started(self, nodes: int) -> None:
        self.progress.setValue(0)
        self.progress.show()
        self.cancel_button.show()
        self.statusBar().showMessage(f"Laying out {nodes:,} nodes…")

    def _layout_finished(self) -> None:
        self.progress.hide()
        self.cancel_button.hide()
        self.statusBar().clearMessage()

    # ================================================================ files
    def _save_to(self, path: Path, *, overwrite_source: bool) -> bool:
        try:
            self.workspace.save_as(path, overwrite_source=overwrite_source)  # history stays: undo still works
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        return True

    def _may_discard(self) -> bool:
        """Ask before unsaved changes would be lost; True to go ahead."""
        if self.model is None or not self.model.modified:
            return True
        answer = QMessageBox.question(  # forced rich text, the file name escaped: a name never reads as markup
            self, "GraphLens", f"<p>{escaped(self.model.name)} has unsaved changes. Save them first?</p>",
            QMessageBox.StandardButton.Save | QMessageBox.StandardButton.Discard | QMessageBox.StandardButton.Cancel,
        )
        if answer == QMessageBox.StandardButton.Save:
            return self.save()
        return answer == QMessageBox.StandardButton.Discard

    # ================================================================ window state
    def _refresh_title(self) -> None:
        modified = bool(self.model and self.model.modified)
        self.setWindowModified(modified)
        self.setWindowTitle(f"{self.model.name}[*] — GraphLens" if self.model else "GraphLens")
        refresh_actions(self)

    def _remember(self, path: Path) -> None:
        recent = [str(path.resolve())] + [p for p in self._recent() if p != str(path.resolve())]
        self.settings.setValue("recent", recent[:MAX_RECENT])
        self.refresh_recent()

    def _recent(self) -> list[str]:
        value = self.settings.value("recent", [])
        if isinstance(value, str):
            return [value]
        return [str(p) for p in value] if isinstance(value, (list, tuple)) else []

    def refresh_recent(self) -> None:
        """File › Open Recent: the last files opened or saved, newest first."""
        self.recent_menu.clear()
        for path in self._recent():
            self.recent_menu.addAction(path, partial(self.open_model_async, path))
        self.recent_menu.setEnabled(bool(self._recent()))

    def closeEvent(self, event: QCloseEvent) -> None:
        if not self._may_discard():
            event.ignore()
            return
        self._cancel_busy()
        workers.shutdown()  # nothing runs, and no late signal arrives, once the window is gone
        self.settings.setValue("geometry", self.saveGeometry())
        self.settings.setValue("state", self.saveState())
        event.accept()

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if any(u.toLocalFile().lower().endswith(".onnx") for u in event.mimeData().urls()):
            event.acceptProposedAction()

    def dropEvent(self, event: QDropEvent) -> None:
        for url in event.mimeData().urls():
            if url.toLocalFile().lower().endswith(".onnx"):
                self.open_model_async(url.toLocalFile())
                event.acceptProposedAction()
                return
