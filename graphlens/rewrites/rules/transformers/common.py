"""Reading the graph around a transformer fusion's match: what writes a tensor, and which MatMuls read activations."""

from __future__ import annotations

from collections.abc import Callable, Collection

from graphlens.core.graph import Graph
from graphlens.core.node import Node


def written_by(graph: Graph, tensor: str, accept: Callable[[Node], bool], through: Collection[str] = (),
               steps: int = 0) -> bool:
    """Whether a node ``accept`` takes writes ``tensor``, directly or through up to ``steps`` nodes whose op is in
    ``through`` (following their inputs that are not constant): what a rule's :meth:`~Rule.is_site` asks."""
    frontier = [tensor]
    for _ in range(steps + 1):
        following: list[str] = []
        for name in frontier:
            found = graph.producer(name)
            if found is None:
                continue
            node = found[0]
            if accept(node):
                return True
            if node.op_type in through:
                following.extend(t for t in node.inputs if t and not graph.is_constant(t))
        frontier = following
    return False


def reads_activations(graph: Graph, node: Node) -> bool:
    """Both of the node's first two inputs vary with the model's inputs: Q·Kᵀ, not x·W."""
    return len(node.inputs) >= 2 and all(t and not graph.is_constant(t) for t in node.inputs[:2])


def scaled_by_constant(graph: Graph, node: Node) -> bool:
    """A Mul or Div with one constant input (x / √2, √(2/π)·u)."""
    return node.op_type in ("Mul", "Div") and any(t and graph.is_constant(t) for t in node.inputs)
