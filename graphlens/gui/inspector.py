"""The inspector: everything about one node, group or tensor, with links to jump around.

Links are ``node:<name>`` and ``tensor:<name>`` (percent-encoded); the window decides what a jump
means. A constant tensor shows its size, statistics, a histogram, its first values and can be
saved as ``.npy``. Weights in external data files are read only when their tensor is shown, and
one larger than :data:`READ_WITHOUT_ASKING` only when asked, so browsing never pulls in gigabytes.
"""

from __future__ import annotations

import html
import math
from pathlib import Path
from urllib.parse import quote, unquote

import numpy as np
import onnx
from PySide6.QtCore import QRectF, Qt, QTimer, QUrl, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.constants import unevaluated
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.tensors import data_path, external_ref, is_external, tensor_stats
from graphlens.core.types import TensorType, tensor_nbytes

TABLE_VALUES = 64
READ_WITHOUT_ASKING = 256 << 20
"""Constants up to this many bytes are read as soon as they are shown; larger ones wait for a click."""


def size_text(nbytes: int) -> str:
    """``1.5 GB``, ``64.0 MB``, ``3.2 KB``, ``12 bytes``."""
    for unit, scale in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} bytes"


def attribute_text(node: Node, key: str) -> str:
    """An attribute as :func:`format_value` shows it; a large tensor from its header, never decoded.

    A hostile Constant may declare 10^12 elements (or hold 300 MB); decoding it to say
    ``⟨tensor ...⟩`` would allocate all of it, or fail on data shorter than its dims.
    """
    proto = next((a for a in node.proto.attribute if a.name == key), None)
    if proto is not None and proto.type == onnx.AttributeProto.TENSOR and math.prod(proto.t.dims) > 8:
        dtype = onnx.helper.tensor_dtype_to_np_dtype(proto.t.data_type) if proto.t.data_type else "?"
        return f"⟨tensor {'×'.join(str(d) for d in proto.t.dims)} {dtype}⟩"
    try:
        return format_value(node.attrs[key])
    except (ValueError, TypeError) as exc:  # data that does not fit its declared dims
        return f"⟨unreadable: {exc}⟩"


def format_value(value: object) -> str:
    """Attribute values as people read them."""
    if isinstance(value, np.ndarray):
        dims = "×".join(str(d) for d in value.shape) or "scalar"
        if value.size > 8:
            return f"⟨tensor {dims} {value.dtype}⟩"
        return np.array2string(value, precision=5, separator=", ")
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(format_value(v) for v in value[:16])
        return f"[{shown}{', …' if len(value) > 16 else ''}]"
    if isinstance(value, str):
        return f'"{value}"'
    if hasattr(value, "node") and hasattr(value, "name"):  # a GraphProto
        return f"⟨graph '{value.name}', {len(value.node)} nodes⟩"
    return str(value)


MOST_USED_OPS = 8


def model_overview(model: Model) -> str:
    """The model at a glance, as Netron shows with nothing selected: where it came from, its inputs and outputs
    (links), how big it is and its most used ops."""
    graph, facts = model.graph, model.summary()  # what ``graphlens info`` prints
    producer = " ".join(p for p in facts["producer"].values() if p) or "unknown"
    opsets = ", ".join(f"{d} {v}" for d, v in facts["opsets"].items())
    ops = list(facts["op_counts"].items())  # most used first
    rows = [f"<h3 style='margin:8px 0 2px 0'>{html.escape(model.name)}</h3>",
            f"<p style='margin:0 0 6px 0'>{facts['node_count']:,} nodes · weights "
            f"{size_text(facts['initializers']['bytes'])}<br>"
            f"from {html.escape(producer)} · IR {facts['ir_version']} · opset {html.escape(opsets)}</p>"]
    for title, values in (("Inputs", facts["inputs"]), ("Outputs", facts["outputs"])):
        names = [v["name"] for v in values]
        rows.append(f"<b>{title}</b><table cellspacing=2>")
        rows.extend(f"<tr><td>{_link('tensor', n)}</td><td style='color:#607d8b'>"
                    f"{html.escape(str(graph.tensor_type(n)))}</td></tr>" for n in names)
        rows.append("</table>")
    rows.append("<b>Most used ops</b><br>" + ", ".join(f"{html.escape(op)} ×{n}" for op, n in ops[:MOST_USED_OPS])
                + (" …" if len(ops) > MOST_USED_OPS else ""))
    return "".join(rows)


