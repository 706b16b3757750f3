"""tidy: exact simplifications of what exports and fusions leave (see :mod:`.rule`); :mod:`.dims` says which ops keep a
tensor's shape and :mod:`.proofs` proves a node passes its input through."""

from __future__ import annotations

from graphlens.rewrites.rules.tidy.rule import Tidy

__all__ = ["Tidy"]
