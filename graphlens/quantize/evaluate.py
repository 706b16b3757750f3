"""Measuring a quantized model against its float model, per tensor and at the outputs.

Both models run on the same batches (one onnxruntime session each, intermediate tensors
exposed); for every quantized activation the float model's value ``x`` is compared with
``DQ(Q(x))`` computed in numpy (local) and with the quantized model's DequantizeLinear output
(accumulated); weights and biases are compared with their stored integers dequantized. The
numbers are those of :mod:`graphlens.quantize.errors`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, Cancelled, Progress, run_batches
from graphlens.quantize.errors import ErrorStats, stats_of
from graphlens.quantize.place import QuantizedTensor
from graphlens.quantize.qdq import dequantize, fake_quantize


@dataclass
class Measured:
    """Local and accumulated errors by record key, and the outputs' errors."""

    local: dict[str, ErrorStats] = field(default_factory=dict)
    accumulated: dict[str, ErrorStats] = field(default_factory=dict)
    outputs: dict[str, ErrorStats] = field(default_factory=dict)
    total: ErrorStats = field(default_factory=ErrorStats)
    """Every float graph output together: the output SQNR."""


def record_key(record: QuantizedTensor) -> str:
    return f"{record.tensor}@{record.node}" if record.kind == "bias" else record.tensor


def float_outputs(model: onnx.ModelProto) -> list[str]:
    return [v.name for v in model.graph.output if v.type.tensor_type.elem_type in (
        onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE, onnx.TensorProto.BFLOAT16)]


def measure(
    float_model: onnx.ModelProto,
    quantized_model: onnx.ModelProto,
    records: list[QuantizedTensor],
    data: CalibrationData,
    *,
    batch_size: int = 8,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
    reference: ModelRunner | None = None,
) -> Measured:
    """Every record's local and accumulated error, and the outputs', on ``data``.

    ``reference``: a session of ``float_model`` exposing every activation (the calibration's), reused.
    """
    result = Measured()
    for record in records:
        if record.float_value is not None and record.quantized_value is not None:
            stats = stats_of(record.float_value, dequantize(record.quantized_value, record.params))
            result.local[record_key(record)] = stats
            result.accumulated[record_key(record)] = stats
    activations = [r for r in records if r.kind == "activation"]
    outputs = float_outputs(float_model)
    ref = reference if reference is not None else ModelRunner(float_model, [r.tensor for r in activations])
    test = ModelRunner(quantized_model, [r.dequantized for r in activations])
    for runner, which in ((ref, "float"), (test, "quantized")):
        if runner.error is not None:
            raise GraphLensError(f"onnxruntime cannot run the {which} model: {runner.error}")
    for r in activations:
        result.local[r.tensor] = ErrorStats()
        result.accumulated[r.tensor] = ErrorStats()
    for name in outputs:
        result.outputs[name] = ErrorStats()
    for done, (a, b) in run_batches([ref, test], float_model, data, batch_size, cancelled):
        for r in activations:
            x = a[r.tensor]
            result.local[r.tensor].add(x, fake_quantize(x, r.params))
            result.accumulated[r.tensor].add(x, b[r.dequantized])
        for name in outputs:
            x, y = np.asarray(a[name], np.float64), np.asarray(b[name], np.float64)
            result.outputs[name].add(x, y)
            result.total.add(x, y)
        if progress is not None:
            progress(done / data.samples)
    return result
