"""Compiling a pattern into flat variants the matcher can hand to networkx.

Optional nodes and one-of choices are expanded: every combination of "present or skipped" and
"which alternative" is one variant, a plain DAG of op nodes whose inputs come from other op nodes
or from value holes. Each variant is also a small ``networkx.DiGraph`` whose edges carry the
slots they connect, like the model's projection.

The order of the variants is the order of preference: an optional node present before skipped,
an ``either``'s branches as written, earlier choice points deciding first. At one site (see
:func:`site_labels`) the matcher keeps the first variant that matches, as an ordered choice.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import NamedTuple

import networkx as nx

from graphlens.core.errors import GraphLensError
from graphlens.patterns.ir import Expr, OneOf, Op, Pattern, Value, ValueSpec

MAX_VARIANTS = 1024
"""A pattern expands into every combination of its choices; past this many it is refused (attention has 768)."""
_PLAIN_CONSTANT = ValueSpec(constant=True)
_ANY_VALUE = ValueSpec()


@dataclass(frozen=True)
class Source:
    """Where a pattern input comes from: output ``output`` of node ``label``, or value ``label``."""

    kind: str  # "node" or "value"
    label: str
    output: int = 0


@dataclass
class FlatInput:
    slot: int
    source: Source
    optional: bool
    plain_constant: bool = False
    """The input is a value hole whose only rule is "constant": the matcher's fast path."""


@dataclass
class FlatNode:
    label: str
    op: Op
    inputs: list[FlatInput]
    commutative: bool = False
    required: int = 0

    def __post_init__(self) -> None:
        self.commutative = self.op.is_commutative
        self.required = sum(1 for i in self.inputs if not i.optional)


class QuickInput(NamedTuple):
    """A value input: at ``slot``, bound to ``label``; ``constant``: an initializer that is not a graph input."""

    slot: int
    optional: bool
    constant: bool
    label: str
    shared: bool
    """The label binds more than one input, so every one must be the same tensor."""


class QuickNode(NamedTuple):
    label: str
    arity: int
    inputs: tuple[QuickInput, ...]


@dataclass
class Variant:
    """One concrete shape of a pattern: its nodes (inputs before users), values and output nodes."""

    index: int
    nodes: dict[str, FlatNode]
    values: dict[str, ValueSpec]
    skipped: tuple[str, ...]
    outputs: frozenset[str]
    graph: nx.DiGraph = field(repr=False)

    @functools.cached_property
    def inner_labels(self) -> frozenset[str]:
        """Nodes whose outputs must stay inside a match: neither the pattern's outputs nor marked shared."""
        return frozenset(label for label, node in self.nodes.items()
                         if label not in self.outputs and not node.op.shared)

    @functools.cached_property
    def has_hidden_values(self) -> bool:
        """Some value label starts with ``_``: bound while matching, left out of a match's values."""
        return any(label.startswith("_") for label in self.values)

    @functools.cached_property
    def quick_inputs(self) -> tuple[QuickNode, ...] | None:
        """Every node's value inputs as checks simple enough to make inline (see ``checks.quick_bindings``).

        Inputs from other pattern nodes are left out: they are edges of :attr:`graph`, whose slots
        VF2 has checked. None when some node needs the general checks: a commutative or variadic
        op, an optional input from another node, or a value with a rule beyond "constant".
        """
        uses: dict[str, int] = {}
        for node in self.nodes.values():
            for inp in node.inputs:
                uses[inp.source.label] = uses.get(inp.source.label, 0) + 1
        quick = []
        for node in self.nodes.values():
            if node.commutative or node.op.variadic:
                return None
            inputs = []
            for inp in node.inputs:
                src = inp.source
                if src.kind == "node":
                    if inp.optional:
                        return None
                    continue
                spec = self.values[src.label]
                if not inp.plain_constant and (spec != _ANY_VALUE or spec.predicate is not None):
                    return None  # (a predicate is left out of ValueSpec's equality: asked apart)
                inputs.append(QuickInput(inp.slot, inp.optional, inp.plain_constant, src.label, uses[src.label] > 1))
            quick.append(QuickNode(node.label, len(node.inputs), tuple(inputs)))
        return tuple(quick)

    def consumers(self, label: str) -> list[tuple[FlatNode, FlatInput]]:
        return [(n, i) for n in self.nodes.values() for i in n.inputs
                if i.source.kind == "node" and i.source.label == label]


