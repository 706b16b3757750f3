"""What a comparison shows besides the two canvases: status colours and their legend, and the changes list.

Every box of both canvases takes the colour of its node's status (:mod:`graphlens.compare`):

* **same** — pale grey-green, so that what did not change steps back;
* **changed** — amber: the node is there in both models but its op, attributes, weights or inputs differ
  (a Conv with a BatchNormalization folded into it, say);
* **removed** — vermillion, on A's canvas only: nothing in B stands for it;
* **added** — bluish green, on B's canvas only: nothing in A stood for it.

The colours are Okabe and Ito's, chosen to stay apart for the common colour-vision deficiencies; amber
and vermillion differ in lightness too, and the status is also written in each box's header, close in.
A collapsed name-scope group takes the worst status among its members, in the order
same < changed < added = removed (``graphlens.compare.result.worst_status``): a group shows
"changed" as soon as one member changed.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

from PySide6.QtCore import QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QFontMetricsF, QIcon, QPainter, QPen
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QListWidgetItem, QPushButton, QVBoxLayout, QWidget

from graphlens.gui.overlay_legend import legend_fonts, paint_legend_box

STATUS_COLOURS: dict[str, tuple[int, int, int]] = {
    "same": (206, 222, 212),
    "changed": (230, 159, 0),
    "removed": (213, 94, 0),
    "added": (0, 158, 115),
}
UNPAIRED = (236, 239, 241)
"""A box with no status (a node the comparison does not know)."""
SIDE_STATUSES = {"a": ("same", "changed", "removed"), "b": ("same", "changed", "added")}


def paint_status_legend(painter: QPainter, bottom_left: QPointF, side: str, counts: dict[str, int],
                        title: str) -> QRectF:
    """The status key for one canvas, bottom-left corner at ``bottom_left`` (widget pixels): a swatch
    and a count per status this side can have, and how a collapsed group is coloured."""
    font, bold = legend_fonts()
    metrics = QFontMetricsF(font)
    rows = [(status, f"{status}  ({counts.get(status, 0)})") for status in SIDE_STATUSES[side]]
    note = "pairs of nodes · a group: its worst member"
    width = 16 + max(QFontMetricsF(bold).horizontalAdvance(title),
                     22 + max(metrics.horizontalAdvance(t) for _, t in rows),
                     metrics.horizontalAdvance(note))
    height = 28 + 16 * len(rows) + 16
    area = QRectF(bottom_left.x(), bottom_left.y() - height, width, height)
    painter.save()
    paint_legend_box(painter, area, title, bold)
    painter.setFont(font)
    for k, (status, text) in enumerate(rows):
        y = area.top() + 24 + 16 * k
        painter.setPen(QPen(QColor("#78909c"), 0.8))
        painter.setBrush(QColor(*STATUS_COLOURS[status]))
        painter.drawRoundedRect(QRectF(area.left() + 8, y + 2, 11, 11), 2, 2)
        painter.setPen(QColor("#37474f"))
        painter.drawText(QPointF(area.left() + 26, y + 12), text)
    painter.setPen(QColor("#607d8b"))
    painter.drawText(QPointF(area.left() + 8, area.bottom() - 7), note)
    painter.restore()
    return area


def _ops(model: Any, graph: str, names: list[str]) -> str:
    """``Conv+Constant×4+BatchNormalization``: the op types of ``names``, repeats counted."""
    try:
        found = model.graph_at(graph).by_name
    except KeyError:
        found = {}
    counts = Counter(found[n].op_type if n in found else "?" for n in names)
    return "+".join(op if k == 1 else f"{op}×{k}" for op, k in counts.items())


def change_line(comparison: Any, pair: Any) -> str:
    """One line of the changes list: ``changed: Conv '/stem/conv' ← Conv+BatchNormalization (why; error)``."""
    ops_a, ops_b = _ops(comparison.a, pair.graph, pair.a), _ops(comparison.b, pair.path_b, pair.b)
    if pair.status == "added":
        head = f"added: {ops_b} '{pair.b[0]}'" + (f" and {len(pair.b) - 1} more" if len(pair.b) > 1 else "")
    elif pair.status == "removed":
        head = f"removed: {ops_a} '{pair.a[0]}'" + (f" and {len(pair.a) - 1} more" if len(pair.a) > 1 else "")
    else:
        b_text = ops_b + f" '{pair.b[0]}'" + (f" (+{len(pair.b) - 1})" if len(pair.b) > 1 else "")
        same_names = pair.a == pair.b and ops_a == ops_b
        head = f"{pair.status}: {b_text}" + ("" if same_names else f" ← {ops_a}")
    notes = _condensed(pair.changes)
    error = pair.error
    if error is not None:
        notes.append(f"output max |Δ| {error.max_abs:.3g}"
                     + (f", SQNR {error.sqnr_db:.1f} dB" if error.sqnr_db is not None else ""))
    return head + (f" ({'; '.join(notes)})" if notes else "")


_FOLDED = re.compile(r"^folded (\S+) '(.*)' into it$")


def _condensed(changes: list[str]) -> list[str]:
    """The changes with every "folded X 'name' into it" made one note: ``folded Constant×4 and
    BatchNormalization '/bn' into it`` (a node's name only when it is the only one of its op)."""
    folded: dict[str, list[str]] = {}
    rest = []
    for change in changes:
        found = _FOLDED.match(change)
        if found:
            folded.setdefault(found.group(1), []).append(found.group(2))
        else:
            rest.append(change)
    if not folded:
        return rest
    parts = [f"{op} '{names[0]}'" if len(names) == 1 else f"{op}×{len(names)}" for op, names in folded.items()]
    text = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
    return [f"folded {text} into it", *rest]


def flow_order(comparison: Any) -> list[int]:
    """The indices of the pairs that are not "same", in the order data flows through A: by where the
    pair's last node of A sits (a fold's Constants come first in a file, its BatchNormalization where
    the Conv was); a node only B has goes right after the A node paired with the B node before it."""
    index = {id(p): k for k, p in enumerate(comparison.pairs)}
    keys: dict[int, tuple[bool, str, int, int]] = {}
    for graph in comparison.a.graphs():
        for position, node in enumerate(graph.nodes):
            pair = comparison.pair_of_a(graph.path, node.name)
            if pair is not None:
                keys[index[id(pair)]] = (graph.path != "main", graph.path, position, 0)  # the last node wins
    for graph in comparison.b.graphs():
        before: tuple[bool, str, int, int] = (graph.path != "main", graph.path, -1, 0)
        for node in graph.nodes:
            pair = comparison.pair_of_b(graph.path, node.name)
            if pair is None:
                continue
            k = index[id(pair)]
            if pair.a:
                before = keys.get(k, before)
            else:
                before = before[:3] + (before[3] + 1,)
                keys.setdefault(k, before)
    chosen = [k for k, pair in enumerate(comparison.pairs) if pair.status != "same"]
    return sorted(chosen, key=lambda k: keys.get(k, (True, "", k, 0)))


class ChangesList(QWidget):
    """The pairs whose status is not "same", one line each, with Previous and Next; choosing a line
    emits its pair's index in ``comparison.pairs``."""

    pair_chosen = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.summary = QLabel()
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        self.summary.setWordWrap(True)
        self.summary.setStyleSheet("color: #455a64")
        self.list = QListWidget()
        self.list.setUniformItemSizes(True)
        self.list.setTextElideMode(Qt.TextElideMode.ElideRight)  # the whole line is the tooltip
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.currentRowChanged.connect(self._on_row)
        self.previous_button = QPushButton("◀ Previous")
        self.previous_button.setToolTip("The previous change (Shift+F8)")
        self.previous_button.clicked.connect(lambda: self.step(-1))
        self.next_button = QPushButton("Next ▶")
        self.next_button.setToolTip("The next change (F8)")
        self.next_button.clicked.connect(lambda: self.step(1))
        top = QHBoxLayout()
        top.addWidget(self.summary, 1)
        top.addWidget(self.previous_button)
        top.addWidget(self.next_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addLayout(top)
        layout.addWidget(self.list, 1)
        self.indices: list[int] = []

    def set_comparison(self, comparison: Any) -> None:
        self.list.blockSignals(True)
        self.list.clear()
        self.indices = flow_order(comparison)
        for k in self.indices:
            pair = comparison.pairs[k]
            item = QListWidgetItem(change_line(comparison, pair))
            item.setToolTip("\n".join([item.text().split(" (", 1)[0], *pair.changes]))
            item.setIcon(_swatch(STATUS_COLOURS[pair.status]))
            self.list.addItem(item)
        self.list.blockSignals(False)
        lines = comparison.summary_lines()
        self.summary.setText("  ·  ".join(lines[:2]) if lines else "")
        for button in (self.previous_button, self.next_button):
            button.setEnabled(bool(self.indices))

    def step(self, delta: int) -> int | None:
        """Go to the next (``delta`` 1) or previous (-1) change, wrapping around; its pair's index."""
        if not self.indices:
            return None
        row = self.list.currentRow()
        row = (0 if delta > 0 else len(self.indices) - 1) if row < 0 else (row + delta) % len(self.indices)
        self.list.setCurrentRow(row)  # emits pair_chosen
        return self.indices[row]

    def show_pair(self, index: int | None) -> None:
        """Mark the line of pair ``index`` (None or a "same" pair: none), without emitting."""
        self.list.blockSignals(True)
        row = self.indices.index(index) if index in self.indices else -1
        self.list.setCurrentRow(row)
        if row >= 0:
            self.list.scrollToItem(self.list.item(row))
        self.list.blockSignals(False)

    def _on_row(self, row: int) -> None:
        if 0 <= row < len(self.indices):
            self.pair_chosen.emit(self.indices[row])


def _swatch(rgb: tuple[int, int, int]) -> QIcon:
    from PySide6.QtGui import QPixmap

    pixmap = QPixmap(12, 12)
    pixmap.fill(QColor(*rgb))
    return QIcon(pixmap)
