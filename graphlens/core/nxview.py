"""The graph as a ``networkx.DiGraph``, the form the matcher and layout work on.

Nodes are keyed by node name and carry ``op_type``, ``domain`` and ``attrs`` (decoded lazily).
A ``DiGraph`` keeps one edge per producer/consumer pair, so each edge carries ``links``: a tuple
of ``(output slot, input slot, tensor name)``, one per connection. That keeps input order and
lets ``Mul(x, x)`` show as one edge with two links.
"""

from __future__ import annotations

import networkx as nx

from graphlens.core.graph import Graph

Link = tuple[int, int, str]
"""(producer output slot, consumer input slot, tensor name)."""


def to_networkx(graph: Graph) -> nx.DiGraph:
    """Project one graph (not its subgraphs, which get their own) onto a ``DiGraph``."""
    g = nx.DiGraph(path=graph.path)
    g.add_nodes_from(
        (node.name, {"op_type": node.op_type, "domain": node.domain, "attrs": node.attrs}) for node in graph.nodes
    )
    producer = graph._producer
    links: dict[tuple[str, str], list[Link]] = {}
    for node in graph.nodes:
        target = node.name
        for in_slot, tensor in enumerate(node.inputs):
            found = producer.get(tensor)
            if found is None:
                continue
            source, out_slot = found
            key = (source.name, target)
            bucket = links.get(key)
            if bucket is None:
                links[key] = [(out_slot, in_slot, tensor)]
            else:
                bucket.append((out_slot, in_slot, tensor))
    g.add_edges_from((u, v, {"links": tuple(bucket)}) for (u, v), bucket in links.items())
    return g
