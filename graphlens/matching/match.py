"""A match result: where a pattern matched, as pattern labels to node and tensor names.

Kept apart from the matcher, which imports networkx: the workspace, the lessons and the window hold and pass
matches without importing the search (a window opening a model matches nothing).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphlens.core.graph import Graph


@dataclass
class Match:
    """One place the pattern matches: pattern labels to node names and value labels to tensor names."""

    pattern: str
    graph: Graph
    nodes: dict[str, str]
    values: dict[str, str]
    variant: int

    @property
    def node_names(self) -> list[str]:
        return list(self.nodes.values())

    def to_json(self) -> dict[str, Any]:
        return {"graph": self.graph.path, "nodes": dict(self.nodes), "values": dict(self.values)}
