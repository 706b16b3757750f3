"""What the canvas shows: boxes for nodes, collapsed scope groups and graph inputs/outputs, and
the edges between them.

Two things keep big models readable. Constants (``Constant``, ``ConstantOfShape`` and chains fed
only by constants) are not boxes of their own but lines in the boxes that use them, as Netron
shows weights. And above :attr:`ViewOptions.collapse_threshold` visible nodes, exporter name
scopes become collapsed groups (see :mod:`graphlens.layout.scopes`) that the user expands one at
a time. Shape arithmetic (``Shape → Gather → Concat → Reshape`` chains) is drawn like constants,
as a line in the box that uses the shape (see :mod:`graphlens.layout.shape_ops`). The matches of a
pattern may be folded into one box each (see :mod:`graphlens.layout.collapse_matches`), and runs of
identical sibling scopes into one box marked ``×N`` (see :mod:`graphlens.layout.repeats`). Edge labels
need tensor shapes, which may mean running ONNX shape inference, so they are computed only when
asked for (:func:`edge_label`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import TensorType, type_of_value_info
from graphlens.layout.categories import CATEGORIES, op_category
from graphlens.layout.collapse_matches import MATCH_PREFIX, assign_matches, is_match_group, match_subtitle, match_title
from graphlens.layout.labels import (
    attribute_lines,
    constant_lines,
    fit_lines,
    group_lines,
    is_overridable,
    shape_label,
    type_text,
)
from graphlens.layout.repeats import assign_repeats, first_block, is_repeat_group, opened_run, repeat_title
from graphlens.layout.scopes import (
    Scope,
    build_tree,
    grouping_depth,
    last_part,
    overview_limit,
    scope_of,
    scope_prefixes,
)
from graphlens.layout.shape_ops import computed_lines, shape_arithmetic

__all__ = [
    "CATEGORIES", "Edge", "Item", "Scope", "View", "ViewOptions", "build_view", "collapse_target", "edge_label",
    "op_category", "scope_of", "scope_prefixes", "scopes",
]

GROUP_PREFIX = "group:"
INPUT_PREFIX = "input:"
OUTPUT_PREFIX = "output:"


@dataclass
class ViewOptions:
    """What to show; the GUI rebuilds the view with new options when the user changes them."""

    show_constants: bool = False
    show_shape_ops: bool = False
    """Draw shape arithmetic as boxes; by default it is a ``⟨computed: …⟩`` line in the box using the shape."""
    expanded: frozenset[str] = frozenset()  # scope prefixes shown expanded
    collapse_threshold: int = 2000  # above this many visible nodes, scopes start collapsed
    grouping: bool | None = None  # None: decided by collapse_threshold
    qdq_badges: bool = True
    """QuantizeLinear → DequantizeLinear pairs of an activation drawn as a badge ("u8") on the edge
    they sit on, not as two more boxes: a quantized model keeps its float model's picture."""
    collapsed_matches: dict[str, str] = field(default_factory=dict)
    """Node name -> key of the pattern match it belongs to: each match drawn as one box titled with the
    pattern's name (see :mod:`graphlens.layout.collapse_matches`)."""


@dataclass
class Item:
    """One box on the canvas: a node, a collapsed group, or a graph input or output."""

    key: str  # node name, "group:" + prefix, "input:" / "output:" + tensor name
    kind: str  # "node" | "group" | "input" | "output"
    title: str
    subtitle: str
    lines: list[str]
    category: str
    node: str | None
    members: list[str]
    has_subgraph: bool


@dataclass
class Edge:
    """Data flowing between two boxes; several tensors when a group boundary bundles them."""

    source: int
    target: int
    tensors: list[str]
    badge: str = ""
    """A quantized edge's integer type (``u8``, ``i8/ch`` per channel); see :attr:`ViewOptions.qdq_badges`."""