def compile_variants(pattern: Pattern) -> list[Variant]:
    """All variants of ``pattern``, de-duplicated, in order of preference (all optional nodes present first)."""
    choice_points = [e for e in pattern.exprs() if (isinstance(e, Op) and e.optional) or isinstance(e, OneOf)]
    ranges = [range(2) if isinstance(e, Op) else range(len(e.alternatives)) for e in choice_points]
    total = 1
    for r in ranges:
        total *= len(r)
    if total > MAX_VARIANTS:
        raise GraphLensError(
            f"pattern '{pattern.name}' expands to {total} variants (more than {MAX_VARIANTS}); use fewer optional nodes"
        )
    variants: list[Variant] = []
    seen: set[Hashable] = set()
    for combo in itertools.product(*ranges):
        choice = {id(e): c for e, c in zip(choice_points, combo)}
        nodes, values, skipped, outputs = _realize(pattern, choice)
        # The op object too: two branches alike but for their op type (Gelu, Gelu@com.microsoft) are two variants.
        key = (tuple(sorted(nodes)),
               tuple((n.label, id(n.op), tuple((i.slot, i.source) for i in n.inputs)) for n in nodes.values()))
        if key in seen or not nodes:
            continue
        seen.add(key)
        graph = _to_graph(nodes)  # built once per distinct variant, not per combination of choices
        if graph.number_of_nodes() > 1 and not nx.is_weakly_connected(graph):
            raise GraphLensError(f"pattern '{pattern.name}' is not connected; split it into separate patterns")
        variants.append(Variant(len(variants), nodes, values, tuple(skipped), frozenset(outputs), graph))
    if not variants:
        raise GraphLensError(f"pattern '{pattern.name}' has no node left once optional nodes are skipped")
    return variants


def site_labels(variants: list[Variant]) -> tuple[str, ...]:
    """The labels that place a match: where the ordered choice between variants is made.

    They are the pattern's fixed nodes, the ones every variant has as the same node (outside every
    ``either`` branch and not optional), so that Conv -> Mul -> Add is one site for ``conv-mul-add``.
    A pattern made only of choices has no fixed node; its site is then its output node, the label
    every branch's last node carries.
    """
    common: set[tuple[str, int]] | None = None
    for v in variants:
        pairs = {(label, id(node.op)) for label, node in v.nodes.items()}
        common = pairs if common is None else common & pairs
    fixed = sorted(label for label, _ in common or ())
    if fixed:
        return tuple(fixed)
    outputs = set.intersection(*(set(v.outputs) for v in variants))
    return tuple(sorted(outputs))  # empty only for a pattern without a common output: no choice is made


def _realize(pattern: Pattern, choice: dict[int, int],
             ) -> tuple[dict[str, FlatNode], dict[str, ValueSpec], list[str], set[str]]:
    """The variant of ``pattern`` that ``choice`` (a branch for each optional node and ``either``) makes: its
    nodes, values, skipped nodes and output nodes."""
    nodes: dict[str, FlatNode] = {}
    values: dict[str, ValueSpec] = {}
    skipped: list[str] = []
    memo: dict[int, Source] = {}

    def visit(e: Expr) -> Source:
        if id(e) in memo:
            return memo[id(e)]
        if isinstance(e, Value):
            if values.setdefault(e.label, e.spec) != e.spec:
                raise GraphLensError(f"pattern '{pattern.name}': value '{e.label}' is given two different constraints")
            src = Source("value", e.label)
        elif isinstance(e, OneOf):
            src = visit(e.alternatives[choice[id(e)]])
        else:
            assert isinstance(e, Op)
            if e.optional and choice[id(e)] == 1:
                skipped.append(e.label)
                through = e.passthrough()
                inner = visit(through.expr)
                src = Source(inner.kind, inner.label, through.output if inner.kind == "node" else 0)
            else:
                inputs = []
                for slot, arg in enumerate(e.inputs):
                    s = visit(arg.expr)
                    if s.kind == "node" and arg.output:
                        s = Source("node", s.label, arg.output)
                    plain = (isinstance(arg.expr, Value) and arg.expr.spec == _PLAIN_CONSTANT
                             and arg.expr.spec.predicate is None)
                    inputs.append(FlatInput(slot, s, arg.optional, plain))
                if e.label in nodes:
                    raise GraphLensError(f"pattern '{pattern.name}': label '{e.label}' names two nodes")
                nodes[e.label] = FlatNode(e.label, e, inputs)
                src = Source("node", e.label)
        memo[id(e)] = src
        return src

    roots = [visit(o) for o in pattern.outputs]
    outputs = {r.label for r in roots if r.kind == "node"}
    clash = set(nodes) & set(values)
    if clash:
        raise GraphLensError(f"pattern '{pattern.name}': '{sorted(clash)[0]}' names both a node and a value")
    return nodes, values, skipped, outputs


def _to_graph(nodes: dict[str, FlatNode]) -> nx.DiGraph:
    """The variant as a DiGraph; edge ``links`` are (output slot, input slot or None if commutative)."""
    g = nx.DiGraph()
    for node in nodes.values():
        g.add_node(node.label, pnode=node)
    for node in nodes.values():
        commutative = node.op.is_commutative
        for inp in node.inputs:
            if inp.source.kind != "node" or inp.optional:
                continue
            link = (inp.source.output, None if commutative else inp.slot)
            if g.has_edge(inp.source.label, node.label):
                g.edges[inp.source.label, node.label]["links"] += (link,)
            else:
                g.add_edge(inp.source.label, node.label, links=(link,))
    return g
