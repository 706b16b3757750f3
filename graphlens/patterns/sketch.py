"""A pattern from nodes someone selected: "find every place that looks like this".

Each selected node becomes a pattern node with its exact op type, connected as in the graph;
inputs from outside the selection become values: constants as ``const`` (with their dtype),
everything else as wildcards. The result is ordinary pattern text, ready to edit and save.
Sketches allow shared values, since the place they were drawn from may well have them.

The sketch editor loosens a sketch without retyping it: op alternatives per node (``ops``),
nodes that may be skipped (``optional``) and, per boundary tensor, wildcard or constant
(``value_kinds``). :func:`sketch_nodes` and :func:`sketch_boundary` list what can be changed,
under the labels the sketch text uses.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

import networkx as nx

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.names import check_node_names
from graphlens.core.node import Node
from graphlens.patterns.ir import Arg, Expr, Op, Pattern, Value, ValueSpec

VALUE_KINDS = ("any", "const")
_OP_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SketchedNode(NamedTuple):
    """A selected node as the sketch names it; ``can_be_optional`` when another selected node feeds it."""

    label: str
    name: str
    op_type: str
    can_be_optional: bool


class BoundaryValue(NamedTuple):
    """A tensor entering the selection from outside, under its sketch label."""

    label: str
    tensor: str
    is_constant: bool


@dataclass
class _Plan:
    """The selection in graph order with every label fixed, so listings and the sketch agree."""

    order: list[Node]
    selected: set[str]
    node_labels: dict[str, str] = field(default_factory=dict)
    value_labels: dict[str, str] = field(default_factory=dict)
    fed: set[str] = field(default_factory=set)


def _plan(graph: Graph, node_names: Iterable[str]) -> _Plan:
    wanted = list(dict.fromkeys(node_names))
    if not wanted:
        raise GraphLensError("select at least one node to sketch a pattern from")
    check_node_names(wanted, graph.by_name, "", graph.path)
    selected = set(wanted)
    view = graph.to_networkx().subgraph(selected)
    if len(selected) > 1 and not nx.is_weakly_connected(view):
        parts = sorted((sorted(c) for c in nx.weakly_connected_components(view)), key=len)
        raise GraphLensError(
            f"the selected nodes form {len(parts)} separate groups "
            f"(e.g. {', '.join(parts[0][:3])}); select connected nodes"
        )
    plan = _Plan([n for n in graph.nodes if n.name in selected], selected)  # graph order is topological
    labels = _Labels()
    for node in plan.order:
        for tensor in node.inputs:
            if not tensor:
                continue
            found = graph.producer(tensor)
            if found is not None and found[0].name in selected:
                plan.fed.add(node.name)
            elif tensor not in plan.value_labels:
                plan.value_labels[tensor] = labels.make(tensor, fallback="value")
        plan.node_labels[node.name] = labels.make(node.name, fallback=node.op_type.lower())
    return plan


def sketch_nodes(graph: Graph, node_names: Iterable[str]) -> list[SketchedNode]:
    """The selected nodes in graph order, with the labels :func:`sketch_pattern` gives them."""
    plan = _plan(graph, node_names)
    return [SketchedNode(plan.node_labels[n.name], n.name, n.op_type, n.name in plan.fed) for n in plan.order]


def sketch_boundary(graph: Graph, node_names: Iterable[str]) -> list[BoundaryValue]:
    """The tensors entering the selection, in first-use order, with the sketch's labels."""
    plan = _plan(graph, node_names)
    return [BoundaryValue(label, tensor, graph.is_constant(tensor)) for tensor, label in plan.value_labels.items()]


