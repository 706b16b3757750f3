"""The Quantize panel: settings, Run (off the GUI thread), the output verdict, the layers table, Apply.

Run quantizes a scratch copy (:meth:`Workspace.quantize_request` → ``compute_quantize_preview`` in
a worker, with progress and cancel); the workspace keeps the preview only while the model is the
one it was computed for. The canvas is coloured by the chosen metric through the workspace's
overlay, so the Overlay panel's legend and table show it too. Unticking a layer (or right-clicking
its node) leaves it float and runs again; Apply puts the previewed model in as one undo step.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
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
from graphlens.overlays import Overlay
from graphlens.quantize import METHODS, QuantConfig, load_calibration
from graphlens.workspace import Workspace
from graphlens.workspace.quantize_preview import QuantizePreview, compute_quantize_preview

METRIC_CHOICES = [
    ("sqnr_db", "SQNR of each layer's tensors (dB)", "Quantization SQNR", "dB", False),
    ("sensitivity_db", "Sensitivity: output SQNR with only this layer quantized (dB)", "Output SQNR, layer alone", "dB",
     False),
    ("mse", "Mean squared error", "Quantization MSE", "", True),
    ("cosine", "Cosine similarity", "Quantization cosine", "", False),
    ("max_abs", "Max abs error", "Quantization max abs error", "", True),
]
"""(metric, picker text, overlay name, unit, higher is worse)."""
COLUMNS = ("Quantize", "Node", "Tensor", "Kind", "SQNR dB", "MSE", "Cosine", "Max abs", "Sensitivity dB")
GOOD_DB, FAIR_DB = 30.0, 20.0
"""Output SQNR verdicts: from 30 dB the outputs' error is within about 3% of their size, below 20 dB above 10%."""
VERDICTS = (
    (GOOD_DB, "GOOD", "background:#2e7d32;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"),
    (FAIR_DB, "FAIR", "background:#ef6c00;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"),
    (-math.inf, "POOR", "background:#c62828;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"),
)


class NumberItem(QTableWidgetItem):
    """A table cell showing a number as text and sorting by its value."""

    def __init__(self, value: float | None, text: str) -> None:
        super().__init__(text)
        self.value = -math.inf if value is None or math.isnan(value) else value
        self.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)

    def __lt__(self, other: QTableWidgetItem) -> bool:
        return self.value < other.value if isinstance(other, NumberItem) else super().__lt__(other)


def _db(value: float | None) -> str:
    if value is None:
        return "–"
    return "exact" if math.isinf(value) and value > 0 else f"{value:.1f}"


def verdict(sqnr_db: float) -> tuple[str, str, str]:
    """(word, style, sentence) for the output SQNR."""
    word, style = next((w, s) for floor, w, s in VERDICTS if sqnr_db >= floor)
    if math.isinf(sqnr_db):
        return word, style, "the outputs are exactly the float model's"
    relative = 100.0 * 10.0 ** (-sqnr_db / 20.0)
    return word, style, (f"output SQNR {sqnr_db:.1f} dB: the outputs differ from the float model's by about "
                         f"{relative:.2g}% of their size (RMS)")


