"""Where the boxes go: a layered layout, top to bottom like Netron, built to be fast.

Sugiyama-style layout proper (network-simplex layering, dummy nodes for long edges, Brandes-Köpf
coordinates) takes seconds on DenseNet-121, whose dense blocks make every edge long. Each phase
here is one pass or a few vectorised sweeps instead:

1. Layers: longest path from the sources in one pass over the items in topological order (the
   view's own order when it is one, as it is without groups; else Kahn's algorithm, breaking any
   cycle that grouping closed at its earliest item, whose edge then counts reversed). Then, bottom
   up, sources and items with more outputs than inputs move down next to their first consumer,
   so a side branch does not hang from the top of the picture.
2. Order within layers: barycenter sweeps down, up and down; a layer is sorted (numpy argsort) by
   the mean position of its neighbours. Long edges are not split into dummy nodes: the far end's
   position is used directly, which keeps a sweep O(edges) whatever the edges' lengths.
3. x: each layer is packed left to right in that order, then items shift toward the mean x of
   their predecessors (then successors, then predecessors again) keeping order and gaps. The
   placement nearest to the wished-for one is approximated by averaging a left-to-right and a
   right-to-left clamp, each a cumulative max/min over the layer.
4. Connected components are laid out side by side; items without edges go in a grid at the right.
5. y from layer heights; edges are cubic Béziers with vertical tangents, and one that would run
   straight through the boxes of the layers it spans bulges sideways (:mod:`.paths`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from graphlens.core.task import Task, task_or_idle
from graphlens.layout.coords import COMPONENT_GAP, NODE_GAP, grid, x_coordinates
from graphlens.layout.order import order_positions
from graphlens.layout.paths import ARROW_GAP, edge_paths
from graphlens.layout.view import Item, View

__all__ = ["ARROW_GAP", "COMPONENT_GAP", "NODE_GAP", "Layout", "item_size", "layout_view"]

CHAR_WIDTH = 7.0  # average advance of an 11 px font
TEXT_PADDING = 20.0
MIN_WIDTH, MAX_WIDTH = 90.0, 260.0
HEADER_HEIGHT, LINE_HEIGHT = 28.0, 15.0
LAYER_GAP = 40.0  # between layers, room for edge labels
MARGIN = 24.0


@dataclass
class Layout:
    """Positions for a view's items (top-left corners) and control points for its edges."""

    x: np.ndarray
    y: np.ndarray
    w: np.ndarray
    h: np.ndarray
    layer: np.ndarray
    edge_paths: list[tuple[tuple[float, float], ...]]  # per view edge: start, c1, c2, end
    width: float
    height: float


def item_size(item: Item) -> tuple[float, float]:
    """Box size for ~7 px per character: the title and subtitle share the header row, and each
    line is a row below it; past :data:`MAX_WIDTH` the text is elided when painted."""
    header = len(item.title) + (len(item.subtitle) + 3 if item.subtitle else 0)
    chars = max([header, *(len(line) for line in item.lines)])
    width = min(MAX_WIDTH, max(MIN_WIDTH, chars * CHAR_WIDTH + TEXT_PADDING))
    return width, HEADER_HEIGHT + LINE_HEIGHT * len(item.lines)


def layout_view(view: View, task: Task | None = None) -> Layout:
    """Lay out ``view``; raises :class:`~graphlens.core.task.Cancelled` as soon as ``task`` is cancelled."""
    task = task_or_idle(task)

    def phase(fraction: float) -> None:
        task.check("the layout")
        task.report(fraction)

    phase(0.0)
    return _layout(view, phase)


