"""The panels of the three jobs: matches, "why not here?", and rewrite previews.

Each panel only shows results the window hands it and reports what the user asks for; the window
runs the core calls (off-thread when they are long) and draws the matching marks on the canvas.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QMenu,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.constants import OVERRIDABLE_PHRASE
from graphlens.gui.inspector import Histogram
from graphlens.gui.plain import escaped, tooltip

PASS_STYLE = "background:#2e7d32;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"
FAIL_STYLE = "background:#c62828;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"
NA_STYLE = "background:#78909c;color:white;padding:3px 8px;border-radius:3px;font-weight:bold"


class MatchesPanel(QWidget):
    """The matches of the last search; choose one to see it, preview a rule on it, or learn from it."""

    match_selected = Signal(int)
    preview_requested = Signal(str, int)  # rule, match index
    apply_all_requested = Signal(str)  # rule
    lesson_requested = Signal(int)
    cancel_requested = Signal()
    binarize_requested = Signal(int)  # match index, or -1: every match
    collapse_toggled = Signal(bool)  # every match drawn as one box, or as its nodes again

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.header = QLabel()
        self.header.setWordWrap(True)
        self.list = QListWidget()
        self.list.setUniformItemSizes(True)  # one line per match: Qt skips measuring 25,000 rows
        self.list.currentRowChanged.connect(self._on_row_changed)
        self.rule = QComboBox()
        self.preview_button = QPushButton("Preview")
        self.apply_all_button = QPushButton("Apply to all")
        self.lesson_button = QPushButton("Learn BN folding")
        self.binarize_button = QPushButton("Binarize…")
        self.binarize_button.setToolTip("Binarize the linear layers (Conv, Gemm, MatMul) of this match or of every "
                                        "match, in the Binarize panel: a preview first, Apply to keep it")
        binarize_menu = QMenu(self.binarize_button)
        self.binarize_one = binarize_menu.addAction("This match's layers",
                                                    lambda: self.binarize_requested.emit(self.list.currentRow()))
        self.binarize_all = binarize_menu.addAction("The layers of every match",
                                                    lambda: self.binarize_requested.emit(-1))
        self.binarize_button.setMenu(binarize_menu)
        self.collapse_button = QPushButton("Collapse matches")
        self.collapse_button.setCheckable(True)
        self.collapse_button.setToolTip("Draw every match as one box named after the pattern, listing the ops it "
                                        "holds; double-click a box to open it, untick to draw the nodes again")
        self.collapse_button.toggled.connect(self.collapse_toggled)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.hide()
        self.cancel_button.clicked.connect(self.cancel_requested)
        self.preview_button.clicked.connect(lambda: self.preview_requested.emit(self.rule.currentText(),
                                                                                self.list.currentRow()))
        self.apply_all_button.clicked.connect(lambda: self.apply_all_requested.emit(self.rule.currentText()))
        self.lesson_button.clicked.connect(lambda: self.lesson_requested.emit(self.list.currentRow()))
        row = QHBoxLayout()
        row.addWidget(QLabel("rule"))
        row.addWidget(self.rule, 1)
        row.addWidget(self.preview_button)
        row.addWidget(self.apply_all_button)
        row.addWidget(self.lesson_button)
        row.addWidget(self.binarize_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        top = QHBoxLayout()
        top.addWidget(self.header, 1)
        top.addWidget(self.collapse_button)
        top.addWidget(self.cancel_button)
        layout.addLayout(top)
        layout.addWidget(self.list, 1)
        layout.addLayout(row)
        self.set_matches("", [], [])

    def set_busy(self, text: str) -> None:
        self.header.setText(text)
        self.cancel_button.show()

    def _on_row_changed(self, row: int) -> None:
        if row >= 0:
            self.match_selected.emit(row)

    def set_matches(self, pattern: str, matches: list[dict[str, Any]], rules: list[str], lesson: bool = False) -> None:
        self.cancel_button.hide()
        self.list.clear()
        if pattern:
            self.header.setText(f"<b>{escaped(pattern)}</b>: {len(matches)} match{'es' if len(matches) != 1 else ''}"
                                + ("" if matches else " — right-click a node and ask why not"))
        else:  # nothing found yet for this model (or the model changed under the old matches)
            self.header.setText("Run a pattern (Ctrl+M) to list its matches here.")
        for k, match in enumerate(matches, 1):
            where = "" if match["graph"] == "main" else f"   [{match['graph']}]"
            item = QListWidgetItem(f"{k}. " + ", ".join(f"{label}={node}" for label, node in match["nodes"].items())
                                   + where)
            item.setToolTip(tooltip("\n".join(f"{label}: {node}" for label, node in match["nodes"].items())))
            self.list.addItem(item)
        self.rule.clear()
        self.rule.addItems(rules)
        for button in (self.preview_button, self.apply_all_button):
            button.setEnabled(bool(rules) and bool(matches))
        self.lesson_button.setEnabled(lesson and bool(matches))
        self.collapse_button.blockSignals(True)  # new matches start drawn node by node; the window resets the canvas
        self.collapse_button.setChecked(False)
        self.collapse_button.blockSignals(False)
        self.collapse_button.setEnabled(bool(matches))
        self.set_binarizable(False)
        if matches:
            self.list.setCurrentRow(0)

    def set_binarizable(self, on: bool) -> None:
        """Offer "Binarize…" (the window says whether the matches hold a linear layer with a constant weight)."""
        self.binarize_button.setVisible(on)
        self.binarize_button.setEnabled(on)

    def step(self, delta: int) -> None:
        """Next (+1) or previous (−1) match."""
        if self.list.count():
            self.list.setCurrentRow((self.list.currentRow() + delta) % self.list.count())


class WhyPanel(QWidget):
    """The explain result: the sentence, what was expected and found, and near misses to visit."""

    near_miss_selected = Signal(int)
    freeze_inputs_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.freeze = QPushButton("Make initializer inputs constant (freeze-inputs)")
        self.freeze.setToolTip("Remove the initializers from the graph inputs, so callers can no longer override "
                               "them and rewrites may use their values; one undo step")
        self.freeze.clicked.connect(self.freeze_inputs_requested)
        self.freeze.hide()
        self.sentence = QLabel("Right-click a node and choose “Why doesn't … match here?”.")
        self.sentence.setWordWrap(True)
        self.sentence.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details = QTextBrowser()
        self.misses = QListWidget()
        self.misses.currentRowChanged.connect(self._on_miss_changed)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.sentence)
        layout.addWidget(self.freeze)
        layout.addWidget(self.details, 1)
        self.misses_label = QLabel("Near misses")
        layout.addWidget(self.misses_label)
        layout.addWidget(self.misses, 1)
        self._show_misses(False)

    def _show_misses(self, on: bool) -> None:
        """The near-miss list only for a question about the whole model; the details get its room otherwise."""
        self.misses_label.setVisible(on)
        self.misses.setVisible(on)

    def clear(self) -> None:
        """No question asked yet about this model."""
        self._show_misses(False)
        self.freeze.hide()
        self.sentence.setText("Right-click a node and choose “Why doesn't … match here?”.")
        self.details.clear()
        self.misses.clear()

    def _on_miss_changed(self, row: int) -> None:
        if row >= 0:
            self.near_miss_selected.emit(row)

    def show_result(self, result: dict[str, Any]) -> None:
        matched = result.get("matched")
        messages = [result.get("message", "")] + [m.get("message", "") for m in result.get("near_misses", [])]
        self.freeze.setVisible(any(OVERRIDABLE_PHRASE in m for m in messages))
        self._show_misses("near_misses" in result)
        if "near_misses" in result:
            self.sentence.setText(f"<b>{escaped(result['message'])}</b>")
            self.details.setHtml("<p>Choose a near miss to see it on the canvas.</p>")
            self.misses.clear()
            for miss in result["near_misses"]:
                item = QListWidgetItem(f"{miss['at']}: {miss['message']}")
                item.setToolTip(tooltip(miss["message"]))
                self.misses.addItem(item)
            return
        colour = "#2e7d32" if matched else "#c62828"
        self.sentence.setText(f"<span style='color:{colour};font-weight:bold'>{escaped(result['message'])}</span>")
        rows = [f"<p><b>{result.get('matched_nodes', 0)}</b> of {result.get('pattern_nodes', 0)} pattern nodes placed"
                f"{'' if matched else ' before the failure'}.</p>"]
        if not matched and result.get("kind"):
            rows.append("<table cellspacing=3>")
            for key, label in WHY_ROWS:
                if result.get(key) not in (None, ""):
                    rows.append(f"<tr><td style='color:#607d8b'>{label}</td>"
                                f"<td>{escaped(str(result[key]))}</td></tr>")
            rows.append("</table>")
        if result.get("mapping"):
            heading = "The match" if matched else "Placed before the failure"
            rows.append(f"<p><b>{heading}</b><br>"
                        + "<br>".join(escaped(f"{k} = {v}") for k, v in result["mapping"].items()) + "</p>")
        self.details.setHtml("".join(rows))


WHY_ROWS = (("constraint", "what failed"), ("pattern_label", "pattern node"), ("node", "node"), ("input", "input"),
            ("tensor", "tensor"), ("expected", "expected"), ("actual", "found"))
"""The failure's fields the Why not here? panel shows, in words (``kind`` is for scripts)."""


