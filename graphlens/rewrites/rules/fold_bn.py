"""fold-bn: a BatchNormalization in inference mode folded into the Conv, ConvTranspose, Gemm or MatMul before it.

W' = W·s and b' = (b − μ)·s + β with s = γ/√(σ² + ε) (see :mod:`graphlens.rewrites.bn_math`). A
constant bias Add between the layer and the BN is absorbed into b. The folded layer keeps its
name and writes the BN's output tensor, so graph outputs and downstream readers are unchanged.
Only sites that ``conv-bn``, ``gemm-bn`` or ``matmul-bn`` match are touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.matching.matcher import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Rule, Site, shape_text
from graphlens.rewrites.rules.linear import (
    Layer,
    channel_norms,
    channel_vector,
    effective_bias,
    fold_into,
    folded_parameters,
    read_layer,
)


@dataclass
class FoldDetails:
    """One fold's numbers, per output channel, computed by the same functions as the rewrite."""

    layer: str
    kind: str
    bn: str
    params: bn_math.AffineParams
    weight_before: np.ndarray
    weight_after: np.ndarray
    bias_before: np.ndarray
    bias_after: np.ndarray
    norms_before: np.ndarray
    norms_after: np.ndarray

    @property
    def channels(self) -> int:
        return self.params.channels

    def rows(self) -> list[dict[str, float]]:
        """γ, β, μ, σ², ε, scale = γ/√(σ²+ε), weight norms and biases before and after, per channel."""
        p = self.params
        return [
            {
                "channel": c, "gamma": float(p.gamma[c]), "beta": float(p.beta[c]), "mean": float(p.mean[c]),
                "var": float(p.var[c]), "epsilon": float(p.epsilon), "scale": float(p.scale[c]),
                "weight_norm_before": float(self.norms_before[c]), "weight_norm_after": float(self.norms_after[c]),
                "bias_before": float(self.bias_before[c]), "bias_after": float(self.bias_after[c]),
            }
            for c in range(self.channels)
        ]


def _per_channel(bias: np.ndarray | None, channels: int) -> np.ndarray:
    """A bias as one number per channel; a Gemm's full [M, N] C is shown as its average row."""
    if bias is None:
        return np.zeros(channels)
    b = np.asarray(bias, np.float64)
    if b.ndim >= 2:
        b = b.reshape(-1, b.shape[-1]).mean(axis=0)
    return np.broadcast_to(b.reshape(-1), (channels,)).copy()


class FoldBatchNorm(Rule):
    name = "fold-bn"
    description = "fold inference-mode BatchNormalization into the Conv/ConvTranspose/Gemm/MatMul before it"
    pattern_names = ("conv-bn", "gemm-bn", "matmul-bn")

    def _prepare(self, match: Match) -> tuple[Site, Layer | None, bn_math.AffineParams | None, np.ndarray | None, str | None]:
        site = Site(match)
        node = site.node("conv") or site.node("gemm") or site.node("matmul")
        bn = site.node("bn")
        assert node is not None and bn is not None
        extra_outputs = [o for o in bn.outputs[1:] if o]
        if any(site.graph.consumers(o) or site.graph.is_graph_output(o) for o in extra_outputs):
            return site, None, None, None, f"{bn.label} also outputs its running statistics, which are used"
        layer, reason = read_layer(site, node)
        if layer is None:
            return site, None, None, None, reason
        stats = [site.const(k) for k in ("scale", "B", "mean", "var")]
        if any(s is None for s in stats):
            why = site.missing(bn, ("scale", "B", "mean", "var"))
            return site, None, None, None, why or f"a parameter of {bn.label} could not be evaluated"
        sizes = {int(np.asarray(s).size) for s in stats}
        if sizes != {layer.channels}:
            return site, None, None, None, (
                f"{bn.label} has parameters of {', '.join(shape_text(np.asarray(s).shape) for s in stats)} "
                f"for the {layer.channels} output channels of {node.label}"
            )
        params = bn_math.bn_affine(*stats, float(bn.attrs.get("epsilon", 1e-5)))  # type: ignore[arg-type]
        extra = None
        if site.node("bias_add") is not None:
            missing = site.missing(site.node("bias_add"), ("add_bias",))
            if missing is not None:
                return site, None, None, None, missing
            extra, reason = channel_vector(site.const("add_bias"), layer, f"the constant added by {site.node('bias_add').label}")
            if extra is None:
                return site, None, None, None, reason
        return site, layer, params, extra, None

    def check(self, match: Match) -> str | None:
        return self._prepare(match)[4]

    def details(self, match: Match) -> FoldDetails:
        """The per-channel numbers of this fold (for the preview's table and the lesson)."""
        site, layer, params, extra, reason = self._prepare(match)
        if reason is not None:
            raise ValueError(reason)
        assert layer is not None and params is not None
        new_weight, new_bias = folded_parameters(layer, params, extra)
        return FoldDetails(layer.node.name, layer.kind, site.node("bn").name, params, layer.weight, new_weight,
                           _per_channel(effective_bias(layer, extra), layer.channels), _per_channel(new_bias, layer.channels),
                           channel_norms(layer, layer.weight), channel_norms(layer, new_weight))

    def try_plan(self, match: Match) -> GraphEdit | str:
        site, layer, params, extra, reason = self._prepare(match)
        if reason is not None:
            return reason
        assert layer is not None and params is not None
        bn = site.node("bn")
        output = bn.outputs[0]
        proto, inits = fold_into(site, layer, params, extra, output)
        removed = [layer.node.name] + ([site.node("bias_add").name] if site.node("bias_add") else []) + [bn.name]
        return GraphEdit(
            graph=site.graph.path,
            rule=self.name,
            description=f"fold {bn.label} into {layer.node.label}",
            remove=removed,
            add=[proto],
            initializers=inits,
            boundary=[(output, output)],
            site=dict(match.nodes),
        )
