r"""The one way a rule fuses a match into one operator: choosing the operator, and the one-node edit.

A fusion prefers the standard ONNX operator where the model's opset for the default domain has it
(``Attention``, ``RMSNormalization`` and ``RotaryEmbedding`` arrived in opset 23, ``Gelu`` in 20,
``HardSwish`` in 14), and otherwise, where the rule allows it, onnxruntime's contrib operator in the
``com.microsoft`` domain, which every onnxruntime build runs. The model declares ``com.microsoft`` only
while a node uses it (:meth:`graphlens.core.model.Model.to_proto`). The activation fusions
(``fuse-activations``) and the transformer fusions are both :class:`Fusion`\ s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import onnx

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


def target_op(site: Site, standard: str | None, contrib: str | None) -> TargetOp | Refusal:
    """The ``standard`` op where the model's default-domain opset has it, else onnxruntime's ``contrib`` op; a
    refusal when neither is available."""
    model = site.graph.model
    opset = (model.opset("") if model is not None else None) or 0
    since = None if standard is None else op_since(standard)
    if standard is not None and since is not None and opset >= since:
        return TargetOp(standard)
    if contrib is not None:
        return TargetOp(contrib, MS_DOMAIN)
    assert standard is not None
    if since is None:
        return site.refuse(f"ONNX has no {standard} in its default domain")
    return site.refuse(f"the model's opset {opset} has no {standard} (it arrived in opset {since})")


@cache
def op_since(op: str) -> int | None:
    """The opset of the default domain that introduced ``op``; None when that domain has no such op."""
    versions = [s.since_version for s in onnx.defs.get_all_schemas_with_history() if s.name == op and s.domain == ""]
    return min(versions) if versions else None


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


class Fusion(Rule):
    """A rule that replaces one match by one fused node (and the few nodes it needs before and after it).

    Subclasses set ``name``, ``description``, ``pattern_names`` and implement :meth:`fuse`. ``default`` is
    False: fusions run when asked for, by name, as ``--rules transformers`` or as ``fuse-activations``.
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
