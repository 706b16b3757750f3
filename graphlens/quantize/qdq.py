"""The quantization math, stated once: a range to a scale and zero point, and back.

For a b-bit integer type with limits ``[q_min, q_max]`` (int8 −128..127, narrow −127..127,
uint8 0..255, int4 −8..7, narrow −7..7, uint4 0..15) and a calibrated range ``[r_min, r_max]``,
first widened to hold 0 (so that zero, padding and ReLU's floor, is exact):

- asymmetric: ``s = (r_max − r_min) / (q_max − q_min)``, ``z = clip(round(q_min − r_min / s))``;
- symmetric: ``m = max(|r_min|, |r_max|)``, ``s = 2m / (q_max − q_min)``, ``z = 0`` for signed
  types and ``(q_min + q_max + 1) / 2`` (128 for uint8) for unsigned ones;
- a range of zero width gets ``s = 1`` (any scale represents an all-zero tensor exactly).

``q = clip(round_half_even(x / s) + z, q_min, q_max)`` is ONNX's QuantizeLinear (x / s in
float32, as onnxruntime computes it); ``x̂ = (q − z) · s`` its DequantizeLinear; the difference
``x − x̂`` is the quantization error every report measures. A bias is quantized to int32 with
``s_b = s_x · s_w`` (per output channel when the weight is) and ``z_b = 0``, so that the integer
kernel can add it to the int32 accumulator Σ q_x · q_w directly. Per channel, ``s`` and ``z``
are vectors along the weight's output-channel axis: 0 for Conv ``[C_out, C_in/g, k…]``, 1 for
ConvTranspose ``[C_in, C_out/g, k…]`` (so output channel ``o`` uses scale ``o mod C_out/g``, and
the bias's scale repeats the weight's ``g`` times), 1 for Gemm with ``transB=0`` and MatMul
``[K, N]``, 0 for Gemm with ``transB=1``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphlens.numerics.metrics import ErrorStats

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@dataclass(frozen=True)
class QType:
    """An integer type for quantized values: its bits, sign and (narrow) range."""

    bits: int
    signed: bool
    narrow: bool = False

    @property
    def qmin(self) -> int:
        return -(2 ** (self.bits - 1)) + (1 if self.narrow else 0) if self.signed else 0

    @property
    def qmax(self) -> int:
        return int(2 ** (self.bits - 1) - 1 if self.signed else 2**self.bits - 1)

    @property
    def onnx_type(self) -> int:
        return {(8, True): TensorProto.INT8, (8, False): TensorProto.UINT8,
                (4, True): TensorProto.INT4, (4, False): TensorProto.UINT4}[(self.bits, self.signed)]

    @property
    def numpy_type(self) -> type:
        return np.int8 if self.signed else np.uint8

    @property
    def name(self) -> str:
        return f"{'' if self.signed else 'u'}int{self.bits}" + (" narrow" if self.narrow else "")


@dataclass(frozen=True)
class QParams:
    """Scale and zero point of one tensor: scalars, or vectors along ``axis`` (per channel)."""

    scale: np.ndarray
    zero_point: np.ndarray
    qtype: QType
    axis: int | None = None

    @property
    def per_channel(self) -> bool:
        return self.axis is not None


def scale_zero_point(rmin: np.ndarray | float, rmax: np.ndarray | float, qtype: QType, symmetric: bool,
                     axis: int | None = None) -> QParams:
    """Scale and zero point for the range ``[rmin, rmax]`` (see the module docstring)."""
    lo = np.minimum(np.asarray(rmin, np.float64), 0.0)
    hi = np.maximum(np.asarray(rmax, np.float64), 0.0)
    qmin, qmax = qtype.qmin, qtype.qmax
    if symmetric:
        m = np.maximum(np.abs(lo), np.abs(hi))
        scale = 2.0 * m / (qmax - qmin)
        zero = np.full(scale.shape, 0 if qtype.signed else (qmin + qmax + 1) // 2, np.float64)
    else:
        scale = (hi - lo) / (qmax - qmin)
        safe = np.where(scale > 0, scale, 1.0)
        zero = np.clip(np.rint(qmin - lo / safe), qmin, qmax)
    scale = np.where(scale > 0, scale, 1.0).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(np.finfo(np.float32).tiny))  # float32 underflow of a tiny range
    return QParams(scale, zero.astype(np.int64), qtype, axis)


def _broadcast(values: np.ndarray, ndim: int, axis: int | None) -> np.ndarray:
    if axis is None or values.ndim == 0:
        return values
    shape = [1] * ndim
    shape[axis] = values.size
    return values.reshape(shape)


def _levels(x: np.ndarray, params: QParams) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``clip(round(x / s) + z)`` as float32, with ``s`` and ``z`` broadcast along the axis.

    Exact in float32 for every type here (at most 8 bits): ``round(x / s)`` is an integer, and
    past 2^24, where float32 stops holding every integer, it is clipped to ``q_max`` anyway.
    """
    x = np.asarray(x, np.float32)
    scale = _broadcast(params.scale.astype(np.float32), x.ndim, params.axis)
    zero = _broadcast(params.zero_point.astype(np.float32), x.ndim, params.axis)
    q = np.asarray(np.rint(x / scale), np.float32)  # an array even for a 0-d x, so the steps below work in place
    q += zero
    np.clip(q, params.qtype.qmin, params.qtype.qmax, out=q)
    return q, scale, zero


