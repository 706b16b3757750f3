"""fuse-attention: scaled dot-product attention written in pieces, fused into one attention operator.

The rule is :class:`~.fusion.FuseAttention`; the rest of the package is what it reads and writes, one concept a
module: the scores (Q·Kᵀ, its scale, masks and Softmax: :mod:`.scores`), the heads' layout and counts
(:mod:`.shapes`), padding masks proved to be one (:mod:`.padding`), Q, K and V packed into one weight
(:mod:`.packing`), a KV cache's past and present (:mod:`.cache`), and the edit that removes the match (:mod:`.edits`).
"""

from __future__ import annotations

from graphlens.rewrites.rules.transformers.attention.fusion import RULES, FuseAttention

__all__ = ["RULES", "FuseAttention"]
