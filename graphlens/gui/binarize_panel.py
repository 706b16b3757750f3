"""The Binarize panel: settings, Run (off the GUI thread), the output verdict, the layers table with
bits per layer, Apply.

Run binarizes a scratch copy (:meth:`Workspace.binarize_request` → ``compute_binarize_preview`` in
a worker, with progress and cancel); the workspace keeps the preview only while the model is the
one it was computed for. The layers may be limited to one match's or every match's (the Matches
panel's "Binarize…"). Each row's bits box sets that layer's K and runs again. The canvas is
coloured by each layer's reconstruction SQNR through the workspace's overlay; Apply puts the
previewed model in as one undo step.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.gui import workers
from graphlens.gui.graph_panel import GraphPanel
from graphlens.gui.quantize_panel import NumberItem, verdict
from graphlens.overlays import Overlay
from graphlens.workspace import Workspace
from graphlens.workspace.binarize_preview import BinarizePreview, compute_binarize_preview

COLUMNS = ("Node", "Tensor", "Bits K", "SQNR dB", "Distinct values", "α per")
FORMS = (("emulated", "emulated form", "Each weight is stored as its ±α₁ ± α₂ … sum, in float"),
         ("structured", "structured form", "The K sign tensors are stored as int8 with their α, and summed in the graph"))
ACTIVATION_WARNING = ("Activations binarized too: every layer's input becomes ±1. The outputs change a lot; "
                      "a model usually has to be trained for this.")
WHOLE_MODEL = "every linear layer"


def _db(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return "exact" if math.isinf(value) and value > 0 else f"{value:.1f}"


class BinarizePanel(QWidget):
    """The dock: settings, which layers, Run/Cancel, verdict, layers table (bits per row), Learn, Apply."""

    lesson_requested = Signal(object, object)  # the BinarizePreview shown, the LayerBits of the selected row
    save_requested = Signal()

    def __init__(self, workspace: Workspace, graph_panel: GraphPanel, show_error: Callable[[str], None],
                 before_edit: Callable[[], None] = lambda: None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workspace, self.graph_panel, self.show_error, self.before_edit = workspace, graph_panel, show_error, before_edit
        self.jobs = workers.JobSlot()
        self.shown: BinarizePreview | None = None
        """The preview on screen (kept after Apply, for the lesson)."""
        self._last: BinarizePreview | None = None
        self.applied = False
        self.layer_bits: dict[str, int] = {}
        """Bits chosen per layer in the table (the others take the bits box's)."""
        self.only: list[str] | None = None
        self.scope = WHOLE_MODEL
        self._overlay: Overlay | None = None

        self.bits = QSpinBox()
        self.bits.setRange(1, 8)
        self.bits.setValue(1)
        self.bits.setPrefix("bits K = ")
        self.bits.setToolTip("Each weight becomes a sum of K signed terms ±α₁ ± α₂ … ± α_K: 2^K levels")
        self.per_kernel = QCheckBox("α per kernel")
        self.per_kernel.setChecked(True)
        self.per_kernel.setToolTip("One set of α per output kernel (filter); off: one set for the whole tensor")
        self.form = QComboBox()
        for key, text, tip in FORMS:
            self.form.addItem(text, key)
            self.form.setItemData(self.form.count() - 1, tip, Qt.ItemDataRole.ToolTipRole)
        self.form.setToolTip("How the binarized weights are written into the model: " + "; ".join(
            f"{text}: {tip[0].lower()}{tip[1:]}" for _, text, tip in FORMS))
        self.fold = QCheckBox("fold BNs first")
        self.fold.setChecked(True)
        self.fold.setToolTip("Fold each BatchNorm into its layer before binarizing (the whole model's, as the "
                             "quantizer does): a BN scale left apart would undo the binarized weight's")
        self.activations = QCheckBox("binarize activations")
        self.activations.toggled.connect(lambda on: self.warning.setVisible(on))
        self.warning = QLabel(ACTIVATION_WARNING)
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet("color:#b71c1c")
        self.warning.hide()
        self.samples = QSpinBox()
        self.samples.setRange(1, 256)
        self.samples.setValue(4)
        self.samples.setPrefix("random samples: ")
        self.samples.setToolTip("Inputs the float and binarized models both run on, for the output SQNR")
        self.scope_label = QLabel()
        self.scope_label.setTextFormat(Qt.TextFormat.PlainText)
        self.scope_label.setWordWrap(True)
        self.whole_button = QPushButton("Every linear layer")
        self.whole_button.setToolTip("Binarize every linear layer with a constant weight, not only the matches'")
        self.whole_button.clicked.connect(lambda: self.set_scope(None))
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Binarize a copy of the model and measure it; the model is not changed")
        self.run_button.clicked.connect(lambda: self.run())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.badge = QLabel()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(24)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._on_row_selected)
        self.learn_button = QPushButton("Learn binarization")
        self.learn_button.setToolTip("The selected layer's kernel: its weights, the 2^K levels and each α worked out")
        self.learn_button.clicked.connect(self.learn)
        self.show_after = QCheckBox("Show the graph after")
        self.show_after.toggled.connect(self._show_after)
        self.apply_button = QPushButton("Apply")
        self.apply_button.setToolTip("Put the binarized model in (one undo step: Ctrl+Z)")
        self.apply_button.clicked.connect(lambda: self.apply())
        self.save_button = QPushButton("Save…")
        self.save_button.clicked.connect(self.save_requested)
        self._build_layout()

        events = workspace.events
        events.binarize_preview_changed.connect(self._on_preview)
        events.binarized.connect(self._on_binarized)
        events.edited.connect(self._on_edited)
        events.opened.connect(lambda _: self.reset())
        self.reset()

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        rows = ((self.bits, self.per_kernel, self.form, self.fold, self.activations),
                (QLabel("Layers:"), self.scope_label, self.whole_button),
                (self.run_button, self.cancel_button, self.samples, self.progress, self.badge))
        for row in rows:
            line = QHBoxLayout()
            for widget in row:
                line.addWidget(widget, 1 if widget in (self.progress, self.scope_label) else 0)
            if self.scope_label not in row:
                line.addStretch(1)
            layout.addLayout(line)
        layout.addWidget(self.warning)
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
    def config(self):
        """The settings as a :class:`BinarizeConfig`."""
        from graphlens.binarize.config import BinarizeConfig

        return BinarizeConfig(bits=self.bits.value(), per_kernel=self.per_kernel.isChecked(),
                              form=self.form.currentData(), layer_bits=dict(self.layer_bits),
                              binarize_activations=self.activations.isChecked(), fold_first=self.fold.isChecked())

    def set_scope(self, only: list[str] | None, scope: str = WHOLE_MODEL) -> None:
        """Binarize only the layers ``only`` names (None: every linear layer); ``scope`` says which in words."""
        self.only, self.scope = (None, WHOLE_MODEL) if only is None else (list(only), scope)
        self.scope_label.setText(self.scope if only is None else f"{self.scope} ({len(only)} layer"
                                 f"{'s' if len(only) != 1 else ''}: {', '.join(only[:4])}{'…' if len(only) > 4 else ''})")
        self.whole_button.setVisible(only is not None)

    def set_layer_bits(self, node: str, bits: int, *, rerun: bool = True) -> None:
        """Binarize ``node`` with ``bits`` (its row's box does this) and run again."""
        if bits == self.bits.value():
            self.layer_bits.pop(node, None)
        else:
            self.layer_bits[node] = bits
        if rerun and self.shown is not None and not self.applied:
            self.run()

    def run(self, *, background: bool = True) -> BinarizePreview | None:
        """Binarize a scratch copy with the settings (in a worker unless ``background`` is False)."""
        if self.workspace.model is None:
            return None
        try:
            request = self.workspace.binarize_request(self.config(), None, self.samples.value(), only=self.only,
                                                      scope=self.scope)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None
        if not background:
            try:
                preview = compute_binarize_preview(request)
            except GraphLensError as exc:
                self.show_error(str(exc))
                return None
            self.workspace.accept_binarize_preview(preview)
            return preview

        def done(preview: BinarizePreview) -> None:
            self._set_busy(False)
            if not self.workspace.accept_binarize_preview(preview):
                self.summary.setText("The model changed while it was binarized; press Run again.")

        def failed(message: str | None) -> None:
            self._set_busy(False)
            if message:
                self.show_error(message.splitlines()[0])

        self._set_busy(True)
        self.jobs.start(lambda progress, cancelled: compute_binarize_preview(request, progress, cancelled), done,
                        failed, progress=lambda f: self.progress.setValue(int(f * 100)))
        return None

    def cancel(self) -> None:
        self.jobs.cancel()
        self._set_busy(False)

    @property
    def busy(self) -> bool:
        return self.jobs.busy

    def colour_canvas(self) -> Overlay | None:
        """Colour the canvas by each binarized layer's reconstruction SQNR (through the workspace's overlay)."""
        shown = self.shown
        if shown is None:
            return None
        self._overlay = Overlay.of("Binarization SQNR", shown.result.per_node("sqnr_db"), "dB", higher_is_worse=False,
                                   log_scale=False, source=f"binarize preview, {shown.config.bits} bit(s)")
        return self.workspace.set_overlay(self._overlay)

    def selected_layer(self):
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.shown is None:
            return None
        return self.shown.result.layers[self.table.item(rows[0].row(), 0).data(Qt.ItemDataRole.UserRole)]

    def select_layer(self, node: str) -> None:
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == node:
                self.table.selectRow(row)
                return

    def row_bits(self, node: str) -> QSpinBox | None:
        """The bits box of ``node``'s row."""
        for row in range(self.table.rowCount()):
            if self.table.item(row, 0).text() == node:
                return self.table.cellWidget(row, 2)
        return None

    def learn(self) -> None:
        layer = self.selected_layer()
        if layer is None:
            self.show_error("select a row of the table first; the lesson explains one kernel of its weight")
            return
        self.lesson_requested.emit(self.shown, layer)

    def apply(self) -> bool:
        """Put the previewed binarization in as one undo step, or say why not."""
        self.before_edit()
        self.show_after.setChecked(False)
        try:
            self.workspace.apply_binarize()
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        return True

    def reset(self) -> None:
        """A new model: nothing shown, bits per layer and scope forgotten."""
        self.jobs.cancel()
        self._set_busy(False)
        self._last = None
        self.layer_bits.clear()
        self.set_scope(None)
        self._clear("Choose the bits and press Run, or pick matches and press “Binarize…” in the Matches panel: "
                    "a copy of the model is binarized and measured; the model changes only when you Apply.")

    # ================================================================ reactions
    def _on_preview(self, preview: BinarizePreview | None) -> None:
        if preview is None:
            if self.shown is not None and not self.applied:
                self._clear("The model changed, so the binarization shown no longer applies; press Run again.")
            return
        self.applied = False
        self._show(preview)

    def _on_binarized(self, result) -> None:
        last = self._last
        if last is not None and result is last.result:  # Apply dropped the preview (an edit), then said so
            self.applied = True
            self._show(last)

    def _on_edited(self, _step) -> None:
        if self.applied and self.shown is not None and self.shown.result.revision != self.workspace.revision:
            self._clear("The binarization was undone or the model changed; press Run to binarize again.")

    def _show(self, preview: BinarizePreview) -> None:
        self.shown = self._last = preview
        result = preview.result
        word, style, sentence = verdict(result.output_sqnr_db)
        self.badge.setText(word)
        self.badge.setStyleSheet(style)
        self.badge.show()
        state = "Applied (Ctrl+Z undoes it). " if self.applied else "Preview: the model is unchanged until Apply. "
        self.summary.setText(state + sentence[0].upper() + sentence[1:] + ".\n" + self._counts(preview))
        self._fill_table(preview)
        for widget in (self.apply_button, self.show_after):
            widget.setEnabled(not self.applied)
        self.learn_button.setEnabled(bool(result.layers))
        self.save_button.setEnabled(self.applied)
        self.colour_canvas()

    @staticmethod
    def _counts(preview: BinarizePreview) -> str:
        result = preview.result
        n = len(result.layers)
        worst = min(result.layers, key=lambda l: l.sqnr_db, default=None)
        parts = [f"{n} layer{'s' if n != 1 else ''} binarized ({preview.scope}), {result.form} form"]
        if worst is not None:
            parts.append(f"weakest reconstruction: {worst.node} at {_db(worst.sqnr_db)} dB")
        own = dict(preview.config.layer_bits)
        if own:
            parts.append(f"K = {preview.config.bits}, except " + ", ".join(f"{n}: {k}" for n, k in list(own.items())[:4])
                         + ("…" if len(own) > 4 else ""))
        if result.fold is not None and getattr(result.fold, "applied", None):
            parts.append("BatchNorms folded in first")
        text = "; ".join(parts) + "."
        return text + "".join(f"\n{w}" for w in result.warnings[:3])

    def _fill_table(self, preview: BinarizePreview) -> None:
        table = self.table
        table.setSortingEnabled(False)
        table.clearContents()
        layers = preview.result.layers
        table.setRowCount(len(layers))
        for row, layer in enumerate(layers):
            node = QTableWidgetItem(layer.node)
            node.setData(Qt.ItemDataRole.UserRole, row)
            node.setToolTip(layer.node)
            cells = [node, QTableWidgetItem(layer.tensor), NumberItem(layer.bits, ""),
                     NumberItem(layer.sqnr_db, _db(layer.sqnr_db)),
                     NumberItem(layer.distinct_values, f"{layer.distinct_values:,}"),
                     QTableWidgetItem("kernel" if layer.per_kernel else "tensor")]
            for column, cell in enumerate(cells):
                table.setItem(row, column, cell)
            box = QSpinBox()
            box.setRange(1, 8)
            box.setValue(layer.bits)
            box.setEnabled(not self.applied)
            box.setToolTip("This layer's bits K; changing it runs the binarization again")
            box.valueChanged.connect(lambda k, name=layer.node: self.set_layer_bits(name, k))
            table.setCellWidget(row, 2, box)
        table.setSortingEnabled(True)
        table.sortItems(3, Qt.SortOrder.AscendingOrder)  # the weakest reconstruction first

    def _on_row_selected(self) -> None:
        layer = self.selected_layer()
        if layer is not None:
            self.graph_panel.select_nodes([layer.node], center=True)
        self.learn_button.setEnabled(layer is not None)

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
        if self._overlay is not None and self.workspace.overlay is self._overlay:
            self.workspace.set_overlay(None)  # our colours describe a binarization no longer shown
        self._overlay = None

    def _set_busy(self, busy: bool) -> None:
        self.progress.setValue(0)
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.run_button.setEnabled(not busy)
        if busy:
            self.summary.setText("Binarizing a copy of the model and running both on the same inputs…")
