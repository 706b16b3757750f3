"""Activation ranges from histograms: percentile, MSE, entropy (KL) and the per-tensor ``auto`` choice.

:mod:`~graphlens.quantize.calibrate` runs the model and fills the histograms; the math is here.
A histogram has counts ``h_0 … h_{B−1}`` over equal bins of width ``w``.

- ``percentile``: ``[P_(100−p), P_p]``, read off the cumulative counts (interpolated in a bin).
- ``mse``: among ``α · [min(lo, 0), max(hi, 0)]`` (α from 1 down to 0.05), the range with the least
  expected error ``Σ_j h_j · e(x_j)``: ``e = s²/12`` inside the range (rounding to a step ``s``) and
  ``(x − clip(x))²`` outside it (clipping).
- ``entropy`` (TensorRT's and onnxruntime's KL calibration): for each candidate window of bins
  ``[a, b)`` (``n = b − a ≥ L`` bins; ``L`` the integer levels the window maps to),

  * the reference ``P``: ``P_j = h_j`` inside, with every count left of the window added to ``P_a``
    and every count right of it to ``P_{b−1}`` (what clipping does to them); ``p = P / ΣP``;
  * the candidate ``Q``: the window's own counts (outliers not included) merged into ``L`` levels,
    bin ``j`` in level ``⌊(j − a) · L / n⌋``, each level's count ``Q_l`` spread evenly over the
    bins of the level where ``P_j > 0`` (zero elsewhere); ``q = Q / ΣQ``;
  * ``KL(P‖Q) = Σ_{P_j>0} p_j · log(p_j / max(q_j, ε))``, ``ε = 10⁻¹²``;

  and the window with the least divergence is the range (its bin edges). Symmetric activations use
  the histogram of ``|x|`` over ``[0, max |x|]`` with windows ``[0, n)`` and ``L`` the levels of
  one sign (128 for 8 bits), the range then ``±`` the window's end; asymmetric ones use the histogram of
  ``x`` over ``[min(lo, 0), max(hi, 0)]`` with ``L`` all the levels (256) and windows that hold
  zero: for values of both signs, those keeping zero's relative place, those keeping the low end,
  those keeping the high end (so outliers on one side only are clipped) and those centred on zero.
  ``B = 16 · L`` bins, so that the range can shrink to a sixteenth of the observed one. The histogram
  leaves out the values exactly 0 (a ReLU's floor, or what a Clip or HardSwish floors at 0): every window
  holds zero, which quantizes exactly, so they tell the windows apart no more than they do for ``auto``,
  and their spike in the bin holding 0 made KL's comparison one of that bin against its neighbours,
  which the narrowest window keeps best (as NVIDIA's pytorch-quantization flattens its first bin).
- ``auto``: the range among minmax's, percentile's, mse's and entropy's with the least expected
  quantize-dequantize error ``Σ_j h'_j · mean_k (x_jk − x̂(x_jk))²`` over the min–max histogram,
  ``x_jk`` four points evenly inside bin ``j``, ``x̂`` the quantize-dequantize of the range's scale
  and zero point; ``h'`` leaves out the exact zeros (a ReLU's floor), which every range keeps
  exact. Ties go to the method listed first (minmax).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.quantize.qdq import QType, fake_quantize, scale_zero_point

EPSILON = 1e-12
"""Floor of a candidate probability, so that a level the window left empty costs much but not infinitely."""
AUTO_METHODS = ("minmax", "entropy", "percentile", "mse")
"""What ``auto`` chooses from, in the order ties are broken."""
SUBPOINTS = 4
"""Points per histogram bin at which ``auto`` quantizes."""
_CHUNK = 256
"""Windows whose divergences are computed at once (bounds the temporary arrays)."""


@dataclass
class Range:
    """The calibrated range of one activation, and the method that gave it."""

    low: float
    high: float
    method: str = ""


def percentile_range(counts: np.ndarray, edges: np.ndarray, p: float) -> Range:
    """``[P_(100−p), P_p]`` of the histogram (bin edges, interpolated inside a bin)."""
    cdf = np.concatenate([[0.0], np.cumsum(counts)])
    total = cdf[-1]
    if total == 0:
        return Range(float(edges[0]), float(edges[-1]), "percentile")
    low = float(np.interp((100.0 - p) / 100.0 * total, cdf, edges))
    high = float(np.interp(p / 100.0 * total, cdf, edges))
    return Range(low, high, "percentile")


def mse_range(counts: np.ndarray, edges: np.ndarray, qtype: QType, symmetric: bool) -> Range:
    """The shrunk range with the least expected rounding-plus-clipping error (module docstring)."""
    centers = (edges[:-1] + edges[1:]) / 2
    lo0, hi0 = min(float(edges[0]), 0.0), max(float(edges[-1]), 0.0)
    best, best_error = Range(float(edges[0]), float(edges[-1]), "mse"), np.inf
    for alpha in np.linspace(1.0, 0.05, 96):
        params = scale_zero_point(lo0 * alpha, hi0 * alpha, qtype, symmetric)
        s, z = float(params.scale), float(params.zero_point)
        low, high = (qtype.qmin - z) * s, (qtype.qmax - z) * s  # what the integers can represent
        clipped = np.clip(centers, low, high)
        error = np.where(centers == clipped, s * s / 12.0, (centers - clipped) ** 2)
        total = float(np.dot(counts, error))
        if total < best_error:
            best, best_error = Range(lo0 * alpha, hi0 * alpha, "mse"), total
    return best


# ------------------------------------------------------------------------------ entropy
@dataclass(frozen=True)
class EntropyHistogram:
    """Where the entropy method's histogram lies for one tensor, and how its windows run."""

    low: float
    high: float
    bins: int
    levels: int
    absolute: bool
    """Histogram of ``|x|`` (symmetric activations) rather than ``x``."""

    def counts(self, x: np.ndarray) -> np.ndarray:
        values = np.abs(x) if self.absolute else x
        return np.histogram(values, bins=self.bins, range=(self.low, self.high))[0].astype(np.float64)

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(self.low, self.high, self.bins + 1)


