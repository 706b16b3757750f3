"""Runs of identical sibling scopes drawn as one box marked ``×N``.

An encoder of twelve layers exports twelve scopes (``/model/layers.0`` … ``/model/layers.11``)
with the same nodes wired the same way; collapsed, they are still twelve boxes saying the same
thing. Sibling scope groups (same parent scope) named alike up to an exporter's index suffix
(``layers.3``, ``rxn_layer_3``, ``self_attn`` and ``self_attn_1``; not ``linear1`` and ``linear2``,
which are usually different layers) are taken in the order their first nodes appear, other
siblings between them ignored; each run of consecutive ones with equal *signatures* is drawn as one
box titled
``layers.0 … layers.11 ×12`` that lists the ops of one block. Edges into and out of the run are
kept; those between its blocks fall inside the box. The box opens as a group does, by putting its
item key (:data:`REPEAT_PREFIX` + ``first|last|count``) in :attr:`ViewOptions.expanded`, which
shows the individual (still collapsed) scopes again.

A block's signature is the sequence, in graph order, of its visible nodes'
``(domain, op_type, inputs)`` where each input is the (position within the block, output slot)
of the block's node producing it, or ``None`` for a tensor from outside the block. It ignores
names, attributes and weights, so blocks that differ only in those (layer 3's weights, a suffix
``_3`` the exporter appended) are equal; blocks with another op, another order or other wiring are
not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from graphlens.core.node import Node
from graphlens.layout.scopes import last_part

REPEAT_PREFIX = "repeat:"
"""Item keys of runs of repeated scopes start with this (scope groups' with ``group:``)."""

_INDEX_SUFFIX = re.compile(r"[._]\d+$")

Signature = tuple[tuple[str, str, tuple[tuple[int, int] | None, ...]], ...]


def is_repeat_group(group: str) -> bool:
    return group.startswith(REPEAT_PREFIX)


def repeat_key(first: str, last: str, count: int) -> str:
    return f"{REPEAT_PREFIX}{first}|{last}|{count}"


def _parts(group: str) -> tuple[str, str, int]:
    first, last, count = group.removeprefix(REPEAT_PREFIX).rsplit("|", 2)
    return first, last, int(count)


def repeat_title(group: str) -> str:
    """``rxn_layer_1 … rxn_layer_6 ×6`` for the run ``/rxn_layer_1`` … ``/rxn_layer_6``."""
    first, last, count = _parts(group)
    return f"{last_part(first)} … {last_part(last)} ×{count}"


def first_block(group: str, nodes: Sequence[Node]) -> list[Node]:
    """The nodes of the run's first scope: what one block holds."""
    first = _parts(group)[0] + "/"
    return [n for n in nodes if n.name.startswith(first)]


def stem(prefix: str) -> str:
    """``/model/layers.3`` -> ``/model/layers``: the scope without its exporter index."""
    return _INDEX_SUFFIX.sub("", prefix)


def signature(nodes: Sequence[Node]) -> Signature:
    """See the module docstring: op types in order and the wiring inside the block."""
    produced: dict[str, tuple[int, int]] = {}
    for position, node in enumerate(nodes):
        for slot, tensor in enumerate(node.outputs):
            if tensor:
                produced[tensor] = (position, slot)
    return tuple((n.domain, n.op_type, tuple(produced.get(t) for t in n.inputs)) for n in nodes)


def assign_repeats(
    nodes: Sequence[Node],
    group_of: list[str | None],
    expanded: frozenset[str],
) -> list[str | None]:
    """``group_of`` with each run of identical consecutive sibling scope groups moved into one box.

    ``nodes`` are the visible nodes, ``group_of`` the collapsed scope each falls in (None: its own
    box; other prefixed keys such as match boxes are left alone). A run the user opened (its key in
    ``expanded``) stays as separate scopes."""
    members: dict[str, list[Node]] = {}
    for node, group in zip(nodes, group_of):
        if group is not None and group.startswith("/"):
            members.setdefault(group, []).append(node)
    if len(members) < 2:
        return group_of
    siblings: dict[str, list[str]] = {}  # alike-named siblings by stem
    for group in members:  # first-appearance order
        siblings.setdefault(stem(group), []).append(group)
    run_of: dict[str, str] = {}
    for groups in siblings.values():
        signatures = [signature(members[g]) for g in groups]
        start = 0
        for end in range(1, len(groups) + 1):
            if end < len(groups) and signatures[end] == signatures[start]:
                continue
            if end - start > 1:
                key = repeat_key(groups[start], groups[end - 1], end - start)
                if key not in expanded:
                    run_of.update(dict.fromkeys(groups[start:end], key))
            start = end
    if not run_of:
        return group_of
    return [run_of.get(g, g) if g is not None else None for g in group_of]


def _index(prefix: str) -> int:
    """The exporter index a scope ends with; -1 for the unnumbered first one (``self_attn``)."""
    found = _INDEX_SUFFIX.search(prefix)
    return int(found.group()[1:]) if found else -1


def opened_run(prefix: str, expanded: frozenset[str]) -> str | None:
    """The key of the opened run (in ``expanded``) the scope ``prefix`` is one block of, if any."""
    for key in expanded:
        if is_repeat_group(key):
            first, last, _ = _parts(key)
            if stem(prefix) == stem(first) and _index(first) <= _index(prefix) <= _index(last):
                return key
    return None
