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
with a fixed seed. A grouped convolution has one ``H`` per group (a depthwise one, ``k×k``
per channel). Conv (any rank, any padding), ConvTranspose (explicit pads), MatMul with a 2-D weight and Gemm
with ``transA = 0`` are rounded this way; other layers (a ConvTranspose given ``output_shape`` or
``auto_pad``, a weight read first) keep nearest rounding.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.numerics.inputs import structure
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, Cancelled, QuantizeCancelled, run_batches
from graphlens.quantize.config import QuantConfig
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
class _Layout:
    """How one site's input becomes columns ``x`` of ``W_r x``: ``groups`` of ``d`` inputs each."""

    op_type: str
    groups: int
    d: int
    kernel: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    """Begin pads then end pads (ONNX's order); with ``auto_pad`` SAME_*, worked out per input."""
    auto_pad: str = "NOTSET"
    output_padding: tuple[int, ...] = ()
    """A ConvTranspose's."""


@dataclass
class _Hessian:
    """``H`` of one weight, summed over the layers reading it and the samples."""

    layout: _Layout
    h: np.ndarray
    sites: list[Site] = field(default_factory=list)


def _conv_layout(graph: Graph, site: Site, weight: np.ndarray) -> _Layout | None:
    node = graph.by_name[site.node]
    groups, kernel = int(node.attr("group", 1)), tuple(int(k) for k in weight.shape[2:])
    rank = len(kernel)
    transposed = site.op_type == "ConvTranspose"
    if rank == 0 or transposed and node.attr("output_shape", None) is not None:
        return None  # a ConvTranspose given its output shape works out its pads itself: nearest rounding
    strides = tuple(node.attr("strides", [1] * rank))
    dilations = tuple(node.attr("dilations", [1] * rank))
    pads = tuple(node.attr("pads", [0] * (2 * rank)))
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        return None
    if transposed:
        output_padding = tuple(node.attr("output_padding", [0] * rank))
        if auto_pad != "NOTSET" or len(output_padding) != rank:
            return None
        d = int(weight.shape[0]) // groups * math.prod(kernel)
        return _Layout("ConvTranspose", groups, d, kernel, strides, dilations, pads, auto_pad, output_padding)
    d = int(weight.shape[1]) * math.prod(kernel)
    return _Layout("Conv", groups, d, kernel, strides, dilations, pads, auto_pad)


def _layout(graph: Graph, site: Site, weight: np.ndarray) -> _Layout | None:
    """The site's layout, or None when it keeps nearest rounding."""
    if site.op_type in ("Conv", "ConvTranspose") and site.weight_slot == 1 and weight.ndim >= 3:
        return _conv_layout(graph, site, weight)
    if site.op_type == "MatMul" and site.weight_slot == 1 and weight.ndim == 2:
        return _Layout("MatMul", 1, int(weight.shape[0]))
    if site.op_type == "Gemm" and site.weight_slot == 1 and weight.ndim == 2:
        node = graph.by_name[site.node]
        if node.attr("transA", 0):
            return None
        trans_b = bool(node.attr("transB", 0))
        return _Layout("GemmT" if trans_b else "MatMul", 1, int(weight.shape[1] if trans_b else weight.shape[0]))
    return None