class PreviewPanel(QWidget):
    """What a rewrite would change: parameters per channel, the numeric diff, and Apply."""

    apply_requested = Signal()
    show_after_toggled = Signal(bool)
    inputs_requested = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = QLabel("Preview a rewrite from the Matches panel.")
        self.title.setWordWrap(True)
        self.badge = QLabel("")
        self.tolerance = QLabel("")
        self.tolerance.setTextFormat(Qt.TextFormat.PlainText)
        self.tolerance.setWordWrap(True)
        self.show_after = QCheckBox("Show the graph after the rewrite (added nodes green)")
        self.show_after.toggled.connect(self.show_after_toggled)
        self.numeric = QTableWidget(0, 7)
        self.numeric.setHorizontalHeaderLabels(["tensor", "max abs", "max rel", "cosine", "limit", "", "note"])
        self.numeric.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.histogram = Histogram()
        self.histogram_label = QLabel("")
        self.parameters = QTableWidget(0, 11)
        self.parameters.setHorizontalHeaderLabels(
            ["ch", "γ", "β", "μ", "σ²", "ε", "scale", "|w| before", "|w| after", "b before", "b after"])
        self.parameters.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.apply_button = QPushButton("Apply (Ctrl+Enter)")
        self.apply_button.clicked.connect(self.apply_requested)
        self.inputs_label = QLabel("")
        self.inputs_label.setTextFormat(Qt.TextFormat.PlainText)  # dim names come from the model
        self.inputs_label.setWordWrap(True)
        self.inputs_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.inputs_label.setTextFormat(Qt.TextFormat.PlainText)
        self.inputs_button = QPushButton("Inputs…")
        self.inputs_button.setToolTip("Set the sizes of the model's dynamic dims, or load the inputs from an .npz file")
        self.inputs_button.clicked.connect(self.inputs_requested)
        top = QHBoxLayout()
        top.addWidget(self.title, 1)
        top.addWidget(self.badge)
        bottom = QHBoxLayout()
        bottom.addWidget(self.show_after, 1)
        bottom.addWidget(self.inputs_button)
        bottom.addWidget(self.apply_button)
        numbers = QWidget()  # left: the numeric diff; right: the parameters, side by side in a short dock
        left = QVBoxLayout(numbers)
        left.setContentsMargins(0, 0, 0, 0)
        left.addWidget(self.inputs_label)
        left.addWidget(self.tolerance)
        left.addWidget(self.numeric, 1)
        left.addWidget(self.histogram_label)
        left.addWidget(self.histogram)
        params = self.params_box = QWidget()  # shown for folds, which have per-channel numbers
        right = QVBoxLayout(params)
        right.setContentsMargins(0, 0, 0, 0)
        right.addWidget(QLabel("Parameters per output channel"))
        right.addWidget(self.parameters, 1)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(numbers)
        split.addWidget(params)
        split.setStretchFactor(0, 1)
        split.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addLayout(top)
        layout.addWidget(split, 1)
        layout.addLayout(bottom)
        self.clear()

    def clear(self) -> None:
        self.shown = False
        """A preview is on screen (computed, applied, or kept as history after an edit)."""
        self.title.setText("Preview a rewrite from the Matches panel.")
        self.badge.setText("")
        self.badge.setStyleSheet("")
        self.tolerance.setText("")
        self.inputs_label.setText("")
        self.numeric.setRowCount(0)
        self.parameters.setRowCount(0)
        self.histogram.set_values(None)
        self.histogram_label.setText("")
        self.apply_button.setEnabled(False)
        self.show_after.setChecked(False)
        self.show_after.setEnabled(False)

    def set_computing(self, title: str) -> None:
        self.clear()
        self.title.setText(f"<b>{escaped(title)}</b><br>running both models with onnxruntime…")

    def show_preview(self, result: dict[str, Any], error: np.ndarray | None) -> None:
        changes = result["summary"].removeprefix(f"{result['description']}: ")  # the title says the description once
        self.title.setText(f"<b>{escaped(result['description'])}</b><br>{escaped(changes)}")
        numeric = result["numeric"]
        self.inputs_label.setText(result.get("inputs", ""))
        if not numeric["available"]:
            self.badge.setText("no numeric check")
            self.badge.setStyleSheet(NA_STYLE)
            self.tolerance.setText(f"The numeric diff is not available: {numeric['reason']}. "
                                   "The rewrite can still be applied.")
        else:
            self.badge.setText("PASS" if numeric["passed"] else "FAIL")
            self.badge.setStyleSheet(PASS_STYLE if numeric["passed"] else FAIL_STYLE)
            self.tolerance.setText("Each tensor passes when max |before − after| ≤ atol + rtol·max|before| "
                                   "(float32: rtol 1e-4, atol 1e-5; float16: rtol 1e-2, atol 1e-3).")
        rows = [("output", d) for d in numeric["outputs"]] + [("boundary", d) for d in numeric["boundary"]]
        self.numeric.setRowCount(len(rows))
        for r, (kind, d) in enumerate(rows):
            cells = [f"{d['name']} ({kind})", _num(d["max_abs"]), _num(d["max_rel"]), _num(d["cosine"], "{:.8f}"),
                     _num(d["limit"]), "pass" if d["passed"] else "FAIL", d.get("note") or ""]
            for c, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if c == 5:
                    item.setForeground(QColor("#2e7d32" if d["passed"] else "#c62828"))
                self.numeric.setItem(r, c, item)
        self.histogram.set_values(error)
        self.histogram_label.setText("" if error is None
                                     else f"|before − after| at the rewrite's boundary ({error.size:,} values)")
        params = result.get("parameters") or []
        self.params_box.setVisible(bool(params))
        self.parameters.setRowCount(len(params))
        keys = ["channel", "gamma", "beta", "mean", "var", "epsilon", "scale", "weight_norm_before",
                "weight_norm_after",
                "bias_before", "bias_after"]
        for r, row in enumerate(params):
            for c, key in enumerate(keys):
                self.parameters.setItem(r, c,
                                        QTableWidgetItem(str(row[key]) if key == "channel" else f"{row[key]:.6g}"))
        self.apply_button.setEnabled(True)
        self.show_after.setEnabled(True)
        self.shown = True
        self._summary = self.title.text()

    def mark_applied(self) -> None:
        """The previewed rewrite was applied: its diff stays on screen as the record of what changed."""
        self._mark("<span style='color:#2e7d32'><b>Applied</b></span> (Ctrl+Z undoes it)")

    def mark_history(self) -> None:
        """Another edit (an undo, a redo, another rewrite) changed the model: the preview describes it as it was."""
        self._mark("<span style='color:#78909c'><b>The model changed since this preview</b>; preview again from the "
                   "Matches panel</span>")

    def _mark(self, note: str) -> None:
        if not self.shown:
            return
        self.title.setText(f"{note}<br>{self._summary}")
        self.apply_button.setEnabled(False)
        self.show_after.setChecked(False)
        self.show_after.setEnabled(False)


def _num(value: float | None, fmt: str = "{:.3g}") -> str:
    return "–" if value is None else fmt.format(value)