def _layout(view: View, phase: Callable[[float], None]) -> Layout:
    n = len(view.items)
    sizes = np.array([item_size(item) for item in view.items], dtype=np.float64).reshape(n, 2)
    w, h = sizes[:, 0].copy(), sizes[:, 1].copy()
    source = np.fromiter((e.source for e in view.edges), np.int64, len(view.edges))
    target = np.fromiter((e.target for e in view.edges), np.int64, len(view.edges))
    valid = (source != target) & (source >= 0) & (target >= 0) & (source < n) & (target < n)
    rank = _topological_rank(n, source[valid], target[valid])
    by_rank = np.argsort(rank)
    ru, rv = _dag_edges(n, rank[source[valid]], rank[target[valid]])
    u, v = by_rank[ru], by_rank[rv]  # item indexes, each edge oriented along the ranks
    phase(0.1)

    pinned = np.zeros(n, dtype=bool)
    pinned[[i for i in view.inputs if i < n]] = True
    layer = _layers(n, ru, rv, pinned[by_rank])[rank]
    phase(0.3)

    comp, isolated = _components(n, u, v)
    positions = order_positions(layer, comp, isolated, u, v, lambda done: phase(0.3 + 0.3 * done))
    x, right_end = x_coordinates(layer, comp, isolated, u, v, w, positions)
    layer = grid(x, layer, isolated, w, right_end)
    phase(0.8)

    layer_h = np.zeros(int(layer.max(initial=-1)) + 1)
    np.maximum.at(layer_h, layer, h)
    tops = np.concatenate(([0.0], np.cumsum(layer_h + LAYER_GAP)))[:-1]
    y = tops[layer] + (layer_h[layer] - h) / 2 if n else np.zeros(0)
    paths = edge_paths(x, y, w, h, layer, tops, layer_h, source, target)
    phase(0.9)

    shift_x = MARGIN - min(float(x.min(initial=0.0)), float(paths[:, :, 0].min(initial=0.0)))
    shift_y = MARGIN - min(0.0, float(paths[:, :, 1].min(initial=0.0)))
    x += shift_x
    y += shift_y
    paths[:, :, 0] += shift_x
    paths[:, :, 1] += shift_y
    width = max(float((x + w).max(initial=0.0)), float(paths[:, :, 0].max(initial=0.0))) + MARGIN
    height = max(float((y + h).max(initial=0.0)), float(paths[:, :, 1].max(initial=0.0))) + MARGIN
    as_tuples = [tuple(map(tuple, p)) for p in paths.tolist()]
    phase(1.0)
    return Layout(x, y, w, h, layer, as_tuples, width, height)


def _topological_rank(n: int, source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each item's place in a topological order, preferring item order; cycles broken at the
    earliest item left.

    Views list items in graph order, which is topological except around collapsed groups: a
    group stands where its first member is, yet may consume an item placed after that.
    """
    if np.all(source < target):
        return np.arange(n)
    succ_order = np.argsort(source, kind="stable")
    successors = target[succ_order].tolist()
    start = np.searchsorted(source[succ_order], np.arange(n + 1)).tolist()
    waiting = np.bincount(target, minlength=n).tolist()
    ready = [i for i in range(n) if waiting[i] == 0]
    heapq.heapify(ready)
    rank = [-1] * n
    placed, scan = 0, 0
    while placed < n:
        if not ready:  # a cycle: release its earliest item
            while rank[scan] >= 0:
                scan += 1
            ready.append(scan)
            waiting[scan] = 0
        item = heapq.heappop(ready)
        if rank[item] >= 0:
            continue
        rank[item] = placed
        placed += 1
        for nxt in successors[start[item] : start[item + 1]]:
            waiting[nxt] -= 1
            if waiting[nxt] == 0 and rank[nxt] < 0:
                heapq.heappush(ready, nxt)
    return np.asarray(rank, dtype=np.int64)


def _dag_edges(n: int, source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Distinct edges oriented from lower to higher index (against the order: reversed)."""
    lo = np.minimum(source, target)
    hi = np.maximum(source, target)
    keys = np.unique(lo * max(n, 1) + hi)
    return keys // max(n, 1), keys % max(n, 1)


def _layers(n: int, u: np.ndarray, v: np.ndarray, pinned: np.ndarray) -> np.ndarray:
    """Longest-path layers over edges with ``u < v`` (items in topological order), then sources
    and fan-out items pulled down toward their consumers."""
    layer = [0] * n
    by_target = np.argsort(v, kind="stable")
    for a, b in zip(u[by_target].tolist(), v[by_target].tolist()):
        if layer[a] >= layer[b]:
            layer[b] = layer[a] + 1
    out_deg = np.bincount(u, minlength=n).tolist()
    in_deg = np.bincount(v, minlength=n).tolist()
    by_source = np.argsort(u, kind="stable")
    succ = v[by_source].tolist()
    start = np.searchsorted(u[by_source], np.arange(n + 1)).tolist()
    is_pinned = pinned.tolist()
    for i in range(n - 1, -1, -1):
        outs = out_deg[i]
        if outs and not is_pinned[i] and (in_deg[i] == 0 or outs > in_deg[i]):
            lowest = min(layer[j] for j in succ[start[i] : start[i + 1]]) - 1
            if lowest > layer[i]:
                layer[i] = lowest
    _, compact = np.unique(np.asarray(layer, dtype=np.int64), return_inverse=True)
    return compact.astype(np.int64).reshape(n)


def _components(n: int, u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Component ranks in order of each component's first item, and items with no edges."""
    parent = list(range(n))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    for a, b in zip(u.tolist(), v.tolist()):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    roots = np.fromiter((find(i) for i in range(n)), np.int64, n)
    isolated = (np.bincount(u, minlength=n) + np.bincount(v, minlength=n)) == 0
    _, comp = np.unique(roots, return_inverse=True)
    return comp.astype(np.int64).reshape(n), isolated