def _rows(weight: np.ndarray, layout: _Layout) -> np.ndarray:
    """``W`` as ``(groups, rows per group, d)``: each row one output channel's weights on ``x``."""
    rows: np.ndarray
    if layout.op_type == "Conv":
        rows = weight.reshape(layout.groups, weight.shape[0] // layout.groups, layout.d)
    elif layout.op_type == "ConvTranspose":  # [C_in, C_out/g, k…]: a row is one output channel over its group's inputs
        per_group = weight.shape[0] // layout.groups
        rows = weight.reshape(layout.groups, per_group, weight.shape[1], -1).transpose(0, 2, 1, 3).reshape(
            layout.groups, weight.shape[1], layout.d)
    elif layout.op_type == "GemmT":
        rows = weight.reshape(1, *weight.shape)
    else:
        rows = weight.T.reshape(1, weight.shape[1], weight.shape[0])
    return rows


def _unrows(rows: np.ndarray, weight_shape: tuple[int, ...], layout: _Layout) -> np.ndarray:
    weight: np.ndarray
    if layout.op_type == "ConvTranspose":
        groups, out_per_group = rows.shape[:2]
        weight = rows.reshape(groups, out_per_group, weight_shape[0] // groups, -1).transpose(0, 2, 1, 3).reshape(
            weight_shape)
    elif layout.op_type in ("Conv", "GemmT"):
        weight = rows.reshape(weight_shape)
    else:
        weight = rows[0].T.reshape(weight_shape)
    return weight


def _same_pads(layout: _Layout, spatial: tuple[int, ...]) -> tuple[int, ...]:
    """``auto_pad`` SAME_UPPER / SAME_LOWER pads for an input of ``spatial`` size (ONNX's formula)."""
    begin, end = [], []
    for size, k, s, dl in zip(spatial, layout.kernel, layout.strides, layout.dilations, strict=True):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * dl + 1 - size, 0)
        small = total // 2
        begin.append(small if layout.auto_pad == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (*begin, *end)


def _positions(out_shape: tuple[int, ...], count: int, rng: np.random.Generator) -> np.ndarray:
    """``(rank, P)``: ``count`` output positions drawn at random, in order (all of them, if fewer)."""
    total = math.prod(out_shape)
    chosen = np.sort(rng.choice(total, count, replace=False)) if total > count else np.arange(total)
    return np.stack(np.unravel_index(chosen, out_shape))


def _taps(layout: _Layout) -> np.ndarray:
    """``(rank, K)``: each kernel tap's offset, dilation applied."""
    taps = np.stack(np.unravel_index(np.arange(math.prod(layout.kernel)), layout.kernel))
    offsets: np.ndarray = taps * np.array(layout.dilations)[:, None]
    return offsets


def _columns(flat_x: np.ndarray, flat: np.ndarray, layout: _Layout) -> np.ndarray:
    """``(groups, d, N·P)``: the inputs ``flat`` ``(P, K)`` indexes in ``flat_x`` ``(N, C, positions)``, as columns
    ordered like a weight row (channel of the group, then tap)."""
    n, channels = flat_x.shape[:2]
    picked = flat_x.take(flat, axis=2)  # (N, C, P, K)
    columns = picked.reshape(n, layout.groups, channels // layout.groups, flat.shape[0], flat.shape[1])
    out: np.ndarray = columns.transpose(1, 2, 4, 0, 3).reshape(layout.groups, layout.d, -1)
    return out


def _patches(x: np.ndarray, layout: _Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(groups, d, columns)``: the input patches of ``count`` output positions per sample (all, if fewer)."""
    rank = len(layout.kernel)
    spatial = tuple(x.shape[2:])
    if layout.auto_pad.startswith("SAME"):
        pads = _same_pads(layout, spatial)
    elif layout.auto_pad == "VALID":
        pads = (0,) * (2 * rank)
    else:
        pads = layout.pads
    if any(pads):
        x = np.pad(x, [(0, 0), (0, 0), *((pads[i], pads[i + rank]) for i in range(rank))])
    padded = x.shape[2:]
    out_shape = tuple((size - (k - 1) * dl - 1) // s + 1 for size, k, dl, s in
                      zip(padded, layout.kernel, layout.dilations, layout.strides, strict=True))
    starts = _positions(out_shape, count, rng) * np.array(layout.strides)[:, None]  # (rank, P)
    flat = np.ravel_multi_index(tuple(starts[:, :, None] + _taps(layout)[:, None, :]), padded)  # (P, K)
    return _columns(x.reshape(*x.shape[:2], -1), flat, layout)


def _transposed_patches(x: np.ndarray, layout: _Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(groups, d, columns)`` for a ConvTranspose: output ``o`` reads input ``i`` through tap ``k`` where
    ``o + pad = i·s + k·dilation``; a tap with no such ``i`` reads 0."""
    rank = len(layout.kernel)
    spatial = np.array(x.shape[2:])
    strides = np.array(layout.strides)[:, None, None]
    begin, end = np.array(layout.pads[:rank]), np.array(layout.pads[rank:])
    out_shape = tuple(int(v) for v in np.array(layout.strides) * (spatial - 1) + np.array(layout.output_padding)
                      + (np.array(layout.kernel) - 1) * np.array(layout.dilations) + 1 - begin - end)
    t = _positions(out_shape, count, rng)[:, :, None] + begin[:, None, None] - _taps(layout)[:, None, :]  # (rank,P,K)
    valid = ((t % strides == 0) & (t >= 0) & (t // strides < spatial[:, None, None])).all(axis=0)
    source = np.where(valid, t // strides, 0)
    flat = np.where(valid, np.ravel_multi_index(tuple(source), tuple(spatial)), int(np.prod(spatial)))
    n, channels = x.shape[:2]
    with_zero = np.concatenate([x.reshape(n, channels, -1), np.zeros((n, channels, 1), x.dtype)], axis=2)
    return _columns(with_zero, flat, layout)


def _input_rows(x: np.ndarray, layout: _Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(1, d, rows)``: ``count`` rows per sample of a MatMul's or Gemm's input (all, if fewer)."""
    rows = x.reshape(-1, layout.d)
    limit = count * max(x.shape[0], 1)
    if rows.shape[0] > limit:
        rows = rows[np.sort(rng.choice(rows.shape[0], limit, replace=False))]
    out: np.ndarray = rows.T.reshape(1, layout.d, -1)
    return out


def _per_sample(layout: _Layout, samples: int) -> int:
    """Patches (or rows) each sample adds to ``H``: :data:`COLUMNS` per input of a row, at least :data:`LEAST`
    in all."""
    return max(1, math.ceil(max(COLUMNS * layout.d, LEAST) / max(samples, 1)))


def _targets(graph: Graph, placement: Placement) -> dict[str, _Hessian]:
    """Every weight GPTQ can round, its layout and the sites reading it (``H`` not yet allocated)."""
    found: dict[str, _Hessian] = {}
    refused: set[str] = set()
    for site in placement.sites:
        value = graph.constant_value(site.weight)
        layout = None if value is None or site.weight in refused else _layout(graph, site, np.asarray(value))
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
             cancelled: Cancelled | None = None) -> None:
    """Fill the ``H`` of ``targets`` from one float pass over ``data`` (see the module docstring)."""
    for target in targets.values():
        target.h = np.zeros((target.layout.groups, target.layout.d, target.layout.d))
    tensors = list(dict.fromkeys(s.activation for h in targets.values() for s in h.sites))
    runner = ModelRunner(model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model for GPTQ rounding: {runner.error}")
    rng = np.random.default_rng(0)
    for batch in run_batches([runner], structure(model), data, batch_size, cancelled):
        outputs = batch.outputs[0]
        for target in targets.values():
            count = _per_sample(target.layout, data.samples * len(target.sites))  # the budget is the weight's
            for site in target.sites:
                x = np.asarray(outputs[site.activation], np.float32)
                if target.layout.op_type == "Conv":
                    columns = _patches(x, target.layout, count, rng)
                elif target.layout.op_type == "ConvTranspose":
                    columns = _transposed_patches(x, target.layout, count, rng)
                else:
                    columns = _input_rows(x, target.layout, count, rng)
                target.h += np.matmul(columns, columns.transpose(0, 2, 1))
        del outputs


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


def _factor(h: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """GPTQ's column order (``H``'s diagonal, largest first: ``act_order``), ``U`` of the damped, reordered ``H``,
    and the damping per group. Reorders and damps ``h`` (float64) in place: a ``d = 8192`` layer's ``H`` is
    512 MiB, so no step keeps a second copy of it."""
    d = h.shape[-1]
    diagonal = np.arange(d)
    dead = h[:, diagonal, diagonal] <= 0
    h[:, diagonal, diagonal] = np.where(dead, 1.0, h[:, diagonal, diagonal])  # an input never seen moves no error
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

    @property
    def ratio(self) -> float:
        return self.error_gptq / self.error_nearest if self.error_nearest > 0 else 1.0

    def line(self) -> str:
        samples = f"{self.samples} calibration sample{'' if self.samples == 1 else 's'}"
        return (f"weights rounded by GPTQ: {len(self.integers)} of {self.weights}, on the first {samples}; "
                f"their layers' output error there {self.ratio:.2f}× nearest rounding's")

    def to_dict(self) -> dict[str, Any]:
        return {"rounding": "gptq", "weights": sorted(self.integers), "of": self.weights, "samples": self.samples,
                "error_ratio": self.ratio}


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
                  progress: Callable[[float], None] | None = None, cancelled: Cancelled | None = None) -> Rounding:
    """Each weight GPTQ can round, rounded (see the module docstring), with the scales nearest rounding would use
    (:func:`~.place.weight_qparams`); ``progress`` gets the share of the weights done after each."""
    graph = model.graph
    first = data.first(ELEMENTS)
    result = Rounding({}, len({s.weight for s in placement.sites}), first.samples)
    targets = _targets(graph, placement)
    for chunk in _chunks(targets):
        part = {name: targets[name] for name in chunk}
        hessians(model, part, first, config.batch_size, cancelled)
        for name, hessian in part.items():
            if cancelled is not None and cancelled():
                raise QuantizeCancelled("quantization cancelled")
            _round(graph, name, hessian, config, result)
            if progress is not None:
                progress(len(result.integers) / max(len(targets), 1))
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
    weight = np.asarray(value, np.float32)
    params = weight_qparams(weight, hessian.sites[0], config)
    rows = _rows(weight, hessian.layout)
    scale, zero = _per_row(params.scale, rows.shape[:2]), _per_row(params.zero_point, rows.shape[:2])
    qtype = params.qtype
    order, u, damp = _factor(h64)  # h64 now reordered and damped: _error undoes both
    h = h64.astype(np.float32)  # enough to measure the errors by, at half the memory
    del h64
    levels = np.empty(rows.shape, np.float32)
    step = max(1, ROW_BYTES // (4 * rows.shape[0] * rows.shape[2]))
    for start in range(0, rows.shape[1], step):
        part, s, z = (a[:, start:start + step] for a in (rows, scale, zero))
        levels[:, start:start + step] = _gptq_rows(part, order, u, s, z, qtype.qmin, qtype.qmax)
        nearest = np.clip(np.rint(part / s[:, :, None].astype(np.float32)) + z[:, :, None], qtype.qmin, qtype.qmax)
        result.error_nearest += _error(part, nearest, s, z, h, order, damp)
        result.error_gptq += _error(part, levels[:, start:start + step], s, z, h, order, damp)
    result.integers[name] = _unrows(levels, weight.shape, hessian.layout).astype(qtype.numpy_type)
