"""File › Compare with…: the open model (A) beside another (B), synced, coloured by status, its changes listed.

:class:`~graphlens.gui.comparer.Comparer` compares in a worker and hands the result to the
workspace, whose ``compared`` event shows the :class:`CompareView` in the window's centre: A's canvas (the
window's own, so every panel keeps working on A) and B's side by side or one above the other, and
the list of changes below them. A new model, an edit or Close (Esc) returns to the single view.

How the canvases follow each other (A leads after every new layout; otherwise whoever moved):

* **pan and zoom**: the other canvas takes the same scale and centres on the partner of the box
  nearest the mover's centre, offset by as much as the mover's centre is from that box, so a pan
  moves both by the same amount while the anchor stays the same box;
* **selection**: selecting boxes selects the boxes of their paired nodes on the other side (a folded
  Conv in B selects the Conv and the BatchNormalization of A), without feeding back;
* **subgraphs**: entering an If/Loop/Scan body enters the paired node's body on the other side when
  it has one;
* **groups**: expanding a name-scope group (or all of them) expands the group of the same scope on
  the other side.

Colours (see :mod:`graphlens.gui.compare_panel`) go through the renderers' per-box overlay colours;
"Colour by" switches both canvases to the numeric error of each node's output (A's through the
workspace's overlay, so the Overlay panel lists it, B's here).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from PySide6.QtCore import QObject, QPointF, Qt
from PySide6.QtGui import QStandardItemModel
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.graph import Graph
from graphlens.gui.compare_panel import STATUS_COLOURS, UNPAIRED, ChangesList, paint_status_legend
from graphlens.gui.graph_panel import GraphPanel
from graphlens.gui.overlay_legend import colour_by_overlay
from graphlens.overlays import Overlay

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.gui.main_window import MainWindow

COLOUR_MODES = [
    ("status", "status"),
    ("sqnr_db", "numeric error (SQNR dB)"),
    ("max_abs", "numeric error (max |Δ|)"),
]


class CompareView(QWidget):
    """The window's centre while comparing: a bar, A's and B's graph panels, and the changes list."""

    def __init__(self, window: MainWindow, comparison: Any) -> None:
        super().__init__()
        self.main_window, self.workspace, self.comparison = window, window.workspace, comparison
        self.panel_a: GraphPanel = window.panel
        self.panel_b = GraphPanel()
        self.mode = "status"
        self.overlays: dict[str, Overlay] = {}
        self._syncing = False
        self._maps: dict[str, dict[int, list[int]]] = {"a": {}, "b": {}}
        self._maps_for: tuple[Any, Any] = (None, None)
        self._anchors: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]] = {}
        """Per side: the boxes with a partner, and their centres (the candidates to anchor a pan on)."""
        self._pair_index = {id(p): k for k, p in enumerate(comparison.pairs)}
        self._build()
        self._connections = []  # to A's panel, which outlives the view: dropped one by one on release
        for side, panel in (("a", self.panel_a), ("b", self.panel_b)):
            for signal, slot in ((panel.canvas.scene_changed, lambda s=side: self._on_scene_changed(s)),
                                 (panel.canvas.view_changed, lambda s=side: self._on_view_changed(s)),
                                 (panel.canvas.selection_changed,
                                  lambda indices, s=side: self._on_selection(s, indices)),
                                 (panel.graph_changed, lambda graph, s=side: self._on_graph_changed(s, graph))):
                connection = signal.connect(slot)
                if side == "a":
                    self._connections.append(connection)
        self.workspace.overlay.events.shown.connect(self._on_overlay)
        self.changes.pair_chosen.connect(self.show_pair)
        self.changes.set_comparison(comparison)
        b_graph = (self._partner_graph("a", self.panel_a.graph) if self.panel_a.graph is not None
                   else None) or comparison.b.graph
        self.panel_b.grouping = self.panel_a.grouping  # B starts with A's groups open
        if self.panel_a.graph is not None:
            self.panel_b.expanded[b_graph.path] = set(self.panel_a.expanded.get(self.panel_a.graph.path, set()))
        self.panel_b.show_path(b_graph)
        self._apply_colours("a")

    # ================================================================ construction
    def _build(self) -> None:
        cmp = self.comparison
        a_name, b_name = _model_name(self.workspace.model), _model_name(cmp.b)
        self.colour_by = QComboBox()
        for key, text in COLOUR_MODES:
            self.colour_by.addItem(text, key)
        if cmp.numeric_reason:
            model = self.colour_by.model()
            assert isinstance(model, QStandardItemModel)  # a combo box's own model
            for k in (1, 2):
                model.item(k).setEnabled(False)
                self.colour_by.setItemData(k, cmp.numeric_reason, Qt.ItemDataRole.ToolTipRole)
        self.colour_by.setToolTip("Colour both canvases by each node's status, or by the error of its output"
                                  + (f" (numbers unavailable: {cmp.numeric_reason})" if cmp.numeric_reason else ""))
        self.colour_by.activated.connect(lambda k: self.set_colour_mode(self.colour_by.itemData(k)))
        self.stacked = QPushButton("One above the other")
        self.stacked.setCheckable(True)
        self.stacked.setToolTip("Show B below A instead of beside it")
        self.stacked.toggled.connect(self.set_stacked)
        self.close_button = QPushButton("Close comparison")
        self.close_button.setToolTip("Back to the open model alone (Esc)")
        self.close_button.clicked.connect(self.main_window.comparer.close)
        title = QLabel(f"Comparing A: {a_name}  with  B: {b_name}")
        title.setTextFormat(Qt.TextFormat.PlainText)
        title.setStyleSheet("font-weight: bold")
        bar = QHBoxLayout()
        bar.setContentsMargins(6, 4, 6, 2)
        bar.addWidget(title, 1)
        bar.addSpacing(12)
        bar.addWidget(QLabel("Colour by"))
        bar.addWidget(self.colour_by)
        bar.addWidget(self.stacked)
        bar.addWidget(self.close_button)
        self.canvases = QSplitter(Qt.Orientation.Horizontal)
        self.canvases.setChildrenCollapsible(False)
        self.label_a = _side_label(f"A · {a_name} (the open model)")
        self.label_b = _side_label(f"B · {b_name}")
        for label, panel in ((self.label_a, self.panel_a), (self.label_b, self.panel_b)):
            column = QWidget()
            layout = QVBoxLayout(column)
            layout.setContentsMargins(0, 0, 0, 0)
            layout.setSpacing(0)
            layout.addWidget(label)
            layout.addWidget(panel, 1)
            self.canvases.addWidget(column)
        self.changes = ChangesList()
        body = QSplitter(Qt.Orientation.Vertical)
        body.setChildrenCollapsible(False)
        body.addWidget(self.canvases)
        body.addWidget(self.changes)
        body.setStretchFactor(0, 4)
        body.setStretchFactor(1, 1)
        self.body = body
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(bar)
        layout.addWidget(body, 1)

    def release(self) -> GraphPanel:
        """Give A's panel back to the window, colours and legend as they were before comparing."""
        for connection in self._connections:
            QObject.disconnect(connection)
        self.workspace.overlay.events.shown.disconnect(self._on_overlay)
        self.panel_b.cancel_layout()
        if self.workspace.overlay.shown is not None and self.workspace.overlay.shown is self.overlays.get("a"):
            self.workspace.overlay.show(None)  # the Overlay panel colours A by kind again
        renderer = self.panel_a.canvas.renderer
        if renderer is not None and self.workspace.overlay.shown is None:
            renderer.set_overlay(None)
            self.panel_a.canvas.legend_painter = None
            self.panel_a.canvas.update()
        self.panel_a.setParent(None)
        return self.panel_a

    # ================================================================ scripting API
    def set_colour_mode(self, mode: str) -> None:
        """``status``, ``sqnr_db`` or ``max_abs``: what both canvases are coloured by."""
        if mode != "status" and self.comparison.numeric_reason:
            self.main_window.show_error(f"no numeric error to colour by: {self.comparison.numeric_reason}")
            mode = "status"
        self.mode = mode
        self.colour_by.setCurrentIndex(self.colour_by.findData(mode))
        if mode == "status":
            if self.workspace.overlay.shown is not None and self.workspace.overlay.shown is self.overlays.get("a"):
                self.workspace.overlay.show(None)  # _on_overlay colours A by status again
            self._apply_colours("a")
        else:
            self.overlays = {side: self.comparison.as_overlay(mode, side) for side in ("a", "b")}
            self.workspace.overlay.show(self.overlays["a"])  # the Overlay panel colours A and lists its nodes
        self._apply_colours("b")

    def set_stacked(self, stacked: bool) -> None:
        """B below A (True) or beside it."""
        self.canvases.setOrientation(Qt.Orientation.Vertical if stacked else Qt.Orientation.Horizontal)
        if self.stacked.isChecked() != stacked:
            self.stacked.setChecked(stacked)
        self.follow("a")

    def show_pair(self, index: int) -> None:
        """Select pair ``index`` of the comparison in both canvases and centre both on it."""
        pair = self.comparison.pairs[index]
        model = self.workspace.model
        self._syncing = True
        try:
            if pair.a and model is not None:
                self.panel_a.show_path(model.graph_at(pair.graph))
            if pair.b:
                self.panel_b.show_path(self.comparison.b.graph_at(pair.path_b))
            self.panel_a.select_nodes(list(pair.a), center=bool(pair.a))
            self.panel_b.select_nodes(list(pair.b), center=bool(pair.b))
        finally:
            self._syncing = False
        if not pair.a or not pair.b:
            self.follow("b" if not pair.a else "a")
        self.changes.show_pair(index)

    def fit(self) -> None:
        """A's whole graph in its canvas (F), B following."""
        self.body.setSizes([int(self.body.height() * 0.78), int(self.body.height() * 0.22)])
        self.panel_a.canvas.fit()

    def step(self, delta: int) -> int | None:
        """Next (1) or previous (-1) change, selected and centred in both canvases; its pair's index."""
        return self.changes.step(delta)

    # ================================================================ colours
    def _panel(self, side: str) -> GraphPanel:
        return self.panel_a if side == "a" else self.panel_b

    def _apply_colours(self, side: str) -> None:
        canvas = self._panel(side).canvas
        if canvas.renderer is None:
            return
        ours = self.overlays.get("a")
        if side == "a" and self.workspace.overlay.shown is not None:
            if self.mode == "status" and self.workspace.overlay.shown is ours:
                self.workspace.overlay.show(None)
            return  # the Overlay panel colours A: by the error, or by what the user picked there
        if self.mode != "status" and side == "b":
            colour_by_overlay(canvas, self.overlays["b"])
        else:
            self._colour_by_status(side)
        canvas.update()

    def _colour_by_status(self, side: str) -> None:
        panel = self._panel(side)
        view, graph, renderer = panel.view, panel.graph, panel.canvas.renderer
        if view is None or graph is None or renderer is None:
            return
        status_of, path = self.comparison.status_of_group, graph.path
        colours: dict[int, tuple[int, int, int]] = {}
        labels: dict[int, str] = {}
        for i, item in enumerate(view.items):
            if item.kind not in ("node", "group"):
                continue
            status = status_of(side, path, item.members)  # a collapsed group: its worst member's
            colours[i] = STATUS_COLOURS[status]
            if status != "same":
                labels[i] = status if item.kind == "node" else f"worst: {status}"
        renderer.set_overlay(colours, labels, UNPAIRED)
        counts = self.comparison.counts
        title = "Status of A's nodes in B" if side == "a" else "Status of B's nodes"
        panel.canvas.legend_painter = lambda painter, corner: paint_status_legend(painter, corner, side, counts, title)

    def _on_overlay(self, overlay: Overlay | None) -> None:
        if self.mode == "status" and (overlay is None or overlay is self.overlays.get("a")):
            self._apply_colours("a")

    # ================================================================ following each other
    def _live(self) -> bool:
        return self.workspace.comparison.result is self.comparison

    def _pair_of(self, side: str, graph: str, node: str) -> Any:
        return (self.comparison.pair_of_a if side == "a" else self.comparison.pair_of_b)(graph, node)

    def _partners(self, side: str, graph: Graph, names: list[str]) -> list[Any]:
        """The pairs of ``names`` (nodes of ``graph`` on ``side``), each once, in order."""
        found: dict[int, Any] = {}
        for name in names:
            pair = self._pair_of(side, graph.path, name)
            if pair is not None:
                found.setdefault(id(pair), pair)
        return list(found.values())

    def _ensure_maps(self) -> None:
        renderers = (self.panel_a.canvas.renderer, self.panel_b.canvas.renderer)
        if renderers == self._maps_for:
            return
        self._maps_for = renderers
        self._maps = {"a": {}, "b": {}}
        if renderers[0] is None or renderers[1] is None:
            return
        for side, here, there in (("a", self.panel_a, self.panel_b), ("b", self.panel_b, self.panel_a)):
            r, view, graph, there_view = here.canvas.renderer, here.view, here.graph, there.view
            if r is None or view is None or graph is None or there_view is None:
                return
            found = self._maps[side]
            for i, item in enumerate(view.items):
                if item.kind in ("input", "output"):
                    j = there_view.index.get(item.key)
                    if j is not None:
                        found[i] = [j]
                    continue
                partners = [n for p in self._partners(side, graph, item.members)
                            for n in (p.b if side == "a" else p.a)]
                items = list(dict.fromkeys(j for j in (there.item_of(n) for n in partners) if j is not None))
                if items:
                    found[i] = items
            keys = np.fromiter(found, dtype=np.int64, count=len(found))
            self._anchors[side] = (keys, (r.x0[keys] + r.x1[keys]) / 2, (r.y0[keys] + r.y1[keys]) / 2)

    def follow(self, leader: str) -> None:
        """The other canvas takes ``leader``'s scale and centres on the partner of the box nearest its centre."""
        if self._syncing or not self._live():
            return
        self._ensure_maps()
        here, there = (self.panel_a, self.panel_b) if leader == "a" else (self.panel_b, self.panel_a)
        src, dst, found = here.canvas, there.canvas, self._maps[leader]
        if src.renderer is None or dst.renderer is None or not found:
            return
        keys, cx, cy = self._anchors[leader]
        centre = src.visible_scene_rect().center()
        anchor = int(keys[int(np.argmin((cx - centre.x()) ** 2 + (cy - centre.y()) ** 2))])
        delta = centre - src.renderer.rects[anchor].center()
        target = dst.renderer.rects[found[anchor][0]].center() + delta
        self._syncing = True
        try:
            dst.scale = src.scale
            dst.offset = QPointF(target.x() - dst.width() / 2 / dst.scale, target.y() - dst.height() / 2 / dst.scale)
            dst.update()
        finally:
            self._syncing = False

    def _on_view_changed(self, side: str) -> None:
        if self._panel(side).canvas.renderer is not self._maps_for[0 if side == "a" else 1]:
            return  # a new layout is being installed (its fit moves the view); its scene_changed syncs
        self.follow(side)

    def _on_scene_changed(self, side: str) -> None:
        if not self._live():
            return
        self._apply_colours(side)
        self._ensure_maps()
        if not self._syncing:
            self._sync_groups(side)
            self.follow("a")

    def _sync_groups(self, side: str) -> None:
        """Groups expanded on one side (by name scope), or all of them, are expanded on the other too."""
        here, there = (self.panel_a, self.panel_b) if side == "a" else (self.panel_b, self.panel_a)
        if here.graph is None or there.graph is None:
            return
        wanted = set(here.expanded.get(here.graph.path, set()))
        if there.grouping == here.grouping and there.expanded.get(there.graph.path, set()) == wanted:
            return
        there.grouping = here.grouping
        there.expanded[there.graph.path] = wanted
        self._syncing = True
        try:
            there.relayout(keep_view=True)
        finally:
            self._syncing = False

    def _on_selection(self, side: str, indices: list[int]) -> None:
        if self._syncing or not self._live():
            return
        here, there = (self.panel_a, self.panel_b) if side == "a" else (self.panel_b, self.panel_a)
        if here.view is None or here.graph is None:
            return
        items = [here.view.items[i] for i in indices if 0 <= i < len(here.view.items)]
        pairs = self._partners(side, here.graph,
                               [n for item in items if item.kind in ("node", "group") for n in item.members])
        names = [n for p in pairs for n in (p.b if side == "a" else p.a)]
        self._syncing = True
        try:
            there.select_nodes(names)
            extra = [j for i in indices for j in self._maps[side].get(i, [])
                     if here.view.items[i].kind in ("input", "output")]
            if extra:
                there.canvas.select(extra, add=True)
        finally:
            self._syncing = False
        changed = [self._pair_index[id(p)] for p in pairs if p.status != "same"]
        self.changes.show_pair(changed[0] if changed else None)
        if side == "b" and len(items) == 1 and items[0].kind == "node" and items[0].node is not None:
            graph = here.graph
            self.main_window.inspector.show_node(graph, graph.by_name[items[0].node])  # what was clicked: B's node

    def _on_graph_changed(self, side: str, graph: Graph | None) -> None:
        if self._syncing or graph is None or not self._live():
            return
        there = self.panel_b if side == "a" else self.panel_a
        partner = self._partner_graph(side, graph)
        if partner is None or partner is there.graph:
            return
        self._syncing = True
        try:
            there.show_path(partner)
        finally:
            self._syncing = False

    def _partner_graph(self, side: str, graph: Graph) -> Graph | None:
        """The graph on the other side that stands for ``graph``: the main graph's is the main graph, a
        body's is the same body of the paired node (None when the pair has no such body)."""
        other_model: Model | None = self.comparison.b if side == "a" else self.workspace.model
        if other_model is None:
            return None
        parent_graph = graph.parent_graph
        if graph.parent is None or parent_graph is None:
            return other_model.graph
        other_parent = self._partner_graph(side, parent_graph)
        pair = self._pair_of(side, parent_graph.path, graph.parent.name)
        if other_parent is None or pair is None:
            return None
        attr = graph.attr_name
        index = next((k for k, g in enumerate(graph.parent.subgraphs.get(attr, [])) if g is graph), 0)
        for name in pair.b if side == "a" else pair.a:
            node = other_parent.by_name.get(name)
            if node is not None and node.subgraphs.get(attr):
                bodies: list[Graph] = node.subgraphs[attr]
                return bodies[min(index, len(bodies) - 1)]
        return None


def _model_name(model: Any) -> str:
    path = getattr(model, "path", None)
    return Path(path).name if path else getattr(model, "name", "model")


def _side_label(text: str) -> QLabel:
    label = QLabel(text)
    label.setTextFormat(Qt.TextFormat.PlainText)
    label.setStyleSheet("background: #eceff1; color: #263238; padding: 3px 8px; font-weight: bold")
    return label

