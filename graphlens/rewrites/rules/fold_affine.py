"""fold-affine: a per-channel constant Mul and/or Add after a Conv, ConvTranspose or Gemm, folded into it.

y = m·(W∗u + b) + a is a layer with W' = W·m and b' = m·b + a (the arithmetic of
:mod:`graphlens.rewrites.bn_math` with s = m, t = a). The constants must hold one value per output
channel (or one value in all); anything broadcasting along another axis is left alone.
"""

from __future__ import annotations

from graphlens.matching.matcher import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Rule, Site
from graphlens.rewrites.rules.linear import channel_vector, fold_into, read_layer


class FoldAffine(Rule):
    name = "fold-affine"
    description = "fold a per-channel constant Mul and/or Add after a Conv/ConvTranspose/Gemm into its weights"
    pattern_names = ("conv-mul-add",)

    def _prepare(self, match: Match):
        site = Site(match)
        node, out = site.node("conv"), site.node("out")
        assert node is not None and out is not None
        mul = site.node("mul") or (out if out.op_type == "Mul" else None)
        add = out if out.op_type == "Add" else None
        layer, reason = read_layer(site, node)
        if layer is None:
            return site, None, None, reason, mul, add
        scale = shift = None
        if mul is not None:
            missing = site.missing(mul, ("scale",))
            if missing is not None:
                return site, None, None, missing, mul, add
            scale, reason = channel_vector(site.const("scale"), layer, f"the constant multiplied by {mul.label}")
            if scale is None:
                return site, None, None, reason, mul, add
        if add is not None:
            missing = site.missing(add, ("shift",))
            if missing is not None:
                return site, None, None, missing, mul, add
            shift, reason = channel_vector(site.const("shift"), layer, f"the constant added by {add.label}")
            if shift is None:
                return site, None, None, reason, mul, add
        return site, layer, bn_math.plain_affine(layer.channels, scale, shift), None, mul, add

    def check(self, match: Match) -> str | None:
        return self._prepare(match)[3]

    def try_plan(self, match: Match) -> GraphEdit | str:
        site, layer, params, reason, mul, add = self._prepare(match)
        if reason is not None:
            return reason
        assert layer is not None and params is not None
        out = site.node("out")
        proto, inits = fold_into(site, layer, params, None, out.outputs[0])
        removed = [layer.node.name] + [n.name for n in (mul, add) if n is not None]
        what = " and ".join(n.label for n in (mul, add) if n is not None)
        return GraphEdit(site.graph.path, self.name, f"fold {what} into {layer.node.label}", removed, [proto], inits,
                         boundary=[(out.outputs[0], out.outputs[0])], site=dict(match.nodes))