def entropy_histogram(low: float, high: float, qtype: QType, symmetric: bool) -> EntropyHistogram:
    """The histogram the entropy method needs for a tensor observed in ``[low, high]`` (module docstring)."""
    levels = qtype.qmax - qtype.qmin + 1
    if symmetric:
        levels //= 2
        top = max(abs(low), abs(high))
        return EntropyHistogram(0.0, max(top, 1e-12), 16 * levels, levels, True)
    lo0, hi0 = min(low, 0.0), max(high, 0.0)
    return EntropyHistogram(lo0, max(hi0, lo0 + 1e-12), 16 * levels, levels, False)


def entropy_windows(bins: int, levels: int, zero: float) -> tuple[np.ndarray, np.ndarray]:
    """Every candidate window ``[a, b)`` of ``n = levels … bins`` bins that holds zero, at fractional
    bin position ``zero``: from the left end when zero is there (``|x|``, or ``x ≥ 0``), from the
    right when ``x ≤ 0``; for two-signed values the union of four families (module docstring)."""
    n = np.arange(levels, bins + 1, dtype=np.int64)
    if zero <= 0:
        return np.zeros_like(n), n
    if zero >= bins:
        return bins - n, np.full_like(n, bins)
    families = [
        np.rint(zero * (bins - n) / bins).astype(np.int64),  # zero keeps its relative place
        np.zeros_like(n),  # the low end kept
        bins - n,  # the high end kept
        np.clip(np.rint(zero - n / 2), 0, bins - n).astype(np.int64),  # centred on zero
    ]
    pairs = np.unique(np.stack([np.concatenate(families), np.tile(n, len(families))], axis=1), axis=0)
    starts, stops = pairs[:, 0], pairs[:, 0] + pairs[:, 1]
    holds = (starts <= zero) & (zero <= stops)
    return starts[holds], stops[holds]


def _xlogx(v: np.ndarray) -> np.ndarray:
    return np.where(v > 0, v * np.log(np.where(v > 0, v, 1.0)), 0.0)


