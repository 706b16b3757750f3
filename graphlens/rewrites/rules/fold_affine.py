"""fold-affine: a per-channel constant Mul and/or Add after a Conv, ConvTranspose or Gemm, folded into it.

y = m·(W∗u + b) + a is a layer with W' = W·m and b' = m·b + a (the arithmetic of
:mod:`graphlens.rewrites.bn_math` with s = m, t = a). The constants must hold one value per output
channel (or one value in all); anything broadcasting along another axis is left alone.
"""

from __future__ import annotations

import numpy as np

from graphlens.matching.match import Match
from graphlens.rewrites import bn_math
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site
from graphlens.rewrites.rules.affine_fold import channel_vector, fold_plan, folded_parameters, read_layer


class FoldAffine(Rule):
    name = "fold-affine"
    description = "fold a per-channel constant Mul and/or Add after a Conv/ConvTranspose/Gemm into its weights"
    pattern_names = ("conv-mul-add",)

    def plan(self, match: Match) -> Plan | Refusal:
        site = Site(match, self)
        node, out = site.matched("conv"), site.matched("out")
        mul = site.node("mul") or (out if out.op_type == "Mul" else None)
        add = out if out.op_type == "Add" else None
        layer = read_layer(site, node)
        if isinstance(layer, Refusal):
            return layer
        vectors: dict[str, np.ndarray] = {}
        for label, reader, verb in (("scale", mul, "multiplied by"), ("shift", add, "added by")):
            if reader is None:
                continue
            value = site.const_read_by(label, reader)
            vector = value if isinstance(value, Refusal) else channel_vector(
                site, value, layer, f"the constant {verb} {reader.label}")
            if isinstance(vector, Refusal):
                return vector
            vectors[label] = vector
        affine = bn_math.plain_affine(layer.channels, vectors.get("scale"), vectors.get("shift"))
        folded = folded_parameters(layer, affine, None)
        what = " and ".join(n.label for n in (mul, add) if n is not None)
        return fold_plan(site, layer, folded, output=out.outputs[0],
                         remove=[layer.node.name] + [n.name for n in (mul, add) if n is not None],
                         description=f"fold {what} into {layer.node.label}")

