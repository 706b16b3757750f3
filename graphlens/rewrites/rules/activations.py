"""fuse-activations (off by default): activations exported in pieces, replaced by the fused ONNX op.

silu → Swish, hard-swish → HardSwish, gelu → Gelu (``approximate="tanh"`` for the tanh form),
layer-norm → LayerNormalization, leaky-relu → LeakyRelu; each only where the model's opset for
the default domain has that op (the refusal says which opset added it). A layer norm with the
Casts of mixed precision becomes one LayerNormalization in gamma's type, x cast to it if need be;
one whose exporter dropped the epsilon gets epsilon 0.
"""

from __future__ import annotations

import numpy as np
import onnx

from graphlens.matching.match import Match
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site, fresh_name
from graphlens.rewrites.rules.fusion import Fused, Fusion, TargetOp, target_op


class ActivationFusion(Fusion):
    """One activation written in pieces, replaced by the single standard op ``op``: a part of fuse-activations
    (no contrib op: a model keeps to ONNX's own operators).

    Subclasses give the pattern and, where the op takes more than x, :meth:`inputs`.
    """

    name = "fuse-activations"
    op = ""

    def fuse(self, site: Site) -> Fused | Refusal:
        target = target_op(site, self.op, None)
        return target if isinstance(target, Refusal) else self.inputs(site, target)

    def inputs(self, site: Site, target: TargetOp) -> Fused | Refusal:
        """The fused node's inputs and attributes (x alone by default), or why the match does not fit the op."""
        return Fused(target, [site.value("x")])


class FuseSwish(ActivationFusion):
    """x·sigmoid(x) (silu) → Swish."""

    pattern_names = ("silu",)
    op = "Swish"


class FuseHardSwish(ActivationFusion):
    """x·HardSigmoid(x), or x·Clip(x + 3, 0, 6) / 6 → HardSwish."""

    pattern_names = ("hard-swish",)
    op = "HardSwish"


class FuseGelu(ActivationFusion):
    """The erf form → Gelu; the tanh form (the match has a ``tanh`` node) → Gelu(approximate="tanh")."""

    pattern_names = ("gelu",)
    op = "Gelu"

    def inputs(self, site: Site, target: TargetOp) -> Fused:
        return Fused(target, [site.value("x")], {"approximate": "tanh" if "tanh" in site.match.nodes else "none"})


class FuseLeakyRelu(ActivationFusion):
    """Where(x > 0, x, α·x) or Max(x, α·x) → LeakyRelu(alpha=α)."""

    pattern_names = ("leaky-relu",)
    op = "LeakyRelu"

    def inputs(self, site: Site, target: TargetOp) -> Fused | Refusal:
        alpha = site.const_read_by("alpha", site.matched("negative"))
        if isinstance(alpha, Refusal):
            return alpha
        return Fused(target, [site.value("x")], {"alpha": float(np.asarray(alpha, np.float64).reshape(-1)[0])})


class FuseLayerNorm(ActivationFusion):
    """(x − mean) / √(var + ε) · γ + β over the trailing axes → LayerNormalization(axis, epsilon)."""

    pattern_names = ("layer-norm",)
    op = "LayerNormalization"

    def inputs(self, site: Site, target: TargetOp) -> Fused | Refusal:
        mean, var = site.matched("mean"), site.matched("var")
        axes: list[list[int]] = []
        for node, label in ((mean, "axes"), (var, "var_axes")):
            if int(node.attrs.get("keepdims", 1)) != 1:
                return site.refuse(f"{node.label} drops the reduced axes (keepdims=0)")
            found = node.attrs.get("axes")
            if found is None and site.tensor(label) is not None:
                found = site.const(label)
            if found is None:
                return site.refuse(f"{node.label} reduces over all axes")
            axes.append(sorted(int(a) for a in np.asarray(found).reshape(-1)))
        if axes[0] != axes[1]:
            return site.refuse(f"{mean.label} and {var.label} reduce over different axes ({axes[0]} and {axes[1]})")
        rank = site.rank_of(site.value("x"))
        normalized = axes[0]
        if rank is not None:
            normalized = sorted(a - rank if a >= 0 else a for a in normalized)
        if normalized != list(range(-len(normalized), 0)):
            return site.refuse(f"{mean.label} reduces over axes {axes[0]}, "
                               "not the trailing ones LayerNormalization uses")
        eps = site.const("eps")  # absent where the exporter dropped a tiny epsilon: the Sqrt reads the variance
        epsilon = 0.0 if eps is None else float(np.asarray(eps, np.float64).reshape(-1)[0])
        cast = self._cast_x(site)
        x = site.value("x") if cast is None else cast.output[0]
        return Fused(target, [x, site.value("gamma"), site.value("beta")], {"axis": normalized[0], "epsilon": epsilon},
                     before=[] if cast is None else [cast])

    @staticmethod
    def _cast_x(site: Site) -> onnx.NodeProto | None:
        """A Cast of x to gamma's type where the match casts between them (mixed precision), else None.

        LayerNormalization wants X, Scale and B of one type; the matched nodes produced gamma's.
        """
        x = site.value("x")
        want = site.graph.tensor_type(site.value("gamma")).dtype
        have = site.graph.tensor_type(x).dtype
        if not (site.node("centered_cast") or site.node("normalized_cast")) or want is None or want == have:
            return None
        cast_out = fresh_name(site.graph, f"{x}_as_{want}", set())
        to = onnx.helper.np_dtype_to_tensor_dtype(np.dtype(want)) if want != "bfloat16" else onnx.TensorProto.BFLOAT16
        return onnx.helper.make_node("Cast", [x], [cast_out], name=f"{site.matched('out').name}/cast_x", to=to)


FUSIONS: tuple[ActivationFusion, ...] = (FuseSwish(), FuseHardSwish(), FuseGelu(), FuseLayerNorm(), FuseLeakyRelu())


class FuseActivations(Rule):
    """The one rule users name: each match goes to the fusion that owns its pattern."""

    name = "fuse-activations"
    description = ("replace silu, hard-swish, gelu, layer-norm and leaky-relu written in pieces by the fused op"
                   " (off by default)")
    pattern_names = tuple(p for fusion in FUSIONS for p in fusion.pattern_names)
    default = False

    def __init__(self) -> None:
        self.by_pattern = {p: fusion for fusion in FUSIONS for p in fusion.pattern_names}

    def plan(self, match: Match) -> Plan | Refusal:
        return self.by_pattern[match.pattern].plan(match)
