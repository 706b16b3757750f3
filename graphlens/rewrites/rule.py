"""A rewrite rule: a pattern, and a plan for each match (a :class:`Plan`, or a :class:`Refusal`).

Like the onnxscript rewriter's rules, each is a short class; its math lives in its module's
docstring (or in :mod:`bn_math`). ``plan`` answers once per match: the edit, or one sentence
naming the node and the reason, so refusals read like explain's. Rules that read weights read
them once for both answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeAlias

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.constants import input_refusal
from graphlens.core.graph import Graph
from graphlens.core.linear import LinearOp
from graphlens.core.node import Node
from graphlens.core.types import dtype_name
from graphlens.matching.match import Match
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import get_pattern
from graphlens.patterns.syntax import parse_pattern
from graphlens.rewrites.bn_math import AffineParams
from graphlens.rewrites.edit import GraphEdit

FLOAT_TYPES = (np.float16, np.float32, np.float64)

Plan: TypeAlias = GraphEdit
"""What a rule would do to a match: the :class:`GraphEdit` that :meth:`EditHistory.apply` takes."""


@dataclass(frozen=True)
class Refusal:
    """Why a rule leaves a match alone: ``reason`` is one sentence naming the node, as explain's are."""

    rule: str
    reason: str
    graph: str
    nodes: dict[str, str]
    """Pattern label -> node name of the refused match."""
    pattern: str = ""
    """The pattern of the refused match: what *Why not here?* draws the site with."""

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "graph": self.graph, "nodes": dict(self.nodes), "reason": self.reason}


@dataclass
class FoldDetails:
    """One fold's numbers, per output channel, computed by the same functions as the rewrite."""

    layer: str
    op: LinearOp
    """The layer's op, which places its output channels in the weight."""
    bn: str
    params: AffineParams
    weight_before: np.ndarray
    weight_after: np.ndarray
    bias_before: np.ndarray
    bias_after: np.ndarray
    norms_before: np.ndarray
    norms_after: np.ndarray

    @property
    def kind(self) -> str:
        return self.op.op_type

    @property
    def channels(self) -> int:
        return self.params.channels

    def rows(self) -> list[dict[str, float]]:
        """γ, β, μ, σ², ε, scale = γ/√(σ²+ε), weight norms and biases before and after, per channel."""
        p = self.params
        assert p.gamma is not None and p.beta is not None and p.mean is not None and p.var is not None
        return [
            {
                "channel": c, "gamma": float(p.gamma[c]), "beta": float(p.beta[c]), "mean": float(p.mean[c]),
                "var": float(p.var[c]), "epsilon": float(p.epsilon or 0.0), "scale": float(p.scale[c]),
                "weight_norm_before": float(self.norms_before[c]), "weight_norm_after": float(self.norms_after[c]),
                "bias_before": float(self.bias_before[c]), "bias_after": float(self.bias_after[c]),
            }
            for c in range(self.channels)
        ]


class Rule:
    """Base class: subclasses set ``name``, ``description``, ``pattern_names`` and implement :meth:`plan`."""

    name: str = ""
    description: str = ""
    pattern_names: tuple[str, ...] = ()
    pattern_texts: tuple[str, ...] = ()
    """Patterns private to the rule (text), for sites the public library does not name."""
    default: bool = True
    kind: str = ""
    """What the fold report counts this rule's rewrites as (``attention``, ``rms-norm``); its name when empty."""
    anchor_ops: tuple[str, ...] = ()
    """Ops that mark a site where the rule could apply (Softmax for attention): each one still in the model
    after a fold is reported with why, the rule's refusal or explain's reason, where :meth:`is_site` agrees."""
    family: str = ""
    """The construct a reader knows the rule's sites as (``attention``, ``GELU``): a fold report says once which
    families the rules looked for and found none of."""
    fused_ops: tuple[str, ...] = ()
    """The ops the rule writes, which a model may have from its exporter already (onnxruntime-genai writes
    GroupQueryAttention): the report says so instead of saying the family is not in the model."""

    def already_fused(self, graph: Any) -> int:
        """How many nodes of ``graph`` are this rule's fused ops already."""
        by_op = graph.nodes_by_op()
        return sum(len(by_op.get(op, ())) for op in self.fused_ops)

    def patterns(self) -> list[Pattern]:
        """The rule's patterns, parsed once per rule (the fold driver asks every round)."""
        cached = self.__dict__.get("_patterns")
        if cached is None:
            cached = self.__dict__["_patterns"] = [get_pattern(n) for n in self.pattern_names] + [
                parse_pattern(t, name=f"{self.name}:{i}") for i, t in enumerate(self.pattern_texts)
            ]
        return list(cached)

    def plan(self, match: Match) -> Plan | Refusal:  # pragma: no cover - interface
        """The edit for ``match``, or why the rule leaves it alone."""
        raise NotImplementedError

    def is_site(self, graph: Graph, node: Node) -> bool:
        """Whether an anchor node the rule did not rewrite is plausibly one of its sites, worth a "left" line
        (a Sigmoid after a Conv is no gated MLP); every anchor by default."""
        return True

    def details(self, match: Match) -> FoldDetails | None:
        """The per-channel numbers of a fold, for the preview's table and the lesson.

        None for rules without such numbers, and for a match the rule refuses (:meth:`plan` says why).
        """
        return None

    def model_edits(self, model: Any) -> list[GraphEdit]:
        """Edits a rule makes to the model as a whole, before any matching (most rules make none)."""
        return []

    def final_edits(self, model: Any) -> list[GraphEdit]:
        """Edits a rule makes to the model as a whole once no rule applies any more, before the cleanup
        (a tidy-up of what the fusions left; most rules make none)."""
        return []

    def refuse(self, match: Match, reason: str) -> Refusal:
        return Refusal(self.name, reason, match.graph.path, dict(match.nodes), match.pattern)


