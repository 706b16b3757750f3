"""What every transformer fusion shares: choosing the operator to fuse into, and the one-node edit.

Each fusion prefers the standard ONNX operator where the model's opset for the default domain has
it (``Attention``, ``RMSNormalization`` and ``RotaryEmbedding`` arrived in opset 23, ``Gelu`` in
20), and otherwise onnxruntime's contrib operator in the ``com.microsoft`` domain, which every
onnxruntime build runs. The model declares ``com.microsoft`` only while a node uses it
(:meth:`graphlens.core.model.Model.to_proto`).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit, without_orphans
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site
from graphlens.rewrites.rules.naming import place_in_scope

MS_DOMAIN = "com.microsoft"


@dataclass(frozen=True)
class TargetOp:
    """The operator a fusion writes: ``op`` in ``domain`` (``""`` for ONNX's default domain)."""

    op: str
    domain: str = ""

    @property
    def label(self) -> str:
        return self.op if not self.domain else f"{self.op} ({self.domain})"


def target_op(site: Site, standard: tuple[str, int] | None, contrib: str | None) -> TargetOp | Refusal:
    """The standard op where the model's default-domain opset has it (``standard`` = (op, since)), else
    onnxruntime's ``contrib`` op; a refusal when neither is available."""
    model = site.graph.model
    opset = (model.opset("") if model is not None else None) or 0
    if standard is not None and opset >= standard[1]:
        return TargetOp(standard[0])
    if contrib is not None:
        return TargetOp(contrib, MS_DOMAIN)
    assert standard is not None
    return site.refuse(f"the model's opset {opset} has no {standard[0]} (it arrived in opset {standard[1]})")


@dataclass
class Fused:
    """The fused node: its op, inputs, attributes and outputs, and the nodes it needs before it.

    ``outputs`` default to the matched ``out`` node's first output. ``reroute`` sends other readers of
    a tensor inside the match (e.g. a residual sum that is also read later) to one of the fused
    node's outputs: (tensor in the match, tensor it becomes).
    """

    target: TargetOp
    inputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)
    outputs: list[str] | None = None
    before: list[onnx.NodeProto] = field(default_factory=list)
    reroute: list[tuple[str, str]] = field(default_factory=list)
    after: list[onnx.NodeProto] = field(default_factory=list)
    """Nodes after the fused one (a layout restored)."""
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    replaces: list[str] = field(default_factory=list)
    """Nodes outside the match the edit also removes (a view the fused op redoes after itself)."""
    kind: str = ""
    """What the report counts this site as, where one rule fuses several kinds; the rule's ``kind`` when empty."""


class TransformerFusion(Rule):
    """A rule that replaces one match by one fused node (and the few nodes it needs before it).

    Subclasses set ``name``, ``description``, ``pattern_names`` and implement :meth:`fuse`.
    ``default`` is False: transformer fusions run when asked for, by name or as ``--rules transformers``.
    """

    default = False

    def fuse(self, site: Site) -> Fused | Refusal:  # pragma: no cover - interface
        raise NotImplementedError

    def removed(self, site: Site, fused: Fused, added: list[onnx.NodeProto]) -> list[str] | Refusal:
        """The nodes the edit removes: the match and the nodes ``fused`` replaces (a rule may remove more)."""
        return [*site.match.nodes.values(), *fused.replaces]

    def plan(self, match: Match) -> Plan | Refusal:
        site = Site(match, self)
        fused = self.fuse(site)
        if isinstance(fused, Refusal):
            return fused
        out = site.matched("out")
        outputs = fused.outputs if fused.outputs is not None else [out.outputs[0]]
        node = onnx.helper.make_node(fused.target.op, fused.inputs, outputs, name=out.name,
                                     domain=fused.target.domain or None, **fused.attrs)
        added = [*fused.before, node, *fused.after]
        removed = self.removed(site, fused, added)
        if isinstance(removed, Refusal):
            return removed
        place_in_scope(site.graph, added, removed, node)
        matched = set(match.nodes.values())
        reroute = [
            (reader.name, slot, new)
            for old, new in fused.reroute
            for reader, slot in site.graph.consumers(old)
            if reader.name not in matched
        ]
        edit = GraphEdit(site.graph.path, self.name,
                         f"fuse the {match.pattern} ending at {out.label} into {fused.target.label}",
                         removed, added, initializers=fused.initializers, reroute=reroute,
                         boundary=[(out.outputs[0], outputs[0])], site=dict(match.nodes),
                         kind=fused.kind or self.kind or self.name)
        return without_orphans(site.graph, edit)


def written_by(graph: Graph, tensor: str, accept: Callable[[Node], bool], through: Collection[str] = (),
               steps: int = 0) -> bool:
    """Whether a node ``accept`` takes writes ``tensor``, directly or through up to ``steps`` nodes whose op is in
    ``through`` (following their inputs that are not constant): what a rule's :meth:`~Rule.is_site` asks."""
    frontier = [tensor]
    for _ in range(steps + 1):
        following: list[str] = []
        for name in frontier:
            found = graph.producer(name)
            if found is None:
                continue
            node = found[0]
            if accept(node):
                return True
            if node.op_type in through:
                following.extend(t for t in node.inputs if t and not graph.is_constant(t))
        frontier = following
    return False


def reads_activations(graph: Graph, node: Node) -> bool:
    """Both of the node's first two inputs vary with the model's inputs: Q·Kᵀ, not x·W."""
    return len(node.inputs) >= 2 and all(t and not graph.is_constant(t) for t in node.inputs[:2])


def scaled_by_constant(graph: Graph, node: Node) -> bool:
    """A Mul or Div with one constant input (x / √2, √(2/π)·u)."""
    return node.op_type in ("Mul", "Div") and any(t and graph.is_constant(t) for t in node.inputs)
