"""Finding a cycle among a graph's nodes, which ONNX forbids and a hostile file may still contain.

Layout, matching and folding all assume that following a tensor to its producer eventually
stops; a node that (through others) reads its own output breaks that, so loading refuses it.
Checking is one pass over the nodes when they are in order, as ONNX requires; only files that
are not get the full search, which keeps its own stack (chains of 20,000 nodes are real).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar


class _Wired(Protocol):
    """What the search reads of a node; a protocol, so that the graph module imports this one only."""

    @property
    def inputs(self) -> Sequence[str]: ...

    @property
    def outputs(self) -> Sequence[str]: ...


Node = TypeVar("Node", bound=_Wired)


def node_in_cycle(nodes: Sequence[Node]) -> Node | None:
    """A node that is part of a cycle of ``nodes`` (through the tensors they produce), or None."""
    produced_by: dict[str, int] = {}
    for index, node in enumerate(nodes):
        for tensor in node.outputs:
            if tensor:
                produced_by[tensor] = index
    if all(produced_by.get(t, -1) < i for i, node in enumerate(nodes) for t in node.inputs if t):
        return None  # in topological order: no cycle possible
    # Kahn's algorithm: whatever never becomes ready lies on a cycle or downstream of one.
    readers: list[list[int]] = [[] for _ in nodes]
    waiting = [0] * len(nodes)
    for index, node in enumerate(nodes):
        for producer in {produced_by[t] for t in node.inputs if t in produced_by}:
            readers[producer].append(index)
            waiting[index] += 1
    ready = [i for i, count in enumerate(waiting) if count == 0]
    while ready:
        for reader in readers[ready.pop()]:
            waiting[reader] -= 1
            if waiting[reader] == 0:
                ready.append(reader)
    stuck = {i for i, count in enumerate(waiting) if count}
    if not stuck:
        return None
    # Walk back from a stuck node through stuck producers; the first node seen twice is on a cycle.
    current, seen = min(stuck), set()
    while current not in seen:
        seen.add(current)
        current = next(produced_by[t] for t in nodes[current].inputs if produced_by.get(t, -1) in stuck)
    return nodes[current]
