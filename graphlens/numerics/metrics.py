"""How far a candidate tensor is from a reference tensor, and what the output SQNR says: stated once here.

For a reference ``a`` (the float model's value, the weight as stored) and a candidate ``b`` (what the
rewritten model has instead), over every element:

- SQNR ``= 10 · log10(Σa² / Σ(a − b)²)`` dB, signal-to-quantization-noise ratio: higher is better,
  each bit of precision adds about 6 dB;
- MSE ``= Σ(a − b)² / n``; max abs ``= max |a − b|``;
- cosine ``= Σab / √(Σa² · Σb²)``, clipped to [−1, 1];
- max rel ``= max |a − b| / max(|a|, tiny)`` (``tiny`` the smallest normal float64): reported by
  :mod:`graphlens.numerics.diff`, never a verdict, since it explodes near zero.

One policy for the edge cases, for every caller:

- **Equal tensors** (and empty ones): SQNR +inf, MSE 0, max abs 0, max rel 0, cosine 1.
- **Zero reference**: with a non-zero candidate SQNR −inf and cosine 0; cosine is 1 when both are 0.
- **Non-finite values.** An element whose two values are the same infinity, or NaN on both sides,
  *matches*: no error, and it is left out of Σa², Σb² and Σab (it has no finite size). Any other
  element with a non-finite value (NaN or ±inf facing a number, +inf facing −inf) is an infinite
  error: MSE, max abs and max rel +inf, SQNR −inf. Cosine is taken over the elements finite on
  both sides: an infinity has no direction to compare. Float64 values beyond about 1e154, whose
  squares overflow, give infinite sums (SQNR may then be NaN); no network produces them.
- **Integer and bool tensors** are compared as float64 values (exact up to 2⁵³); so are
  ml_dtypes' bfloat16 and float8 types. Complex and text tensors are refused.
- **Shapes** must be equal; otherwise a :class:`GraphLensError` names both.
- **JSON** has no infinity: :func:`finite` writes ±inf and NaN as null.

Before this module each caller had its own rule: the quantizer's report left out every element
with a non-finite value on either side, so a NaN the quantized model made where the float model
had a number went unseen; the comparison of two models gave −inf for a NaN even where both had it;
the binarizer's SQNR raised on an infinite error. All three now follow the rule above, which is
the numeric diff's (NaNs in the same places are equal, elsewhere an infinite error).

**Precision and memory.** Tensors are read :data:`CHUNK` elements at a time, so nothing the size of
a tensor is copied, and every sum is kept in float64. Products are taken in float64 too, except in
an accumulator made with ``fast=True`` (the quantizer's per-tensor report over every activation):
there float32 inputs are multiplied and summed by BLAS in float32 within a chunk (about 1e-6
relative, a report's digits rather than a proof's, and 5-10x faster), and a chunk whose float32
sums are not finite is redone in float64 under the rule above.

**Verdicts** on a model's output SQNR: :data:`GOOD_DB` and up is GOOD (the outputs' RMS error is
within about 3% of their size), below :data:`FAIR_DB` POOR (above 10%), FAIR between; NaN is POOR.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import Enum
from typing import Any

import numpy as np

from graphlens.core.errors import GraphLensError

CHUNK = 1 << 18
"""Elements read at a time: 2 MB per float64 chunk."""

GOOD_DB = 30.0
"""Output SQNR from which the outputs' RMS error is within about 3% of their size."""
FAIR_DB = 20.0
"""Output SQNR below which the outputs' RMS error is above 10% of their size."""

