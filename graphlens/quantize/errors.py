"""How far a quantized tensor is from its float value, in four numbers, stated once here.

For a float tensor ``x`` and what the quantized model has instead, ``x̂`` (over every element of
every sample):

- SQNR ``= 20 · log10(‖x‖ / ‖x − x̂‖)`` dB (signal-to-quantization-noise ratio; higher is
  better, each bit of precision adds about 6 dB; +inf when ``x̂ = x``);
- MSE ``= mean((x − x̂)²)``; cosine ``= ⟨x, x̂⟩ / (‖x‖ ‖x̂‖)``; max abs ``= max |x − x̂|``.

*Local* error: the tensor quantized alone, ``x̂ = DQ(Q(x))`` on the float model's own ``x``
(for a weight, its stored integers dequantized). *Accumulated* error: the quantized model's value
at that tensor (the DequantizeLinear output its readers see) against the float model's, so every
earlier layer's error is in it, as in onnxruntime's ``qdq_loss_debug`` cross-model comparison.
The statistics accumulate over batches, so no tensor is kept.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class ErrorStats:
    """Running sums for the four numbers above."""

    signal: float = 0.0
    """Σ x²"""
    noise: float = 0.0
    """Σ (x − x̂)²"""
    dot: float = 0.0
    quantized: float = 0.0
    """Σ x̂²"""
    count: int = 0
    max_abs: float = 0.0

    def add(self, x: np.ndarray, x_hat: np.ndarray) -> None:
        """Add one batch: float32 products summed by BLAS, a report's digits rather than a proof's. A batch
        whose float32 sums are not finite (activations around 1e19 and up, or a NaN) is summed again
        in float64 over its finite elements."""
        a = np.ascontiguousarray(x, np.float32).reshape(-1)
        b = np.ascontiguousarray(x_hat, np.float32).reshape(-1)
        if a.size != b.size:
            raise ValueError(f"tensors of {a.size} and {b.size} elements cannot be compared")
        with np.errstate(over="ignore", invalid="ignore"):
            d = a - b
            sums = (float(np.dot(a, a)), float(np.dot(d, d)), float(np.dot(a, b)), float(np.dot(b, b)))
            if all(math.isfinite(v) for v in sums):  # then every element is finite too: one pass each, no mask
                max_abs = max(float(d.max()), -float(d.min())) if d.size else 0.0
                signal, noise, dot, quantized, count = *sums, a.size
            else:
                signal, noise, dot, quantized, count, max_abs = self._sums(a.astype(np.float64), b.astype(np.float64))
        self.signal += signal
        self.noise += noise
        self.dot += dot
        self.quantized += quantized
        self.count += count
        self.max_abs = max(self.max_abs, max_abs)

    @staticmethod
    def _sums(a: np.ndarray, b: np.ndarray) -> tuple[float, float, float, float, int, float]:
        d = a - b
        if not np.isfinite(d).all():
            finite = np.isfinite(a) & np.isfinite(b)
            a, b, d = a[finite], b[finite], d[finite]
        max_abs = float(np.abs(d).max()) if d.size else 0.0
        return float(np.dot(a, a)), float(np.dot(d, d)), float(np.dot(a, b)), float(np.dot(b, b)), a.size, max_abs

    @property
    def sqnr_db(self) -> float:
        if self.noise == 0.0:
            return math.inf
        if self.signal == 0.0:
            return -math.inf
        return 10.0 * math.log10(self.signal / self.noise)

    @property
    def mse(self) -> float:
        return self.noise / self.count if self.count else 0.0

    @property
    def cosine(self) -> float:
        if self.signal == 0.0 or self.quantized == 0.0:
            return 1.0 if self.signal == self.quantized else 0.0
        return self.dot / math.sqrt(self.signal * self.quantized)

    def to_dict(self) -> dict[str, Any]:
        return {"sqnr_db": finite(self.sqnr_db), "mse": self.mse, "cosine": self.cosine, "max_abs": self.max_abs}


def finite(value: float) -> float | None:
    """JSON has no infinity: an exact tensor's SQNR is written as null."""
    return value if math.isfinite(value) else None


def stats_of(x: np.ndarray, x_hat: np.ndarray) -> ErrorStats:
    stats = ErrorStats()
    stats.add(x, x_hat)
    return stats


def sqnr_db(x: np.ndarray, x_hat: np.ndarray) -> float:
    """20·log10(‖x‖/‖x − x̂‖) of two arrays."""
    return stats_of(x, x_hat).sqnr_db
