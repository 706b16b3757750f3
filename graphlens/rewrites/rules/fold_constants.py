"""fold-constants (off by default; part of ``--rules transformers``): being written."""

from __future__ import annotations

from graphlens.matching.matcher import Match
from graphlens.rewrites.rule import Plan, Refusal, Rule


class FoldConstants(Rule):
    name = "fold-constants"
    description = "being written"
    default = False

    def plan(self, match: Match) -> Plan | Refusal:  # pragma: no cover - no patterns
        raise NotImplementedError
