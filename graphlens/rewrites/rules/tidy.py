"""tidy (off by default; last in ``--rules transformers``): being written."""

from __future__ import annotations

from graphlens.matching.matcher import Match
from graphlens.rewrites.rule import Plan, Refusal, Rule


class Tidy(Rule):
    name = "tidy"
    description = "being written"
    default = False

    def plan(self, match: Match) -> Plan | Refusal:  # pragma: no cover - no patterns
        raise NotImplementedError
