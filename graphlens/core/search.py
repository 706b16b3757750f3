"""Finding nodes by op type, node name or tensor name, plain or by regular expression."""

from __future__ import annotations

import re

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.node import Node


def search_nodes(graph: Graph, query: str, *, regex: bool = False) -> list[Node]:
    """Nodes whose op type, name, or an input/output tensor name matches ``query``, in graph order.

    Plain queries match case-insensitively as substrings, except that an exact op type (``Conv``)
    matches only that op, not ``ConvTranspose``.
    """
    query = query.strip()
    if not query:
        return []
    if regex:
        try:
            pattern = re.compile(query, re.IGNORECASE)
        except re.error as exc:
            raise GraphLensError(f"'{query}' is not a valid regular expression: {exc}") from exc

        def hit(text: str) -> bool:
            return pattern.search(text) is not None

        return [n for n in graph.nodes
                if hit(n.op_type) or hit(n.name) or any(hit(t) for t in (*n.inputs, *n.outputs) if t)]
    lowered = query.lower()
    if any(n.op_type.lower() == lowered for n in graph.nodes):
        return [n for n in graph.nodes if n.op_type.lower() == lowered]
    return [
        n for n in graph.nodes
        if lowered in n.name.lower() or any(lowered in t.lower() for t in (*n.inputs, *n.outputs) if t)
    ]