@dataclass
class View:
    """The boxes and edges of one graph under one set of :class:`ViewOptions`.

    Items are in graph order (inputs first, outputs last, a group where its first member is), so
    edges go from lower to higher indexes except around collapsed groups: a group may be fed by
    an item listed after it, and grouping may close cycles. The layout sorts that out itself.
    """

    graph: Graph
    options: ViewOptions
    items: list[Item]
    edges: list[Edge]
    index: dict[str, int]  # item key -> item index
    node_item: dict[str, int]  # visible node name -> index of the item showing it
    inputs: list[int]  # item indexes of the graph inputs (and of outer tensors a body reads)
    outputs: list[int]  # item indexes of the graph outputs
    hidden: frozenset[str]  # constant nodes summarised in their consumers instead of shown
    depth: int = 0  # scope depth groups were collapsed at; 0 when not grouped
    badged: frozenset[str] = frozenset()  # Q/DQ nodes drawn as edge badges instead of boxes
    shape_ops: frozenset[str] = frozenset()  # shape-arithmetic nodes summarised in the boxes using their values
    chip_item: dict[str, int] = field(default_factory=dict)  # such a node -> index of the box its line is in
    _labels: dict[int, str] = field(default_factory=dict, repr=False)

    @property
    def grouped(self) -> bool:
        return self.depth > 0

    def item_showing(self, node_name: str) -> int | None:
        """The item drawing the node: its box or group, or for hidden shape arithmetic the box whose
        ``⟨computed: …⟩`` line stands for it; None for a hidden constant or an unknown name."""
        found = self.node_item.get(node_name)
        return self.chip_item.get(node_name) if found is None else found

    def edge_label(self, edge_index: int) -> str:
        """Shape of the edge's first tensor (``1×64×56×56``), ``""`` when unknown; cached per view."""
        found = self._labels.get(edge_index)
        if found is None:
            found = shape_label(self.graph.tensor_type(self.edges[edge_index].tensors[0]))
            self._labels[edge_index] = found
        return found


def edge_label(view: View, edge_index: int) -> str:
    """:meth:`View.edge_label`, as a function."""
    return view.edge_label(edge_index)


def collapse_target(view: View, item_index: int) -> str | None:
    """The expanded prefix to remove from :attr:`ViewOptions.expanded` to fold this item back
    into a group: the opened match it is in, else the deepest expanded scope around it, else the
    opened run of repeated blocks it is one of, or None if nothing around it is expanded."""
    item = view.items[item_index]
    opened_match = MATCH_PREFIX + view.options.collapsed_matches.get(item.node or "", "")
    if item.kind == "node" and opened_match in view.options.expanded:
        return opened_match
    if item.kind == "group":
        enclosing = scope_prefixes(item.key[len(GROUP_PREFIX) :])[:-1]
    elif item.kind == "node" and item.node is not None:
        enclosing = scope_prefixes(scope_of(item.node))
    else:
        return None
    found = next((p for p in reversed(enclosing) if p in view.options.expanded), None)
    if found is None and item.kind == "group":
        return opened_run(item.key[len(GROUP_PREFIX) :], view.options.expanded)
    return found


def scopes(graph: Graph, *, show_constants: bool = False, show_shape_ops: bool = False) -> Scope:
    """The tree of exporter name scopes of the graph's (visible) nodes; the root has prefix ``""``."""
    constants = hidden_nodes(graph)
    hidden = frozenset() if show_constants else constants
    if not show_shape_ops:
        hidden = hidden | shape_arithmetic(graph, constants)
    return build_tree(n.name for n in graph.nodes if n.name not in hidden)


def hidden_nodes(graph: Graph) -> frozenset[str]:
    """Nodes fed only by constants whose outputs are all constant and not graph outputs.

    Only nodes whose inputs are all initializers or outputs of hidden nodes are asked
    :meth:`Graph.is_constant` (which also turns away overridable input defaults); the
    structural test rejects the rest of a large graph at its first input.
    """
    initializers = graph.initializers
    known = {""}
    graph_outputs = set(graph.outputs)
    hidden = set()
    for node in graph.nodes:
        for tensor in node.inputs:
            if tensor not in initializers and tensor not in known:
                break
        else:
            outputs = [t for t in node.outputs if t]
            if outputs and not any(t in graph_outputs or not _drawn_as_constant(graph, t) for t in outputs):
                hidden.add(node.name)
                known.update(outputs)
    return frozenset(hidden)


def _drawn_as_constant(graph: Graph, tensor: str) -> bool:
    """Constant, or one only because an initializer it comes from is listed as a graph input (IR >= 4):
    such weights are drawn in their consumer's box too, marked (see :func:`labels.is_overridable`)."""
    reason = graph.why_not_constant(tensor)
    return reason is None or is_overridable(graph, tensor)


