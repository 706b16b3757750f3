"""Cross-layer equalization arithmetic (Nagel et al. 2019, "Data-Free Quantization"), computed here once.

Two layers in a row, y = W2·f(W1·x + b1) + b2, with f positively homogeneous (ReLU, LeakyReLU,
a Clip at 0 and/or ±∞, or nothing): f(v/s) = f(v)/s for s > 0. So for any positive s_i per channel
i between the layers,

    y = (W2·S)·f((S⁻¹·W1)·x + S⁻¹·b1) + b2,   S = diag(s):

layer 1's output channel i (its weights and bias) is divided by s_i and layer 2's input channel i
multiplied by s_i, and the float output is unchanged. With r1_i the largest |weight| of layer 1's
output channel i and r2_i the largest |weight| that layer 2 multiplies channel i by, the choice

    s_i = √(r1_i·r2_i) / r2_i

makes both ranges √(r1_i·r2_i): every channel spends the same share of each weight's quantization
range (the paper's optimum for per-tensor quantization). A dead channel (r1_i or r2_i zero) keeps s_i = 1.
Over a chain L0 → L1 → … the pairs are equalized in turn, sweep after sweep, until every pair's scales
lie within 0.1 % of each other (AIMET's CLE sweeps the same way; a scale common to all channels
changes no quantization error, so it does not count).

Where the output and input channels sit in each weight is each op's own fact, stated in
:mod:`graphlens.core.linear` (:meth:`~graphlens.core.linear.LinearOp.positions`).

A pair is only equalized when it lowers the pair's weight quantization error, measured where it
matters, in what the pair computes: channel i carries layer 2's column times layer 1's row, so with
a_i = ‖W1 row i‖², c_i = ‖W2 column i‖² and e1_i, e2_i the squared errors ‖W − Q(W)‖² of that row
and column (Q symmetric narrow-range int8, −127..127), the pair's relative error is

    E = Σ_i (e1_i·c_i + a_i·e2_i) / Σ_i a_i·c_i

(the first-order error of the product W2·W1 per channel; the denominator does not change with s).
Plain ‖W − Q(W)‖²/‖W‖² per weight would miss the point: a channel scaled down to nothing adds
nothing to ‖W1‖² and is lost to quantization all the same. E must fall with one scale per tensor,
and must not rise with one scale per output channel (GraphLens's default, where equalizing leaves
layer 1's error as it is but changes layer 2's).

All arithmetic is float64; the caller casts the results back to each weight's dtype.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np

from graphlens.core.linear import LinearOp

MAX_SWEEPS = 20
TOLERANCE = 1e-3
"""A pair whose scales all lie within 0.1 % of each other is equalized already: one common factor
changes no relative quantization error."""
GAIN = 1e-3
"""Equalizing must lower the per-tensor error by more than this fraction of it."""
QMAX = 127.0


@dataclass(frozen=True)
class LayerWeights:
    """One layer's weight and bias, with the op that places its channels."""

    op: LinearOp
    weight: np.ndarray
    bias: np.ndarray | None

    @property
    def out_channels(self) -> int:
        return int(_positions(self, "out").shape[0])

    @property
    def in_channels(self) -> int:
        return int(_positions(self, "in").shape[0])


def _positions(layer: LayerWeights, side: str) -> np.ndarray:
    """Flat weight indices per channel, [channels, -1]: the weight entries of each output (or input) channel."""
    return _layout(layer.op, layer.weight.shape, side, "positions")


def channel_index(layer: LayerWeights, side: str) -> np.ndarray:
    """For each weight entry (in the weight's shape), the output (``out``) or input (``in``) channel it belongs to."""
    return _layout(layer.op, layer.weight.shape, side, "channel_index")


CACHED_LAYOUT_ENTRIES = 1 << 20
"""Weights of at most this many entries keep their index layouts (8 bytes an entry) between calls; a larger one's
are made again, their cost small beside the float64 arithmetic on the weight, and never held for the process."""


def _layout(op: LinearOp, shape: tuple[int, ...], side: str, which: str) -> np.ndarray:
    """``op.positions`` or ``op.channel_index`` of a weight shape: a chain's sweeps ask for the same ones hundreds of
    times, so a small weight's are computed once (read-only)."""
    if int(np.prod(shape, dtype=np.int64)) > CACHED_LAYOUT_ENTRIES:
        found: np.ndarray = getattr(op, which)(shape, side)
        return found
    return _cached_layout(op, shape, side, which)


@lru_cache(maxsize=256)
def _cached_layout(op: LinearOp, shape: tuple[int, ...], side: str, which: str) -> np.ndarray:
    found: np.ndarray = getattr(op, which)(shape, side)
    found.setflags(write=False)
    return found


def channel_ranges(layer: LayerWeights, side: str) -> np.ndarray:
    """The largest |weight| of each output or input channel."""
    w = np.abs(np.asarray(layer.weight, np.float64)).reshape(-1)
    ranges: np.ndarray = w[_positions(layer, side)].max(axis=1)
    return ranges


def equalizing_scales(first: LayerWeights, second: LayerWeights) -> np.ndarray:
    """s_i = √(r1_i·r2_i)/r2_i = √(r1_i/r2_i); 1 for a dead channel."""
    r1, r2 = channel_ranges(first, "out"), channel_ranges(second, "in")
    alive = (r1 > 0) & (r2 > 0) & np.isfinite(r1) & np.isfinite(r2)
    return np.where(alive, np.sqrt(np.where(alive, r1, 1.0) / np.where(alive, r2, 1.0)), 1.0)