def sketch_pattern(
    graph: Graph,
    node_names: Iterable[str],
    *,
    name: str = "sketch",
    constants_as_constraints: bool = True,
    ops: Mapping[str, Iterable[str] | str] | None = None,
    optional: Iterable[str] | None = None,
    value_kinds: Mapping[str, str] | None = None,
) -> Pattern:
    """Build a pattern from ``node_names`` (which must be connected) in ``graph``.

    ``ops`` maps a node name to the op types it may have (``("Conv", "ConvTranspose")``, or
    ``("*",)`` for any); ``optional`` names nodes the match may skip (each needs an input from
    another selected node to stand in for it); ``value_kinds`` maps a boundary tensor to
    ``"any"`` or ``"const"``, overriding ``constants_as_constraints`` for it.
    """
    plan = _plan(graph, node_names)
    op_choices = _check_ops(plan, ops or {})
    skippable = _check_optional(plan, set(optional or ()))
    kinds = _check_kinds(graph, plan, value_kinds or {})
    anonymous = 0
    built: dict[str, Op] = {}
    values: dict[str, Value] = {}
    for node in plan.order:
        args: list[Arg] = []
        for tensor in node.inputs:
            if not tensor:
                anonymous += 1
                args.append(Arg(Value(f"_omitted{anonymous}"), optional=True))
                continue
            found = graph.producer(tensor)
            if found is not None and found[0].name in plan.selected:
                args.append(Arg(built[found[0].name], found[1]))
                continue
            if tensor not in values:
                constant = graph.is_constant(tensor) and constants_as_constraints
                if tensor in kinds:
                    constant = kinds[tensor] == "const"
                spec = ValueSpec(constant=True, dtype=graph.tensor_type(tensor).dtype) if constant else ValueSpec()
                values[tensor] = Value(plan.value_labels[tensor], spec)
            args.append(Arg(values[tensor]))
        built[node.name] = Op(
            plan.node_labels[node.name],
            op_choices.get(node.name, (node.op_type,)),
            tuple(args),
            node.domain,
            optional=node.name in skippable,
        )
    consumed = {id(a.expr) for op in built.values() for a in op.inputs}
    outputs: tuple[Expr, ...] = tuple(op for op in built.values() if id(op) not in consumed)
    count = len(plan.order)
    description = f"sketched from {count} node{'s' if count != 1 else ''} in {graph.path}"
    return Pattern(name, outputs, description, allow_shared=True)


def _check_ops(plan: _Plan, ops: Mapping[str, Iterable[str] | str]) -> dict[str, tuple[str, ...] | None]:
    """Op alternatives per node, refusing names the pattern text could not spell."""
    out: dict[str, tuple[str, ...] | None] = {}
    for node_name, given in ops.items():
        if node_name not in plan.selected:
            raise GraphLensError(f"'{node_name}' is not one of the selected nodes")
        where = f"node '{node_name}' ({plan.node_labels[node_name]})"
        alternatives = tuple(a.strip() for a in (given.split("|") if isinstance(given, str) else given))
        if not alternatives or not all(alternatives):
            raise GraphLensError(f"{where}: give an op type, alternatives like 'Conv|ConvTranspose', or '*'")
        if "*" in alternatives:
            if len(alternatives) > 1:
                raise GraphLensError(f"{where}: '*' already means any op; do not combine it with others")
            out[node_name] = None
            continue
        bad = [a for a in alternatives if not _OP_NAME.fullmatch(a)]
        if bad:
            raise GraphLensError(f"{where}: '{bad[0]}' is not an op type name")
        out[node_name] = tuple(dict.fromkeys(alternatives))
    return out


def _check_optional(plan: _Plan, optional: set[str]) -> set[str]:
    """Only a node fed by another selected node can be skipped: that input stands in for it."""
    unknown = sorted(optional - plan.selected)
    if unknown:
        raise GraphLensError(f"'{unknown[0]}' is not one of the selected nodes")
    for node_name in (n.name for n in plan.order if n.name in optional):
        if len(plan.selected) == 1:
            raise GraphLensError(f"node '{node_name}' cannot be optional: it is the only node in the sketch")
        if node_name not in plan.fed:
            raise GraphLensError(
                f"node '{node_name}' cannot be optional: no other "
                "selected node feeds it, so nothing could take its place"
            )
    return optional


def _check_kinds(graph: Graph, plan: _Plan, kinds: Mapping[str, str]) -> dict[str, str]:
    """Wildcard or constant per boundary tensor; a constant only where the selection has one,
    so the sketch still matches it."""
    for tensor, kind in kinds.items():
        if tensor not in plan.value_labels:
            raise GraphLensError(f"'{tensor}' is not an input of the selected nodes from outside them")
        if kind not in VALUE_KINDS:
            raise GraphLensError(f"value kind for '{tensor}' must be 'any' or 'const', not {kind!r}")
        if kind == "const" and not graph.is_constant(tensor):
            raise GraphLensError(
                f"'{tensor}' cannot be const: it is not constant here ({graph.why_not_constant(tensor)}), "
                "so the sketch would not match its own selection"
            )
    return dict(kinds)


class _Labels:
    """Readable, unique labels: the last part of a scoped name, made an identifier."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def make(self, source: str, fallback: str) -> str:
        tail = source.rstrip("/").split("/")[-1].split(".")[-1] or fallback
        base = re.sub(r"[^A-Za-z0-9_]+", "_", tail).strip("_") or fallback
        if base[0].isdigit():
            base = f"{fallback}_{base}"
        if base in ("any", "const", "where", "either", "or", "end", "pattern", "verb", "allow", "anchor", "_"):
            base = f"{base}_"
        label, k = base, 2
        while label in self.used:
            label, k = f"{base}_{k}", k + 1
        self.used.add(label)
        return label