_SHORT_TYPES = {"uint8": "u8", "int8": "i8", "uint16": "u16", "int16": "i16", "uint4": "u4", "int4": "i4",
                "int32": "i32", "float8e4m3fn": "f8", "float8e5m2": "f8"}


def qdq_pairs(graph: Graph, hidden: frozenset[str]) -> tuple[frozenset[str], dict[str, tuple[str, str]]]:
    """QuantizeLinear nodes of a non-constant tensor with constant scale and zero point whose output only
    DequantizeLinear nodes (with the same kind of constants) read: those nodes, and for each
    DequantizeLinear output, (the tensor quantized, its badge). A DequantizeLinear of a stored
    integer weight or bias is listed too, with source ``""``: its reader shows it as a constant."""
    names: set[str] = set()
    aliases: dict[str, tuple[str, str]] = {}
    outputs = set(graph.outputs)

    def constant(tensor: str) -> bool:
        return not tensor or tensor in graph.initializers or graph.is_constant(tensor)

    for node in graph.nodes:
        if (node.op_type == "DequantizeLinear" and node.name not in hidden and len(node.outputs) == 1
                and node.outputs[0] not in outputs and all(constant(t) for t in node.inputs)):
            names.add(node.name)
            aliases[node.outputs[0]] = ("", "")
            continue
        if node.op_type != "QuantizeLinear" or node.name in hidden or len(node.inputs) < 2 or len(node.outputs) != 1:
            continue
        source, quantized = node.inputs[0], node.outputs[0]
        readers = graph.consumers(quantized)
        if (constant(source) or quantized in outputs or not readers
                or not all(constant(t) for t in node.inputs[1:])
                or any(r.op_type != "DequantizeLinear" or slot != 0 or not all(constant(t) for t in r.inputs[1:])
                       or len(r.outputs) != 1 for r, slot in readers)):
            continue
        zero = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else ""
        dtype = graph.tensor_type(zero).dtype if zero else "uint8"
        badge = _SHORT_TYPES.get(dtype or "", dtype or "q")
        if any(isinstance(d, int) and d > 1 for d in graph.tensor_type(node.inputs[1]).shape or ()):
            badge += "/ch"
        names.add(node.name)
        for reader, _ in readers:
            names.add(reader.name)
            aliases[reader.outputs[0]] = (source, badge)
    return frozenset(names), aliases


def build_view(graph: Graph, options: ViewOptions | None = None) -> View:
    """The boxes and edges to draw for ``graph``; see the module docstring for what is hidden."""
    options = options or ViewOptions()
    return _Builder(graph, options).build()


