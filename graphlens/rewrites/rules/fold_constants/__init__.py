"""fold-constants: what is computed from constants alone, stored as constants (see :mod:`.rule`); :mod:`.evaluation`
computes one node's value and types."""

from __future__ import annotations

from graphlens.rewrites.rules.fold_constants.rule import SMALL_BYTES, FoldConstants

__all__ = ["SMALL_BYTES", "FoldConstants"]
