"""Shape arithmetic: the nodes an exporter writes to compute a shape, and where the view draws them.

A PyTorch export computes every dynamic shape in the graph itself: ``Shape → Gather → Unsqueeze →
Concat → Reshape`` for each head split, ``Shape → Slice → …`` for each Q/K/V bound. In a transformer
those chains outnumber the layers' own operators, so by default they are not boxes of their own
but a line in the box that uses the shape (``shape ⟨computed: Shape·Gather·Concat⟩``), as weights are.

A node is shape arithmetic when its op is one shapes are computed with (:data:`SHAPE_OPS`), every
input it reads is a constant or shape arithmetic (a ``Shape``/``Size`` may read anything: that is
where a chain starts), and every reader of its outputs is shape arithmetic too or reads it in a slot
that takes a shape, axes or bounds (:data:`SHAPE_SLOTS`). A ``Shape`` whose value is added to an
activation, used as data, or is a graph output is therefore drawn, and so is all that feeds it.
"""

from __future__ import annotations

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.layout.labels import input_name

SHAPE_OPS = frozenset({
    "Shape", "Size", "Gather", "GatherElements", "Slice", "Squeeze", "Unsqueeze", "Concat", "Range", "Cast",
    "CastLike", "Add", "Sub", "Mul", "Div", "Mod", "Neg", "Abs", "Min", "Max", "Floor", "Ceil", "Equal", "Less",
    "Greater", "LessOrEqual", "GreaterOrEqual", "Not", "And", "Or", "Where", "Expand", "ConstantOfShape",
    "Reshape", "Identity", "ReduceProd", "ReduceSum", "ReduceMax", "ReduceMin", "Flatten", "Tile",
})
"""Ops a shape is computed with; a node of another op is never shape arithmetic."""

SHAPE_SLOTS: dict[str, frozenset[int]] = {
    "Reshape": frozenset({1}), "Expand": frozenset({1}), "Slice": frozenset({1, 2, 3, 4}),
    "ConstantOfShape": frozenset({0}), "Range": frozenset({0, 1, 2}), "Tile": frozenset({1}),
    "Squeeze": frozenset({1}), "Unsqueeze": frozenset({1}), "Pad": frozenset({1, 3}),
    "Resize": frozenset({1, 2, 3}), "Upsample": frozenset({1}), "TopK": frozenset({1}), "OneHot": frozenset({1}),
    "Split": frozenset({1}), "ReduceSum": frozenset({1}), "ReduceMean": frozenset({1}), "ReduceMax": frozenset({1}),
    "ReduceMin": frozenset({1}), "ReduceProd": frozenset({1}), "ReduceL2": frozenset({1}), "CumSum": frozenset({1}),
    "Trilu": frozenset({1}),
}
"""Input slots of each op that take a shape, axes, bounds or a count rather than data."""

ROOTS = frozenset({"Shape", "Size"})
CHAIN_OPS_SHOWN = 3
"""Op names a chip lists: enough to say where the value comes from and what made it."""


def shape_arithmetic(graph: Graph, constant_nodes: frozenset[str]) -> frozenset[str]:
    """Names of the graph's shape-arithmetic nodes (see the module docstring).

    ``constant_nodes``: the nodes the view treats as constants (:func:`view.hidden_nodes`); their
    outputs and initializers count as constant inputs. Two passes over the (topological) node list:
    forwards, what is computed only from shapes and constants; backwards, what is used only as a shape.
    """
    constant = set(graph.initializers)
    constant.add("")
    for node in graph.nodes:
        if node.name in constant_nodes:
            constant.update(node.outputs)
    computed: set[str] = set()
    candidates: list[Node] = []
    for node in graph.nodes:
        if node.name in constant_nodes or node.op_type not in SHAPE_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if node.subgraphs or not node.outputs:
            continue
        reads = [t for t in node.inputs if t not in constant]
        if node.op_type in ROOTS or (reads and all(t in computed for t in reads)):
            candidates.append(node)
            computed.update(t for t in node.outputs if t)
    if not candidates:
        return frozenset()
    blocked = set(graph.outputs) | graph.outer_reads()
    kept: set[str] = set()
    for node in reversed(candidates):
        if all(t not in blocked and _used_as_shape(graph, t, kept) for t in node.outputs if t):
            kept.add(node.name)
    return frozenset(kept)


def _used_as_shape(graph: Graph, tensor: str, kept: set[str]) -> bool:
    """Every reader of ``tensor`` is kept shape arithmetic or reads it in a shape slot; and it has one."""
    readers = graph.consumers(tensor)
    return bool(readers) and all(
        reader.name in kept or slot in SHAPE_SLOTS.get(reader.op_type, ()) for reader, slot in readers
    )


def chain_ops(graph: Graph, tensor: str, shape_nodes: frozenset[str]) -> list[str]:
    """The op types of the shape-arithmetic nodes ``tensor`` is computed by, each once, in graph order
    except that the op producing ``tensor`` comes last."""
    seen: set[str] = set()
    found: list[Node] = []
    stack = [tensor]
    while stack:
        producer = graph.producer(stack.pop())
        if producer is None or producer[0].name not in shape_nodes or producer[0].name in seen:
            continue
        node = producer[0]
        seen.add(node.name)
        found.append(node)
        stack.extend(t for t in node.inputs if t)
    if not found:
        return []
    order = graph.positions()
    ops = dict.fromkeys(n.op_type for n in sorted(found[1:], key=lambda n: order.get(n.name, 0)))
    ops.pop(found[0].op_type, None)
    return [*ops, found[0].op_type]


def computed_text(ops: list[str]) -> str:
    """``⟨computed: Shape·Gather·Concat⟩``; a longer chain keeps its first two ops and its last one:
    ``⟨computed: Shape·Gather·…·Concat⟩``."""
    if len(ops) > CHAIN_OPS_SHOWN:
        ops = [*ops[: CHAIN_OPS_SHOWN - 1], "…", ops[-1]]
    return f"⟨computed: {'·'.join(ops)}⟩"


def computed_lines(graph: Graph, node: Node, slots: list[int], shape_nodes: frozenset[str]) -> list[str]:
    """One line per computed input of ``node``, neighbours with the same text merged:
    ``starts, ends ⟨computed: Shape·Gather·…⟩``."""
    entries: list[tuple[str, str]] = []
    for slot in slots:
        name = input_name(node, slot)
        text = computed_text(chain_ops(graph, node.inputs[slot], shape_nodes))
        if entries and entries[-1][1] == text:
            entries[-1] = (f"{entries[-1][0]}, {name}", text)
        else:
            entries.append((name, text))
    return [f"{name} {text}" for name, text in entries]
