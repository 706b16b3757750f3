"""fold-affine: a per-channel constant Mul and/or Add after a Conv, ConvTranspose or Gemm, folded into it.

y = m·(W∗u + b) + a is a layer with W' = W·m and b' = m·b + a (the arithmetic of
:mod:`graphlens.rewrites.bn_math` with s = m, t = a). The constants must hold one value per output
channel (or one value in all); anything broadcasting along another axis is left alone.
"""

from __future__ import annotations

from graphlens.matching.matcher import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site
from graphlens.rewrites.rules.linear import channel_vector, fold_plan, folded_parameters, read_layer


class FoldAffine(Rule):
    name = "fold-affine"
    description = "fold a per-channel constant Mul and/or Add after a Conv/ConvTranspose/Gemm into its weights"
    pattern_names = ("conv-mul-add",)

    def plan(self, match: Match) -> Plan | Refusal:
        site = Site(match, self)
        node, out = site.node("conv"), site.node("out")
        assert node is not None and out is not None
        mul = site.node("mul") or (out if out.op_type == "Mul" else None)
        add = out if out.op_type == "Add" else None
        layer = read_layer(site, node)
        if isinstance(layer, Refusal):
            return layer
        scale = shift = None
        if mul is not None:
            scale = site.missing(mul, ("scale",)) or channel_vector(
                site, site.const("scale"), layer, f"the constant multiplied by {mul.label}")
            if isinstance(scale, Refusal):
                return scale
        if add is not None:
            shift = site.missing(add, ("shift",)) or channel_vector(
                site, site.const("shift"), layer, f"the constant added by {add.label}")
            if isinstance(shift, Refusal):
                return shift
        folded = folded_parameters(layer, bn_math.plain_affine(layer.channels, scale, shift), None)
        what = " and ".join(n.label for n in (mul, add) if n is not None)
        return fold_plan(site, layer, folded, output=out.outputs[0],
                         remove=[layer.node.name] + [n.name for n in (mul, add) if n is not None],
                         description=f"fold {what} into {layer.node.label}")
