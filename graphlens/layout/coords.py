"""x coordinates: pack layers, then pull boxes toward their neighbours keeping order and gaps.

With ``S`` the packed offsets of a layer's boxes (each at least half of both widths plus
:data:`NODE_GAP` from the previous one), a placement ``c`` keeps order and gaps exactly when
``c - S`` is non-decreasing. So the wished-for centres ``d`` become feasible by clamping ``d - S``
with a cumulative max (pushing right) or a cumulative min from the right (pushing left); the mean
of the two is feasible too, symmetric, and equals ``d`` wherever nothing collides. Runs of one
connected component within a layer are clamped separately by adding a large offset per run.
"""

from __future__ import annotations

import math

import numpy as np

NODE_GAP = 24.0
COMPONENT_GAP = 72.0
PASSES = ("down", "up", "down")


def x_coordinates(
    layer: np.ndarray,
    comp: np.ndarray,
    isolated: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    w: np.ndarray,
    positions: np.ndarray,
) -> tuple[np.ndarray, float]:
    """Left x of every item with edges (0 for the others), and where the laid-out part ends."""
    n = len(layer)
    x = np.zeros(n)
    placed = np.flatnonzero(~isolated)
    m = len(placed)
    if m == 0:
        return x, 0.0
    order = placed[np.lexsort((positions[placed], comp[placed], layer[placed]))]
    slot = np.full(n, -1, dtype=np.int64)
    slot[order] = np.arange(m)
    lay, widths = layer[order], w[order]
    _, comps = np.unique(comp[order], return_inverse=True)
    comps = comps.reshape(m)

    new_layer = np.ones(m, dtype=bool)
    new_layer[1:] = lay[1:] != lay[:-1]
    new_run = new_layer.copy()
    new_run[1:] |= comps[1:] != comps[:-1]
    run = np.cumsum(new_run) - 1
    gaps = np.zeros(m)
    gaps[1:] = (widths[:-1] + widths[1:]) / 2 + NODE_GAP
    gaps[new_run] = 0.0
    packed = np.cumsum(gaps)
    run_start = np.flatnonzero(new_run)
    offsets = packed - packed[run_start][run]  # S, restarting at each run
    run_end = np.append(run_start[1:], m) - 1
    centres = offsets - offsets[run_end][run] / 2

    layer_start = np.flatnonzero(new_layer)
    first_run = run[layer_start][np.cumsum(new_layer) - 1]
    big = 4.0 * (float(widths.sum()) + NODE_GAP * m) + 1e4
    base = offsets - (run - first_run) * big
    ranges = list(zip(layer_start.tolist(), np.append(layer_start[1:], m).tolist()))

    for direction in PASSES:
        near, far = (v, u) if direction == "down" else (u, v)
        _pull(centres, base, slot[near], slot[far], ranges if direction == "down" else ranges[::-1])

    left = centres - widths / 2
    right = centres + widths / 2
    count = int(comps.max()) + 1
    lo = np.full(count, np.inf)
    hi = np.full(count, -np.inf)
    np.minimum.at(lo, comps, left)
    np.maximum.at(hi, comps, right)
    starts = np.concatenate(([0.0], np.cumsum(hi - lo + COMPONENT_GAP)))
    x[order] = left - lo[comps] + starts[comps]
    return x, float(starts[-1])


def _pull(
    centres: np.ndarray, base: np.ndarray, near: np.ndarray, far: np.ndarray, ranges: list[tuple[int, int]]
) -> None:
    """One pass: each layer in turn moves toward the mean x of its neighbours on the far side."""
    by_near = np.argsort(near, kind="stable")
    near_sorted = near[by_near]
    far_sorted = far[by_near]
    m = len(centres)
    bounds = np.searchsorted(near_sorted, np.arange(m + 1))
    count = np.diff(bounds)
    edge_at = bounds.tolist()
    far_list = far_sorted.tolist()
    value = centres.item
    for a, b in ranges:
        e0, e1 = edge_at[a], edge_at[b]
        if e0 == e1:
            continue
        if b - a == 1:  # most layers of a deep network: plain Python beats numpy's call overhead
            centres[a] = sum(map(value, far_list[e0:e1])) / (e1 - e0)
            continue
        sums = np.bincount(near_sorted[e0:e1] - a, weights=centres[far_sorted[e0:e1]], minlength=b - a)
        k = count[a:b]
        wished = np.where(k > 0, sums / np.maximum(k, 1), centres[a:b]) - base[a:b]
        pushed_right = np.maximum.accumulate(wished)
        pushed_left = np.minimum.accumulate(wished[::-1])[::-1]
        centres[a:b] = (pushed_right + pushed_left) / 2 + base[a:b]


def grid(x: np.ndarray, layer: np.ndarray, isolated: np.ndarray, w: np.ndarray, start: float) -> np.ndarray:
    """Put items without edges in a square-ish grid from ``start``; returns layers with their rows."""
    items = np.flatnonzero(isolated)
    if len(items) == 0:
        return layer
    columns = max(1, math.ceil(math.sqrt(len(items))))
    cell = float(w[items].max()) + NODE_GAP
    rows, cols = np.divmod(np.arange(len(items)), columns)
    x[items] = start + cols * cell
    layer = layer.copy()
    layer[items] = rows
    return layer
