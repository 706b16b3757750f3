"""The Quantize panel: settings, Run (off the GUI thread), the output verdict, the layers table, Apply.

Run starts the workspace's :meth:`~graphlens.workspace.quantization.QuantizationFeature.preview_job` (a scratch copy
quantized in a worker, with progress and cancel) in the panel's job slot; the workspace keeps the
preview only while the model is the one it was computed for. The canvas is coloured by the chosen
metric through the workspace's overlay, so the Overlay panel's legend and table show it too.
Unticking a layer (or right-clicking its node) leaves it float and runs again; Apply puts the
previewed model in as one undo step. The preview's lifecycle is
:class:`~graphlens.gui.lossy_panel.LossyRewritePanel`'s, shared with Binarize.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import psygnal
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
)

from graphlens.core.errors import GraphLensError
from graphlens.gui.lossy_panel import BADGE_STYLES, LossyRewritePanel, NumberItem, db_text, table_cell, verdict_badge
from graphlens.numerics.metrics import Verdict
from graphlens.overlays import Overlay
from graphlens.quantize import METHODS, CalibrationData, QuantConfig, load_calibration
from graphlens.quantize.config import EQUALIZE_MODES
from graphlens.quantize.weight_only import WeightOnlyResult
from graphlens.workspace.quantize_preview import QuantizePreview

if TYPE_CHECKING:
    from graphlens.workspace.jobs import Job
    from graphlens.workspace.quantize_preview import QuantizeRequest

METRIC_CHOICES = [
    ("sqnr_db", "SQNR of each layer's tensors (dB)", "Quantization SQNR", "dB", False),
    ("sensitivity_db", "Sensitivity: output SQNR with only this layer quantized (dB)", "Output SQNR, layer alone", "dB",
     False),
    ("mse", "Mean squared error", "Quantization MSE", "", True),
    ("cosine", "Cosine similarity", "Quantization cosine", "", False),
    ("max_abs", "Max abs error", "Quantization max abs error", "", True),
]
"""(metric, picker text, overlay name, unit, higher is worse)."""
WEIGHTS = {"int8 weights": (8, False, "qdq"), "int4 weights": (4, False, "qdq"),
           "int4 weight-only blocks (DequantizeLinear)": (4, True, "qdq"),
           "int4 weight-only blocks (MatMulNBits)": (4, True, "matmulnbits")}
"""The weights picker: (bits, weight-only, weight-only's storage)."""
BLOCK_SIZES = (32, 64, 128)
TARGET_NAMES = 3
"""Layers left float for a target that the summary names (the table lists them all)."""
COLUMNS = ("Quantize", "Node", "Tensor", "Kind", "SQNR dB", "MSE", "Cosine", "Max abs", "Sensitivity dB")



class QuantizePanel(LossyRewritePanel[QuantizePreview]):
    """The dock: settings, Run/Cancel, verdict, metric picker, layers table, Learn, Apply, Save.

    ``lesson_requested`` carries the QuantizePreview shown and the LayerError of the selected row.
    """

    NOUN, VERB, PAST = "quantization", "quantize", "quantized"
    START_TEXT = ("Choose the settings and press Run: a copy of the model is quantized and measured; "
                  "the model changes only when you Apply.")
    BUSY_TEXT = "Quantizing a copy of the model: folding, calibrating, measuring…"
    LEARN_TEXT = "Learn fake quantization"
    LEARN_TIP = "Explain the selected row's tensor: its histogram, range, scale, zero point and error"
    LEARN_HINT = "select a row of the table first; the lesson explains its tensor"
    COLUMNS, NODE_COLUMN, STRETCH, ROW_HEIGHT = COLUMNS, 1, (1, 2), 20
    shown: QuantizePreview | None

    def _make_settings(self) -> None:
        self.npz: str | None = None
        self.calibration: CalibrationData | None = None
        """The samples ``npz`` holds, read for the model when chosen (a new model forgets both)."""
        self._filling = False
        self.bits = QComboBox()
        for text, (bits, weight_only, weight_format) in WEIGHTS.items():
            self.bits.addItem(text, (bits, weight_only, weight_format))
        self.bits.setToolTip("int8 or int4 weights with uint8 activations; or weight-only: MatMul and Gemm weights "
                             "in int4 blocks along K, activations float (transformers), stored as DequantizeLinear "
                             "with block_size (opset 21) or as onnxruntime's MatMulNBits")
        self.bits.currentIndexChanged.connect(self._on_weights_changed)
        self.block = QComboBox()
        for size in BLOCK_SIZES:
            self.block.addItem(f"blocks of {size}", size)
        self.block.setToolTip("Rows of K that share one scale (weight-only)")
        self.block.setEnabled(False)
        self.per_channel = QCheckBox("per channel")
        self.per_channel.setChecked(True)
        self.per_channel.setToolTip("One weight scale per output channel (needs opset 13)")
        self.symmetric = QCheckBox("symmetric activations")
        self.symmetric.setToolTip("Zero point fixed at the middle; off: the range's own zero point (uint8 by default)")
        self.gptq = QCheckBox("GPTQ rounding")
        self.gptq.setToolTip("Round each layer's weights so their errors cancel on the inputs it sees in the "
                             "calibration samples (GPTQ; one more float pass). Off: each weight to its nearest level")
        self.equalize = QComboBox()
        self.equalize.addItems(list(EQUALIZE_MODES))
        self.equalize.setToolTip("Cross-layer equalization first: auto keeps it where it raises the quantized "
                                 "output SQNR on the calibration samples; on always; off never")
        self.bias = QCheckBox("bias correction")
        self.bias.setToolTip("Move each layer's mean output shift, measured on the calibration samples, into its "
                             "bias (kept only where it raises the output SQNR)")
        self.target = QDoubleSpinBox()
        self.target.setRange(0.0, 200.0)
        self.target.setDecimals(1)
        self.target.setSingleStep(1.0)
        self.target.setPrefix("target SQNR: ")
        self.target.setSuffix(" dB")
        self.target.setSpecialValueText("target SQNR: none")
        self.target.setToolTip("Leave the layers that cost the most float until the output SQNR reaches this "
                               "(a ranking pass and a few verified runs); none: every layer quantized")
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
        self.images_button = QPushButton("Images…")
        self.images_button.setToolTip("Calibrate on a folder of images, with the preprocessing that turns one into "
                                      "the model's input (size, scale, mean, std, layout, channel order)")
        self.images_button.clicked.connect(self._ask_images)
        self.preprocess: str | None = None
        self.npz_label = QLabel("")
        self.excluded = QComboBox()
        self.excluded.setToolTip("Layers left float; untick a row or right-click a node to add one")
        self.include_button = QPushButton("Include again")
        self.include_button.clicked.connect(lambda: self.set_excluded(self.excluded.currentText(), False))
        self.metric_box = QComboBox()
        for key, text, *_ in METRIC_CHOICES:
            self.metric_box.addItem(text, key)
        self.metric_box.setToolTip("Colour the canvas by this number per quantized layer (the worst of its tensors)")
        self.metric_box.activated.connect(lambda _: self.colour_by(self.metric_box.currentData()))
        self.table.itemChanged.connect(self._on_item_changed)
        self.show_after.setToolTip("The quantized graph; Q/DQ pairs are the badges on its edges")
        self.save_button.setToolTip("Save the model (after Apply)")

    def _build_layout(self) -> None:
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        self.excluded.setMinimumWidth(220)
        rows = ((self.bits, self.block, self.per_channel, self.gptq, self.symmetric, QLabel("  equalize"),
                 self.equalize, self.bias, self.target, self.sensitivity),
                (QLabel("calibration"), self.method, self.samples, self.npz_button, self.images_button, self.npz_label),
                (self.run_button, self.cancel_button, self.progress, self.badge, QLabel("  left float:"), self.excluded,
                 self.include_button, QLabel("  colour the canvas by"), self.metric_box))
        for row in rows:
            line = QHBoxLayout()
            for widget in row:
                line.addWidget(widget, 1 if widget is self.progress else 0)
            line.addStretch(1)
            layout.addLayout(line)
        self._add_results(layout)

    # ================================================================ scripting API
    def config(self) -> QuantConfig:
        """The settings as a :class:`QuantConfig`."""
        bits, weight_only, weight_format = self.bits.currentData()
        if weight_only:  # MatMul weights alone: activations, ranges and layer choices do not apply
            return QuantConfig(weight_bits=bits, weight_only=True, weight_format=weight_format,
                               block_size=self.block.currentData(), exclude_nodes=tuple(self.exclusions()))
        return QuantConfig(weight_bits=bits,
                           per_channel=self.per_channel.isChecked(),
                           symmetric_activations=self.symmetric.isChecked(), method=self.method.currentText(),
                           sensitivity=self.sensitivity.isChecked(), exclude_nodes=tuple(self.exclusions()),
                           weight_rounding="gptq" if self.gptq.isChecked() else "nearest",
                           equalize=self.equalize.currentText(), bias_correction=self.bias.isChecked(),
                           target_sqnr_db=self.target.value() or None)

    def _on_weights_changed(self) -> None:
        """Weight-only quantizes MatMul and Gemm weights alone: the settings of activations, rounding and choosing
        layers are greyed out, its block size is offered."""
        weight_only = bool(self.bits.currentData()[1])
        self.block.setEnabled(weight_only)
        for widget in (self.per_channel, self.gptq, self.symmetric, self.equalize, self.bias, self.target,
                       self.method, self.sensitivity):
            widget.setEnabled(not weight_only)

    def exclusions(self) -> list[str]:
        return [self.excluded.itemText(k) for k in range(self.excluded.count())]

    def set_calibration_file(self, path: str | Path | None, preprocess: str | None = None) -> bool:
        """Calibrate on ``path`` (an .npz, or a folder of images read by ``preprocess``) instead of random samples
        (None: random); one line if the samples do not fit the model, and the samples before are kept."""
        model, data = self.workspace.model, None
        if path is not None and model is not None:
            try:  # read once: every run takes these arrays instead of reading the file or images again
                data = load_calibration(path, model, preprocess=preprocess)
            except GraphLensError as exc:
                self.show_error(str(exc))
                return False
        found = "" if data is None else f": {data.samples} samples"
        self.calibration = data
        self.npz, self.preprocess = (None, None) if path is None else (str(path), preprocess)
        self.npz_label.setText("" if path is None else f"{Path(path).name}{found}")
        self.samples.setEnabled(path is None)
        return True

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
        self.metric_box.setCurrentIndex(self.metric_box.findData(metric))
        self._overlay = Overlay.of(name, values, unit, higher_is_worse=worse, log_scale=False,
                                   source=f"quantize preview ({shown.result.calibration})")
        return self.workspace.overlay.show(self._overlay)

    def select_layer(self, index: int) -> None:
        """Select the table row of ``result.layers[index]``."""
        for row in range(self.table.rowCount()):
            if table_cell(self.table, row, 1).data(Qt.ItemDataRole.UserRole) == index:
                self.table.selectRow(row)
                return

    # ================================================================ the lifecycle's hooks
    def _signals(self) -> tuple[psygnal.SignalInstance, psygnal.SignalInstance]:
        events = self.workspace.quantization.events
        return events.previewed, events.applied

    def _job(self) -> Job[QuantizeRequest, QuantizePreview]:
        source = self.calibration if self.calibration is not None else self.npz
        return self.workspace.quantization.preview_job(self.config(), source, self.samples.value(),
                                                       preprocess=self.preprocess)

    def _apply_to_workspace(self) -> None:
        self.workspace.quantization.apply()

    def _forget_layers(self) -> None:
        """Exclusions and the .npz belong to the old model."""
        self.excluded.clear()
        self.set_calibration_file(None)

    def _colour(self) -> None:
        self.colour_by(self.metric_box.currentData())

    def _badge(self, preview: QuantizePreview) -> tuple[str, str, str]:
        """A missed target is the verdict (as the command line's exit 1), whatever the output SQNR reads."""
        word, style, sentence = verdict_badge(preview.result.output_sqnr_db)
        target = preview.result.target
        if target is not None and not target.met:
            return "TARGET MISSED", BADGE_STYLES[Verdict.POOR], sentence
        return word, style, sentence

    @staticmethod
    def _counts(preview: QuantizePreview) -> str:
        result = preview.result
        counts = ", ".join(f"{n} {kind}{'s' if n != 1 else ''}".replace("biass", "biases")
                           for kind, n in result.counts.items())
        left = f"; {len(result.skipped)} left float" if result.skipped else ""
        rounding = "" if result.rounding is None else (
            f" Weights rounded by GPTQ: their layers' output error {result.rounding.ratio:.2f}× nearest rounding's.")
        target = [] if result.target is None else [result.target.line(names=TARGET_NAMES)]
        decided = [] if result.equalization is None or not result.equalization.chains else [result.equalization.line()]
        decided += [] if result.bias_correction is None else [result.bias_correction.line()]
        decided += [stats.line(name) for name, stats in result.probabilities.items() if stats.positions]
        if isinstance(result, WeightOnlyResult):  # its layers may share a weight: say what is stored
            counts = result.storage_line()
        method = "" if result.config.weight_only else f", {result.config.method}"
        layers = len(result.quantized_nodes)
        what = (f"{layers} layer{'' if layers == 1 else 's'} quantized ({counts}){left}; calibration: "
                f"{result.samples} samples {result.calibration}{method}.{rounding}")
        return "\n".join(line[0].upper() + line[1:] + ("" if line.endswith((".", "…")) else ".")
                          for line in (*target, what, *decided))  # the target's verdict first: what was asked

    def _fill_table(self, preview: QuantizePreview) -> None:
        self._filling = True
        table = self.table
        table.setSortingEnabled(False)
        table.clearContents()
        layers = preview.result.layers
        targeted = set(preview.result.excluded_for_target)
        skipped = [(n, why) for n, why in preview.result.skipped if why == "excluded" or n in targeted]
        table.setRowCount(len(layers) + len(skipped))
        for row, layer in enumerate(layers):
            check = QTableWidgetItem()
            check.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable |
                           (Qt.ItemFlag.NoItemFlags if self.applied else Qt.ItemFlag.ItemIsUserCheckable))
            check.setCheckState(Qt.CheckState.Checked)
            check.setToolTip("Untick to leave this layer float and run again")
            node = QTableWidgetItem(layer.node)
            node.setData(Qt.ItemDataRole.UserRole, row)
            scale = f", scale {layer.scale[0]:.4g}{'…' if len(layer.scale) > 1 else ''}" if layer.scale else ""
            node.setToolTip(f"{layer.node} ({layer.dtype}{scale})")  # weight-only blocks: a scale per block
            cells = [check, node, QTableWidgetItem(layer.tensor), QTableWidgetItem(layer.kind),
                     NumberItem(layer.sqnr_db, db_text(layer.sqnr_db)), NumberItem(layer.mse, f"{layer.mse:.3g}"),
                     NumberItem(layer.cosine, f"{layer.cosine:.5f}"), NumberItem(layer.max_abs, f"{layer.max_abs:.3g}"),
                     NumberItem(layer.sensitivity_db, db_text(layer.sensitivity_db))]
            for column, cell in enumerate(cells):
                table.setItem(row, column, cell)
        for k, (name, why) in enumerate(skipped):  # excluded layers stay listed, unticked, to tick again
            row = len(layers) + k
            by_target = why != "excluded"  # the target search's choice: lower the target to quantize it
            check = QTableWidgetItem()
            check.setFlags(Qt.ItemFlag.ItemIsEnabled | (Qt.ItemFlag.NoItemFlags if self.applied or by_target
                                                        else Qt.ItemFlag.ItemIsUserCheckable))
            check.setCheckState(Qt.CheckState.Unchecked)
            if by_target:
                check.setToolTip("Left float by the target search; a lower target quantizes more layers")
            node = QTableWidgetItem(name)
            node.setData(Qt.ItemDataRole.UserRole, -1)
            cells = [check, node, QTableWidgetItem("left float for the target" if by_target else "left float"),
                     QTableWidgetItem("")]
            cells += [NumberItem(None, "") for _ in range(5)]
            for column, cell in enumerate(cells):
                cell.setForeground(Qt.GlobalColor.gray)
                table.setItem(row, column, cell)
        table.setSortingEnabled(True)
        self._filling = False

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 0:
            return
        node = table_cell(self.table, item.row(), 1).text()
        self.set_excluded(node, item.checkState() != Qt.CheckState.Checked)

    def _on_row_selected(self) -> None:
        layer = self.selected_layer()
        rows = self.table.selectionModel().selectedRows()
        name = table_cell(self.table, rows[0].row(), 1).text() if rows else None
        if name is not None:
            self.graph_panel.select_nodes([layer.node if layer is not None else name], center=True)
        self.learn_button.setEnabled(layer is not None and bool(layer.scale))  # no lesson on weight-only blocks

    def _ask_images(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Calibration images")
        if not folder:
            return
        spec, ok = QInputDialog.getText(
            self, "How an image becomes the input",
            "Preprocessing, every key optional (comma-separated):\n"
            "size=WIDTHxHEIGHT (needed when the input's size is dynamic), resize=stretch|fit,\n"
            "scale=1/255, mean=0.485/0.456/0.406, std=0.229/0.224/0.225, layout=NCHW|NHWC, order=rgb|bgr",
            text=self.preprocess or "scale=1/255")
        if ok:
            self.set_calibration_file(folder, spec.strip() or None)

    def _ask_npz(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Calibration samples", "", "NumPy archives (*.npz);;All files (*)")
        if path:
            self.set_calibration_file(path)
