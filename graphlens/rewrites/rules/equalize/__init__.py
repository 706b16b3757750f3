"""equalize: cross-layer equalization of consecutive linear layers (see :mod:`.rule`); :mod:`.arithmetic` holds
the per-channel math."""

from __future__ import annotations

from graphlens.rewrites.rules.equalize.rule import Equalize

__all__ = ["Equalize"]