# ------------------------------------------------------------------------------- helpers
class Site:
    """Convenient access to a match's nodes and constant values, and refusals in the rule's name."""

    def __init__(self, match: Match, rule: Rule) -> None:
        self.match = match
        self.rule = rule
        self.graph: Graph = match.graph

    def refuse(self, reason: str) -> Refusal:
        return self.rule.refuse(self.match, reason)

    def node(self, label: str) -> Node | None:
        name = self.match.nodes.get(label)
        return None if name is None else self.graph.by_name[name]

    def tensor(self, label: str) -> str | None:
        return self.match.values.get(label)

    def matched(self, label: str) -> Node:
        """The node at ``label``, which every variant of the rule's patterns binds (unlike :meth:`node`,
        for labels only some variants have); a pattern without it is a broken rule, not a refusal."""
        node = self.node(label)
        if node is None:
            raise LookupError(f"rule {self.rule.name}: pattern {self.match.pattern} binds no node '{label}'")
        return node

    def value(self, label: str) -> str:
        """The tensor at ``label``, which every variant of the rule's patterns binds (see :meth:`matched`)."""
        tensor = self.tensor(label)
        if tensor is None:
            raise LookupError(f"rule {self.rule.name}: pattern {self.match.pattern} binds no value '{label}'")
        return tensor

    def const(self, label: str) -> np.ndarray | None:
        tensor = self.tensor(label)
        return None if tensor is None else self.graph.constant_value(tensor)

    def missing(self, node: Node | None, labels: tuple[str, ...]) -> Refusal | None:
        """Why one of these constant inputs has no value (e.g. too large to evaluate), or None.

        The sentence names the input of ``node`` (by default, of the match's first node reading it).
        """
        for label in labels:
            tensor = self.tensor(label)
            if tensor is None or self.const(label) is not None:
                continue
            readers = [node] if node is not None else [self.graph.by_name[n] for n in self.match.nodes.values()]
            reader = next((r for r in readers if tensor in r.inputs), None)
            if reader is not None:
                return self.refuse(input_refusal(self.graph, reader, reader.inputs.index(tensor), label))
        return None

    def const_read_by(self, label: str, reader: Node) -> np.ndarray | Refusal:
        """The constant at ``label``, or why ``reader``'s input has no value (see :meth:`missing`)."""
        value = self.const(label)
        if value is not None:
            return value
        why = self.missing(reader, (label,))
        return why or self.refuse(f"the {label} input of {reader.label} could not be evaluated")

    def rank_of(self, tensor: str) -> int | None:
        shape = self.graph.tensor_type(tensor).shape
        return None if shape is None else len(shape)


def fresh_name(graph: Graph, base: str, taken: set[str]) -> str:
    """A tensor/initializer name not used in ``graph`` (or its parents) nor in ``taken``; added to ``taken``."""
    name, k = base, 2
    while name in taken or graph.is_defined(name):
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def initializer(name: str, value: np.ndarray, dtype: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value).astype(dtype), name)


def clone_node(node: Node, *, inputs: list[str], outputs: list[str], op_type: str | None = None,
               name: str | None = None,
               set_attrs: dict[str, Any] | None = None, drop_attrs: tuple[str, ...] = ()) -> onnx.NodeProto:
    """A copy of ``node``'s protobuf (attributes, doc string, domain) with new inputs, outputs and attributes."""
    proto = onnx.NodeProto()
    proto.CopyFrom(node.proto)
    proto.ClearField("input")
    proto.input.extend(inputs)
    proto.ClearField("output")
    proto.output.extend(outputs)
    if op_type is not None:
        proto.op_type = op_type
    proto.name = name if name is not None else node.proto.name or node.name
    replace = set(drop_attrs) | set(set_attrs or ())
    if replace:  # attributes are copied once above; only rebuild their list when some change
        kept = [a for a in proto.attribute if a.name not in replace]
        proto.ClearField("attribute")
        proto.attribute.extend(kept)
        for key, value in (set_attrs or {}).items():
            proto.attribute.append(onnx.helper.make_attribute(key, value))
    return proto


def passes_through(node: Node, graph: Graph) -> bool:
    """Identity, or a Cast or CastLike to the type its input already has (as far as it is known without
    running shape inference): its output is its input.

    The dynamo exporter writes ``CastLike(weight, x)`` for every weight; seeing through it keeps the
    weight where it is (mapped from its data file) instead of copying it under a new name.
    """
    if node.domain not in ("", "ai.onnx") or len(node.outputs) != 1 or not node.inputs or not node.inputs[0]:
        return False
    if node.op_type == "Identity":
        return len(node.inputs) == 1
    if node.op_type == "Cast" and len(node.inputs) == 1:
        to, have = node.attrs.get("to"), graph.known_dtype(node.inputs[0])
        return to is not None and have is not None and dtype_name(int(to)) == have
    if node.op_type == "CastLike" and len(node.inputs) == 2 and node.inputs[1]:
        have, like = graph.known_dtype(node.inputs[0]), graph.known_dtype(node.inputs[1])
        return have is not None and have == like
    return False


def is_float(array: np.ndarray) -> bool:
    return array.dtype.type in FLOAT_TYPES


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
