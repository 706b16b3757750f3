"""A pattern from nodes someone selected: "find every place that looks like this".

Each selected node becomes a pattern node with its exact op type, connected as in the graph;
inputs from outside the selection become values: constants as ``const`` (with their dtype),
everything else as wildcards. The result is ordinary pattern text, ready to edit and save.
Sketches allow shared values, since the place they were drawn from may well have them.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import networkx as nx

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.patterns.ir import Arg, Expr, Op, Pattern, Value, ValueSpec


def sketch_pattern(
    graph: Graph, node_names: Iterable[str], *, name: str = "sketch", constants_as_constraints: bool = True
) -> Pattern:
    """Build a pattern from ``node_names`` (which must be connected) in ``graph``."""
    wanted = list(dict.fromkeys(node_names))
    if not wanted:
        raise GraphLensError("select at least one node to sketch a pattern from")
    missing = [n for n in wanted if n not in graph.by_name]
    if missing:
        raise GraphLensError(f"no node named '{missing[0]}' in {graph.path}")
    selected = set(wanted)
    view = graph.to_networkx().subgraph(selected)
    if len(selected) > 1 and not nx.is_weakly_connected(view):
        parts = sorted((sorted(c) for c in nx.weakly_connected_components(view)), key=len)
        raise GraphLensError(
            f"the selected nodes form {len(parts)} separate groups (e.g. {', '.join(parts[0][:3])}); select connected nodes"
        )
    order = [n for n in graph.nodes if n.name in selected]  # graph order is topological
    labels = _Labels()
    ops: dict[str, Op] = {}
    values: dict[str, Value] = {}
    for node in order:
        args: list[Arg] = []
        for tensor in node.inputs:
            if not tensor:
                args.append(Arg(Value(labels.anonymous()), optional=True))
                continue
            found = graph.producer(tensor)
            if found is not None and found[0].name in selected:
                args.append(Arg(ops[found[0].name], found[1]))
                continue
            if tensor not in values:
                spec = ValueSpec()
                if constants_as_constraints and graph.is_constant(tensor):
                    spec = ValueSpec(constant=True, dtype=graph.tensor_type(tensor).dtype)
                values[tensor] = Value(labels.make(tensor, fallback="value"), spec)
            args.append(Arg(values[tensor]))
        ops[node.name] = Op(labels.make(node.name, fallback=node.op_type.lower()), (node.op_type,), tuple(args), node.domain)
    consumed = {id(a.expr) for op in ops.values() for a in op.inputs}
    outputs: tuple[Expr, ...] = tuple(op for op in ops.values() if id(op) not in consumed)
    description = f"sketched from {len(order)} node{'s' if len(order) != 1 else ''} in {graph.path}"
    return Pattern(name, outputs, description, allow_shared=True)


class _Labels:
    """Readable, unique labels: the last part of a scoped name, made an identifier."""

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.count = 0

    def make(self, source: str, fallback: str) -> str:
        tail = source.rstrip("/").split("/")[-1].split(".")[-1] or fallback
        base = re.sub(r"\W+", "_", tail).strip("_") or fallback
        if base[0].isdigit():
            base = f"{fallback}_{base}"
        if base in ("any", "const", "where", "either", "or", "end", "pattern", "verb", "allow", "_"):
            base = f"{base}_"
        label, k = base, 2
        while label in self.used:
            label, k = f"{base}_{k}", k + 1
        self.used.add(label)
        return label

    def anonymous(self) -> str:
        self.count += 1
        return f"_omitted{self.count}"