class _Builder:
    def __init__(self, graph: Graph, options: ViewOptions) -> None:
        self.graph = graph
        self.options = options
        self.items: list[Item] = []
        self.index: dict[str, int] = {}
        self.quantized_constants: set[str] = set()
        self.shape_ops: frozenset[str] = frozenset()  # shape-arithmetic nodes not drawn as boxes
        self.computed: set[str] = set()  # their outputs

    def add(self, item: Item) -> int:
        position = len(self.items)
        self.items.append(item)
        self.index[item.key] = position
        return position

    def build(self) -> View:
        graph, options = self.graph, self.options
        constants = hidden_nodes(graph) if not (options.show_constants and options.show_shape_ops) else frozenset()
        hidden = frozenset() if options.show_constants else constants
        shape_ops = self.shape_ops = frozenset() if options.show_shape_ops else shape_arithmetic(graph, constants)
        self.computed = {t for n in graph.nodes if n.name in shape_ops for t in n.outputs if t}
        if hidden or shape_ops:
            visible = [n for n in graph.nodes if n.name not in hidden and n.name not in shape_ops]
        else:
            visible = graph.nodes
        badged, aliases = qdq_pairs(graph, hidden) if options.qdq_badges else (frozenset(), {})
        if badged:
            visible = [n for n in visible if n.name not in badged]
        grouped = options.grouping if options.grouping is not None else len(visible) > options.collapse_threshold
        depth = 0
        group_of: list[str | None] = [None] * len(visible)
        if grouped:
            node_scopes = [scope_of(n.name) for n in visible]
            depth = grouping_depth(Counter(node_scopes), overview_limit(len(visible)))
            if depth:
                group_of = assign_repeats(visible, self.assign_groups(node_scopes, depth), options.expanded)
        group_of = assign_matches([n.name for n in visible], group_of, options.collapsed_matches, options.expanded)

        declared = {vi.name: type_of_value_info(vi) for vi in (*graph.proto.input, *graph.proto.output)}
        tensor_item: dict[str, int] = {}
        inputs = []
        for name in dict.fromkeys(graph.inputs):
            if name in graph.initializers:
                continue  # an overridable default: shown with the weights it belongs to
            position = self.add(_io_item(INPUT_PREFIX, "input", name, declared.get(name)))
            inputs.append(position)
            tensor_item[name] = position
        for name in self.outer_reads(visible, tensor_item):
            position = self.add(_io_item(INPUT_PREFIX, "input", name, None))
            self.items[position].subtitle = "from the enclosing graph"
            inputs.append(position)
            tensor_item[name] = position

        node_item: dict[str, int] = {}
        places: list[int] = []
        groups: dict[str, int] = {}
        members: dict[int, list[Node]] = {}
        for node, group in zip(visible, group_of):
            if group is None:
                position = self.add(_node_item(node))
            else:
                position = groups.get(group, -1)
                if position < 0:
                    position = groups[group] = self.add(_group_item(group))
                    members[position] = []
                members[position].append(node)
            node_item[node.name] = position
            places.append(position)
            for tensor in node.outputs:
                tensor_item[tensor] = position
        tensor_item.pop("", None)
        self.quantized_constants = {t for t, (source, _) in aliases.items() if not source}
        for dequantized, (source, _) in aliases.items():  # the pair's readers take their edge from its source
            if source in tensor_item:
                tensor_item[dequantized] = tensor_item[source]
        for position, nodes in members.items():
            _fill_group(self.items[position], nodes)

        bundles = self.connect(visible, places, tensor_item)
        outputs = []
        for name in dict.fromkeys(graph.outputs):
            position = self.add(_io_item(OUTPUT_PREFIX, "output", name, declared.get(name)))
            outputs.append(position)
            producer = tensor_item.get(name)
            if producer is not None:
                bundles.setdefault((producer, position), {})[name] = None

        edges = [Edge(s, t, list(tensors), next((aliases[n][1] for n in tensors if aliases.get(n, "")[:1]), ""))
                 for (s, t), tensors in bundles.items()]
        return View(graph, options, self.items, edges, self.index, node_item, inputs, outputs, hidden, depth, badged,
                    shape_ops, self.chip_items(node_item))

    def connect(
        self, visible: list[Node], places: list[int], tensor_item: dict[str, int]
    ) -> dict[tuple[int, int], dict[str, None]]:
        """Tensors between items, bundled per (source, target); node boxes get their text lines,
        constant and computed-shape inputs among them, on the way."""
        graph = self.graph
        bundles: dict[tuple[int, int], dict[str, None]] = {}
        find = tensor_item.get
        for node, target in zip(visible, places):
            item = self.items[target]
            if item.kind == "group":
                for tensor in node.inputs:
                    source = find(tensor)
                    if source is not None and source != target:
                        bundles.setdefault((source, target), {})[tensor] = None
                continue
            summarised: list[tuple[bool, int]] = []  # (computed, slot) of the inputs drawn as lines
            for slot, tensor in enumerate(node.inputs):
                source = find(tensor)
                if source is not None:
                    if source != target:
                        bundles.setdefault((source, target), {})[tensor] = None
                elif tensor in self.computed:
                    summarised.append((True, slot))
                elif tensor and (tensor in graph.initializers or tensor in self.quantized_constants
                                 or _drawn_as_constant(graph, tensor)):
                    summarised.append((False, slot))
            item.lines = fit_lines(attribute_lines(node) + self.input_lines(node, summarised))
        return bundles

    def chip_items(self, node_item: dict[str, int]) -> dict[str, int]:
        """Each hidden shape-arithmetic node -> the item of a box (or group) that reads what it computes."""
        found: dict[str, int] = {}
        if not self.shape_ops:
            return found
        for node in reversed(self.graph.nodes):
            if node.name not in self.shape_ops:
                continue
            readers = (r.name for t in node.outputs if t for r, _ in self.graph.consumers(t))
            item = next((i for i in (node_item.get(r, found.get(r)) for r in readers) if i is not None), None)
            if item is not None:
                found[node.name] = item
        return found

    def input_lines(self, node: Node, summarised: list[tuple[bool, int]]) -> list[str]:
        """Lines for constant and computed inputs in slot order, each run of one kind merged as its lines merge."""
        lines: list[str] = []
        start = 0
        for end in range(1, len(summarised) + 1):
            if end == len(summarised) or summarised[end][0] != summarised[start][0]:
                slots = [slot for _, slot in summarised[start:end]]
                if summarised[start][0]:
                    lines += computed_lines(self.graph, node, slots, self.shape_ops)
                else:
                    lines += constant_lines(self.graph, node, slots)
                start = end
        return lines

    def outer_reads(self, visible: list[Node], known: dict[str, int]) -> list[str]:
        """Non-constant tensors a branch or loop body reads from its enclosing graphs: its
        implicit inputs, drawn as inputs so the body's picture shows where they enter."""
        graph = self.graph
        if graph.parent is None:
            return []
        found = dict.fromkeys(
            t for node in visible for t in node.inputs
            if t and t not in known and graph.owner_of(t) not in (graph, None) and not graph.is_constant(t)
        )
        return list(found)

    def assign_groups(self, node_scopes: list[str], depth: int) -> list[str | None]:
        """The collapsed scope each node falls in (None: shown itself); one-node groups dissolve."""
        expanded = self.options.expanded
        resolved: dict[str, str | None] = {}

        def collapsed(scope: str) -> str | None:
            for level, prefix in enumerate(scope_prefixes(scope), 1):
                if level >= depth and prefix not in expanded:
                    return prefix
            return None

        group_of: list[str | None] = []
        for scope in node_scopes:
            if scope not in resolved:
                resolved[scope] = collapsed(scope)
            group_of.append(resolved[scope])
        sizes = Counter(group_of)
        return [g if g is not None and sizes[g] > 1 else None for g in group_of]


