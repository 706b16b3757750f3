"""The transformer fusions, in the order ``--rules transformers`` applies them.

BERT's embeddings first (their sum and LayerNormalization would otherwise fuse as a skip norm), then norms
(a residual Add then fuses with the norm it feeds), then the GELU family, rotary
embeddings, and attention last, whose pattern reads the rotary output as its Q and K. The driver
repeats the whole list until a round changes nothing.
"""

from __future__ import annotations

from graphlens.rewrites.rule import Rule
from graphlens.rewrites.rules.transformers import attention, embed_norm, gelu, norms, rotary

TRANSFORMER_RULES: tuple[Rule, ...] = (*embed_norm.RULES, *norms.RULES, *gelu.RULES, *rotary.RULES, *attention.RULES)

__all__ = ["TRANSFORMER_RULES"]