class QuantizePanel(QWidget):
    """The dock: settings, Run/Cancel, verdict, metric picker, layers table, Learn, Apply, Save."""

    lesson_requested = Signal(object, object)  # the QuantizePreview shown, the LayerError of the selected row
    save_requested = Signal()

    def __init__(self, workspace: Workspace, graph_panel: GraphPanel, show_error: Callable[[str], None],
                 before_edit: Callable[[], None] = lambda: None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workspace, self.graph_panel, self.show_error, self.before_edit = workspace, graph_panel, show_error, before_edit
        self.jobs = workers.JobSlot()
        self.shown: QuantizePreview | None = None
        """The preview on screen (kept after Apply, for the lesson)."""
        self._last: QuantizePreview | None = None  # the last one shown: Apply clears it, then reports it applied
        self.applied = False
        self.npz: str | None = None
        self._overlay: Overlay | None = None
        self._filling = False

        self.bits = QComboBox()
        self.bits.addItems(["int8 weights", "int4 weights"])
        self.per_channel = QCheckBox("per channel")
        self.per_channel.setChecked(True)
        self.per_channel.setToolTip("One weight scale per output channel (needs opset 13)")
        self.symmetric = QCheckBox("symmetric activations")
        self.symmetric.setToolTip("Zero point fixed at the middle; off: the range's own zero point (uint8 by default)")
        self.method = QComboBox()
        self.method.addItems(list(METHODS))
        self.method.setToolTip("How each activation's range is calibrated (see docs/quantize.md)")
        self.sensitivity = QCheckBox("rank layers")
        self.sensitivity.setChecked(True)
        self.sensitivity.setToolTip("Also measure the output SQNR with each layer quantized alone (2 runs per layer)")
        self.samples = QSpinBox()
        self.samples.setRange(1, 1024)
        self.samples.setValue(8)
        self.samples.setPrefix("random samples: ")
        self.npz_button = QPushButton("Samples .npz…")
        self.npz_button.setToolTip("Calibrate on your own inputs: one array per graph input, (samples, *shape)")
        self.npz_button.clicked.connect(self._ask_npz)
        self.npz_label = QLabel("")
        self.excluded = QComboBox()
        self.excluded.setToolTip("Layers left float; untick a row or right-click a node to add one")
        self.include_button = QPushButton("Include again")
        self.include_button.clicked.connect(lambda: self.set_excluded(self.excluded.currentText(), False))
        self.run_button = QPushButton("Run")
        self.run_button.setToolTip("Quantize a copy of the model and measure it; the model is not changed")
        self.run_button.clicked.connect(lambda: self.run())
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 100)
        self.badge = QLabel()
        self.summary = QLabel()
        self.summary.setWordWrap(True)
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.metric = QComboBox()
        for key, text, *_ in METRIC_CHOICES:
            self.metric.addItem(text, key)
        self.metric.setToolTip("Colour the canvas by this number per quantized layer (the worst of its tensors)")
        self.metric.activated.connect(lambda _: self.colour_by(self.metric.currentData()))
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.verticalHeader().setDefaultSectionSize(20)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._on_row_selected)
        self.table.itemChanged.connect(self._on_item_changed)
        self.learn_button = QPushButton("Learn fake quantization")
        self.learn_button.setToolTip("Explain the selected row's tensor: its histogram, range, scale, zero point and error")
        self.learn_button.clicked.connect(self.learn)
        self.show_after = QCheckBox("Show the graph after")
        self.show_after.setToolTip("The quantized graph; Q/DQ pairs are the badges on its edges")
        self.show_after.toggled.connect(self._show_after)
        self.apply_button = QPushButton("Apply")
        self.apply_button.setToolTip("Put the quantized model in (one undo step: Ctrl+Z)")
        self.apply_button.clicked.connect(lambda: self.apply())
        self.save_button = QPushButton("Save…")
        self.save_button.setToolTip("Save the model (after Apply)")
        self.save_button.clicked.connect(self.save_requested)
        self._build_layout()

        events = workspace.events
        events.quantize_preview_changed.connect(self._on_preview)
        events.quantized.connect(self._on_quantized)
        events.edited.connect(self._on_edited)
        events.opened.connect(lambda _: self.reset())
        self.reset()

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.excluded.setMinimumWidth(220)
        rows = ((self.bits, self.per_channel, self.symmetric, QLabel("  calibration"), self.method, self.samples,
                 self.npz_button, self.npz_label, self.sensitivity),
                (self.run_button, self.cancel_button, self.progress, self.badge, QLabel("  left float:"), self.excluded,
                 self.include_button),
                (QLabel("Colour the canvas by"), self.metric))
        for row in rows:
            line = QHBoxLayout()
            for widget in row:
                line.addWidget(widget, 1 if widget is self.progress else 0)
            line.addStretch(1)
            layout.addLayout(line)
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
    def config(self) -> QuantConfig:
        """The settings as a :class:`QuantConfig`."""
        return QuantConfig(weight_bits=4 if self.bits.currentIndex() == 1 else 8,
                           per_channel=self.per_channel.isChecked(),
                           symmetric_activations=self.symmetric.isChecked(), method=self.method.currentText(),
                           sensitivity=self.sensitivity.isChecked(), exclude_nodes=tuple(self.exclusions()))

    def exclusions(self) -> list[str]:
        return [self.excluded.itemText(k) for k in range(self.excluded.count())]

    def set_calibration_file(self, path: str | Path | None) -> bool:
        """Calibrate on ``path`` (.npz) instead of random samples (None: random); one line if it does not fit."""
        model = self.workspace.model
        if path is not None and model is not None:
            try:
                load_calibration(path, model)
            except GraphLensError as exc:
                self.show_error(str(exc))
                return False
        self.npz = None if path is None else str(path)
        self.npz_label.setText("" if path is None else Path(path).name)
        self.samples.setEnabled(path is None)
        return True

    def run(self, *, background: bool = True) -> QuantizePreview | None:
        """Quantize a scratch copy with the settings (in a worker unless ``background`` is False)."""
        if self.workspace.model is None:
            return None
        try:
            request = self.workspace.quantize_request(self.config(), self.npz, self.samples.value())
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None
        if not background:
            try:
                preview = compute_quantize_preview(request)
            except GraphLensError as exc:
                self.show_error(str(exc))
                return None
            self.workspace.accept_quantize_preview(preview)
            return preview

        def done(preview: QuantizePreview) -> None:
            self._set_busy(False)
            if not self.workspace.accept_quantize_preview(preview):
                self.summary.setText("The model changed while it was quantized; press Run again.")

        def failed(message: str | None) -> None:
            self._set_busy(False)
            if message:
                self.show_error(message.splitlines()[0])

        self._set_busy(True)
        self.jobs.start(lambda progress, cancelled: compute_quantize_preview(request, progress, cancelled), done,
                        failed, progress=lambda f: self.progress.setValue(int(f * 100)))
        return None

    def cancel(self) -> None:
        self.jobs.cancel()
        self._set_busy(False)

    @property
    def busy(self) -> bool:
        return self.jobs.busy

    def set_excluded(self, node: str, excluded: bool, *, rerun: bool = True) -> None:
        """Leave ``node`` float (or quantize it again) and run again with the new exclusions."""
        names = self.exclusions()
        if excluded and node not in names:
            self.excluded.addItem(node)
        elif not excluded and node in names:
            self.excluded.removeItem(names.index(node))
        self.include_button.setEnabled(self.excluded.count() > 0)
        if rerun and self.shown is not None and not self.applied:
            self.run()

    def is_quantized(self, node: str) -> bool | None:
        """Whether the preview on screen quantizes ``node`` (None: no preview, or not a layer it could)."""
        shown = self.shown
        if shown is None or self.applied:
            return None
        if node in shown.result.quantized_nodes:
            return True
        return False if node in self.exclusions() else None

    def colour_by(self, metric: str) -> Overlay | None:
        """Colour the canvas by one metric of the preview on screen (through the workspace's overlay)."""
        shown = self.shown
        if shown is None:
            return None
        key, text, name, unit, worse = next(c for c in METRIC_CHOICES if c[0] == metric)
        values = shown.result.per_node(metric)
        if not values:
            self.summary.setText(f"No {text.split(':')[0].lower()} values: tick 'rank layers' and Run again.")
        self.metric.setCurrentIndex(self.metric.findData(metric))
        self._overlay = Overlay.of(name, values, unit, higher_is_worse=worse, log_scale=False,
                                   source=f"quantize preview ({shown.result.calibration})")
        return self.workspace.set_overlay(self._overlay)

    def selected_layer(self):
        rows = self.table.selectionModel().selectedRows()
        if not rows or self.shown is None:
            return None
        return self.shown.result.layers[self.table.item(rows[0].row(), 1).data(Qt.ItemDataRole.UserRole)]

    def select_layer(self, index: int) -> None:
        """Select the table row of ``result.layers[index]``."""
        for row in range(self.table.rowCount()):
            if self.table.item(row, 1).data(Qt.ItemDataRole.UserRole) == index:
                self.table.selectRow(row)
                return

    def learn(self) -> None:
        layer = self.selected_layer()
        if layer is None:
            self.show_error("select a row of the table first; the lesson explains its tensor")
            return
        self.lesson_requested.emit(self.shown, layer)

    def apply(self) -> bool:
        """Put the previewed quantization in as one undo step, or say why not."""
        self.before_edit()
        self.show_after.setChecked(False)
        try:
            self.workspace.apply_quantize()
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        return True

    def reset(self) -> None:
        """A new model: nothing shown, exclusions and .npz forgotten."""
        self.jobs.cancel()
        self._set_busy(False)
        self.excluded.clear()
        self._last = None
        self.set_calibration_file(None)
        self._clear("Choose the settings and press Run: a copy of the model is quantized and measured; "
                    "the model changes only when you Apply.")

    # ================================================================ reactions
    def _on_preview(self, preview: QuantizePreview | None) -> None:
        if preview is None:
            if self.shown is not None and not self.applied:
                self._clear("The model changed, so the quantization shown no longer applies; press Run again.")
            return
        self.applied = False
        self._show(preview)

    def _on_quantized(self, result) -> None:
        last = self._last
        if last is not None and result is last.result:  # Apply dropped the preview (an edit), then said so
            self.applied = True
            self._show(last)

    def _on_edited(self, _step) -> None:
        if self.applied and self.shown is not None and self.shown.result.revision != self.workspace.revision:
            self._clear("The quantization was undone or the model changed; press Run to quantize again.")

    def _show(self, preview: QuantizePreview) -> None:
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
        self.learn_button.setEnabled(True)
        self.save_button.setEnabled(self.applied)
        self.colour_by(self.metric.currentData())

    @staticmethod
    def _counts(preview: QuantizePreview) -> str:
        result = preview.result
        counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}".replace("biass", "biases") for kind, n in result.counts.items())
        left = f"; {len(result.skipped)} left float" if result.skipped else ""
        return (f"{len(result.quantized_nodes)} layers quantized ({counts}){left}; "
                f"calibration: {result.samples} samples {result.calibration}, {result.config.method}.")

    def _fill_table(self, preview: QuantizePreview) -> None:
        self._filling = True
        table = self.table
        table.setSortingEnabled(False)
        table.clearContents()
        layers = preview.result.layers
        skipped = [(n, why) for n, why in preview.result.skipped if why == "excluded"]
        table.setRowCount(len(layers) + len(skipped))
        for row, layer in enumerate(layers):
            check = QTableWidgetItem()
            check.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable |
                           (Qt.ItemFlag.NoItemFlags if self.applied else Qt.ItemFlag.ItemIsUserCheckable))
            check.setCheckState(Qt.CheckState.Checked)
            check.setToolTip("Untick to leave this layer float and run again")
            node = QTableWidgetItem(layer.node)
            node.setData(Qt.ItemDataRole.UserRole, row)
            node.setToolTip(f"{layer.node} ({layer.dtype}, scale {layer.scale[0]:.4g}{'…' if len(layer.scale) > 1 else ''})")
            cells = [check, node, QTableWidgetItem(layer.tensor), QTableWidgetItem(layer.kind),
                     NumberItem(layer.sqnr_db, _db(layer.sqnr_db)), NumberItem(layer.mse, f"{layer.mse:.3g}"),
                     NumberItem(layer.cosine, f"{layer.cosine:.5f}"), NumberItem(layer.max_abs, f"{layer.max_abs:.3g}"),
                     NumberItem(layer.sensitivity_db, _db(layer.sensitivity_db))]
            for column, cell in enumerate(cells):
                table.setItem(row, column, cell)
        for k, (name, _) in enumerate(skipped):  # excluded layers stay listed, unticked, to tick again
            row = len(layers) + k
            check = QTableWidgetItem()
            check.setFlags(Qt.ItemFlag.ItemIsEnabled | (Qt.ItemFlag.NoItemFlags if self.applied else Qt.ItemFlag.ItemIsUserCheckable))
            check.setCheckState(Qt.CheckState.Unchecked)
            node = QTableWidgetItem(name)
            node.setData(Qt.ItemDataRole.UserRole, -1)
            cells = [check, node, QTableWidgetItem("left float"), QTableWidgetItem("")]
            cells += [NumberItem(None, "") for _ in range(5)]
            for column, cell in enumerate(cells):
                cell.setForeground(Qt.GlobalColor.gray)
                table.setItem(row, column, cell)
        table.setSortingEnabled(True)
        self._filling = False

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 0:
            return
        node = self.table.item(item.row(), 1).text()
        self.set_excluded(node, item.checkState() != Qt.CheckState.Checked)

    def _on_row_selected(self) -> None:
        layer = self.selected_layer()
        rows = self.table.selectionModel().selectedRows()
        name = self.table.item(rows[0].row(), 1).text() if rows else None
        if name is not None:
            self.graph_panel.select_nodes([layer.node if layer is not None else name], center=True)
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
            self.workspace.set_overlay(None)  # our colours describe a quantization no longer shown
        self._overlay = None

    def _set_busy(self, busy: bool) -> None:
        self.progress.setValue(0)
        self.progress.setVisible(busy)
        self.cancel_button.setVisible(busy)
        self.run_button.setEnabled(not busy)
        if busy:
            self.summary.setText("Quantizing a copy of the model: folding, calibrating, measuring…")

    def _ask_npz(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Calibration samples", "", "NumPy archives (*.npz);;All files (*)")
        if path:
            self.set_calibration_file(path)