_TINY = float(np.finfo(np.float64).tiny)
FLOAT_EXTENSIONS = frozenset({"bfloat16", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz"})
"""ml_dtypes' floats, which numpy files under kind "V" but casts to float64."""


class Verdict(Enum):
    """What an output SQNR says about a lossy rewrite, in one word."""

    GOOD = "GOOD"
    FAIR = "FAIR"
    POOR = "POOR"


def verdict(sqnr_db: float) -> Verdict:
    """GOOD from :data:`GOOD_DB`, FAIR from :data:`FAIR_DB`, else POOR (NaN too)."""
    if sqnr_db >= GOOD_DB:
        return Verdict.GOOD
    if sqnr_db >= FAIR_DB:
        return Verdict.FAIR
    return Verdict.POOR


def relative_rms(sqnr_db: float) -> float:
    """``‖a − b‖ / ‖a‖ = 10^(−SQNR/20)``: the error's RMS as a share of the signal's (0 for +inf)."""
    return math.pow(10.0, -sqnr_db / 20.0)


def finite(value: float) -> float | None:
    """JSON has no infinity: an exact tensor's SQNR (or an infinite error) is written as null."""
    return value if math.isfinite(value) else None


def measurable(x: np.ndarray) -> bool:
    """Whether the measures apply to ``x``'s dtype: bool, integers and real floats (ml_dtypes' too)."""
    return x.dtype.kind in "biuf" or x.dtype.name in FLOAT_EXTENSIONS


def chunk_pairs(reference: np.ndarray, candidate: np.ndarray, name: str = "tensor"
                ) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The two tensors flattened and cut into aligned chunks of :data:`CHUNK` elements (views where possible)."""
    a, b = np.asarray(reference), np.asarray(candidate)
    if a.shape != b.shape:
        raise GraphLensError(f"{name}: cannot compare a tensor of shape {list(a.shape)} "
                             f"with one of shape {list(b.shape)}")
    for t in (a, b):
        if not measurable(t):
            raise GraphLensError(f"{name}: cannot measure the error of a {t.dtype.name} tensor")
    a, b = a.reshape(-1), b.reshape(-1)
    if a.size <= CHUNK:
        yield a, b
        return
    for start in range(0, a.size, CHUNK):
        yield a[start:start + CHUNK], b[start:start + CHUNK]


_ROW = 8192
"""Elements per float64 dot product: OpenBLAS spreads a ddot of more than 10,000 over its threads, and on
a busy machine waiting for them costs milliseconds a call (20 ms for 256k elements against 0.1 ms in
rows). Its sdot stays on one thread, so float32 chunks are summed whole."""


def _dot(x: np.ndarray, y: np.ndarray) -> float:
    """Σxy of two 1-D float64 arrays, row by row on this thread, the rows' sums added in float64."""
    return sum(float(np.dot(x[i:i + _ROW], y[i:i + _ROW])) for i in range(0, x.size, _ROW))


def power(x: np.ndarray) -> float:
    """Σx² in float64, :data:`CHUNK` elements at a time: a float32 dot overflows past 3.4e38, and a float64 copy of
    the whole tensor would double its memory."""
    flat = np.asarray(x).reshape(-1)
    parts = (flat[i:i + CHUNK].astype(np.float64) for i in range(0, flat.size, CHUNK))
    return sum((_dot(part, part) for part in parts), 0.0)


def _is_narrow_float(x: np.ndarray) -> bool:
    return x.dtype.kind == "f" and x.dtype.itemsize <= 4


@dataclass
class ErrorStats:
    """Running sums over batches for the measures above; see the module docstring for the edge cases."""

    fast: bool = False
    """float32 products for float32 inputs (see "Precision" above)."""
    signal: float = 0.0
    """Σa² over the elements finite on both sides"""
    noise: float = 0.0
    """Σ(a − b)²; +inf once any element is an infinite error"""
    dot: float = 0.0
    """Σab over the elements finite on both sides"""
    candidate: float = 0.0
    """Σb² over the elements finite on both sides"""
    count: int = 0
    """elements compared"""
    max_abs: float = 0.0

    def add(self, reference: np.ndarray, candidate: np.ndarray, name: str = "tensor") -> None:
        """Add one batch of the reference and the candidate (equal shapes)."""
        for a, b in chunk_pairs(reference, candidate, name):
            if not (self.fast and _is_narrow_float(a) and _is_narrow_float(b) and self._add_float32(a, b)):
                self._add_float64(a.astype(np.float64), b.astype(np.float64))
            self.count += a.size

    def _add_float32(self, a: np.ndarray, b: np.ndarray) -> bool:
        """float32 products summed by BLAS; False (nothing added) when a sum is not finite."""
        a, b = a.astype(np.float32, copy=False), b.astype(np.float32, copy=False)
        with np.errstate(over="ignore", invalid="ignore"):
            d = a - b
            sums = (float(np.dot(a, a)), float(np.dot(d, d)), float(np.dot(a, b)), float(np.dot(b, b)))
        if not all(math.isfinite(v) for v in sums):  # else every element is finite too: no mask needed
            return False
        self._add_sums(*sums, max(float(d.max()), -float(d.min())) if d.size else 0.0)
        return True

    def _add_float64(self, x: np.ndarray, y: np.ndarray) -> None:
        finite_both = np.isfinite(x) & np.isfinite(y)
        infinite_error = False
        if not finite_both.all():
            with np.errstate(invalid="ignore"):
                matched = (x == y) | (np.isnan(x) & np.isnan(y))
            infinite_error = bool((~finite_both & ~matched).any())
            x, y = x[finite_both], y[finite_both]
        with np.errstate(over="ignore", invalid="ignore"):
            d = x - y
            sums = _dot(x, x), _dot(d, d), _dot(x, y), _dot(y, y)
            worst = float(np.abs(d).max()) if d.size else 0.0
        self._add_sums(*sums, worst)
        if infinite_error:
            self.noise, self.max_abs = math.inf, math.inf

    def _add_sums(self, signal: float, noise: float, dot: float, candidate: float, max_abs: float) -> None:
        self.signal += signal
        self.noise += noise
        self.dot += dot
        self.candidate += candidate
        self.max_abs = max(self.max_abs, max_abs)

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0 or self.noise == math.inf:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    @property
    def mse(self) -> float:
        return self.noise / self.count if self.count else 0.0

    @property
    def cosine(self) -> float:
        if self.signal == 0.0 or self.candidate == 0.0:
            return 1.0 if self.signal == self.candidate else 0.0
        product = self.signal * self.candidate
        # √(Σa²·Σb²) rather than ‖a‖·‖b‖, so identical tensors give exactly 1.0, unless the product overflows
        norms = math.sqrt(product) if math.isfinite(product) else math.sqrt(self.signal) * math.sqrt(self.candidate)
        return min(1.0, max(-1.0, self.dot / norms))

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values: infinities (an exact tensor's SQNR, an infinite error) as null."""
        return {"sqnr_db": finite(self.sqnr_db), "mse": finite(self.mse), "cosine": self.cosine,
                "max_abs": finite(self.max_abs)}


def worst_sqnr_db(outputs: Iterable[ErrorStats]) -> float:
    """A model's output SQNR: the lowest of its outputs' (``inf`` with none). Pooled, as one signal over one noise,
    an output of large values (a recurrent model's state, a decoder's key-value cache) would hide another's error:
    silero-vad's speech probability at 34 dB read as 113 dB beside its exact state."""
    return min((stats.sqnr_db for stats in outputs), default=math.inf)


def error_stats(reference: np.ndarray, candidate: np.ndarray, *, fast: bool = False,
                name: str = "tensor") -> ErrorStats:
    """The measures of one pair of tensors."""
    stats = ErrorStats(fast=fast)
    stats.add(reference, candidate, name)
    return stats


def sqnr_db(reference: np.ndarray, candidate: np.ndarray) -> float:
    """``10·log10(Σa² / Σ(a − b)²)`` in float64, ``a`` the reference."""
    return error_stats(reference, candidate).sqnr_db


def cosine(reference: np.ndarray, candidate: np.ndarray) -> float:
    """``Σab / √(Σa²·Σb²)`` in float64 over the elements finite on both sides."""
    return error_stats(reference, candidate).cosine


def max_rel(reference: np.ndarray, candidate: np.ndarray, name: str = "tensor") -> float:
    """``max |a − b| / max(|a|, tiny)`` in float64; 0 where the two match, +inf for an infinite error."""
    worst = 0.0
    for a, b in chunk_pairs(reference, candidate, name):
        x, y = a.astype(np.float64), b.astype(np.float64)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            diff = np.abs(x - y)
            diff[(x == y) | (np.isnan(x) & np.isnan(y))] = 0.0
            rel = diff / np.maximum(np.nan_to_num(np.abs(x), nan=0.0), _TINY)
        rel[diff == 0.0] = 0.0
        rel[np.isnan(rel)] = np.inf
        worst = max(worst, float(rel.max(initial=0.0)))
    return worst
