"""Edge shapes: one cubic Bézier per edge, from the source's bottom centre to the target's top.

Edges leave and enter vertically. Since long edges are not routed around boxes, one spanning
several layers would often run straight through the boxes between its ends (a residual or
dense-block skip drawn over the column it skips). Such an edge bulges to the side by just
enough to clear them: with both inner control points shifted by ``off`` the curve sits
``3 t (1 - t) off`` beside the straight line at parameter ``t``; the control points are kept
only :data:`TURN` pixels below the start and above the end, so the curve swings out within the
gap under its source instead of crossing the next box. Which boxes are in the way is found for
all edges at once with one ``searchsorted`` over the boxes sorted by (layer, x); a long edge is
checked at the layers near its ends, where the curve is still close to the straight course, and
at a fixed number of layers in between, so the cost stays linear in the number of edges.
"""

from __future__ import annotations

import numpy as np

ARROW_GAP = 6.0  # the edge ends this far above the target so an arrowhead fits
BULGE_MARGIN = 14.0
MAX_BULGE = 480.0
LOOP = 70.0  # how far upward and self edges swing out
TURN = 16.0  # vertical reach of a bulged edge's control points
NEAR_END = 12  # layers next to each end of a long edge that are all checked for boxes in the way
MIDDLE = 24  # layers sampled evenly in between: there the curve is far out anyway
MAX_CHECKS = 2_000_000  # (edge, layer) pairs examined at most; the longest edges beyond are skipped


def edge_paths(
    x: np.ndarray,
    y: np.ndarray,
    w: np.ndarray,
    h: np.ndarray,
    layer: np.ndarray,
    tops: np.ndarray,
    heights: np.ndarray,
    source: np.ndarray,
    target: np.ndarray,
) -> np.ndarray:
    """Control points, shape (edges, 4, 2): start, c1, c2, end. Invalid indexes give zeros."""
    count = len(source)
    paths = np.zeros((count, 4, 2))
    n = len(x)
    valid = (source >= 0) & (source < n) & (target >= 0) & (target < n)
    s = np.where(valid, source, 0)
    t = np.where(valid, target, 0)
    if count == 0 or n == 0:
        return paths
    sx, sy = x[s] + w[s] / 2, y[s] + h[s]
    tx, ty = x[t] + w[t] / 2, y[t] - ARROW_GAP
    dy = ty - sy
    forward = (layer[t] > layer[s]) & (dy > 0)
    c1x, c2x = sx.copy(), tx.copy()
    c1y = np.where(forward, sy + dy / 2, sy + LOOP)
    c2y = np.where(forward, ty - dy / 2, ty - LOOP)

    back = ~forward
    side = np.maximum(x[s] + w[s], x[t] + w[t]) + LOOP
    c1x[back] = side[back]
    c2x[back] = side[back]

    f = forward
    offset = _bulges(x, w, layer, tops, heights, s[f], t[f], sx[f], tx[f], sy[f], dy[f])
    bulged = np.flatnonzero(forward)[offset != 0]
    c1x[bulged] += offset[offset != 0]
    c2x[bulged] += offset[offset != 0]
    turn = np.minimum(TURN, dy[bulged] / 3)
    c1y[bulged] = sy[bulged] + turn
    c2y[bulged] = ty[bulged] - turn

    paths[:, 0, 0], paths[:, 0, 1] = sx, sy
    paths[:, 1, 0], paths[:, 1, 1] = c1x, c1y
    paths[:, 2, 0], paths[:, 2, 1] = c2x, c2y
    paths[:, 3, 0], paths[:, 3, 1] = tx, ty
    paths[~valid] = 0.0
    return paths