def _link(kind: str, name: str, text: str | None = None) -> str:
    return f'<a href="{kind}:{quote(name, safe="")}">{html.escape(text or name)}</a>'


class Histogram(QWidget):
    """A small bar chart of a tensor's values."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.counts: np.ndarray | None = None
        self.edges: np.ndarray | None = None
        self.setMinimumHeight(70)

    def set_values(self, values: np.ndarray | None) -> None:
        summary = tensor_stats(values) if values is not None else None
        self.set_counts(*((summary.histogram, summary.edges) if summary is not None else (None, None)))

    def set_counts(self, counts: np.ndarray | None, edges: np.ndarray | None) -> None:
        self.counts, self.edges = counts, edges
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        if self.counts is None or self.edges is None or not self.counts.max():
            return
        w, h = self.width(), self.height() - 14
        bar = w / len(self.counts)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor("#3465a4"))
        for k, c in enumerate(self.counts):
            bh = h * c / self.counts.max()
            painter.drawRect(QRectF(k * bar + 0.5, h - bh, max(bar - 1, 1), bh))
        painter.setPen(QColor("#607d8b"))
        painter.drawText(QRectF(0, h, w, 14), Qt.AlignmentFlag.AlignLeft, f"{self.edges[0]:.3g}")
        painter.drawText(QRectF(0, h, w, 14), Qt.AlignmentFlag.AlignRight, f"{self.edges[-1]:.3g}")


class Inspector(QWidget):
    """Details of the selected node, group or tensor."""

    link_activated = Signal(str, str)  # kind ("node" | "tensor"), name

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.graph: Graph | None = None
        self.overview = ""
        self.showing_overview = False
        self._overview_of: tuple[Model, int] | None = None
        self.tensor_name: str | None = None
        self.tensor_value: np.ndarray | None = None
        self.text = QTextBrowser()
        self.text.setOpenLinks(False)
        self.text.anchorClicked.connect(self._on_link)
        self.stats = QLabel()
        self.stats.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stats.setTextFormat(Qt.TextFormat.PlainText)
        self.histogram = Histogram()
        self.table = QTableWidget(0, 2)
        self.table.setHorizontalHeaderLabels(["index", "value"])
        self.table.verticalHeader().setVisible(False)
        self.read_button = QPushButton("Read values")
        self.read_button.clicked.connect(self.read_shown_tensor)
        self.save_button = QPushButton("Save as .npy…")
        self.save_button.clicked.connect(self._ask_save)
        self.tensor_panel = QWidget()
        panel = QVBoxLayout(self.tensor_panel)
        panel.setContentsMargins(0, 0, 0, 0)
        panel.addWidget(self.stats)
        panel.addWidget(self.read_button)
        panel.addWidget(self.histogram)
        panel.addWidget(self.table, 1)
        row = QHBoxLayout()
        row.addStretch(1)
        row.addWidget(self.save_button)
        panel.addLayout(row)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.text, 2)
        layout.addWidget(self.tensor_panel, 2)
        self.clear()

    # ------------------------------------------------------------------ showing
    def clear(self) -> None:
        """Nothing selected: the model's overview (inputs, outputs, opsets, most used ops), or a hint."""
        hint = "<p style='color:#78909c'>Select a node to see its attributes, inputs and outputs.</p>"
        self.text.setHtml(hint + self.overview)
        self._show_tensor_panel(None, None)
        self.showing_overview = True

    def set_model(self, model: Model | None) -> None:
        """The model whose overview shows while nothing is selected (again after each edit). It is written once
        the event loop is free: the graph is drawn first (100,000 nodes take a quarter of a second to sum up)."""
        self.overview = ""
        self.graph = None if model is None else model.graph
        self.clear()
        self._overview_of = None if model is None else (model, model.revision)
        if model is not None:
            QTimer.singleShot(0, self, lambda: self._write_overview(model, model.revision))

    def _write_overview(self, model: Model, revision: int) -> None:
        if self._overview_of != (model, revision):
            return  # another model, or the same one edited again since
        self.overview = model_overview(model)
        if self.showing_overview:
            self.clear()

    def show_node(self, graph: Graph, node: Node) -> None:
        self.graph = graph
        rows = [
            f"<h3 style='margin:0'>{html.escape(node.op_type)}</h3>",
            f"<p style='margin:2px 0 8px 0'><b>{html.escape(node.name)}</b>"
            + (f"<br>domain {html.escape(node.domain)}" if node.domain else "")
            + (f"<br>in {html.escape(graph.path)}" if graph.parent is not None else "")
            + "</p>",
        ]
        if node.attrs:
            rows.append("<b>Attributes</b><table cellspacing=2>")
            for key in node.attrs:
                rows.append(f"<tr><td style='color:#607d8b'>{html.escape(key)}</td>"
                            f"<td>{html.escape(attribute_text(node, key))}</td></tr>")
            rows.append("</table>")
        rows.append("<b>Inputs</b>" + self._tensor_rows(graph, node.inputs, inputs=True))
        rows.append("<b>Outputs</b>" + self._tensor_rows(graph, node.outputs, inputs=False))
        if node.subgraphs:
            subs = ", ".join(f"{html.escape(k)} ({sum(len(g.nodes) for g in v)} nodes)"
                             for k, v in node.subgraphs.items())
            rows.append(f"<p><b>Subgraphs</b> {subs}<br><i>double-click the node to open</i></p>")
        self.text.setHtml("".join(rows))
        self._show_tensor_panel(None, None)
        self.showing_overview = False

    def show_group(self, prefix: str, members: list[str]) -> None:
        self.text.setHtml(
            f"<h3 style='margin:0'>{html.escape(prefix)}</h3>"
            f"<p>{len(members)} nodes; double-click the group to expand it.</p>"
            + "<br>".join(_link("node", m) for m in members[:200])
            + ("<br>…" if len(members) > 200 else "")
        )
        self._show_tensor_panel(None, None)
        self.showing_overview = False

    def show_tensor(self, graph: Graph, tensor: str) -> None:
        self.graph = graph
        self.showing_overview = False
        ttype = graph.tensor_type(tensor)
        found = graph.producer(tensor)
        rows = [f"<h3 style='margin:0'>{html.escape(tensor)}</h3>", f"<p>{html.escape(str(ttype))}</p>"]
        rows.append("<p>from " + (_link("node", found[0].name, found[0].label) if found
                                  else html.escape(self._origin(graph, tensor))) + "</p>")
        users = graph.consumers(tensor)
        if users:
            rows.append("<p>to " + ", ".join(_link("node", c.name, f"{c.label} (input {slot})") for c, slot in users)
                        + "</p>")
        why = graph.why_not_constant(tensor)
        rows.append("<p style='color:#2e7d32'>constant</p>" if why is None
                    else f"<p style='color:#78909c'>not constant: {html.escape(why)}</p>")
        missing = unevaluated(graph, tensor) if why is None and self._initializer(graph, tensor) is None else None
        if missing is not None:
            rows.append(f"<p style='color:#78909c'>no value shown: it {html.escape(missing.reason)}</p>")
        stored = self._storage(graph, tensor)
        if stored:
            rows.append(f"<p>{html.escape(stored)}</p>")
        self.text.setHtml("".join(rows))
        if why is not None:
            self._show_tensor_panel(None, None)
        elif self._initializer_bytes(graph, tensor) > READ_WITHOUT_ASKING:
            self._offer_to_read(tensor, self._initializer_bytes(graph, tensor))
        else:
            self._show_tensor_panel(tensor, graph.constant_value(tensor))

    @staticmethod
    def _initializer(graph: Graph, tensor: str) -> onnx.TensorProto | None:
        owner = graph.owner_of(tensor)
        return owner.initializers.get(tensor) if owner is not None else None

    def _initializer_bytes(self, graph: Graph, tensor: str) -> int:
        init = self._initializer(graph, tensor)
        return tensor_nbytes(init) if init is not None else 0

    def _storage(self, graph: Graph, tensor: str) -> str:
        """``64.0 MB in model.onnx.data`` for an initializer; empty for other tensors."""
        init = self._initializer(graph, tensor)
        if init is None:
            return ""
        size = size_text(tensor_nbytes(init))
        if is_external(init):
            return f"{size} in {Path(data_path(external_ref(init).location)).name}, read only when shown"
        return f"{size} in the model file"

    def _offer_to_read(self, tensor: str, nbytes: int) -> None:
        self._show_tensor_panel(None, None)
        self.tensor_name = tensor
        self.tensor_panel.setVisible(True)
        for widget in (self.histogram, self.table, self.save_button):
            widget.setVisible(False)
        self.read_button.setText(f"Read values ({size_text(nbytes)})")
        self.read_button.setVisible(True)
        self.stats.setText(f"{size_text(nbytes)}: not read until asked")

    def read_shown_tensor(self) -> None:
        """Read the large constant the panel offers, and show its statistics."""
        if self.graph is not None and self.tensor_name is not None:
            self._show_tensor_panel(self.tensor_name, self.graph.constant_value(self.tensor_name))

    def _origin(self, graph: Graph, tensor: str) -> str:
        owner = graph.owner_of(tensor)
        if owner is not None and tensor in owner.initializers:
            return "initializer"
        return "graph input"

    def _tensor_rows(self, graph: Graph, names: list[str], *, inputs: bool) -> str:
        rows = ["<table cellspacing=2>"]
        for slot, name in enumerate(names):
            if not name:
                rows.append(f"<tr><td>{slot}</td><td style='color:#90a4ae'>(omitted)</td></tr>")
                continue
            ttype: TensorType = graph.tensor_type(name)
            if inputs:
                found = graph.producer(name)
                where = (_link("node", found[0].name, found[0].op_type) if found
                         else "const" if graph.is_constant(name) else "input")
            else:
                users = graph.consumers(name)
                where = (", ".join(_link("node", c.name, c.op_type) for c, _ in users[:4])
                         + (" …" if len(users) > 4 else ""))
                if graph.is_graph_output(name):
                    where = (where + ", " if where else "") + "graph output"
            rows.append(
                f"<tr><td>{slot}</td><td>{_link('tensor', name)}</td>"
                f"<td style='color:#607d8b'>{html.escape(str(ttype))}</td><td>{where}</td></tr>"
            )
        rows.append("</table>")
        return "".join(rows)

    def _show_tensor_panel(self, name: str | None, value: np.ndarray | None) -> None:
        self.tensor_name, self.tensor_value = name, value
        self.tensor_panel.setVisible(value is not None)
        self.read_button.setVisible(False)
        for widget in (self.histogram, self.table, self.save_button):
            widget.setVisible(True)
        if value is None:
            return
        flat = value.reshape(-1)
        numeric = bool(np.issubdtype(value.dtype, np.number) and value.size)
        stats = f"{value.dtype} {list(value.shape)}, {value.size} values, {size_text(value.nbytes)}"
        summary = tensor_stats(value)  # a slice at a time: a mapped weight is never copied whole
        if summary is not None:
            stats += (
                f"<br>min {summary.minimum:.6g}  max {summary.maximum:.6g}  "
                f"mean {summary.mean:.6g}  std {summary.std:.6g}"
            )
            self.histogram.set_counts(summary.histogram, summary.edges)
        else:
            self.histogram.set_counts(None, None)
        self.stats.setText(stats)
        shown = flat[:TABLE_VALUES]
        self.table.setRowCount(len(shown))
        for k, v in enumerate(shown):
            index = np.unravel_index(k, value.shape) if value.ndim else ()
            self.table.setItem(k, 0, QTableWidgetItem(str(tuple(int(i) for i in index))))
            self.table.setItem(k, 1, QTableWidgetItem(f"{v:.6g}" if numeric else str(v)))

    # ------------------------------------------------------------------ actions
    def save_tensor(self, path: str | Path) -> Path:
        """Write the shown constant to ``path`` (``.npy``)."""
        if self.tensor_value is None:
            raise ValueError("no constant tensor is shown")
        target = Path(path)
        np.save(target, self.tensor_value)
        return target if target.suffix == ".npy" else target.with_suffix(target.suffix + ".npy")

    def _ask_save(self) -> None:
        default = (self.tensor_name or "tensor").replace("/", "_").strip("_") + ".npy"
        path, _ = QFileDialog.getSaveFileName(self, "Save tensor", default, "NumPy arrays (*.npy)")
        if path:
            self.save_tensor(path)

    def _on_link(self, url: QUrl) -> None:
        kind, _, name = url.toString().partition(":")
        self.link_activated.emit(kind, unquote(name))
