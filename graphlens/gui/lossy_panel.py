"""What the Quantize and Binarize panels share: a lossy rewrite previewed on a scratch copy, then applied.

Both start the workspace's preview job in a worker
(:meth:`~graphlens.gui.workers.WorkerSlot.start_job`: progress, cancel), show the output verdict, a
layers table and a coloured canvas while the workspace keeps the preview, and put it in as one undo
step on Apply (milliseconds: an edit of the live model, so on the GUI thread). The lifecycle (stale
previews, a run that finished after an edit, Apply reported back by the workspace, undo) is the
same, so it lives here once; a subclass supplies the settings, the words, the workspace's job for
them, how Apply goes through the workspace, and the table's columns and rows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import psygnal
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.gui import workers
from graphlens.gui.graph_panel import GraphPanel
from graphlens.numerics.metrics import Verdict, relative_rms, verdict
from graphlens.overlays import Overlay
from graphlens.workspace import Workspace

if TYPE_CHECKING:
    from graphlens.workspace.binarize_preview import BinarizePreview
    from graphlens.workspace.jobs import Job
    from graphlens.workspace.quantize_preview import QuantizePreview

Preview = TypeVar("Preview", bound="QuantizePreview | BinarizePreview")

BADGE_STYLES = {
    Verdict.GOOD: "background:#2e7d32;color:white;padding:3px 8px;border-radius:3px;font-weight:bold",
    Verdict.FAIR: "background:#ef6c00;color:white;padding:3px 8px;border-radius:3px;font-weight:bold",
    Verdict.POOR: "background:#c62828;color:white;padding:3px 8px;border-radius:3px;font-weight:bold",
}
"""The badge's colours; the thresholds are :mod:`graphlens.numerics.metrics`'s."""


class NumberItem(QTableWidgetItem):
    """A table cell showing a number as text and sorting by its value."""

    def __init__(self, value: float | None, text: str) -> None:
        super().__init__(text)
        self.value = -math.inf if value is None or math.isnan(value) else value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        return self.value < other.value if isinstance(other, NumberItem) else super().__lt__(other)


def table_cell(table: QTableWidget, row: int, column: int) -> QTableWidgetItem:
    """The item the panel put at (row, column): every cell of its tables is filled."""
    item = table.item(row, column)
    assert item is not None, f"no item at row {row}, column {column}"
    return item


def db_text(value: float | None) -> str:
    """A dB figure for a table cell: "exact" for +∞ (no error), "–" for none or NaN."""
    if value is None or math.isnan(value):
        return "–"
    return "exact" if math.isinf(value) and value > 0 else f"{value:.1f}"


def verdict_badge(sqnr_db: float | None) -> tuple[str, str, str]:
    """(word, style, sentence) for the output SQNR (None: the model could not be run to measure it)."""
    if sqnr_db is None:
        return Verdict.POOR.value, BADGE_STYLES[Verdict.POOR], "output SQNR not measured: the model could not be run"
    judged = verdict(sqnr_db)
    word, style = judged.value, BADGE_STYLES[judged]
    if math.isinf(sqnr_db) and sqnr_db > 0:
        return word, style, "the outputs are exactly the float model's"
    if sqnr_db == -math.inf:
        return word, style, ("output SQNR −∞ dB: the float model's outputs are zero, or the outputs hold "
                             "a NaN or infinity where the float model's have a number")
    if math.isnan(sqnr_db):
        return word, style, "output SQNR undefined: the outputs hold values too large to measure"
    return word, style, (f"output SQNR {sqnr_db:.1f} dB: the outputs differ from the float model's by about "
                         f"{100.0 * relative_rms(sqnr_db):.2g}% of their size (RMS)")

class LossyRewritePanel(QWidget, Generic[Preview]):
    """Run/Cancel, verdict, layers table, Learn, Show after, Apply, Save, and the preview's lifecycle.

    A subclass sets the words and table shape below and fills in the hooks at the end of the class,
    for its preview and request types.
    """

    lesson_requested = Signal(object, object)  # the preview shown, the layer of the selected row
    save_requested = Signal()
    filled = Signal()  # a run started or a preview arrived: the window shows this panel

    NOUN, VERB, PAST = "rewrite", "rewrite", "rewritten"
    """The words of the messages: "quantization", "quantize", "quantized"."""
    START_TEXT = BUSY_TEXT = LEARN_TEXT = LEARN_TIP = LEARN_HINT = ""
    COLUMNS: tuple[str, ...] = ()
    NODE_COLUMN = 0
    """The column whose item holds the row's index into ``result.layers`` (UserRole)."""
    STRETCH: tuple[int, ...] = ()
    ROW_HEIGHT = 20

    def __init__(self, workspace: Workspace, graph_panel: GraphPanel, show_error: Callable[[str], None],
                 before_edit: Callable[[], None] = lambda: None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workspace, self.graph_panel = workspace, graph_panel
        self.show_error, self.before_edit = show_error, before_edit
        self.jobs = workers.WorkerSlot()
        self.shown: Preview | None = None
        """The preview on screen (kept after Apply, for the lesson)."""
        self._last: Preview | None = None  # the last one shown: Apply clears it, then reports it applied
        self.applied = False
        self._overlay: Overlay | None = None
        self._idle_text = ""  # the summary a run replaced, back when it stops without a result

        self.run_button = QPushButton("Run")
        self.run_button.setToolTip(f"{self.VERB.capitalize()} a copy of the model and measure it; "
                                   "the model is not changed")
        self.run_button.clicked.connect(lambda: self.run())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.badge = QLabel()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.table = self._make_table()
        self.table.itemSelectionChanged.connect(self._on_row_selected)
        self.learn_button = QPushButton(self.LEARN_TEXT)
        self.learn_button.setToolTip(self.LEARN_TIP)
        self.learn_button.clicked.connect(self.learn)
        self.show_after = QCheckBox("Show the graph after")
        self.show_after.toggled.connect(self._show_after)
        self.apply_button = QPushButton("Apply")
        self.apply_button.setToolTip(f"Put the {self.PAST} model in (one undo step: Ctrl+Z)")
        self.apply_button.clicked.connect(lambda: self.apply())
        self.save_button = QPushButton("Save…")
        self.save_button.clicked.connect(self.save_requested)
        self._make_settings()
        self._build_layout()

        preview_changed, done = self._signals()
        preview_changed.connect(self._on_preview)
        done.connect(self._on_done)
        workspace.events.edited.connect(self._on_edited)
        workspace.events.opened.connect(lambda _: self.reset())
        self.reset()

    def _make_table(self) -> QTableWidget:
        table = QTableWidget(0, len(self.COLUMNS))
        table.setHorizontalHeaderLabels(list(self.COLUMNS))
        table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        table.verticalHeader().hide()
        table.verticalHeader().setDefaultSectionSize(self.ROW_HEIGHT)
        table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        for column in self.STRETCH:
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Stretch)
        return table

    def _add_results(self, layout: QVBoxLayout) -> None:
        """The summary, the table and the bottom row (Learn, Show after … Apply, Save), below the settings."""
        layout.addWidget(self.summary)
        layout.addWidget(self.table, 1)
        bottom = QHBoxLayout()
        for widget in (self.learn_button, self.show_after):
            bottom.addWidget(widget)
        bottom.addStretch(1)
        bottom.addWidget(self.apply_button)
        bottom.addWidget(self.save_button)
        layout.addLayout(bottom)

    # ================================================================ scripting API
    def run(self, *, background: bool = True) -> Preview | None:
        """Rewrite a scratch copy with the settings: the workspace's job, in a worker (progress, Cancel) unless
        ``background`` is False; the workspace keeps the result only for the model as it still is."""
        if self.workspace.model is None:
            return None
        try:
            job = self._job()
            if not background:
                preview: Preview = job.run()
                return preview
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None

        def done(preview: Preview, kept: bool) -> None:
            if not kept:  # the workspace's job_dropped event says so in the status bar too
                self.summary.setText(f"The model changed while it was {self.PAST}; press Run again.")

        def failed(message: str | None) -> None:
            self._after_run()
            if message:
                self.show_error(message.splitlines()[0])

        self._set_busy(True)
        self.jobs.start_job(job, done, failed, progress=lambda f: self.progress.setValue(int(f * 100)),
                            ended=lambda: self._set_busy(False))
        return None

    def cancel(self) -> None:
        """Stop the run; the model and the preview shown stay as they were."""
        self.jobs.cancel()
        self._set_busy(False)
        self._after_run()

    @property
    def busy(self) -> bool:
        return self.jobs.busy

    def selected_layer(self) -> Any:
        """The layer of the selected row (a ``result.layers`` entry), or None."""
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.shown is None:
            return None
        index = table_cell(self.table, rows[0].row(), self.NODE_COLUMN).data(Qt.ItemDataRole.UserRole)
        return None if index is None or index < 0 else self.shown.result.layers[index]  # < 0: a layer left float

    def learn(self) -> None:
        """The lesson on the selected row's layer; with no row selected, on the table's first (the worst, as the
        table opens sorted) rather than a dialog asking for one."""
        if not self.table.selectionModel().selectedRows() and self.table.rowCount():
            self.table.selectRow(0)
        layer = self.selected_layer()
        if layer is None:
            self.show_error(self.LEARN_HINT)
            return
        self.lesson_requested.emit(self.shown, layer)

    def apply(self) -> bool:
        """Put the previewed rewrite in as one undo step, or say why not."""
        self.before_edit()
        self.show_after.setChecked(False)
        try:
            self._apply_to_workspace()
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        return True

    def reset(self) -> None:
        """A new model: nothing shown, and the settings that named the old one's layers forgotten."""
        self.jobs.cancel()
        self._set_busy(False)
        self._last = None
        self._forget_layers()
        self._clear(self.START_TEXT)

    # ================================================================ reactions
    def _on_preview(self, preview: Preview | None) -> None:
        if preview is None:
            if self.shown is not None and not self.applied:
                self._clear(f"The model changed, so the {self.NOUN} shown no longer applies; press Run again.")
            return
        self.applied = False
        self._show(preview)
        self.filled.emit()

    def _on_done(self, result: object) -> None:
        last = self._last
        if last is not None and result is last.result:  # Apply dropped the preview (an edit), then said so
            self.applied = True
            self._show(last)

    def _on_edited(self, _step: object) -> None:
        if self.applied and self.shown is not None and self.shown.result.revision != self.workspace.revision:
            self._clear(f"The model changed since the {self.NOUN} was applied (an undo, a redo or another edit); "
                        f"press Run to {self.VERB} again.")

    def _badge(self, preview: Preview) -> tuple[str, str, str]:
        """(word, style, sentence) of the verdict beside Run: the output SQNR's."""
        return verdict_badge(preview.result.output_sqnr_db)

    def _show(self, preview: Preview) -> None:
        self.shown = self._last = preview
        word, style, sentence = self._badge(preview)
        self.badge.setText(word)
        self.badge.setStyleSheet(style)
        self.badge.show()
        state = "Applied (Ctrl+Z undoes it). " if self.applied else "Preview: the model is unchanged until Apply. "
        self.summary.setText(state + sentence[0].upper() + sentence[1:] + ".\n" + self._counts(preview))
        self._fill_table(preview)
        for widget in (self.apply_button, self.show_after):
            widget.setEnabled(not self.applied)
        self.learn_button.setEnabled(self._learnable(preview))
        self.save_button.setEnabled(self.applied)
        self._colour()

    def _show_after(self, on: bool) -> None:
        shown = self.shown
        if not on or shown is None:
            self.graph_panel.restore()
            return
        self.graph_panel.show_temporary(Model(shown.after).graph)

    def _clear(self, message: str) -> None:
        if self.show_after.isChecked():
            self.show_after.setChecked(False)
        self.shown, self.applied = None, False
        self.table.setRowCount(0)
        self.badge.hide()
        self.summary.setText(message)
        for widget in (self.apply_button, self.show_after, self.learn_button, self.save_button):
            widget.setEnabled(False)
        if self._overlay is not None and self.workspace.overlay.shown is self._overlay:
            self.workspace.overlay.show(None)  # our colours describe a preview no longer shown
        self._overlay = None

    def _set_busy(self, busy: bool) -> None:
        if busy:
            self._idle_text = self.summary.text()
        self.progress.setValue(0)
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.run_button.setEnabled(not busy)
        if busy:
            self.summary.setText(self.BUSY_TEXT)
            self.filled.emit()

    def _after_run(self) -> None:
        """A run stopped without a result (cancelled, failed): the summary of what is shown comes back."""
        self.summary.setText(self._idle_text)

    # ================================================================ what a subclass supplies
    def _make_settings(self) -> None:
        """Create the settings widgets and the state they keep (before the layout and the first reset)."""

    def _build_layout(self) -> None:
        """Lay the settings out, then call :meth:`_add_results`."""
        raise NotImplementedError

    def _signals(self) -> tuple[psygnal.SignalInstance, psygnal.SignalInstance]:
        """The workspace's (preview changed, rewrite applied) signals."""
        raise NotImplementedError

    def _job(self) -> Job[Any, Preview]:
        """The workspace's preview job for the settings (raises GraphLensError if they do not fit the model)."""
        raise NotImplementedError

    def _apply_to_workspace(self) -> None:
        raise NotImplementedError

    def _forget_layers(self) -> None:
        """Forget the settings that name the old model's layers."""

    def _counts(self, preview: Preview) -> str:
        """The summary's second line: what was rewritten."""
        raise NotImplementedError

    def _fill_table(self, preview: Preview) -> None:
        raise NotImplementedError

    def _learnable(self, preview: Preview) -> bool:
        return True

    def _colour(self) -> None:
        """Colour the canvas for the preview shown (keeping the overlay in ``self._overlay``)."""

    def _on_row_selected(self) -> None:
        layer = self.selected_layer()
        if layer is not None:
            self.graph_panel.select_nodes([layer.node], center=True)
        self.learn_button.setEnabled(layer is not None)