def quantize(x: np.ndarray, params: QParams) -> np.ndarray:
    """ONNX QuantizeLinear in numpy: integers (as int64) in ``[q_min, q_max]``."""
    return _levels(x, params)[0].astype(np.int64)


def dequantize(q: np.ndarray, params: QParams) -> np.ndarray:
    """ONNX DequantizeLinear in numpy: ``(q − z) · s`` in float32."""
    scale = _broadcast(params.scale.astype(np.float32), q.ndim, params.axis)
    zero = _broadcast(params.zero_point, q.ndim, params.axis)
    values: np.ndarray = ((q - zero).astype(np.float32) * scale).astype(np.float32)
    return values


ROWS_BYTES = 32 * 2**20
"""Bytes of a weight quantized or compared at a time: its float temporaries stay this size, not the weight's."""


def row_blocks(x: np.ndarray, params: QParams) -> Iterator[tuple[slice, QParams]]:
    """Slices of ``x``'s first axis of about :data:`ROWS_BYTES`, each with the parameters of its rows
    (per-channel ones cut along with them when the channels are on axis 0)."""
    rows = x.shape[0]
    step = max(1, ROWS_BYTES // max(1, x[:1].nbytes))
    for start in range(0, rows, step):
        part = slice(start, min(rows, start + step))
        if params.axis == 0 and np.ndim(params.scale):
            yield part, QParams(params.scale[part], params.zero_point[part], params.qtype, 0)
        else:
            yield part, params


def quantize_stored(x: np.ndarray, params: QParams) -> np.ndarray:
    """:func:`quantize` in the type the integers are stored in (int8/uint8; int4 values too), a block of rows at
    a time: a weight's quantization needs its integers and one block of float temporaries, not copies of it."""
    x = np.asarray(x)
    if x.ndim == 0:
        return quantize(x, params).astype(params.qtype.numpy_type)
    out: np.ndarray = np.empty(x.shape, params.qtype.numpy_type)
    for part, block in row_blocks(x, params):
        out[part] = _levels(x[part], block)[0]
    return out


def stored_error(x: np.ndarray, q: np.ndarray, params: QParams) -> ErrorStats:
    """The error of ``x`` stored as ``q`` (``x`` against ``dequantize(q)``), a block of rows at a time."""
    stats = ErrorStats(fast=True)
    if np.ndim(x) == 0:
        stats.add(np.asarray(x, np.float32).reshape(1), dequantize(np.asarray(q), params).reshape(1))
        return stats
    for part, block in row_blocks(q, params):
        stats.add(np.asarray(x[part], np.float32), dequantize(q[part], block))
    return stats


def fake_quantize(x: np.ndarray, params: QParams) -> np.ndarray:
    """``x̂``: what the consumers of a quantized tensor see, ``dequantize(quantize(x))`` without leaving float32.

    ``(clip(round(x / s) + z) − z) · s`` computed as ``clip(round(x / s), q_min − z, q_max − z) · s`` in one array:
    the same values (every step before the product is an integer exact in float32, see :func:`_levels`), in four
    passes over ``x`` instead of six and two copies (the error report takes it of every activation)."""
    x = np.asarray(x, np.float32)
    scale = _broadcast(params.scale.astype(np.float32), x.ndim, params.axis)
    zero = _broadcast(params.zero_point.astype(np.float32), x.ndim, params.axis)
    q = np.asarray(np.divide(x, scale), np.float32)  # an array even for a 0-d x, so the steps below work in place
    np.rint(q, out=q)
    np.clip(q, params.qtype.qmin - zero, params.qtype.qmax - zero, out=q)
    q *= scale
    return q


def weight_params(w: np.ndarray, qtype: QType, *, symmetric: bool, axis: int | None) -> QParams:
    """A weight's scale and zero point from its own min and max (per channel along ``axis``)."""
    w = np.asarray(w)
    w = w if w.dtype.kind == "f" else w.astype(np.float64)  # min and max are exact in the weight's own type
    if axis is None:
        return scale_zero_point(w.min(initial=0.0), w.max(initial=0.0), qtype, symmetric)
    others = tuple(i for i in range(w.ndim) if i != axis)
    return scale_zero_point(w.min(axis=others, initial=0.0), w.max(axis=others, initial=0.0), qtype, symmetric, axis)


def bias_params(x_scale: np.ndarray, w_params: QParams, channels: int) -> QParams:
    """int32 bias parameters: ``s_b = s_x · s_w`` per output channel (the weight's scales repeated
    to ``channels``, for a grouped ConvTranspose), ``z_b = 0``."""
    s_w = np.asarray(w_params.scale, np.float64).reshape(-1)
    if s_w.size not in (1, channels):
        s_w = np.tile(s_w, channels // s_w.size)
    scale = (float(np.asarray(x_scale).reshape(())) * s_w).astype(np.float32)
    scale = np.where(scale > 0, scale, np.float32(1.0))
    axis = 0 if scale.size > 1 else None
    scale = scale if axis is not None else scale.reshape(())
    return QParams(scale, np.zeros(scale.shape, np.int64), QType(32, True), axis)


def quantize_bias(b: np.ndarray, params: QParams) -> np.ndarray:
    scale = params.scale.astype(np.float64)
    return np.clip(np.rint(np.asarray(b, np.float64) / scale), INT32_MIN, INT32_MAX).astype(np.int32)


# ------------------------------------------------------------------------------ ONNX tensors
def integer_tensor(name: str, values: np.ndarray, qtype: QType) -> TensorProto:
    """An initializer of ``qtype`` (int4/uint4 packed two to a byte by onnx.helper)."""
    values = np.asarray(values)
    if qtype.bits == 32:
        return numpy_helper.from_array(values.astype(np.int32), name)
    if qtype.bits == 4:
        return helper.make_tensor(name, qtype.onnx_type, list(values.shape),
                                  values.astype(np.int64).reshape(-1).tolist())
    return numpy_helper.from_array(values.astype(qtype.numpy_type), name)


def scale_tensor(name: str, params: QParams) -> TensorProto:
    return numpy_helper.from_array(np.asarray(params.scale, np.float32).reshape(np.shape(params.scale)), name)


def zero_point_tensor(name: str, params: QParams) -> TensorProto:
    return integer_tensor(name, np.asarray(params.zero_point).reshape(np.shape(params.zero_point)), params.qtype)


def dq_node(name: str, inputs: list[str], output: str, params: QParams) -> onnx.NodeProto:
    node = helper.make_node("DequantizeLinear", inputs, [output], name=name)
    if params.axis is not None:
        node.attribute.append(helper.make_attribute("axis", params.axis))
    return node


def q_node(name: str, inputs: list[str], output: str) -> onnx.NodeProto:
    return helper.make_node("QuantizeLinear", inputs, [output], name=name)
