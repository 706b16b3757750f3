"""fold-bn: a BatchNormalization in inference mode folded into the Conv, ConvTranspose, Gemm or MatMul before it.

W' = W·s and b' = (b − μ)·s + β with s = γ/√(σ² + ε) (see :mod:`graphlens.rewrites.bn_math`). A
constant bias Add between the layer and the BN is absorbed into b. The folded layer keeps its
name and writes the BN's output tensor, so graph outputs and downstream readers are unchanged.
Only sites that ``conv-bn``, ``gemm-bn`` or ``matmul-bn`` match are touched.
"""

from __future__ import annotations

import numpy as np

from graphlens.matching.matcher import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Rule, Site, shape_text
from graphlens.rewrites.rules.linear import Layer, channel_vector, fold_into, read_layer


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
            return site, None, None, None, f"a parameter of {bn.label} could not be evaluated"
        sizes = {int(np.asarray(s).size) for s in stats}
        if sizes != {layer.channels}:
            return site, None, None, None, (
                f"{bn.label} has parameters of {', '.join(shape_text(np.asarray(s).shape) for s in stats)} "
                f"for the {layer.channels} output channels of {node.label}"
            )
        params = bn_math.bn_affine(*stats, float(bn.attrs.get("epsilon", 1e-5)))  # type: ignore[arg-type]
        extra = None
        if site.node("bias_add") is not None:
            extra, reason = channel_vector(site.const("add_bias"), layer, f"the constant added by {site.node('bias_add').label}")
            if extra is None:
                return site, None, None, None, reason
        return site, layer, params, extra, None

    def check(self, match: Match) -> str | None:
        return self._prepare(match)[4]

    def plan(self, match: Match) -> GraphEdit:
        result = self.try_plan(match)
        assert isinstance(result, GraphEdit), result
        return result

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