def _node_item(node: Node) -> Item:
    name = node.name
    short = name.rsplit("/", 1)[-1] or name
    return Item(
        key=name,
        kind="node",
        title=node.op_type,
        subtitle=short,
        lines=[],
        category=op_category(node.op_type, node.domain),
        node=name,
        members=[name],
        has_subgraph=bool(node.subgraphs),
    )


def _group_item(prefix: str) -> Item:
    match, repeat = is_match_group(prefix), is_repeat_group(prefix)
    return Item(
        key=prefix if match or repeat else GROUP_PREFIX + prefix,
        kind="group",
        title=match_title(prefix) if match else repeat_title(prefix) if repeat else last_part(prefix),
        subtitle=match_subtitle(prefix) if match else "",
        lines=[],
        category="other",
        node=None,
        members=[],
        has_subgraph=False,
    )


def _fill_group(item: Item, nodes: list[Node]) -> None:
    item.members = [n.name for n in nodes]
    if is_repeat_group(item.key):  # a run of identical blocks lists one block's ops
        nodes = first_block(item.key, nodes)
        item.subtitle = f"{len(nodes)} nodes each"
    else:
        item.subtitle = (f"{item.subtitle} · " if item.subtitle else "") + f"{len(nodes)} nodes"
    ops = Counter((n.op_type, n.domain) for n in nodes)
    by_type: Counter[str] = Counter()
    categories: Counter[str] = Counter()
    for (op_type, domain), count in ops.items():
        by_type[op_type] += count
        categories[op_category(op_type, domain)] += count
    item.lines = group_lines(by_type)
    item.category = max(CATEGORIES, key=lambda c: (categories.get(c, 0), -CATEGORIES.index(c)))
    item.has_subgraph = any(n.subgraphs for n in nodes)


def _io_item(prefix: str, kind: str, name: str, tensor_type: TensorType | None) -> Item:
    return Item(
        key=prefix + name,
        kind=kind,
        title=name,
        subtitle=type_text(tensor_type or TensorType()),
        lines=[],
        category="other",
        node=None,
        members=[],
        has_subgraph=False,
    )
