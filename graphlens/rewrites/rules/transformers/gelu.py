"""Transformer fusions of the GELU family, and the SiLU-gated MLP they cannot fuse.

GELU(x) = x·Φ(x) = 0.5·x·(1 + erf(x/√2)); its tanh approximation ("fast GELU") is
0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))). A transformer's feed-forward block computes
GELU(x·W + b), so the bias Add right before it can be absorbed: onnxruntime's ``BiasGelu(A, B)``
is GELU(A + B) and ``FastGelu(X, bias)`` the tanh approximation of GELU(X + bias), each with B a
1-D tensor over the last axis of A.

- ``fuse-bias-gelu``: bias Add + erf GELU (in pieces, or a fused ``Gelu``) → ``BiasGelu``
  (com.microsoft; ONNX has no operator with a bias).
- ``fuse-gelu``: erf GELU in pieces → ``Gelu`` (opset 20), else com.microsoft ``Gelu``.
- ``fuse-fast-gelu``: tanh GELU without a bias → ``Gelu(approximate="tanh")`` (opset 20), else
  com.microsoft ``FastGelu``. With a bias Add it becomes ``FastGelu(X, bias)`` at every opset, as
  fuse-bias-gelu's result does: ONNX has no operator that takes the bias, so one contrib node
  replaces the match rather than a standard Add and Gelu that a runtime would fuse again. A bias
  FastGelu cannot take (not 1-D over the last axis) stays an Add before the fused GELU.
- ``silu-mlp``: down(SiLU(h·Wg) ⊙ (h·Wu)), the gated MLP of LLaMA-style decoders, is recognised and
  explained: neither ONNX nor onnxruntime has one operator for it, so its rule always refuses,
  saying what does fuse there.
"""

from __future__ import annotations

import numpy as np

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.rewrites.rule import Refusal, Rule, Site, clone_node, shape_text
from graphlens.rewrites.rules.fusion import MS_DOMAIN, Fused, Fusion, TargetOp, op_since, target_op
from graphlens.rewrites.rules.transformers.common import scaled_by_constant, written_by


def bias_refusal(site: Site, fused_op: str) -> Refusal | None:
    """Why the match's bias Add cannot become ``fused_op``'s bias input: it must be 1-D and as long
    as the last axis of x (a bias that broadcasts x to a larger shape would change the output's shape)."""
    add, bias, x = site.matched("biased"), site.value("bias"), site.value("x")
    shape = _shape_of(site, bias)
    if shape is None:
        return site.refuse(f"the shape of the bias '{bias}' that {add.label} "
                           f"adds is unknown, so {fused_op} may not take it")
    if len(shape) != 1:
        return site.refuse(f"{add.label} adds a bias of shape {shape_text(shape)}, not the 1-D bias over the last axis "
                           f"that {fused_op} takes")
    last = _last_dim(site, x)
    if last is not None and last != shape[0]:
        return site.refuse(f"{add.label} adds a bias of shape {shape_text(shape)} "
                           f"to '{x}', whose last axis has {last}, "
                           f"so {fused_op}, which takes one bias value per element of that axis, cannot take it")
    return None


def _shape_of(site: Site, tensor: str) -> tuple[int, ...] | None:
    """The tensor's shape from its type (no weight is decoded for it), else from its constant value."""
    shape = site.graph.tensor_type(tensor).shape
    known = tuple(d for d in shape or () if isinstance(d, int))
    if shape is not None and len(known) == len(shape):
        return known
    value = site.graph.constant_value(tensor)
    return None if value is None else tuple(int(d) for d in np.shape(value))


def _last_dim(site: Site, tensor: str) -> int | None:
    """The length of ``tensor``'s last axis where its type, or the constant weight of the MatMul or Gemm
    writing it, says it; None when unknown."""
    shape = site.graph.tensor_type(tensor).shape
    if shape and isinstance(shape[-1], int):
        return shape[-1]
    found = site.graph.producer(tensor)
    if found is None:
        return None
    node = found[0]
    if node.op_type == "MatMul" and len(node.inputs) == 2:
        weight = _shape_of(site, node.inputs[1])
        return weight[-1] if weight else None
    if node.op_type == "Gemm" and len(node.inputs) >= 2:
        weight = _shape_of(site, node.inputs[1])
        if weight is None or len(weight) != 2:
            return None
        return weight[0] if node.attrs.get("transB", 0) else weight[1]
    return None


class FuseBiasGelu(Fusion):
    """Bias Add + erf GELU (pieces, Gelu, or com.microsoft Gelu) → BiasGelu (com.microsoft)."""

    name = "fuse-bias-gelu"
    kind = "bias-gelu"
    family = "GELU"
    fused_ops = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu")
    description = "a bias Add and the erf GELU after it (in pieces or fused) become onnxruntime's BiasGelu"
    pattern_names = ("bias-gelu", "bias-gelu-ms")

    def fuse(self, site: Site) -> Fused | Refusal:
        refusal = bias_refusal(site, "BiasGelu")
        if refusal is not None:
            return refusal
        return Fused(TargetOp("BiasGelu", MS_DOMAIN), [site.value("x"), site.value("bias")])


