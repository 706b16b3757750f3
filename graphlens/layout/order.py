"""Order within layers: barycenter sweeps, each layer sorted by its neighbours' mean position.

Positions are ranks centred on 0 within a layer's run of one connected component, so layers of
different widths compare directly and components never mix. Long edges count with their far
end's position, without dummy nodes. Layers holding a single item have nothing to order and are
skipped, which is most layers of a deep, narrow network.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

SWEEPS = ("down", "up", "down")

_Neighbours = tuple[np.ndarray, np.ndarray, np.ndarray]


def centered_ranks(runs: np.ndarray) -> np.ndarray:
    """Rank within each run of equal consecutive ids, centred on 0."""
    k = len(runs)
    if k == 0:
        return np.zeros(0)
    starts = np.flatnonzero(np.concatenate(([True], runs[1:] != runs[:-1])))
    lengths = np.diff(np.append(starts, k))
    slot = np.arange(k) - np.repeat(starts, lengths)
    return slot - np.repeat((lengths - 1) / 2.0, lengths)


class _Sweeper:
    """Per-layer neighbour lists, built once for all sweeps."""

    def __init__(
        self, layer: np.ndarray, comp: np.ndarray, isolated: np.ndarray, u: np.ndarray, v: np.ndarray
    ) -> None:
        n = len(layer)
        placed = np.flatnonzero(~isolated)
        placed = placed[np.lexsort((placed, comp[placed], layer[placed]))]
        self.pos = np.zeros(n)
        local = np.zeros(n, dtype=np.int64)
        self.layers: list[tuple[int, np.ndarray, np.ndarray, np.ndarray]] = []
        if len(placed):
            lay, comps = layer[placed], comp[placed]
            run_id = np.cumsum(np.concatenate(([True], (lay[1:] != lay[:-1]) | (comps[1:] != comps[:-1]))))
            centered = centered_ranks(run_id)
            self.pos[placed] = centered
            starts = np.flatnonzero(np.concatenate(([True], lay[1:] != lay[:-1])))
            ends = np.append(starts[1:], len(placed))
            local[placed] = np.arange(len(placed)) - np.repeat(starts, ends - starts)
            for a, b in zip(starts[ends - starts > 1].tolist(), ends[ends - starts > 1].tolist()):
                self.layers.append((int(lay[a]), placed[a:b], comps[a:b], centered[a:b]))
        self.down = self._neighbours(layer, local, far=u, near=v)
        self.up = self._neighbours(layer, local, far=v, near=u)

    def _neighbours(
        self, layer: np.ndarray, local: np.ndarray, far: np.ndarray, near: np.ndarray
    ) -> dict[int, _Neighbours]:
        """For each multi-item layer: far-end items, local index of the near end, count per item."""
        found: dict[int, _Neighbours] = {}
        by_layer = np.argsort(layer[near], kind="stable")
        near_layers = layer[near][by_layer]
        for number, items, _, _ in self.layers:
            lo, hi = np.searchsorted(near_layers, [number, number + 1])
            edges = by_layer[lo:hi]
            at = local[near[edges]]
            found[number] = (far[edges], at, np.bincount(at, minlength=len(items)))
        return found

    def sweep(self, direction: str) -> None:
        pos = self.pos
        neighbours = self.down if direction == "down" else self.up
        layers = self.layers if direction == "down" else self.layers[::-1]
        for number, items, comps, centered in layers:
            far, at, count = neighbours[number]
            current = pos[items]
            sums = np.bincount(at, weights=pos[far], minlength=len(items))
            bary = np.where(count > 0, sums / np.maximum(count, 1), current)
            pos[items[np.lexsort((current, bary, comps))]] = centered


def order_positions(
    layer: np.ndarray,
    comp: np.ndarray,
    isolated: np.ndarray,
    u: np.ndarray,
    v: np.ndarray,
    done: Callable[[float], None] | None = None,
) -> np.ndarray:
    """Each item's centred rank in its layer after the sweeps; ``done(fraction)`` after each sweep."""
    sweeper = _Sweeper(layer, comp, isolated, u, v)
    for i, direction in enumerate(SWEEPS):
        sweeper.sweep(direction)
        if done is not None:
            done((i + 1) / len(SWEEPS))
    return sweeper.pos
