"""The Binarize panel: settings, Run (off the GUI thread), the output verdict, the layers table with
bits per layer, Apply.

Run starts the workspace's :meth:`~graphlens.workspace.binarization.BinarizationFeature.preview_job` (a scratch copy
binarized in a worker, with progress and cancel) in the panel's job slot; the workspace keeps the
preview only while the model is the one it was computed for. The layers may be limited to one
match's or every match's (the Matches panel's "Binarize…"). Each row's bits box sets that layer's K
and runs again. The canvas is coloured by each layer's reconstruction SQNR through the workspace's
overlay; Apply puts the previewed model in as one undo step. The preview's lifecycle is
:class:`~graphlens.gui.lossy_panel.LossyRewritePanel`'s, shared with Quantize.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import psygnal
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidgetItem,
    QVBoxLayout,
)

from graphlens.gui.lossy_panel import LossyRewritePanel, NumberItem, db_text, table_cell
from graphlens.overlays import Overlay
from graphlens.rewrites.defaults import BN_FOLD_RULES
from graphlens.workspace.binarize_preview import BinarizePreview

if TYPE_CHECKING:
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.workspace.binarize_preview import BinarizeRequest
    from graphlens.workspace.jobs import Job

COLUMNS = ("Node", "Tensor", "Bits K", "SQNR dB", "Distinct values", "α per")
FORMS = (("emulated", "emulated form", "Each weight is stored as its ±α₁ ± α₂ … sum, in float"),
         ("structured", "structured form",
          "The K sign tensors are stored as int8 with their α, and summed in the graph"))
ACTIVATION_WARNING = ("Activations binarized too: every layer's input becomes ±1. The outputs change a lot; "
                      "a model usually has to be trained for this.")
WHOLE_MODEL = "every linear layer"



class BinarizePanel(LossyRewritePanel[BinarizePreview]):
    """The dock: settings, which layers, Run/Cancel, verdict, layers table (bits per row), Learn, Apply.

    ``lesson_requested`` carries the BinarizePreview shown and the LayerBits of the selected row.
    """

    NOUN, VERB, PAST = "binarization", "binarize", "binarized"
    START_TEXT = ("Choose the bits and press Run, or pick matches and press “Binarize…” in the Matches panel: "
                  "a copy of the model is binarized and measured; the model changes only when you Apply.")
    BUSY_TEXT = "Binarizing a copy of the model and running both on the same inputs…"
    LEARN_TEXT = "Learn binarization"
    LEARN_TIP = "The selected layer's kernel: its weights, the 2^K levels and each α worked out"
    LEARN_HINT = "select a row of the table first; the lesson explains one kernel of its weight"
    COLUMNS, NODE_COLUMN, STRETCH, ROW_HEIGHT = COLUMNS, 0, (0, 1), 24
    shown: BinarizePreview | None

    def _make_settings(self) -> None:
        self.layer_bits: dict[str, int] = {}
        """Bits chosen per layer in the table (the others take the bits box's)."""
        self.only: list[str] | None = None
        self.scope = WHOLE_MODEL
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
        self.warning = QLabel(ACTIVATION_WARNING)
        self.activations = QCheckBox("binarize activations")
        self.activations.toggled.connect(lambda on: self.warning.setVisible(on))
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
        self._add_results(layout)

    # ================================================================ scripting API
    def config(self) -> BinarizeConfig:
        """The settings as a :class:`BinarizeConfig`."""
        from graphlens.binarize.config import BinarizeConfig

        return BinarizeConfig(bits=self.bits.value(), per_kernel=self.per_kernel.isChecked(),
                              form=self.form.currentData(), layer_bits=dict(self.layer_bits),
                              binarize_activations=self.activations.isChecked(),
                              fold_rules=BN_FOLD_RULES if self.fold.isChecked() else ())

    def set_scope(self, only: list[str] | None, scope: str = WHOLE_MODEL) -> None:
        """Binarize only the layers ``only`` names (None: every linear layer); ``scope`` says which in words."""
        self.only, self.scope = (None, WHOLE_MODEL) if only is None else (list(only), scope)
        self.scope_label.setText(self.scope if only is None else f"{self.scope} ({len(only)} layer"
                                 f"{'s' if len(only) != 1 else ''}: "
                                 f"{', '.join(only[:4])}{'…' if len(only) > 4 else ''})")
        self.whole_button.setVisible(only is not None)

    def set_layer_bits(self, node: str, bits: int, *, rerun: bool = True) -> None:
        """Binarize ``node`` with ``bits`` (its row's box does this) and run again."""
        if bits == self.bits.value():
            self.layer_bits.pop(node, None)
        else:
            self.layer_bits[node] = bits
        if rerun and self.shown is not None and not self.applied:
            self.run()

    def colour_canvas(self) -> Overlay | None:
        """Colour the canvas by each binarized layer's reconstruction SQNR (through the workspace's overlay)."""
        shown = self.shown
        if shown is None:
            return None
        self._overlay = Overlay.of("Binarization SQNR", shown.result.per_node("sqnr_db"), "dB", higher_is_worse=False,
                                   log_scale=False, source=f"binarize preview, {shown.config.bits} bit(s)")
        return self.workspace.overlay.show(self._overlay)

    def select_layer(self, node: str) -> None:
        for row in range(self.table.rowCount()):
            if table_cell(self.table, row, 0).text() == node:
                self.table.selectRow(row)
                return

    def row_bits(self, node: str) -> QSpinBox | None:
        """The bits box of ``node``'s row."""
        for row in range(self.table.rowCount()):
            if table_cell(self.table, row, 0).text() == node:
                box = self.table.cellWidget(row, 2)
                return box if isinstance(box, QSpinBox) else None
        return None

    # ================================================================ the lifecycle's hooks
    def _signals(self) -> tuple[psygnal.SignalInstance, psygnal.SignalInstance]:
        events = self.workspace.binarization.events
        return events.previewed, events.applied

    def _job(self) -> Job[BinarizeRequest, BinarizePreview]:
        return self.workspace.binarization.preview_job(self.config(), None, self.samples.value(), only=self.only,
                                                       scope=self.scope)

    def _apply_to_workspace(self) -> None:
        self.workspace.binarization.apply()

    def _forget_layers(self) -> None:
        """Bits per layer and the scope name the old model's layers."""
        self.layer_bits.clear()
        self.set_scope(None)

    def _learnable(self, preview: BinarizePreview) -> bool:
        return bool(preview.result.layers)

    def _colour(self) -> None:
        self.colour_canvas()

    @staticmethod
    def _counts(preview: BinarizePreview) -> str:
        result = preview.result
        n = len(result.layers)
        worst = min(result.layers, key=lambda layer: layer.sqnr_db, default=None)
        parts = [f"{n} layer{'s' if n != 1 else ''} binarized ({preview.scope}), {result.form} form"]
        if worst is not None:
            parts.append(f"weakest reconstruction: {worst.node} at {db_text(worst.sqnr_db)} dB")
        own = dict(preview.config.layer_bits)
        if own:
            parts.append(f"K = {preview.config.bits}, except "
                         + ", ".join(f"{n}: {k}" for n, k in list(own.items())[:4])
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
                     NumberItem(layer.sqnr_db, db_text(layer.sqnr_db)),
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
