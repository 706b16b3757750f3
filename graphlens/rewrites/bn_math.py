"""Batch-norm folding arithmetic, computed here once; the rewrite, its preview and the lesson all use it.

In inference mode a BatchNormalization computes, for each channel c,

    y = γ·(x − μ)/σ + β,   σ = √(σ² + ε)

which is an affine map y = s·x + t with scale s = γ/σ and shift t = β − μ·s.

When x comes from a linear layer, x = W∗u + b, the two collapse into one layer:

    y = (s·W)∗u + (s·b + t)   so   W' = W·s (along W's output-channel axis),   b' = s·b + t = (b − μ)·s + β.

A constant Add between the layer and the BN (x = W∗u + b + c) only changes b to b + c. The same
holds for any per-channel affine map y = m·x + a after the layer (fold-affine): s = m, t = a.

W·s scales each weight entry by the factor of the output channel it belongs to; which entries those
are (axis 0 of a Conv's W, the columns of a Gemm's B, the grouped axis 1 of a ConvTranspose's W…)
is each op's own fact, stated in :mod:`graphlens.core.linear`. A Gemm's bias is β·C, broadcast over
its [M, N] output, so the new C is s·(β·C) + t with β = 1; a MatMul by a 2-D weight [K, N] becomes
a Gemm with C = t (plus any bias Add).

All arithmetic is float64; results are cast back to the weight's dtype by the caller.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class AffineParams:
    """Per-channel y = scale·x + shift, from a BN (with its statistics) or a plain Mul/Add."""

    scale: np.ndarray
    shift: np.ndarray
    gamma: np.ndarray | None = None
    beta: np.ndarray | None = None
    mean: np.ndarray | None = None
    var: np.ndarray | None = None
    epsilon: float | None = None

    @property
    def channels(self) -> int:
        return int(self.scale.shape[0])

    @property
    def std(self) -> np.ndarray | None:
        return None if self.var is None or self.epsilon is None else np.sqrt(self.var + self.epsilon)


def bn_affine(gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray, epsilon: float) -> AffineParams:
    """s = γ/√(σ²+ε), t = β − μ·s, in float64."""
    g, b, m, v = (np.asarray(a, dtype=np.float64).reshape(-1) for a in (gamma, beta, mean, var))
    scale = g / np.sqrt(v + float(epsilon))
    return AffineParams(scale, b - m * scale, g, b, m, v, float(epsilon))


BN_INPUTS = ("scale", "B", "mean", "var")
"""BatchNormalization's inputs 1 to 4, as its schema names them."""


def parameter_type_problem(values: list[np.ndarray]) -> str | None:
    """Which of a BN's four parameters (scale, B, mean, var, as read) is not a tensor of floating-point numbers,
    which its schema requires: ``input 1 (scale) is a tensor of strings``; None when all four are."""
    for slot, (name, value) in enumerate(zip(BN_INPUTS, values), start=1):
        dtype = np.asarray(value).dtype
        if not (np.issubdtype(dtype, np.floating) or dtype.name == "bfloat16"):  # ml_dtypes' bfloat16 is kind V
            held = "strings" if dtype.kind in "OSU" else dtype.name
            return f"input {slot} ({name}) is a tensor of {held}, where BatchNormalization takes floating-point numbers"
    return None


def unfoldable_statistics(gamma: np.ndarray, beta: np.ndarray, mean: np.ndarray, var: np.ndarray,
                          epsilon: float) -> str | None:
    """Why a BN's numbers cannot be folded (σ²+ε not positive, or a value not finite: the fold would write NaN or
    infinite weights), naming the first channel; None when they can."""
    v = np.asarray(var, dtype=np.float64).reshape(-1) + float(epsilon)
    bad = ~(np.isfinite(v) & (v > 0))
    if bad.any():
        c = int(np.argmax(bad))
        return f"its variance plus epsilon is {v[c]:g} at channel {c}, not a positive number"
    for name, values in (("scale", gamma), ("bias", beta), ("mean", mean)):
        finite = np.isfinite(np.asarray(values, dtype=np.float64).reshape(-1))
        if not finite.all():
            c = int(np.argmin(finite))
            return f"its {name} is {np.asarray(values).reshape(-1)[c]} at channel {c}"
    return None


def plain_affine(channels: int, scale: np.ndarray | None = None, shift: np.ndarray | None = None) -> AffineParams:
    """A Mul by ``scale`` and/or Add of ``shift`` (each already one value per channel, or None)."""
    s = (np.ones(channels) if scale is None
         else np.broadcast_to(np.asarray(scale, np.float64).reshape(-1), (channels,)).copy())
    t = (np.zeros(channels) if shift is None
         else np.broadcast_to(np.asarray(shift, np.float64).reshape(-1), (channels,)).copy())
    return AffineParams(s, t)


def fold_bias(bias: np.ndarray | None, params: AffineParams) -> np.ndarray:
    """b' = s·b + t (b = 0 when the layer had none), in float64."""
    b = np.zeros(params.channels) if bias is None else np.asarray(bias, dtype=np.float64).reshape(-1)
    folded: np.ndarray = params.scale * b + params.shift
    return folded


def fold_gemm_c(c: np.ndarray | None, beta: float, params: AffineParams) -> np.ndarray:
    """New Gemm C (with β = 1): s·(β·C) + t, broadcast over Gemm's [M, N] output."""
    if c is None:
        shift: np.ndarray = params.shift.copy()
        return shift
    folded: np.ndarray = params.scale * (float(beta) * np.asarray(c, dtype=np.float64)) + params.shift
    return folded


def per_channel_vector(value: np.ndarray, channels: int, out_rank: int) -> np.ndarray | None:
    """The per-channel vector a constant stands for when broadcast onto an [N, C, ...] output; None if it is not one.

    Only axis 1 of the output may vary: e.g. [C, 1, 1] or [1, C, 1, 1] for a 4-D conv output,
    [C] or [1, C] for a Gemm's [N, C]; a single value is the same for every channel.
    """
    v = np.asarray(value, dtype=np.float64)
    if v.size == 1:
        return np.full(channels, float(v.reshape(-1)[0]))
    if v.ndim > out_rank:
        return None
    shape = (1,) * (out_rank - v.ndim) + tuple(v.shape)
    if any(d != 1 for i, d in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return (np.broadcast_to(v.reshape(-1), (channels,)).copy() if shape[1] == channels
            else np.full(channels, float(v.reshape(-1)[0])))