def kl_divergences(counts: np.ndarray, starts: np.ndarray, stops: np.ndarray, levels: int) -> np.ndarray:
    """``KL(P‖Q)`` of each window ``[starts[i], stops[i])`` (module docstring), from cumulative sums:
    ``Σ p log(p/q) = (Σ_j P_j log P_j − Σ_l P_l log q_l) / T − log T`` with ``T = ΣP`` and ``P_l``
    the reference counts of level ``l``, inside which ``q`` is one value wherever ``P_j > 0``."""
    h = np.asarray(counts, np.float64)
    total = h.sum()
    out = np.full(len(starts), np.inf)
    if total <= 0:
        return out
    cum = np.concatenate([[0.0], np.cumsum(h)])
    nonzero = np.concatenate([[0], np.cumsum(h > 0)])
    hlogh = np.concatenate([[0.0], np.cumsum(_xlogx(h))])
    level = np.arange(levels + 1, dtype=np.int64)
    for c in range(0, len(starts), _CHUNK):
        a, b = starts[c:c + _CHUNK], stops[c:c + _CHUNK]
        n = b - a
        bounds = a[:, None] + (level[None, :] * n[:, None] + levels - 1) // levels  # ceil(l·n/L)
        q = cum[bounds[:, 1:]] - cum[bounds[:, :-1]]
        nz = (nonzero[bounds[:, 1:]] - nonzero[bounds[:, :-1]]).astype(np.float64)
        left, right = cum[a], total - cum[b]
        first, last = h[a] + left, h[b - 1] + right
        p = q.copy()
        p[:, 0] += left
        p[:, -1] += right
        nz[:, 0] += (h[a] == 0) & (left > 0)
        nz[:, -1] += (h[b - 1] == 0) & (right > 0)
        plogp = hlogh[b] - hlogh[a] - _xlogx(h[a]) - _xlogx(h[b - 1]) + _xlogx(first) + _xlogx(last)
        inside = cum[b] - cum[a]
        with np.errstate(divide="ignore", invalid="ignore"):
            q_level = q / (np.where(nz > 0, nz, 1.0) * np.where(inside > 0, inside, 1.0)[:, None])
        cross = np.sum(np.where(p > 0, p * np.log(np.maximum(q_level, EPSILON)), 0.0), axis=1)
        kl = (plogp - cross) / total - np.log(total)
        out[c:c + _CHUNK] = np.where(inside > 0, kl, np.inf)
    return out


def entropy_range(counts: np.ndarray, spec: EntropyHistogram, low: float, high: float) -> Range:
    """The window of least KL divergence as a range, within the observed ``[low, high]``."""
    edges = spec.edges
    zero = 0.0 if spec.absolute else -spec.low / (spec.high - spec.low) * spec.bins
    starts, stops = entropy_windows(spec.bins, spec.levels, zero)
    best = int(np.argmin(kl_divergences(counts, starts, stops, spec.levels)))
    a, b = int(starts[best]), int(stops[best])
    if spec.absolute:
        t = float(edges[b])
        return Range(max(low, -t), min(high, t), "entropy")
    return Range(max(low, float(edges[a])), min(high, float(edges[b])), "entropy")


# ------------------------------------------------------------------------------ auto
def expected_error(counts: np.ndarray, edges: np.ndarray, r: Range, qtype: QType, symmetric: bool) -> float:
    """``Σ_j h_j · mean_k (x_jk − x̂(x_jk))²`` for the range ``r`` (module docstring)."""
    params = scale_zero_point(r.low, r.high, qtype, symmetric)
    width = np.diff(edges)
    offsets = (np.arange(SUBPOINTS) + 0.5) / SUBPOINTS
    points = (edges[:-1, None] + width[:, None] * offsets[None, :]).astype(np.float32)
    err = (points.astype(np.float64) - fake_quantize(points, params).astype(np.float64)) ** 2
    return float(np.dot(counts, err.mean(axis=1)))


def auto_range(candidates: dict[str, Range], counts: np.ndarray, edges: np.ndarray, zeros: float,
               qtype: QType, symmetric: bool) -> tuple[Range, dict[str, float]]:
    """The candidate with the least expected error, and every candidate's error.

    ``counts``/``edges``: the min–max histogram; ``zeros``: how many of its values are exactly 0
    (taken out of the bin holding 0: they quantize exactly whatever the range).
    """
    counts = np.asarray(counts, np.float64).copy()
    if zeros > 0 and edges[0] <= 0.0 <= edges[-1]:
        j = min(int(np.searchsorted(edges, 0.0, side="right")) - 1, len(counts) - 1)
        counts[max(j, 0)] = max(counts[max(j, 0)] - zeros, 0.0)
    errors = {m: expected_error(counts, edges, candidates[m], qtype, symmetric)
              for m in AUTO_METHODS if m in candidates}
    least = min(errors.values())
    chosen = next(m for m in errors if errors[m] <= least * (1 + 1e-9))
    r = candidates[chosen]
    return Range(r.low, r.high, chosen), errors
