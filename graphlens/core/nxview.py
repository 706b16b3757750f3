"""The graph as a ``networkx.DiGraph``, the form the matcher and layout work on.

Nodes are keyed by node name and carry ``op_type``, ``domain`` and ``attrs`` (decoded lazily).
A ``DiGraph`` keeps one edge per producer/consumer pair, so each edge carries ``links``: a tuple
of ``(output slot, input slot, tensor name)``, one per connection. That keeps input order and
lets ``Mul(x, x)`` show as one edge with two links.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import networkx as nx


class _Node(Protocol):
    name: str
    op_type: str
    domain: str
    inputs: list[str]

    @property
    def attrs(self) -> Mapping[str, Any]: ...


class ProjectedGraph(Protocol):
    """What the projection reads of a graph (:class:`graphlens.core.graph.Graph` is one).

    A protocol rather than an import: the graph calls into this module, never the other way.
    """

    @property
    def nodes(self) -> Sequence[_Node]: ...

    @property
    def producers(self) -> Mapping[str, tuple[Any, int]]: ...

    @property
    def path(self) -> str: ...


Link = tuple[int, int, str]
"""(producer output slot, consumer input slot, tensor name)."""


def to_networkx(graph: ProjectedGraph) -> nx.DiGraph:
    """Project one graph (not its subgraphs, which get their own) onto a ``DiGraph``.

    The adjacency dicts are filled directly rather than through ``add_edges_from``, which
    re-validates every edge and is four times slower on 100,000 nodes; the result is the same
    graph (a test compares the two constructions).
    """
    node_data: dict[str, dict[str, Any]] = {}
    # graph order, as add_node gives
    succ: dict[str, dict[str, dict[str, Any]]] = {node.name: {} for node in graph.nodes}
    pred: dict[str, dict[str, dict[str, Any]]] = {}
    producer = graph.producers
    for node in graph.nodes:
        target = node.name
        node_data[target] = {"op_type": node.op_type, "domain": node.domain, "attrs": node.attrs}
        incoming: dict[str, dict[str, Any]] = {}
        pred[target] = incoming
        for in_slot, tensor in enumerate(node.inputs):
            found = producer.get(tensor)
            if found is None:
                continue
            source, out_slot = found
            source_name = source.name
            data = incoming.get(source_name)
            if data is None:  # one dict per edge, shared by both directions as networkx shares it
                incoming[source_name] = succ[source_name][target] = {"links": ((out_slot, in_slot, tensor),)}
            else:
                data["links"] += ((out_slot, in_slot, tensor),)
    g = nx.DiGraph(path=graph.path)
    # networkx's own adjacency dicts, filled directly on purpose (see above): its public API has
    # no bulk constructor that skips per-edge validation.
    g._node.update(node_data)
    g._succ.update(succ)  # _adj is the same dict as _succ in a DiGraph
    g._pred.update(pred)
    return g


def consumers_of(g: nx.DiGraph, name: str) -> dict[str, dict[str, Any]]:
    """Consumer node -> edge data (with ``links``) for node ``name``, in graph order, without copying.

    ``g._succ`` is networkx's own adjacency dict: ``g.succ[name]`` wraps it in a view object per call.
    """
    succ: dict[str, dict[str, Any]] = g._succ[name]
    return succ


def to_networkx_reference(graph: ProjectedGraph) -> nx.DiGraph:
    """The same projection through networkx's public API; the tests hold the fast one to it."""
    g = nx.DiGraph(path=graph.path)
    for node in graph.nodes:
        g.add_node(node.name, op_type=node.op_type, domain=node.domain, attrs=node.attrs)
    for node in graph.nodes:
        for in_slot, tensor in enumerate(node.inputs):
            found = graph.producers.get(tensor)
            if found is not None:
                source, out_slot = found
                if g.has_edge(source.name, node.name):
                    g.edges[source.name, node.name]["links"] += ((out_slot, in_slot, tensor),)
                else:
                    g.add_edge(source.name, node.name, links=((out_slot, in_slot, tensor),))
    return g