def rescale(first: LayerWeights, second: LayerWeights, s: np.ndarray) -> tuple[LayerWeights, LayerWeights]:
    """Layer 1's output channels (weight and bias) divided by s, layer 2's input channels multiplied by s."""
    w1 = np.asarray(first.weight, np.float64) / s[channel_index(first, "out")]
    w2 = np.asarray(second.weight, np.float64) * s[channel_index(second, "in")]
    b1 = None if first.bias is None else np.asarray(first.bias, np.float64) / _bias_scale(first, s)
    return replace(first, weight=w1, bias=b1), replace(second, weight=w2)


def _bias_scale(layer: LayerWeights, s: np.ndarray) -> np.ndarray | float:
    """s shaped to divide the layer's bias: per channel for a Conv's [C]; along the last axis for a Gemm's C."""
    bias = np.asarray(layer.bias)
    if bias.ndim == 0 or not layer.op.channel_bias:
        return s  # a Gemm's C broadcasts to [M, N] (a scalar or [M, 1] C too): divided, it becomes [N] or [M, N]
    return s.reshape(bias.shape)


def quant_axis(layer: LayerWeights) -> int:
    """The axis the quantizer puts one scale per output channel on (Conv 0, ConvTranspose 1, Gemm by transB)."""
    return layer.op.output_axis(layer.weight.ndim)


def quantized(weight: np.ndarray, axis: int | None) -> np.ndarray:
    """Q(W): symmetric narrow-range int8 (−127..127), one scale per tensor (axis None) or per slice of ``axis``."""
    w = np.asarray(weight, np.float64)
    m = (np.max(np.abs(w)) if axis is None
         else np.max(np.abs(np.moveaxis(w, axis, 0)).reshape(w.shape[axis], -1), axis=1))
    scale = np.where(m > 0, m / QMAX, 1.0)
    if axis is not None:
        shape = [1] * w.ndim
        shape[axis] = -1
        scale = scale.reshape(shape)
    return np.clip(np.rint(w / scale), -QMAX, QMAX) * scale


def _channel_power(layer: LayerWeights, values: np.ndarray, side: str) -> np.ndarray:
    v = np.asarray(values, np.float64).reshape(-1)[_positions(layer, side)]
    power: np.ndarray = np.sum(v * v, axis=1)
    return power


def pair_error_at(first: LayerWeights, second: LayerWeights, axis: tuple[int | None, int | None],
                  power: tuple[np.ndarray, np.ndarray] | None = None) -> float:
    """Σ_i (e1_i·c_i + a_i·e2_i) / Σ_i a_i·c_i, with ``axis`` the quantization axis of each weight
    (None: per tensor); ``power``: (a, c), when already known."""
    a, c = power or (_channel_power(first, first.weight, "out"), _channel_power(second, second.weight, "in"))
    e1 = _channel_power(first, first.weight - quantized(first.weight, axis[0]), "out")
    e2 = _channel_power(second, second.weight - quantized(second.weight, axis[1]), "in")
    signal = float(np.sum(a * c))
    return 0.0 if signal == 0.0 else float(np.sum(e1 * c + a * e2)) / signal


@dataclass(frozen=True)
class PairError:
    """A pair's relative int8 weight error (see the module docstring), one scale per tensor and one per channel."""

    per_tensor: float
    per_channel: float


def pair_error(first: LayerWeights, second: LayerWeights) -> PairError:
    power = _channel_power(first, first.weight, "out"), _channel_power(second, second.weight, "in")
    return PairError(pair_error_at(first, second, (None, None), power),
                     pair_error_at(first, second, (quant_axis(first), quant_axis(second)), power))


def lowers_error(before: PairError, after: PairError) -> bool:
    """The criterion of the module docstring: lower per tensor (by more than GAIN), not higher per channel."""
    return (after.per_tensor < before.per_tensor * (1.0 - GAIN)
            and after.per_channel <= before.per_channel * (1.0 + GAIN))


def needs_equalizing(s: np.ndarray) -> bool:
    """Whether the scales differ between channels by more than TOLERANCE (in log terms)."""
    logs = np.log(s)
    return bool(logs.size and np.max(logs) - np.min(logs) > TOLERANCE)


@dataclass
class ChainResult:
    """A chain's equalized layers and what it did to each pair."""

    layers: list[LayerWeights]
    scales: list[np.ndarray]
    """Per pair: the product of the scales applied over all sweeps (1 where left alone)."""
    before: list[PairError]
    after: list[PairError]
    sweeps: int

    @property
    def changed(self) -> list[bool]:
        return [needs_equalizing(s) for s in self.scales]


def equalize_chain(layers: list[LayerWeights], *, max_sweeps: int = MAX_SWEEPS) -> ChainResult:
    """Equalize each pair (k, k+1) in turn, sweep after sweep, where it lowers the pair's error."""
    current = list(layers)
    total = [np.ones(layer.out_channels) for layer in layers[:-1]]
    before = [pair_error(a, b) for a, b in zip(layers, layers[1:])]
    errors = list(before)  # each pair's error as its layers are now
    sweeps = 0
    while sweeps < max_sweeps:
        sweeps += 1
        moved = False
        for k in range(len(current) - 1):
            s = equalizing_scales(current[k], current[k + 1])
            if not needs_equalizing(s):
                continue
            first, second = rescale(current[k], current[k + 1], s)
            error = pair_error(first, second)
            if not lowers_error(errors[k], error):
                continue
            current[k], current[k + 1] = first, second
            total[k] = total[k] * s
            errors[k] = error
            for j in (k - 1, k + 1):  # the neighbouring pairs share a rescaled layer
                if 0 <= j < len(errors):
                    errors[j] = pair_error(current[j], current[j + 1])
            moved = True
        if not moved:
            break
    return ChainResult(current, total, before, errors, sweeps)

