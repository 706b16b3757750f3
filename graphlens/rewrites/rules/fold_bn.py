"""fold-bn: a BatchNormalization in inference mode folded into the Conv, ConvTranspose, Gemm or MatMul before it.

W' = W·s and b' = (b − μ)·s + β with s = γ/√(σ² + ε) (see :mod:`graphlens.rewrites.bn_math`). A
constant bias Add between the layer and the BN is absorbed into b. The folded layer keeps its
name and writes the BN's output tensor, so graph outputs and downstream readers are unchanged.
Only sites that ``conv-bn``, ``gemm-bn`` or ``matmul-bn`` match are touched.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.matching.match import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.rule import FoldDetails, Plan, Refusal, Rule, Site, shape_text
from graphlens.rewrites.rules.affine_fold import (
    Layer,
    channel_norms,
    channel_vector,
    effective_bias,
    fold_plan,
    folded_parameters,
    read_layer,
)


@dataclass(frozen=True)
class _BatchNormFold:
    """What a foldable match reads, once, for both the plan and the details."""

    site: Site
    layer: Layer
    params: bn_math.AffineParams
    extra_bias: np.ndarray | None
    """The constant of a bias Add between the layer and the BN, one value per channel."""


def _per_channel(bias: np.ndarray | None, channels: int) -> np.ndarray:
    """A bias as one number per channel; a Gemm's full [M, N] C is shown as its average row."""
    if bias is None:
        return np.zeros(channels)
    b = np.asarray(bias, np.float64)
    if b.ndim >= 2:
        b = b.reshape(-1, b.shape[-1]).mean(axis=0)
    vector: np.ndarray = np.broadcast_to(b.reshape(-1), (channels,)).copy()
    return vector


class FoldBatchNorm(Rule):
    name = "fold-bn"
    description = "fold inference-mode BatchNormalization into the Conv/ConvTranspose/Gemm/MatMul before it"
    pattern_names = ("conv-bn", "gemm-bn", "matmul-bn")

    def _prepare(self, match: Match) -> _BatchNormFold | Refusal:
        site = Site(match, self)
        node = site.node("conv") or site.node("gemm") or site.node("matmul")
        bn = site.matched("bn")
        assert node is not None
        extra_outputs = [o for o in bn.outputs[1:] if o]
        if any(site.graph.consumers(o) or site.graph.is_graph_output(o) for o in extra_outputs):
            return site.refuse(f"{bn.label} also outputs its running statistics, which are used")
        layer = read_layer(site, node)
        if isinstance(layer, Refusal):
            return layer
        gamma, beta, mean, var = stats = [site.const(k) for k in bn_math.BN_INPUTS]
        if gamma is None or beta is None or mean is None or var is None:
            why = site.missing(bn, bn_math.BN_INPUTS)
            return why or site.refuse(f"a parameter of {bn.label} could not be evaluated")
        mistyped = bn_math.parameter_type_problem([gamma, beta, mean, var])
        if mistyped is not None:  # the file breaks BatchNormalization's schema: not a site left, bad input
            model = site.graph.model
            path = f"{model.path}: " if model is not None and model.path is not None else ""
            raise GraphLensError(f"{path}node {bn.label}: {mistyped}")
        sizes = {int(np.asarray(s).size) for s in stats}
        if sizes != {layer.channels}:
            return site.refuse(
                f"{bn.label} has parameters of {', '.join(shape_text(np.asarray(s).shape) for s in stats)} "
                f"for the {layer.channels} output channels of {node.label}"
            )
        epsilon = float(bn.attrs.get("epsilon", 1e-5))
        unfoldable = bn_math.unfoldable_statistics(gamma, beta, mean, var, epsilon)
        if unfoldable is not None:
            return site.refuse(f"{bn.label} cannot be folded: {unfoldable}")
        params = bn_math.bn_affine(gamma, beta, mean, var, epsilon)
        bias_add = site.node("bias_add")
        if bias_add is None:
            return _BatchNormFold(site, layer, params, None)
        add_bias = site.const_read_by("add_bias", bias_add)
        if isinstance(add_bias, Refusal):
            return add_bias
        extra = channel_vector(site, add_bias, layer, f"the constant added by {bias_add.label}")
        if isinstance(extra, Refusal):
            return extra
        return _BatchNormFold(site, layer, params, extra)

    def details(self, match: Match) -> FoldDetails | None:
        fold = self._prepare(match)
        if isinstance(fold, Refusal):
            return None
        layer = fold.layer
        folded = folded_parameters(layer, fold.params, fold.extra_bias)
        return FoldDetails(layer.node.name, layer.op, match.nodes["bn"], fold.params, layer.weight, folded.weight,
                           _per_channel(effective_bias(layer, fold.extra_bias), layer.channels),
                           _per_channel(folded.bias, layer.channels),
                           channel_norms(layer, layer.weight), channel_norms(layer, folded.weight))

    def plan(self, match: Match) -> Plan | Refusal:
        fold = self._prepare(match)
        if isinstance(fold, Refusal):
            return fold
        site, layer = fold.site, fold.layer
        bn = site.matched("bn")
        bias_add = site.node("bias_add")
        removed = [layer.node.name] + ([bias_add.name] if bias_add is not None else []) + [bn.name]
        return fold_plan(site, layer, folded_parameters(layer, fold.params, fold.extra_bias), output=bn.outputs[0],
                         remove=removed, description=f"fold {bn.label} into {layer.node.label}")
