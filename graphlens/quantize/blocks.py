"""Block-wise weight quantization of a MatMul weight ``W [K, N]``, and the two ways it is stored.

The math: the K rows are cut into ``nb = ceil(K / B)`` blocks of ``B`` rows (the last one padded with
zeros); block ``j`` of column ``n`` (rows ``jB .. jB + B − 1``) gets its own scale and zero point from
its min and max by :func:`~graphlens.quantize.qdq.scale_zero_point`, the same formulas as a
per-channel weight (the range widened to hold 0, so the zero padding changes no scale), and
``q = clip(round(w / s) + z)``, ``ŵ = (q − z) · s`` as :func:`~graphlens.quantize.qdq.quantize`
computes them. Symmetric blocks are signed (int4 −8..7, narrow −7..7) with ``z = 0``; asymmetric
ones unsigned (uint4 0..15) with a zero point per block.

The layouts (two 4-bit values a byte, the first in the low nibble):

- ONNX ``DequantizeLinear`` (opset 21) with ``axis = 0, block_size = B``: ``x`` int4/uint4
  ``[K, N]`` row-major, ``x_scale`` float ``[nb, N]``, ``x_zero_point`` of ``x``'s type ``[nb, N]``
  (asymmetric only); the operator takes ``ceil(K / B)`` blocks itself, so K is not padded;
- onnxruntime's ``com.microsoft.MatMulNBits`` (attributes ``K, N, bits, block_size``): ``B`` uint8
  ``[N, nb, B · bits / 8]``, each column's values padded to ``nb · B`` rows and stored unsigned
  (a signed ``q`` as ``q + 2^(bits−1)``, the op's zero point when none is given); ``scales`` float
  ``[N, nb]``; ``zero_points`` uint8 ``[N, ceil(nb · bits / 8)]`` (asymmetric only; for 4 bits block
  ``2i`` in the low nibble of byte ``i``, each column starting on a byte).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from graphlens.numerics.metrics import ErrorStats
from graphlens.quantize.qdq import QParams, QType, dequantize, quantize, scale_zero_point

COLUMNS_AT_ONCE = 4096
"""Columns quantized together: bounds the float temporaries of a large weight (an LM head) to a few
hundred MB."""


@dataclass(frozen=True)
class BlockQuantized:
    """A weight quantized in blocks along K: integers ``[K, N]``, scales and zero points ``[nb, N]``."""

    values: np.ndarray
    """``q``, int8 (signed types) or uint8 (unsigned), ``[K, N]``."""
    scale: np.ndarray
    zero_point: np.ndarray
    qtype: QType
    block_size: int
    error: ErrorStats
    """``W`` against ``ŵ``: the local error of the weight (see :mod:`graphlens.quantize.evaluate`)."""

    @property
    def k(self) -> int:
        return int(self.values.shape[0])

    @property
    def n(self) -> int:
        return int(self.values.shape[1])

    @property
    def blocks(self) -> int:
        return int(self.scale.shape[0])

    def dequantized(self) -> np.ndarray:
        """``ŵ [K, N]`` in float32, as DequantizeLinear and MatMulNBits compute it."""
        out = np.empty(self.values.shape, np.float32)
        for cols, params in self._column_params():
            q = _blocked(self.values[:, cols], self.block_size, fill=0)
            out[:, cols] = _unblocked(dequantize(q, params), self.k)
        return out

    def _column_params(self) -> Iterator[tuple[slice, QParams]]:
        for start in range(0, self.n, COLUMNS_AT_ONCE):
            cols = slice(start, min(self.n, start + COLUMNS_AT_ONCE))
            yield cols, QParams(self.scale[:, None, cols], self.zero_point[:, None, cols], self.qtype)


def _blocked(w: np.ndarray, block: int, fill: float | int = 0) -> np.ndarray:
    """``[K, C]`` as ``[nb, B, C]``, the last block padded with ``fill``."""
    k = w.shape[0]
    nb = -(-k // block)
    if nb * block != k:
        pad = np.full((nb * block - k, *w.shape[1:]), fill, w.dtype)
        w = np.concatenate([w, pad])
    return w.reshape(nb, block, *w.shape[1:])


def _unblocked(w: np.ndarray, k: int) -> np.ndarray:
    return w.reshape(-1, *w.shape[2:])[:k]


def quantize_blocks(w: np.ndarray, qtype: QType, block_size: int, *, symmetric: bool) -> BlockQuantized:
    """Quantize ``w [K, N]`` in blocks of ``block_size`` rows (see the module docstring)."""
    if w.ndim != 2:
        raise ValueError(f"a block-quantized weight is [K, N], not {list(w.shape)}")
    k, n = w.shape
    nb = -(-k // block_size)
    values = np.empty((k, n), np.int8 if qtype.signed else np.uint8)
    scale = np.empty((nb, n), np.float32)
    zero = np.empty((nb, n), np.int64)
    error = ErrorStats(fast=True)
    for start in range(0, n, COLUMNS_AT_ONCE):
        cols = slice(start, min(n, start + COLUMNS_AT_ONCE))
        part = np.asarray(w[:, cols], np.float32)
        blocks = _blocked(part, block_size)
        params = scale_zero_point(blocks.min(axis=1), blocks.max(axis=1), qtype, symmetric)
        scale[:, cols], zero[:, cols] = params.scale, params.zero_point
        shaped = QParams(params.scale[:, None, :], params.zero_point[:, None, :], qtype)
        q = quantize(blocks, shaped)
        dq = dequantize(q, shaped)
        if blocks.size == part.size:  # no padding: compared as blocks, without copying them back
            error.add(blocks, dq)
        else:
            error.add(part, _unblocked(dq, k))
        values[:, cols] = _unblocked(q, k)
    return BlockQuantized(values, scale, zero, qtype, block_size, error)


# ------------------------------------------------------------------------------ storage
def pack_nibbles(values: np.ndarray) -> np.ndarray:
    """4-bit values (their low nibbles), flattened, two a byte, the first in the low nibble."""
    flat = np.asarray(values).reshape(-1).astype(np.uint8) & 0x0F
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return (flat[0::2] | (flat[1::2] << 4)).astype(np.uint8)


def _typed(name: str, values: np.ndarray, qtype: QType) -> TensorProto:
    """An int4/uint4/int8/uint8 initializer from raw bytes (a Python list per element would not fit an LM head)."""
    dims = list(values.shape)
    if qtype.bits == 4:
        return helper.make_tensor(name, qtype.onnx_type, dims, pack_nibbles(values).tobytes(), raw=True)
    return numpy_helper.from_array(np.asarray(values).astype(qtype.numpy_type), name)


def qdq_tensors(bq: BlockQuantized, weight: str, scale: str, zero_point: str | None, *,
                transposed: bool = False) -> list[TensorProto]:
    """DequantizeLinear's inputs: the weight, the scales and (when named) the zero points; ``transposed``:
    stored ``[N, K]`` and ``[N, nb]``, for ``axis = 1`` (a Gemm's ``transB`` weight)."""
    def laid(a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a.T) if transposed else a

    out = [_typed(weight, laid(bq.values), bq.qtype), numpy_helper.from_array(laid(bq.scale), scale)]
    if zero_point is not None:
        out.append(_typed(zero_point, laid(bq.zero_point), bq.qtype))
    return out


def matmulnbits_arrays(bq: BlockQuantized, *,
                       with_zero_point: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """MatMulNBits's ``B``, ``scales`` and ``zero_points`` (None: the op's default ``2^(bits−1)``)."""
    offset = 2 ** (bq.qtype.bits - 1) if bq.qtype.signed else 0
    if bq.qtype.signed and with_zero_point:
        raise ValueError("MatMulNBits stores unsigned values: a signed weight takes the default zero point")
    unsigned = (bq.values.astype(np.int16) + offset).astype(np.uint8)
    blocked = _blocked(unsigned, bq.block_size, fill=offset)  # [nb, B, N]; padding at the zero point: ŵ = 0
    tail = bq.k - (bq.blocks - 1) * bq.block_size
    if not bq.qtype.signed and tail < bq.block_size:
        blocked[-1, tail:, :] = bq.zero_point[-1, :].astype(np.uint8)
    columns = np.ascontiguousarray(blocked.transpose(2, 0, 1))  # [N, nb, B]
    packed = pack_nibbles(columns).reshape(bq.n, bq.blocks, bq.block_size // 2) if bq.qtype.bits == 4 else columns
    scales = np.ascontiguousarray(bq.scale.T)
    if not with_zero_point:
        return packed, scales, None
    zeros = np.ascontiguousarray(bq.zero_point.T).astype(np.uint8)  # [N, nb]
    if bq.qtype.bits == 4:
        if bq.blocks % 2:
            zeros = np.concatenate([zeros, np.zeros((bq.n, 1), np.uint8)], axis=1)
        zeros = pack_nibbles(zeros).reshape(bq.n, -1)
    return packed, scales, zeros


def stored_bytes(tensors: list[TensorProto]) -> int:
    """Bytes the tensors take in the file (their raw data)."""
    return sum(len(t.raw_data) for t in tensors)
