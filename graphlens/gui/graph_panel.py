"""The canvas with its breadcrumb: which graph is shown, which groups are open, layout off-thread.

Small graphs are laid out at once; large ones in a worker thread with progress and cancel, the
canvas saying what it is doing meanwhile. Expanding a group lays out the view again with that
scope open; entering an If/Loop/Scan body pushes it on the breadcrumb.
"""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QPoint, QPointF, QRectF, Qt, Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMenu, QToolButton, QVBoxLayout, QWidget

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.task import Task
from graphlens.gui import workers
from graphlens.gui.canvas import GraphCanvas
from graphlens.gui.scene import SceneRenderer
from graphlens.layout.collapse_matches import MATCH_PREFIX
from graphlens.layout.layered import Layout, layout_view
from graphlens.layout.view import View, ViewOptions, build_view

SYNC_LIMIT = 2500
"""Graphs with more nodes than this are laid out in a worker thread."""


class GraphPanel(QWidget):
    """Breadcrumb + canvas for one model's graphs."""

    layout_started = Signal(int)  # nodes being laid out
    layout_progress = Signal(float)
    layout_done = Signal()
    layout_failed = Signal(str)
    graph_changed = Signal(object)  # the Graph now shown

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.canvas = GraphCanvas()
        self.crumbs = QHBoxLayout()
        self.crumbs.setContentsMargins(6, 2, 6, 2)
        bar = QWidget()
        bar.setLayout(self.crumbs)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addWidget(bar)
        layout.addWidget(self.canvas, 1)
        self.stack: list[Graph] = []
        self.show_constants = False
        self.show_shape_ops = False
        self.expanded: dict[str, set[str]] = {}
        self.collapsed_matches: dict[str, dict[str, str]] = {}  # graph path -> node name -> match key
        self.grouping: bool | None = None
        self.view: View | None = None
        self.job: workers.Worker | None = None
        self._token = 0
        self._pending_select: list[str] = []
        self._saved_stack: list[Graph] | None = None
        self.canvas.item_activated.connect(self.activate)
        self._refresh_crumbs()

    # ----------------------------------------------------------------- graphs
    @property
    def graph(self) -> Graph | None:
        return self.stack[-1] if self.stack else None

    def show_root(self, graph: Graph | None) -> None:
        self.stack = [graph] if graph is not None else []
        self.expanded = {}
        self.collapsed_matches = {}
        self.relayout()

    def enter(self, node: Node, attr: str | None = None, index: int = 0) -> None:
        """Show the body of an If/Loop/Scan node (``attr``: which one, default the first)."""
        if not node.subgraphs:
            return
        name = attr or next(iter(node.subgraphs))
        self.stack.append(node.subgraphs[name][index])
        self.relayout()

    def show_path(self, graph: Graph) -> None:
        """Show ``graph`` (the main graph or any subgraph), with the breadcrumb leading to it."""
        chain: list[Graph] = []
        current: Graph | None = graph
        while current is not None:
            chain.append(current)
            current = current.parent_graph
        if chain[::-1] != self.stack:
            self.stack = chain[::-1]
            self.relayout()

    def show_temporary(self, graph: Graph) -> None:
        """Show a graph that is not the model's (a rewrite's result) until :meth:`restore`."""
        if self._saved_stack is None:
            self._saved_stack = list(self.stack)
        self.stack = [graph]
        self.relayout()

    def restore(self) -> None:
        if self._saved_stack is not None:
            self.stack, self._saved_stack = self._saved_stack, None
            self.relayout()

    def leave(self) -> None:
        """Back to the enclosing graph."""
        if len(self.stack) > 1:
            self.stack.pop()
            self.relayout()

    def go_to(self, depth: int) -> None:
        if 0 <= depth < len(self.stack) - 1:
            del self.stack[depth + 1 :]
            self.relayout()

    def activate(self, index: int) -> None:
        """A double-click on item ``index``: a group opens or closes, a node with a body is entered."""
        view, graph = self.view, self.graph
        if view is None or graph is None:
            return
        item = view.items[index]
        if item.kind == "group":
            self.toggle_group(item.key.removeprefix("group:"))
        elif item.kind == "node" and item.has_subgraph and item.node is not None:
            self.enter_menu(graph.by_name[item.node], self.cursor().pos())

    def enter_menu(self, node: Node, global_pos: QPoint) -> None:
        """Let the user choose a branch when a node has several bodies (If: then/else)."""
        bodies = [(attr, k) for attr, graphs in node.subgraphs.items() for k in range(len(graphs))]
        if len(bodies) == 1:
            self.enter(node)
            return
        menu = QMenu(self)
        for attr, k in bodies:
            label = attr if len(node.subgraphs[attr]) == 1 else f"{attr}[{k}]"

            def open_body(a: str = attr, i: int = k) -> None:
                self.enter(node, a, i)

            menu.addAction(f"Open {label}", open_body)
        menu.popup(global_pos)

    # --------------------------------------------------------------- groups
    def toggle_group(self, prefix: str) -> None:
        graph = self.graph
        if graph is None:
            return
        opened = self.expanded.setdefault(graph.path, set())
        if prefix in opened:
            opened -= {p for p in opened if p == prefix or p.startswith(prefix + "/")}
        else:
            opened.add(prefix)
        self.relayout(keep_view=True)

    def set_expand_all(self, expand: bool) -> None:
        """Every node drawn, or every name scope closed (at any size: a 1,400-node model's twelve layers too)."""
        self.grouping = not expand
        if not expand and self.graph is not None:
            self.expanded[self.graph.path] = set()
        self.relayout()

    def set_show_constants(self, show: bool) -> None:
        self.show_constants = show
        self.relayout(keep_view=True)

    def set_show_shape_ops(self, show: bool) -> None:
        self.show_shape_ops = show
        self.relayout(keep_view=True)

    def set_collapsed_matches(self, keys: dict[str, dict[str, str]]) -> None:
        """Draw each match as one box: per graph path, node name -> match key (see ``collapse_matches``).
        Matches opened by a double-click close again."""
        self.collapsed_matches = keys
        for opened in self.expanded.values():
            opened -= {p for p in opened if p.startswith(MATCH_PREFIX)}
        self.relayout(keep_view=True)

    def options(self) -> ViewOptions:
        graph = self.graph
        opened = frozenset(self.expanded.get(graph.path, set())) if graph is not None else frozenset()
        collapsed = self.collapsed_matches.get(graph.path, {}) if graph is not None else {}
        return ViewOptions(show_constants=self.show_constants, show_shape_ops=self.show_shape_ops, expanded=opened,
                           grouping=self.grouping, collapsed_matches=collapsed)

    # --------------------------------------------------------------- layout
    def relayout(self, *, keep_view: bool = False, select: Sequence[str] = ()) -> None:
        """Build the view and lay it out again (off-thread for big graphs)."""
        self._refresh_crumbs()
        if self.job is not None:
            self.job.cancel()
            self.job = None
        self._token += 1
        self._pending_select = list(select)
        graph = self.graph
        self.graph_changed.emit(graph)
        if graph is None:
            self.view = None
            self.canvas.set_scene(None)
            return
        options = self.options()
        if len(graph.nodes) <= SYNC_LIMIT:
            view = build_view(graph, options)
            self._install(view, layout_view(view), keep_view)
            return
        token = self._token
        self.canvas.set_message(f"Laying out {len(graph.nodes):,} nodes…  (Esc or the Cancel button stops it)")
        self.layout_started.emit(len(graph.nodes))

        def work(task: Task) -> tuple[View, Layout]:
            view = build_view(graph, options)
            return view, layout_view(view, task)

        job = workers.Worker(work)
        job.signals.progress.connect(self.layout_progress)
        job.signals.finished.connect(lambda result, t=token, k=keep_view: self._finished(t, result, k))
        job.signals.failed.connect(lambda message, t=token: self._failed(t, message))
        job.signals.cancelled.connect(lambda t=token: self._cancelled(t))
        self.job = workers.start(job)

    def cancel_layout(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _finished(self, token: int, result: tuple[View, Layout], keep_view: bool) -> None:
        if token != self._token:
            return  # a newer request replaced this one
        self.job = None
        view, layout = result
        self._install(view, layout, keep_view)
        self.layout_done.emit()

    def _failed(self, token: int, message: str) -> None:
        if token == self._token:
            self.job = None
            self.canvas.set_message(f"Layout failed: {message.splitlines()[0]}")
            self.layout_failed.emit(message)

    def _cancelled(self, token: int) -> None:
        if token == self._token:
            self.job = None
            self.canvas.set_message("Layout cancelled. Use View › Relayout (Ctrl+R) to try again.")
            self.layout_done.emit()

    def _install(self, view: View, layout: Layout, keep_view: bool) -> None:
        scale, offset = self.canvas.scale, self.canvas.offset
        anchors = self._anchors() if keep_view else []
        selected = self._selected_names() if keep_view else []
        self.view = view
        self.canvas.set_scene(SceneRenderer(view, layout), fit=not keep_view)
        if keep_view:
            self.canvas.scale, self.canvas.offset = scale, offset
            self._keep_in_place(anchors)
            self.select_nodes(selected)  # what is still there stays selected
            self.canvas.update()
        if self._pending_select:
            self.select_nodes(self._pending_select, center=True)

    ANCHORS = 24
    """Nodes nearest the canvas's middle remembered across a relayout; the first still drawn stays put."""

    def _selected_names(self) -> list[str]:
        view = self.view
        if view is None:
            return []
        items = (view.items[i] for i in sorted(self.canvas.marks.selected) if i < len(view.items))
        return [item.node for item in items if item.kind == "node" and item.node is not None]

    def _anchors(self) -> list[tuple[str, QPointF]]:
        """The nodes on screen, nearest the middle first, each with where it is drawn (widget pixels)."""
        view, renderer = self.view, self.canvas.renderer
        if view is None or renderer is None:
            return []
        visible = self.canvas.visible_scene_rect()
        middle = visible.center()
        shown = [int(i) for i in renderer.visible(visible)]
        shown.sort(key=lambda i: (renderer.rects[i].center() - middle).manhattanLength())
        found: list[tuple[str, QPointF]] = []
        for i in shown[: self.ANCHORS]:
            item = view.items[i]
            name = item.node if item.kind == "node" else (item.members[0] if item.members else None)
            if name is not None:
                found.append((name, self.canvas.to_widget(_top(renderer.rects[i]))))
        return found

    def _keep_in_place(self, anchors: list[tuple[str, QPointF]]) -> None:
        """After a relayout at the same scale, put the first anchor still drawn where it was on screen; when none
        is (undoing a fusion brings back what the fused nodes replaced), the node sharing the longest name scope
        with the nearest one. An edit, an undo or a group opened never sends the user elsewhere."""
        view, renderer = self.view, self.canvas.renderer
        if view is None or renderer is None or not anchors:
            return
        kept = [(view.item_showing(name), where) for name, where in anchors]
        index, where = next(((i, w) for i, w in kept if i is not None),
                            (_closest_scope(view, anchors[0][0]), anchors[0][1]))
        if index is None:
            return
        top, scale = _top(renderer.rects[index]), self.canvas.scale
        self.canvas.offset = QPointF(top.x() - where.x() / scale, top.y() - where.y() / scale)

    # ------------------------------------------------------------ selection
    def item_of(self, node_name: str) -> int | None:
        return None if self.view is None else self.view.item_showing(node_name)

    def select_nodes(self, names: list[str], *, center: bool = False) -> None:
        """Select the items showing ``names`` (their group when collapsed) and optionally centre on the first."""
        indices = [i for i in (self.item_of(n) for n in names) if i is not None]
        self.canvas.select(indices)
        if center and indices:
            self.canvas.center_on(indices[0])

    # ------------------------------------------------------------ breadcrumb
    def _refresh_crumbs(self) -> None:
        while self.crumbs.count():
            item = self.crumbs.takeAt(0)
            widget = item.widget() if item is not None else None
            if widget is not None:
                widget.deleteLater()
        if not self.stack:
            self.crumbs.addWidget(QLabel(""))
            return
        for depth, graph in enumerate(self.stack):
            if depth:
                self.crumbs.addWidget(QLabel("›"))
            text = "main graph" if graph.parent is None else (f"{graph.parent.op_type} '{graph.parent.name}' · "
                                                              f"{graph.attr_name}")
            button = QToolButton()
            button.setText(text.replace("&", "&&"))  # a name's '&' is not a keyboard shortcut
            button.setAutoRaise(True)
            button.setEnabled(depth < len(self.stack) - 1)
            button.clicked.connect(lambda _=False, d=depth: self.go_to(d))
            button.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextOnly)
            self.crumbs.addWidget(button)
        self.crumbs.addStretch(1)


def _top(box: QRectF) -> QPointF:
    """The middle of a box's top edge: where it stays when an edit gives it another line (a conv's new bias)."""
    return QPointF(box.center().x(), box.top())


def _closest_scope(view: View, name: str) -> int | None:
    """The item of the node whose name shares the most leading ``/`` scopes with ``name`` (None: no scope shared)."""
    wanted = name.split("/")
    best, best_depth = None, 1  # the empty scope before a leading '/' is not shared
    for node, index in view.node_item.items():
        parts = node.split("/")
        depth = 0
        for a, b in zip(parts, wanted):
            if a != b:
                break
            depth += 1
        if depth > best_depth:
            best, best_depth = index, depth
    return best
