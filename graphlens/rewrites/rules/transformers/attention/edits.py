"""The nodes fuse-attention adds besides the fused one, and the nodes its edit takes away.

A match's heads-split nodes may have other readers, and the nodes around it may read its tensors
only to serve it (dynamo's CastLike typing a constant after the scores, TorchScript's arithmetic
on Q's shape for the scale): the edit removes exactly what nothing live needs any more.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.rewrites.rule import fresh_name, initializer


@dataclass
class Emitted:
    """Nodes and initializers a fusion adds besides the fused node, and the names they took."""

    graph: Graph
    prefix: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)

    def node(self, op: str, inputs: list[str], what: str, **attrs: Any) -> str:
        out = fresh_name(self.graph, f"{self.prefix}/{what}", self.taken)
        name = out
        while name in self.graph.by_name:
            name += "_"
        self.nodes.append(onnx.helper.make_node(op, inputs, [out], name=name, **attrs))
        return out

    def const(self, value: np.ndarray, what: str) -> str:
        name = fresh_name(self.graph, f"{self.prefix}/{what}", self.taken)
        self.initializers[name] = initializer(name, value, value.dtype)
        return name

    def flat(self, heads: str | None, role: str) -> str:
        """[B, H, S, D] -> [B, S, H·D]."""
        assert heads is not None
        moved = self.node("Transpose", [heads], f"{role}_seq_first", perm=[0, 2, 1, 3])
        return self.node("Reshape", [moved, self.const(np.array([0, 0, -1], dtype=np.int64), "flat_shape")],
                         f"{role}_flat")


def removal(graph: Graph, matched: list[Node], added: list[onnx.NodeProto]) -> set[str]:
    """The matched nodes nothing else needs once the fused node is in, and the nodes left dead with them.

    A matched node stays if a graph output, a subgraph, a new node or a live node outside the match
    reads it; a node outside the match is dead when only removed or dead nodes read it (the CastLike
    dynamo exports put on a tensor to type a constant, the shape arithmetic of a computed scale).
    """
    produced = {t for p in added for t in p.output}
    pinned = (set(graph.outputs) | graph.outer_reads() | {t for p in added for t in p.input}) - produced
    removed = {n.name for n in matched}
    while True:
        gone = removed | _dead(graph, removed, pinned)
        keep = {name for name in removed if _still_read(graph, graph.by_name[name], gone, pinned, produced)}
        if not keep:
            return gone
        removed -= keep


def _still_read(graph: Graph, node: Node, gone: set[str], pinned: set[str], produced: set[str]) -> bool:
    return any(
        t in pinned or any(reader.name not in gone for reader, _ in graph.consumers(t))
        for t in node.outputs if t and t not in produced
    )


def _dead(graph: Graph, removed: set[str], pinned: set[str]) -> set[str]:
    """Nodes outside ``removed`` whose every output is read only by removed or dead nodes."""
    dead: set[str] = set()
    frontier = [t for name in removed for t in graph.by_name[name].inputs if t]
    while frontier:
        tensor = frontier.pop()
        found = graph.local_producer(tensor)
        if found is None or found[0].name in removed or found[0].name in dead:
            continue
        node = found[0]
        gone = removed | dead
        if any(t in pinned for t in node.outputs if t):
            continue
        if all(reader.name in gone for t in node.outputs if t for reader, _ in graph.consumers(t)):
            dead.add(node.name)
            frontier.extend(t for t in node.inputs if t)
    return dead
