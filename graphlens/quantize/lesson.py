"""The fake-quantization lesson: one tensor's numbers through scale, zero point, Q and DQ (Qt-free).

For one quantized tensor of a quantize preview: its float values (a weight's constant, or an
activation's values on the very calibration samples the quantizer used), the range the
calibration method gives, the scale and zero point computed from it with
:func:`~graphlens.quantize.qdq.scale_zero_point` (so the math is stated once, there), the formulas
filled in with those numbers, the representable values ``(q − z)·s`` to draw over the histogram,
a few values taken through ``x → q → x̂``, and the error ``x − x̂`` measured as every report does
(:mod:`~graphlens.numerics.metrics`). A per-channel weight is explained one output channel at a time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics.metrics import ErrorStats, error_stats
from graphlens.quantize.qdq import QParams, QType, dequantize, quantize, scale_zero_point, weight_params
from graphlens.rewrites.lesson_text import number, operand

if TYPE_CHECKING:
    from graphlens.numerics.samples import CalibrationData
    from graphlens.quantize.config import QuantConfig
    from graphlens.quantize.quantize import LayerError, QuantizeResult
    from graphlens.rewrites.lossy import LossyPreview

    Preview = LossyPreview[QuantConfig, QuantizeResult]

MAX_VALUES = 8_000_000
"""Activation values kept for the lesson; beyond this an even stride of them (the note says so)."""
BINS = 120


@dataclass
class QuantLesson:
    """What the lesson shows for one tensor (one channel of a per-channel weight)."""

    layer: LayerError
    values: np.ndarray = field(repr=False)
    """The float values explained, flat."""
    qtype: QType
    symmetric: bool
    method: str
    observed: tuple[float, float]
    """min and max of the values."""
    calibrated: tuple[float, float]
    """The range the scale comes from (the method's, for an activation; min/max for a weight)."""
    scale: float
    zero_point: int
    quantized: np.ndarray = field(repr=False)
    dequantized: np.ndarray = field(repr=False)
    error: ErrorStats
    channel: int | None = None
    channels: int = 1
    per_channel_scales: np.ndarray | None = field(default=None, repr=False)
    notes: list[str] = field(default_factory=list)

    @property
    def params(self) -> QParams:
        return QParams(np.asarray(self.scale, np.float32), np.asarray(self.zero_point, np.int64), self.qtype)

    @property
    def levels(self) -> np.ndarray:
        """Every representable value ``(q − z)·s``, q from q_min to q_max."""
        q = np.arange(self.qtype.qmin, self.qtype.qmax + 1)
        return dequantize(q, self.params)

    @property
    def clipped(self) -> int:
        """How many values fall outside the representable range (clipped, not rounded)."""
        low, high = float(self.levels[0]) - self.scale / 2, float(self.levels[-1]) + self.scale / 2
        return int(np.count_nonzero((self.values < low) | (self.values > high)))

    def histogram(self, bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
        """Counts and edges over the values and the representable range together."""
        lo = min(float(self.values.min(initial=0.0)), float(self.levels[0]))
        hi = max(float(self.values.max(initial=0.0)), float(self.levels[-1]))
        return np.histogram(self.values, bins=bins, range=(lo, hi if hi > lo else lo + 1.0))

    def examples(self, count: int = 6) -> list[tuple[float, int, float]]:
        """(x, q, x̂) for the smallest, largest, one near zero, the median and the worst-rounded values."""
        x = self.values
        if not x.size:
            return []
        picks = [int(np.argmin(x)), int(np.argmax(x)), int(np.argmin(np.abs(x))),
                 int(np.argsort(x)[x.size // 2]), int(np.argmax(np.abs(x - self.dequantized)))]
        rng = np.random.default_rng(0)
        picks += [int(i) for i in rng.integers(0, x.size, count)]
        chosen = list({float(x[i]): i for i in reversed(picks)}.values())[::-1]  # distinct values, first pick kept
        return [(float(x[i]), int(self.quantized[i]), float(self.dequantized[i])) for i in chosen[:count]]

    def formula_lines(self) -> list[str]:
        """The formulas of :mod:`graphlens.quantize.qdq` with this tensor's numbers filled in."""
        t, s, z = self.qtype, self.scale, self.zero_point
        lo, hi = self.calibrated
        wlo, whi = min(lo, 0.0), max(hi, 0.0)
        where = "" if self.channel is None else f" (channel {self.channel})"
        source = "min and max of the weight" + where if self.layer.kind == "weight" else f"{self.method} calibration"
        lines = [f"range ({source}): r_min = {number(lo)}, r_max = {number(hi)}"]
        if (wlo, whi) != (lo, hi):
            lines.append(f"widened to hold 0: r_min = {number(wlo)}, r_max = {number(whi)}")
        lines.append(f"{t.name}: q_min = {t.qmin}, q_max = {t.qmax}")
        if self.symmetric:
            m = max(abs(wlo), abs(whi))
            lines.append(f"m = max(|r_min|, |r_max|) = max({number(abs(wlo))}, {number(abs(whi))}) = {number(m)}")
            lines.append(f"s = 2m / (q_max − q_min) = 2 × {operand(m)} / ({t.qmax} − {operand(t.qmin)}) = {number(s)}")
            lines.append(f"z = {z}" + (" (signed: 0)" if t.signed else f" (unsigned: (q_min + q_max + 1) / 2 = {z})"))
        else:
            lines.append(f"s = (r_max − r_min) / (q_max − q_min) = ({number(whi)} − {operand(wlo)}) / "
                         f"({t.qmax} − {operand(t.qmin)}) = {number(s)}")
            lines.append(f"z = clip(round(q_min − r_min / s)) = "
                         f"clip(round({t.qmin} − {operand(wlo)} / {number(s)})) = {z}")
        lines.append(f"q = clip(round(x / {number(s)}) + {z}, {t.qmin}, {t.qmax})")
        lines.append(f"x′ = (q − {z}) × {number(s)}   (dequantized: what the next layer reads)")
        lines.append(f"representable: {number(float(self.levels[0]))} … {number(float(self.levels[-1]))} "
                     f"in steps of s = {number(s)}")
        return lines


def _qtype_of(layer: LayerError) -> QType:
    """The integer type the quantizer recorded for the tensor (``int8 narrow``, ``uint8``, ``int4``)."""
    found = re.fullmatch(r"(u?)int(\d+)( narrow)?", layer.dtype)
    if found is None:
        raise GraphLensError(f"cannot explain a tensor of type '{layer.dtype}'")
    return QType(int(found.group(2)), not found.group(1), bool(found.group(3)))


def _weight_axis(after: onnx.ModelProto, layer: LayerError) -> int | None:
    """The per-channel axis of the weight's DequantizeLinear in the quantized model (None: per tensor)."""
    if len(layer.scale) == 1:
        return None
    inits = {t.name for t in after.graph.initializer}
    scales = {t.name: numpy_helper.to_array(t) for t in after.graph.initializer
              if t.data_type == onnx.TensorProto.FLOAT}
    for node in after.graph.node:
        if (node.op_type == "DequantizeLinear" and node.input[0] in inits and len(node.input) > 1
                and node.input[1] in scales and np.array_equal(scales[node.input[1]].reshape(-1),
                                                               np.asarray(layer.scale, np.float32))):
            return next((a.i for a in node.attribute if a.name == "axis"), 1)
    raise GraphLensError(f"cannot find the DequantizeLinear of weight '{layer.tensor}'")


def _samples(preview: Preview) -> CalibrationData:
    """The samples the quantizer ran on, which a quantize preview always keeps."""
    assert preview.calibration is not None
    return preview.calibration


def weight_values(preview: Preview, layer: LayerError) -> np.ndarray:
    """The weight's float values, an initializer or a Constant node's (as Paddle2ONNX and dynamo write)."""
    found = next((t for t in preview.float_model.graph.initializer if t.name == layer.tensor), None)
    if found is not None:
        return numpy_helper.to_array(found).astype(np.float32)
    value = Model(preview.float_model).graph.constant_value(layer.tensor)
    if value is None:
        raise GraphLensError(f"weight '{layer.tensor}' is not a constant of the folded model")
    return np.asarray(value, np.float32)


def activation_values(preview: Preview, tensor: str) -> tuple[np.ndarray, list[str]]:
    """The float model's values at ``tensor`` on every calibration sample, flat (strided when huge)."""
    from graphlens.numerics.run import ModelRunner
    from graphlens.quantize.calibrate import run_batches

    runner = ModelRunner(preview.float_model, [tensor])
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model: {runner.error}")
    parts = [outputs[tensor].astype(np.float32).reshape(-1) for _, (outputs,), _ in
             run_batches([runner], preview.float_model, _samples(preview), preview.config.batch_size)]
    values = np.concatenate(parts) if parts else np.zeros(0, np.float32)
    notes = []
    if values.size > MAX_VALUES:
        step = -(-values.size // MAX_VALUES)
        notes.append(f"Every {step}th of {values.size:,} values shown.")
        values = values[::step]
    return values, notes


def tensor_lesson(preview: Preview, layer: LayerError, channel: int | None = None) -> QuantLesson:
    """The lesson for ``layer`` (a row of the preview's result); ``channel`` of a per-channel weight,
    default the one whose values quantize worst."""
    from graphlens.quantize.calibrate import collect_ranges

    config, qtype = preview.config, _qtype_of(layer)
    if layer.kind == "weight":
        w = weight_values(preview, layer)
        axis = _weight_axis(preview.after, layer)
        params = weight_params(w, qtype, symmetric=config.symmetric_weights, axis=axis)
        if axis is None:
            return _lesson(layer, w.reshape(-1), qtype, config.symmetric_weights, "minmax", _min_max(w), params)
        rows = np.moveaxis(w, axis, 0).reshape(w.shape[axis], -1)
        scales = np.asarray(params.scale, np.float64).reshape(-1)
        if channel is None:
            worst = [error_stats(r, dequantize(quantize(r, _channel(params, c)), _channel(params, c))).sqnr_db
                     for c, r in enumerate(rows)]
            channel = int(np.argmin(worst))
        if not 0 <= channel < len(rows):
            raise GraphLensError(f"there is no channel {channel}; the weight has channels 0–{len(rows) - 1}")
        row = rows[channel]
        lesson = _lesson(layer, row, qtype, config.symmetric_weights, "minmax", _min_max(row),
                         _channel(params, channel))
        lesson.channel, lesson.channels, lesson.per_channel_scales = channel, len(rows), scales
        lesson.notes += _rounding_note(preview, layer, axis, channel, quantize(row, _channel(params, channel)))
        return lesson
    values, notes = activation_values(preview, layer.tensor)
    ranges = collect_ranges(preview.float_model, [layer.tensor], _samples(preview), config)
    if layer.tensor not in ranges:
        raise GraphLensError(f"activation '{layer.tensor}' has no calibrated range")
    r = ranges[layer.tensor]
    params = scale_zero_point(r.low, r.high, qtype, config.symmetric_activations)
    lesson = _lesson(layer, values, qtype, config.symmetric_activations, r.method or config.method, (r.low,
                     r.high), params)
    lesson.notes += notes
    return lesson


def _rounding_note(preview: Preview, layer: LayerError, axis: int, channel: int,
                   nearest: np.ndarray) -> list[str]:
    """When the model's integers of this weight came from GPTQ: how many of the channel's differ from the nearest
    rounding the lesson shows."""
    rounding = preview.result.rounding
    stored = None if rounding is None else rounding.integers.get(layer.tensor)
    if stored is None:
        return []
    row = np.moveaxis(stored, axis, 0).reshape(stored.shape[axis], -1)[channel].astype(np.int64)
    off = int((row != nearest.reshape(-1)).sum())
    return [f"The model stores GPTQ's integers, not these: {off} of this channel's {row.size} values sit off nearest "
            "rounding, so the layer's output loses less (docs/quantize.md, \"Weight rounding\")."]


def _min_max(values: np.ndarray) -> tuple[float, float]:
    return (float(values.min()), float(values.max())) if values.size else (0.0, 0.0)


def _channel(params: QParams, c: int) -> QParams:
    return QParams(np.asarray(params.scale).reshape(-1)[c], np.asarray(params.zero_point).reshape(-1)[c], params.qtype)


def _lesson(layer: LayerError, values: np.ndarray, qtype: QType, symmetric: bool, method: str,
            calibrated: tuple[float, float], params: QParams) -> QuantLesson:
    values = np.asarray(values, np.float32).reshape(-1)
    q = quantize(values, params)
    x_hat = dequantize(q, params)
    return QuantLesson(layer, values, qtype, symmetric, method, _min_max(values), calibrated,
                       float(np.asarray(params.scale).reshape(())), int(np.asarray(params.zero_point).reshape(())),
                       q, x_hat, error_stats(values, x_hat))