def _bulges(
    x: np.ndarray,
    w: np.ndarray,
    layer: np.ndarray,
    tops: np.ndarray,
    heights: np.ndarray,
    s: np.ndarray,
    t: np.ndarray,
    sx: np.ndarray,
    tx: np.ndarray,
    sy: np.ndarray,
    dy: np.ndarray,
) -> np.ndarray:
    """Sideways control-point shift per forward edge (0: the straight course is clear)."""
    offset = np.zeros(len(s))
    between = layer[t] - layer[s] - 1
    candidates = np.flatnonzero(between > 0)
    if len(candidates) == 0:
        return offset
    checks = between[candidates]
    if checks.sum() > MAX_CHECKS:
        keep = checks <= max(1, MAX_CHECKS // len(candidates))
        candidates, checks = candidates[keep], checks[keep]
        if len(candidates) == 0:
            return offset
    pair_edge, step = _sampled_layers(checks)
    edge = candidates[pair_edge]
    pair_layer = layer[s][edge] + step

    f_top = np.clip((tops[pair_layer] - sy[edge]) / dy[edge], 0.0, 1.0)
    f_bottom = np.clip((tops[pair_layer] + heights[pair_layer] - sy[edge]) / dy[edge], 0.0, 1.0)
    line_x = sx[edge] + (tx[edge] - sx[edge]) * (f_top + f_bottom) / 2
    nearest_end = np.minimum(f_top, 1.0 - f_bottom)  # the curve is symmetric in t -> 1 - t
    at = _parameter_at(nearest_end, np.minimum(TURN, dy[edge] / 3) / dy[edge])
    reach = np.maximum(3 * at * (1 - at), 0.1)

    x0 = float(x.min())
    span = float((x + w).max()) - x0 + 2 * BULGE_MARGIN + 1.0
    boxes = np.lexsort((x, layer))
    keys = layer[boxes] * span + (x[boxes] - x0)
    found = np.searchsorted(keys, pair_layer * span + (line_x - x0) + BULGE_MARGIN, side="right") - 1
    box = boxes[np.maximum(found, 0)]
    hit = (found >= 0) & (layer[box] == pair_layer) & (x[box] + w[box] + BULGE_MARGIN > line_x)
    if not hit.any():
        return offset

    need_right = np.zeros(len(candidates))
    need_left = np.zeros(len(candidates))
    np.maximum.at(need_right, pair_edge[hit], ((x[box] + w[box] + BULGE_MARGIN - line_x) / reach)[hit])
    np.maximum.at(need_left, pair_edge[hit], ((line_x - x[box] + BULGE_MARGIN) / reach)[hit])
    blocked = np.bincount(pair_edge[hit], minlength=len(candidates)) > 0
    shift = np.where(need_right <= need_left, need_right, -need_left)
    offset[candidates] = np.where(blocked, np.clip(shift, -MAX_BULGE, MAX_BULGE), 0.0)
    return offset


def _sampled_layers(between: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(edge, layer step) pairs to check: every intermediate layer of short edges; the
    :data:`NEAR_END` layers at both ends and :data:`MIDDLE` evenly spaced ones of long edges."""
    limit = 2 * NEAR_END + MIDDLE
    short = np.flatnonzero(between <= limit)
    counts = between[short]
    edge_short = np.repeat(short, counts)
    first = np.concatenate(([0], np.cumsum(counts)))[:-1]
    step_short = 1 + np.arange(len(edge_short)) - np.repeat(first, counts)
    long = np.flatnonzero(between > limit)
    if len(long) == 0:
        return edge_short, step_short
    length = between[long][:, None]
    ends = np.arange(1, NEAR_END + 1)[None, :]
    middle = NEAR_END + 1 + np.rint((length - 2 * NEAR_END - 1) * np.linspace(0, 1, MIDDLE)[None, :])
    steps = np.hstack([np.broadcast_to(ends, (len(long), NEAR_END)), middle, length + 1 - ends])
    edges = np.concatenate([edge_short, np.repeat(long, limit)])
    return edges, np.concatenate([step_short, steps.reshape(-1).astype(np.int64)])


def _parameter_at(fraction: np.ndarray, kappa: np.ndarray) -> np.ndarray:
    """The t at which a curve with control points ``kappa`` of the height in from each end
    has covered ``fraction`` of its height (bisection; y(t) increases monotonically)."""
    lo = np.zeros_like(fraction)
    hi = np.full_like(fraction, 0.5)
    for _ in range(10):
        mid = (lo + hi) / 2
        rest = 1 - mid
        y = 3 * mid * rest * rest * kappa + 3 * mid * mid * rest * (1 - kappa) + mid**3
        below = y < fraction
        lo = np.where(below, mid, lo)
        hi = np.where(below, hi, mid)
    found: np.ndarray = (lo + hi) / 2
    return found
