"""Exporter name scopes (``/encoder/layer.3/attention/MatMul``) as a tree, and where to cut it.

PyTorch and most other exporters name nodes after the module that emitted them, so the names
already describe the model's structure; grouping by them needs no graph analysis. A node's scope
is its name without the last part; every ``/``-separated prefix of a scope is a scope too.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

OVERVIEW_LIMIT = 300
"""Most boxes an automatic overview shows; more cannot be read as a whole."""


@dataclass
class Scope:
    """A name scope: the nodes directly in it and its sub-scopes."""

    prefix: str  # "" for the root
    name: str  # last part of the prefix ("layer.3")
    depth: int  # 0 for the root
    children: dict[str, Scope] = field(default_factory=dict)  # by prefix, in first-seen order
    nodes: list[str] = field(default_factory=list)  # node names directly in this scope
    size: int = 0  # nodes in this scope and below


def scope_of(name: str) -> str:
    """``/encoder/layer.3/attention/MatMul`` -> ``/encoder/layer.3/attention``; ``""`` when unscoped."""
    cut = name.rfind("/")
    return name[:cut] if cut > 0 else ""


def scope_prefixes(scope: str) -> list[str]:
    """``/a/b/c`` -> ``["/a", "/a/b", "/a/b/c"]``: the scope and every scope enclosing it."""
    if not scope:
        return []
    found = []
    cut = scope.find("/", 1)
    while cut != -1:
        found.append(scope[:cut])
        cut = scope.find("/", cut + 1)
    found.append(scope)
    return found


def last_part(prefix: str) -> str:
    return prefix.rsplit("/", 1)[-1] or prefix


def build_tree(names: Iterable[str]) -> Scope:
    """The scope tree of these node names."""
    root = Scope("", "", 0)
    by_prefix: dict[str, Scope] = {"": root}
    for name in names:
        scope = scope_of(name)
        found = by_prefix.get(scope)
        if found is None:
            parent = root
            for prefix in scope_prefixes(scope):
                child = by_prefix.get(prefix)
                if child is None:
                    child = Scope(prefix, last_part(prefix), parent.depth + 1)
                    parent.children[prefix] = child
                    by_prefix[prefix] = child
                parent = child
            found = parent
        found.nodes.append(name)
    _count(root)
    return root


def _count(root: Scope) -> None:
    stack, post = [root], []
    while stack:
        scope = stack.pop()
        post.append(scope)
        stack.extend(scope.children.values())
    for scope in reversed(post):
        scope.size = len(scope.nodes) + sum(c.size for c in scope.children.values())


def boxes_per_depth(counts: Mapping[str, int]) -> list[int]:
    """``boxes[d]``: boxes shown when every scope at depth ``d`` is collapsed (index 0 unused)."""
    prefix_lists = [(scope_prefixes(scope), n) for scope, n in counts.items()]
    deepest = max((len(p) for p, _ in prefix_lists), default=0)
    boxes = [0] * (deepest + 2)
    for d in range(1, deepest + 2):
        groups = {p[d - 1] for p, _ in prefix_lists if len(p) >= d}
        boxes[d] = len(groups) + sum(n for p, n in prefix_lists if len(p) < d)
    return boxes


def grouping_depth(counts: Mapping[str, int], limit: int = OVERVIEW_LIMIT) -> int:
    """The depth to collapse scopes at: the most detail that still fits in ``limit`` boxes.

    ``counts`` maps each scope to the number of nodes directly in it. A level that shows a single
    box (a wrapper scope such as ``/model``) says nothing, so when the next level no longer fits
    the limit it is taken anyway. 0 means the names have no scopes.
    """
    boxes = boxes_per_depth(counts)
    deepest = len(boxes) - 2
    if deepest < 1:
        return 0
    fitting = [d for d in range(1, deepest + 1) if boxes[d] <= limit]
    if not fitting:
        return 1
    depth = fitting[-1]
    if boxes[depth] <= 1 and depth < deepest:
        depth += 1
    return depth


def overview_limit(visible_nodes: int) -> int:
    """Boxes to aim for: :data:`OVERVIEW_LIMIT`, fewer for small graphs grouped on request."""
    return min(OVERVIEW_LIMIT, max(2, visible_nodes // 8))
