"""Matches of a pattern drawn as one box each, named after the pattern.

A transformer is read as "embedding, twelve attention blocks, a head", not as 1,400 MatMuls and
Reshapes. After a pattern run, every match can fold into one box titled with the pattern's name
("attention", "conv-bn") that lists the ops it holds, as a collapsed scope group does, with the
edges in and out of it kept. :attr:`ViewOptions.collapsed_matches` maps each node of a match to
its match's key (:func:`match_keys`); the box opens as a group does, by putting the key's item
key (:data:`MATCH_PREFIX` + key) in :attr:`ViewOptions.expanded`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence

MATCH_PREFIX = "match:"
"""Item keys of collapsed matches start with this (scope groups' with ``group:``)."""

_NUMBER_MARK = "#"


def match_keys(pattern: str, matches: Iterable[Iterable[str]]) -> dict[str, str]:
    """Node name -> ``pattern#k`` (k from 1) for the nodes of each match: one box per match.

    A node in two overlapping matches stays in the first one's box."""
    keys: dict[str, str] = {}
    for number, nodes in enumerate(matches, 1):
        for name in nodes:
            keys.setdefault(name, f"{pattern}{_NUMBER_MARK}{number}")
    return keys


def match_title(group: str) -> str:
    """The pattern name a match box is titled with: ``match:attention#3`` -> ``attention``."""
    key = group.removeprefix(MATCH_PREFIX)
    head, mark, number = key.rpartition(_NUMBER_MARK)
    return head if mark and number.isdigit() else key


def match_subtitle(group: str) -> str:
    """``match 3`` for ``match:attention#3``; empty for a key without a number."""
    _, mark, number = group.removeprefix(MATCH_PREFIX).rpartition(_NUMBER_MARK)
    return f"match {number}" if mark and number.isdigit() else ""


def is_match_group(group: str) -> bool:
    return group.startswith(MATCH_PREFIX)


def assign_matches(
    names: Sequence[str],
    group_of: list[str | None],
    collapsed: Mapping[str, str],
    expanded: frozenset[str],
) -> list[str | None]:
    """``group_of`` with each node of a collapsed match moved into its match's box.

    ``names`` are the visible nodes, ``group_of`` the scope group each falls in (None: its own
    box). A match the user opened (its item key in ``expanded``) is left as it was. A scope group
    left with one node once its match members are taken dissolves, as one-node groups do."""
    if not collapsed:
        return group_of
    found: list[str | None] = []
    for name, group in zip(names, group_of):
        key = collapsed.get(name)
        if key is not None and MATCH_PREFIX + key not in expanded:
            group = MATCH_PREFIX + key
        found.append(group)
    sizes = Counter(found)
    return [g if g is None or is_match_group(g) or sizes[g] > 1 else None for g in found]
