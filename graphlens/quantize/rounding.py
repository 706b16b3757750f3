"""Weight rounding that looks at the data a layer sees: GPTQ (Frantar et al., 2023; OBQ's fast form).

Rounding each weight to its nearest level minimizes ``‖Ŵ − W‖``, not what a layer's output loses. For a
layer ``y = W x`` (``x``: a Conv's input patch, a MatMul's or Gemm's input row) that loss is

    E‖(Ŵ − W) x‖² = Σ_rows ΔW_r H ΔW_rᵀ,    H = Σ_samples x xᵀ

and it is small when the rounding errors of weights whose inputs move together cancel, which nearest
rounding leaves to chance. A depthwise convolution whose kernel is a difference of large taps (a
folded BatchNorm's) on a smooth image is the bad case: its output is a small difference, and a few
steps of error in the taps are large against it. GPTQ rounds the columns of ``W`` one at a time, in
order of ``H``'s diagonal (the most active inputs first, GPTQ's ``act_order``), and moves each
column's error onto the columns not yet rounded so that the output stays as near as ``H`` allows:

    q_i = round(w_i);    e = (w_i − q_i) / U_ii;    w_j ← w_j − e · U_ij  for j > i

with ``U`` the upper Cholesky factor of ``(H + λI)⁻¹``, ``λ`` = :data:`DAMPING` of ``H``'s mean
diagonal. Columns are taken in blocks of :data:`BLOCK`, the rest updated once per block (GPTQ's lazy
batch updates), so the work is matrix products. Scales and zero points are the nearest rounding's
(each channel's own min and max), so only the integers change, and the weights stay within them.

``H`` comes from the float model's inputs to each layer on the first calibration samples (within
:data:`ELEMENTS` input elements), about :data:`COLUMNS` ``· d`` patches (or rows) in all, drawn at random
with a fixed seed (:mod:`~.layer_inputs`). A grouped convolution has one ``H`` per group (a depthwise one, ``k×k``
per channel). Conv (any rank, any padding), ConvTranspose (explicit pads), MatMul with a 2-D weight and Gemm
with ``transA = 0`` are rounded this way; other layers (a ConvTranspose given ``output_shape`` or
``auto_pad``, a weight read first) keep nearest rounding.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.inputs import structure
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, run_batches
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.layer_inputs import (
    Layout,
    input_rows,
    layout_of,
    patches,
    transposed_patches,
    unrows,
    weight_rows,
)
from graphlens.quantize.place import Placement, Site, weight_qparams

ELEMENTS = 5 << 20
"""Input elements (summed over samples, at least one sample) whose layer inputs give ``H``: two
736×992 detector pages, 24 recognizer crops of 48×994."""

COLUMNS = 8
"""Patches (or input rows) ``H`` is summed over, per input of a row (``d``): enough to fill a ``d × d`` ``H`` well
while its product stays ``8·d³``."""

LEAST = 4096
"""Fewest patches ``H`` is summed over (a depthwise layer's ``d`` is only ``k²``)."""

HESSIAN_BYTES = 256 << 20
"""Most bytes of ``H`` held at a time (float64): more weights than fit take one float pass per chunk (a decoder's
4096-wide MatMuls: 128 MiB each)."""

DAMPING = 0.01
"""``λ`` as a fraction of ``H``'s mean diagonal (GPTQ's ``percdamp``): keeps ``H`` invertible when
inputs are few or correlated."""

BLOCK = 128
"""Columns rounded before the columns after them are updated (GPTQ's lazy batch)."""

ROW_BYTES = 64 << 20
"""Bytes of a weight's rows (float32) rounded at a time."""


@dataclass
class _Hessian:
    """``H`` of one weight, summed over the layers reading it and the samples."""

    layout: Layout
    h: np.ndarray
    sites: list[Site] = field(default_factory=list)


def _per_sample(layout: Layout, samples: int) -> int:
    """Patches (or rows) each sample adds to ``H``: :data:`COLUMNS` per input of a row, at least :data:`LEAST`
    in all."""
    return max(1, math.ceil(max(COLUMNS * layout.d, LEAST) / max(samples, 1)))


def _targets(graph: Graph, placement: Placement) -> dict[str, _Hessian]:
    """Every weight GPTQ can round, its layout and the sites reading it (``H`` not yet allocated)."""
    found: dict[str, _Hessian] = {}
    refused: set[str] = set()
    for site in placement.sites:
        value = graph.constant_value(site.weight)
        layout = None if value is None or site.weight in refused else layout_of(graph, site, np.asarray(value))
        known = found.get(site.weight)
        if layout is None or (known is not None and known.layout != layout):
            refused.add(site.weight)
            found.pop(site.weight, None)
            continue
        if known is None:
            known = found[site.weight] = _Hessian(layout, np.zeros((0, 0, 0)))
        known.sites.append(site)
    return found


def _chunks(targets: dict[str, _Hessian]) -> list[list[str]]:
    """The weights in graph order, cut where their ``H`` together would pass :data:`HESSIAN_BYTES`: one float pass
    each, so a large model's ``H`` never all sit in memory at once."""
    chunks: list[list[str]] = [[]]
    held = 0
    for name, target in targets.items():
        size = 8 * target.layout.groups * target.layout.d ** 2
        if chunks[-1] and held + size > HESSIAN_BYTES:
            chunks.append([])
            held = 0
        chunks[-1].append(name)
        held += size
    return chunks if chunks[0] else []


def hessians(model: Model, targets: dict[str, _Hessian], data: CalibrationData, batch_size: int,
             task: Task | None = None) -> None:
    """Fill the ``H`` of ``targets`` from one float pass over ``data`` (see the module docstring)."""
    for target in targets.values():
        target.h = np.zeros((target.layout.groups, target.layout.d, target.layout.d))
    tensors = list(dict.fromkeys(s.activation for h in targets.values() for s in h.sites))
    runner = ModelRunner(model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model for GPTQ rounding: {runner.error}")
    rng = np.random.default_rng(0)
    for batch in run_batches([runner], structure(model), data, batch_size, task):
        outputs = batch.outputs[0]
        for target in targets.values():
            count = _per_sample(target.layout, data.samples * len(target.sites))  # the budget is the weight's
            for site in target.sites:
                x = np.asarray(outputs[site.activation], np.float32)
                if target.layout.op_type == "Conv":
                    columns = patches(x, target.layout, count, rng)
                elif target.layout.op_type == "ConvTranspose":
                    columns = transposed_patches(x, target.layout, count, rng)
                else:
                    columns = input_rows(x, target.layout, count, rng)
                target.h += _gram(columns)
        del outputs


SAFE = 2.0 ** 32
"""Largest input value squared and summed in float32 unscaled (sums of 2^64 stay far below float32's 2^128)."""


def _gram(columns: np.ndarray) -> np.ndarray:
    """``columns · columnsᵀ`` (float64), the product taken in float32 on columns scaled by a power of two so that it
    cannot overflow (activations of 1e18 square past float32's range) and scaled back exactly."""
    peak = float(np.max(np.abs(columns), initial=0.0))
    if not math.isfinite(peak):
        return np.full((columns.shape[0], columns.shape[1], columns.shape[1]), math.inf)
    exponent = math.frexp(peak)[1] if peak > SAFE else 0  # smaller ones as they are: no subnormal loses its bits
    scaled = np.ldexp(columns, -exponent) if exponent else columns
    gram: np.ndarray = np.ldexp(np.matmul(scaled, scaled.transpose(0, 2, 1)).astype(np.float64), 2 * exponent)
    return gram


def _lower_inverse(m: np.ndarray) -> np.ndarray:
    """The inverse of lower-triangular matrices ``m`` (stacked), by halves: ``d³/3`` multiply-adds in matrix products,
    against ``2d³`` for a general inverse."""
    n = m.shape[-1]
    if n <= 64:
        small: np.ndarray = np.linalg.inv(m)
        return small
    k = n // 2
    top, bottom = _lower_inverse(m[..., :k, :k]), _lower_inverse(m[..., k:, k:])
    out = np.zeros_like(m)
    out[..., :k, :k], out[..., k:, k:] = top, bottom
    out[..., k:, :k] = -np.matmul(np.matmul(bottom, m[..., k:, :k]), top)
    return out


def _upper_inverse_factor(h: np.ndarray) -> np.ndarray:
    """``U`` upper-triangular with ``H⁻¹ = Uᵀ U``, from one Cholesky factorization: with ``J`` the reversal and
    ``J H J = M Mᵀ``, ``U = J M⁻¹ J``."""
    m = np.linalg.cholesky(h[..., ::-1, ::-1])
    inverse: np.ndarray = _lower_inverse(m)[..., ::-1, ::-1]
    return inverse


def _fill_dead(h: np.ndarray) -> None:
    """A diagonal of 1 in ``h`` where an input was never seen (it moves no error), in place."""
    diagonal = np.arange(h.shape[-1])
    h[:, diagonal, diagonal] = np.where(h[:, diagonal, diagonal] <= 0, 1.0, h[:, diagonal, diagonal])


def _factor(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPTQ's column order (``H``'s diagonal, largest first: ``act_order``), ``U`` of the damped, reordered ``H``,
    and the damping per group. Reorders and damps ``h`` (float64) in place: a ``d = 8192`` layer's ``H`` is
    512 MiB, so no step keeps a second copy of it."""
    d = h.shape[-1]
    diagonal = np.arange(d)
    _fill_dead(h)
    order = np.argsort(-h[:, diagonal, diagonal], axis=1, kind="stable")
    for g in range(h.shape[0]):
        h[g] = h[g][np.ix_(order[g], order[g])]
    damp = DAMPING * h[:, diagonal, diagonal].mean(axis=1)
    h[:, diagonal, diagonal] += damp[:, None]
    return order, _upper_inverse_factor(h).astype(np.float32), damp


def _gptq_rows(rows: np.ndarray, order: np.ndarray, u: np.ndarray, params_scale: np.ndarray,
               params_zero: np.ndarray, qmin: int, qmax: int) -> np.ndarray:
    """The levels of ``rows`` ``(groups, r, d)`` by GPTQ with :func:`_factor`'s ``order`` and ``u``, as float32."""
    d = rows.shape[2]
    # columns as rows (groups, d, r), float32: each step reads and updates contiguous memory
    wt = np.ascontiguousarray(np.take_along_axis(rows, order[:, None, :], axis=2).transpose(0, 2, 1), np.float32)
    scale, zero = params_scale.astype(np.float32)[:, None, :], params_zero.astype(np.float32)[:, None, :]
    q = np.empty_like(wt)
    for start in range(0, d, BLOCK):
        stop = min(start + BLOCK, d)
        block = wt[:, start:stop, :]
        for i in range(stop - start):
            column = block[:, i:i + 1, :]
            level = np.clip(np.rint(column / scale) + zero, qmin, qmax)
            q[:, start + i:start + i + 1, :] = level
            column -= (level - zero) * scale  # the column's own error, divided below
            column /= u[:, start + i, start + i][:, None, None]
            block[:, i + 1:, :] -= u[:, start + i, start + i + 1:stop][:, :, None] * column
        if stop < d:  # block now holds the block's errors
            wt[:, stop:, :] -= np.matmul(u[:, start:stop, stop:].transpose(0, 2, 1), block)
    inverse = np.argsort(order, axis=1)
    levels: np.ndarray = np.take_along_axis(q.transpose(0, 2, 1), inverse[:, None, :], axis=2)
    return levels


def gptq(rows: np.ndarray, h: np.ndarray, params_scale: np.ndarray, params_zero: np.ndarray,
         qmin: int, qmax: int) -> np.ndarray:
    """The integers of ``rows`` ``(groups, r, d)`` rounded by GPTQ on ``h`` ``(groups, d, d)``; ``params_*`` per row
    ``(groups, r)``. See the module docstring."""
    order, u, _ = _factor(h.astype(np.float64))  # a copy: _factor changes it
    return _gptq_rows(rows, order, u, params_scale, params_zero, qmin, qmax)


@dataclass
class Rounding:
    """What GPTQ rounding did: the integers of the weights it rounded, and how much it lowered their layers' error."""

    integers: dict[str, np.ndarray] = field(repr=False)
    """Weight name → its integers, with the scales nearest rounding would use."""
    weights: int
    """Weights quantized in all (the others keep nearest rounding)."""
    samples: int
    """The first calibration samples ``H`` came from."""
    error_nearest: float = 0.0
    """``Σ tr(ΔW H ΔWᵀ)`` over the weights rounded, with nearest rounding's ``ΔW`` and with GPTQ's: the layers' own
    output error on the patches ``H`` was summed over."""
    error_gptq: float = 0.0
    not_finite: list[str] = field(default_factory=list)
    """Weights left at nearest rounding because their inputs (hence ``H``) or their own values are not finite."""

    @property
    def ratio(self) -> float:
        return self.error_gptq / self.error_nearest if self.error_nearest > 0 else 1.0

    def line(self) -> str:
        samples = f"{self.samples} calibration sample{'' if self.samples == 1 else 's'}"
        line = f"weights rounded by GPTQ: {len(self.integers)} of {self.weights}, on the first {samples}"
        if self.integers and self.error_nearest > 0:
            line += f"; their layers' output error there {self.ratio:.2f}× nearest rounding's"
        elif self.integers:
            line += "; nearest rounding is exact there"
        if self.not_finite:
            n = len(self.not_finite)
            line += (f"; {n} rounded to nearest, their inputs or values not finite in float32 "
                     f"({', '.join(self.not_finite[:3])}{', …' if n > 3 else ''})")
        return line

    def to_dict(self) -> dict[str, Any]:
        return {"rounding": "gptq", "weights": sorted(self.integers), "of": self.weights, "samples": self.samples,
                "error_ratio": self.ratio, "not_finite": list(self.not_finite)}


def _error(rows: np.ndarray, levels: np.ndarray, scale: np.ndarray, zero: np.ndarray, h: np.ndarray,
           order: np.ndarray | None = None, damp: np.ndarray | None = None) -> float:
    """``Σ_g tr(ΔW_g H_g ΔW_gᵀ)`` of ``rows`` stored as ``levels``; with ``order`` and ``damp``, ``h`` is
    :func:`_factor`'s reordered, damped ``H`` and both are undone (``ΔW`` reordered alike, ``λ‖ΔW‖²`` taken off)."""
    delta = ((levels - zero[:, :, None]) * scale[:, :, None] - rows).astype(np.float32)
    if order is not None:
        delta = np.take_along_axis(delta, order[:, None, :], axis=2)
    total = float((np.matmul(delta, np.asarray(h, np.float32)) * delta).sum(dtype=np.float64))
    if damp is not None:
        total -= float((damp[:, None, None] * delta.astype(np.float64) ** 2).sum())
    return total


def round_weights(model: Model, placement: Placement, config: QuantConfig, data: CalibrationData,
                  task: Task | None = None) -> Rounding:
    """Each weight GPTQ can round, rounded (see the module docstring), with the scales nearest rounding would use
    (:func:`~.place.weight_qparams`); ``task`` is told the share of the weights done after each."""
    task = task_or_idle(task)
    graph = model.graph
    first = data.first(ELEMENTS)
    result = Rounding({}, len({s.weight for s in placement.sites}), first.samples)
    targets = _targets(graph, placement)
    for chunk in _chunks(targets):
        part = {name: targets[name] for name in chunk}
        hessians(model, part, first, config.batch_size, task)
        for name, hessian in part.items():
            task.check("quantization")
            _round(graph, name, hessian, config, result)
            task.report(len(result.integers) / max(len(targets), 1))
    return result


def _per_row(values: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """A weight's scales (or zero points) for each row of ``(groups, rows)``: one for all, one per row, or one per
    row of a group repeated over the groups (a grouped ConvTranspose's ``C_out/g``)."""
    flat = np.asarray(values, np.float64).reshape(-1)
    spread: np.ndarray = flat.reshape(shape) if flat.size == shape[0] * shape[1] else np.broadcast_to(
        flat.reshape(1, -1) if flat.size == shape[1] else flat.reshape(1, 1), shape).copy()
    return spread


def _round(graph: Graph, name: str, hessian: _Hessian, config: QuantConfig, result: Rounding) -> None:
    """GPTQ on one weight, :data:`ROW_BYTES` of its rows at a time (rows are independent given ``H``: a decoder's
    vocabulary projection need not be copied whole); its integers and errors go into ``result``."""
    h64, hessian.h = hessian.h, np.zeros((0, 0, 0))  # this weight's H goes with this call
    value = graph.constant_value(name)
    if value is None:
        return
    # GPTQ's integers do not change when H is scaled (its damping is a share of H's diagonal): an H whose mean diagonal
    # is past 2^±64 is scaled to one near 1 (by an even power of two), which keeps activations of 1e18 within float32
    # in the steps below.
    diagonal = np.einsum("gii->gi", h64)
    mean = float(diagonal.mean()) if diagonal.size else 0.0
    if not math.isfinite(mean) or not np.isfinite(h64).all():
        result.not_finite.append(name)
        return
    _fill_dead(h64)  # at H's own scale, as if unscaled
    exponent = 2 * round(math.log2(mean) / 2) if mean > 0 and not SAFE ** -2 < mean < SAFE ** 2 else 0
    h64 *= 2.0 ** -exponent
    norm = 2.0 ** exponent
    weight = np.asarray(value, np.float32)
    params = weight_qparams(weight, hessian.sites[0], config)
    rows = weight_rows(weight, hessian.layout)
    scale, zero = _per_row(params.scale, rows.shape[:2]), _per_row(params.zero_point, rows.shape[:2])
    qtype = params.qtype
    order, u, damp = _factor(h64)  # h64 now reordered and damped: _error undoes both
    h = h64.astype(np.float32)  # enough to measure the errors by, at half the memory
    del h64
    levels = np.empty(rows.shape, np.float32)
    errors = np.zeros(2)  # nearest rounding's, GPTQ's
    step = max(1, ROW_BYTES // (4 * rows.shape[0] * rows.shape[2]))
    for start in range(0, rows.shape[1], step):
        part, s, z = (a[:, start:start + step] for a in (rows, scale, zero))
        levels[:, start:start + step] = _gptq_rows(part, order, u, s, z, qtype.qmin, qtype.qmax)
        nearest = np.clip(np.rint(part / s[:, :, None].astype(np.float32)) + z[:, :, None], qtype.qmin, qtype.qmax)
        errors += (_error(part, nearest, s, z, h, order, damp), _error(part, levels[:, start:start + step], s, z, h,
                                                                          order, damp))
    if not (np.isfinite(levels).all() and np.isfinite(errors).all()):  # the weight's own values are not finite
        result.not_finite.append(name)
        return
    result.error_nearest += norm * float(errors[0])
    result.error_gptq += norm * float(errors[1])
    result.integers[name] = unrows(levels, weight.shape, hessian.layout).astype(qtype.numpy_type)