class FuseGelu(Fusion):
    """Erf GELU in pieces → Gelu (opset 20), else com.microsoft Gelu; the tanh form is fuse-fast-gelu's."""

    name = "fuse-gelu"
    kind = "gelu"
    family = "GELU"
    fused_ops = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu")
    description = "the erf GELU written in pieces becomes Gelu (opset 20) or onnxruntime's Gelu"
    pattern_names = ("gelu",)
    anchor_ops = ("Erf",)

    def is_site(self, graph: Graph, node: Node) -> bool:
        """An Erf of x / √2 (a Div or Mul by a constant)."""
        return bool(node.inputs) and written_by(graph, node.inputs[0], lambda n: scaled_by_constant(graph, n))

    def fuse(self, site: Site) -> Fused | Refusal:
        tanh = site.node("tanh")
        if tanh is not None:
            return site.refuse(f"{tanh.label} makes this GELU the tanh approximation, which fuse-fast-gelu fuses")
        target = target_op(site, "Gelu", "Gelu")
        assert not isinstance(target, Refusal)
        return Fused(target, [site.value("x")])


class FuseFastGelu(Fusion):
    """Tanh GELU (+ optional bias Add) → Gelu(approximate="tanh") (opset 20) or FastGelu;
    with a bias, FastGelu(X, bias)."""

    name = "fuse-fast-gelu"
    kind = "fast-gelu"
    description = ("the tanh approximation of GELU in pieces becomes Gelu(approximate=\"tanh\") (opset 20) or "
                   "onnxruntime's FastGelu, which also takes the bias Add before it")
    pattern_names = ("fast-gelu",)
    anchor_ops = ("Tanh",)
    family = "GELU"
    fused_ops = ("Gelu", "FastGelu", "BiasGelu", "QuickGelu")

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A Tanh of √(2/π)·(x + c·x³): a Mul by a constant of an Add; not a Tanh activation after a Conv."""
        def scaled_sum(mul: Node) -> bool:
            varying = [t for t in mul.inputs if t and not graph.is_constant(t)]
            return scaled_by_constant(graph, mul) and any(written_by(graph, t, lambda n: n.op_type == "Add")
                                                          for t in varying)

        return bool(node.inputs) and written_by(graph, node.inputs[0], scaled_sum)

    def fuse(self, site: Site) -> Fused | Refusal:
        add = site.node("biased")
        if add is None:
            return self._without_bias(site, site.value("x"))
        refusal = bias_refusal(site, "FastGelu")
        if refusal is None:
            return Fused(TargetOp("FastGelu", MS_DOMAIN), [site.value("x"), site.value("bias")])
        if site.node("tanh") is None:  # Gelu(approximate="tanh"): already fused, and the bias cannot join it
            return refusal
        fused = self._without_bias(site, add.outputs[0])
        fused.before.append(clone_node(add, inputs=list(add.inputs), outputs=list(add.outputs)))
        return fused

    @staticmethod
    def _without_bias(site: Site, x: str) -> Fused:
        target = target_op(site, "Gelu", "FastGelu")
        assert not isinstance(target, Refusal)
        return Fused(target, [x], {"approximate": "tanh"} if not target.domain else {})


class SiluMlp(Fusion):
    """The SiLU-gated MLP: recognised and explained, never rewritten (no single operator computes it)."""

    name = "silu-mlp"
    kind = "silu-mlp"
    description = ("explain the SiLU-gated MLP of LLaMA-style decoders (gate, up and down MatMuls), "
                   "which no single operator computes")
    pattern_names = ("silu-mlp",)
    anchor_ops = ("Sigmoid", "Swish")
    family = "SiLU-gated MLP"

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A SiLU of a projection (MatMul or Gemm, maybe between Reshapes or with a bias): the gate of an MLP,
        not the Swish after a Conv."""
        return bool(node.inputs) and written_by(graph, node.inputs[0], lambda n: n.op_type in ("MatMul", "Gemm"),
                                                through=("Reshape", "Add", "Cast"), steps=2)

    def fuse(self, site: Site) -> Refusal:
        # the MatMuls: labelled *_mm where the exporter put Reshapes around them
        gate = site.node("gate_mm") or site.node("gate")
        up = site.node("up_mm") or site.node("up")
        down = site.node("down_mm") or site.node("out")
        assert gate is not None and up is not None and down is not None
        return site.refuse(f"the SiLU-gated MLP ending at {down.label} "
                           f"(gate {gate.label}, up {up.label}) has no single "
                           f"operator in ONNX or onnxruntime, so its three MatMuls stay; {self._silu_note(site)}")

    @staticmethod
    def _silu_note(site: Site) -> str:
        act = site.matched("act")
        if act.op_type == "Swish":
            return f"its SiLU is already {act.label}"
        since = op_since("Swish") or 0
        model = site.graph.model
        opset = (model.opset("") if model is not None else None) or 0
        if opset >= since:
            return f"its SiLU ({site.matched('sigmoid').label} and {act.label}) fuses into Swish with fuse-activations"
        return (f"its SiLU ({site.matched('sigmoid').label} and {act.label}) would fuse into Swish from opset {since} "
                f"(the model has opset {opset})")


RULES: tuple[Rule, ...] = (FuseBiasGelu(), FuseFastGelu(), FuseGelu(), SiluMlp())
"""Bias first, so that the Add joins the GELU after it; the tanh form before fuse-gelu, which refuses it."""
