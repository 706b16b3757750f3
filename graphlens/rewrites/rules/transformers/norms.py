"""Transformer fusions: norms (being written)."""

from __future__ import annotations

from graphlens.rewrites.rule import Rule

RULES: tuple[Rule, ...] = ()
