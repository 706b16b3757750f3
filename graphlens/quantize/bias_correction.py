"""Bias correction: each quantized layer's mean output shift, measured on the calibration samples,
moved into its bias (Nagel et al. 2019, "Data-Free Quantization", §4.2, empirical version; AIMET's
empirical bias correction).

Rounding weights and inputs is not zero-mean per output channel: a layer ``y = W ⊛ x + b`` quantized
gives ``ŷ = Ŵ ⊛ x̂ + b``, and ``E[ŷ − y]`` over the samples and positions is a per-channel offset
that every later layer inherits. One pass over the samples measures it for every layer at once:
a scratch copy of the quantized model gets, next to each quantized layer, a float twin reading
the same input before its QuantizeLinear and the float weight and bias, so

    shift_c = mean over samples and positions of (ŷ_c − y_c)

is the layer's own shift in the quantized model (an earlier layer's shift, present in both, cancels;
the twin reads the layer's own rounded bias, so the bias's rounding is not counted twice).
The layer's bias becomes ``b − shift`` before it is quantized (int32, scale ``s_x·s_w``); a Conv,
ConvTranspose or Gemm without a bias gets one. Channels are axis 1 for Conv and ConvTranspose, the
last axis for Gemm and MatMul. The report gives, per corrected layer, the shift's RMS over channels
relative to the layer output's RMS, before and after (the after measured again the same way).
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.task import Task
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats, finite
from graphlens.numerics.metrics import power as signal_power
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, run_batches
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import Placement, apply_quantization, scratch_model
from graphlens.quantize.qdq import QParams

CORRECTED_OPS = ("Conv", "ConvTranspose", "Gemm")
"""MatMul has no bias input; its shift is measured but not moved."""


@dataclass
class Shifts:
    """Per layer: the mean output shift per channel, and its size relative to the output."""

    shift: dict[str, np.ndarray] = field(default_factory=dict)
    relative: dict[str, float] = field(default_factory=dict)
    """Layer -> RMS over channels of the shift / RMS of the float output."""
    positions: dict[str, int] = field(default_factory=dict)
    """Layer -> values per channel the mean is over (samples × positions)."""
    outputs: dict[str, ErrorStats] = field(default_factory=dict)
    """The quantized model's outputs against the float model's, by output."""
    reference: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    """The float outputs, flattened in sample order."""


@dataclass
class BiasCorrection:
    """What bias correction did: the layers corrected and their relative shift before and after."""

    before: dict[str, float]
    after: dict[str, float]
    sqnr_without_db: float = float("nan")
    """Output SQNR on the calibration samples, uncorrected and corrected."""
    sqnr_with_db: float = float("nan")
    samples: int = 0
    """Calibration samples the shifts were measured on."""

    @property
    def kept(self) -> bool:
        """Whether the corrections went in: only where they raise the output SQNR."""
        return self.sqnr_with_db > self.sqnr_without_db

    @property
    def layers(self) -> list[str]:
        return list(self.before)

    def mean(self, which: dict[str, float]) -> float:
        return float(np.mean(list(which.values()))) if which else 0.0

    def line(self) -> str:
        if not self.before:
            return "bias correction: no layer to correct (it moves the mean output shift of Conv, ConvTranspose, Gemm)"
        verdict = "applied" if self.kept else "not applied (it did not raise the output SQNR)"
        samples = f"{self.samples or 'the'} calibration sample{'' if self.samples == 1 else 's'}"
        return (f"bias correction {verdict}: {len(self.before)} layers, mean output shift "
                f"{100 * self.mean(self.before):.2f}% of the output before, {100 * self.mean(self.after):.2f}% after; "
                f"output SQNR on {samples} {self.sqnr_without_db:.1f} dB without, "
                f"{self.sqnr_with_db:.1f} dB with")

    def to_dict(self) -> dict[str, Any]:
        return {"applied": self.kept, "layers": {n: {"before": self.before[n], "after": self.after.get(n)}
                                                 for n in self.before},
                "mean_before": self.mean(self.before), "mean_after": self.mean(self.after),
                "sqnr_without_db": finite(self.sqnr_without_db), "sqnr_with_db": finite(self.sqnr_with_db),
                "samples": self.samples}


def measure_shifts(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
                   config: QuantConfig, data: CalibrationData, constant: Callable[[str], np.ndarray | None], *,
                   bias_shift: dict[str, np.ndarray] | None = None, reference: dict[str, np.ndarray] | None = None,
                   residual: bool = False, task: Task | None = None) -> Shifts:
    """Every quantized layer's own mean output shift (see the module docstring) with ``bias_shift`` applied;
    ``residual``: what is left of it, the corrected bias's rounding included. Also the quantized model's
    output error against ``reference``, the float outputs flattened in sample order (run here when not given).

    One session at a time: the float model's (for ``reference``), released before the twin model's is made;
    the twin model's protobuf is dropped once its session has it (a large one is staged as files)."""
    from graphlens.quantize.equalization import flat_outputs

    names = float_outputs(float_proto)
    if reference is None:
        reference = flat_outputs(float_proto, data, config, task)
    runner, pairs, shell = _twin_session(float_proto, placement, params, config, constant, bias_shift, residual)
    gc.collect()  # the scratch model (its graph and nodes refer to each other) and the twin protobuf
    if runner.error is not None:
        return Shifts()
    result = Shifts(reference=reference)
    quantized: dict[str, list[np.ndarray]] = {n: [] for n in names}
    sums: dict[str, list[Any]] = {}
    for batch in run_batches([runner], shell, data, config.batch_size, task):
        out = batch.outputs[0]
        for node, (layer_out, twin, axis) in pairs.items():
            y, y_hat = _channels_last(out[twin], axis), _channels_last(out[layer_out], axis)
            acc = sums.setdefault(node, [0.0, 0, 0.0])
            acc[0] = acc[0] + (y_hat - y).astype(np.float64).sum(axis=0)
            acc[1] += y.shape[0]
            acc[2] += signal_power(y)
        for n in names:
            quantized[n].append(np.ravel(out[n]))
    for n in names:
        result.outputs.setdefault(n, ErrorStats()).add(reference[n], np.concatenate(quantized[n]))
    for node, (total, count, power) in sums.items():
        if count:
            shift = np.asarray(total, np.float64) / count
            result.shift[node] = shift.astype(np.float32)
            result.positions[node] = count
            rms = np.sqrt(power / (count * shift.size)) if power > 0 else 0.0
            result.relative[node] = float(np.sqrt(np.mean(shift ** 2)) / rms) if rms > 0 else 0.0
    return result


def _twin_session(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
                  config: QuantConfig, constant: Callable[[str], np.ndarray | None],
                  bias_shift: dict[str, np.ndarray] | None, residual: bool,
                  ) -> tuple[ModelRunner, dict[str, tuple[str, str, int]], onnx.ModelProto]:
    """A session of the quantized model with its float twins, the layer pairs, and the model's inputs alone
    (what batching the samples needs)."""
    scratch = scratch_model(float_proto)
    apply_quantization(scratch, placement, params, config, bias_shift=bias_shift, keep_values=False)
    proto = onnx.ModelProto.FromString(scratch.serialize())
    del scratch
    pairs = _add_twins(proto, placement, constant, own_bias=not residual)
    runner = ModelRunner(proto, [t for pair in pairs.values() for t in pair[:2]])
    shell = onnx.ModelProto()
    shell.graph.input.extend(proto.graph.input)
    return runner, pairs, shell


def _channels_last(y: np.ndarray, axis: int) -> np.ndarray:
    """``y`` as (positions, channels)."""
    return np.moveaxis(np.asarray(y), axis, -1).reshape(-1, y.shape[axis])


def _add_twins(proto: onnx.ModelProto, placement: Placement, constant: Callable[[str], np.ndarray | None], *,
               own_bias: bool) -> dict[str, tuple[str, str, int]]:
    """Next to each quantized layer, its float twin; layer -> (its output, the twin's, channel axis).

    ``own_bias``: the twin reads the layer's own (quantized) bias, so the shift is the weights' and
    input's alone, the one to correct (the bias is rounded once, after); else the float bias, so the
    shift is all that is left."""
    graph = proto.graph
    by_name = {n.name: n for n in graph.node}
    producer = {o: n for n in graph.node for o in n.output}
    pairs: dict[str, tuple[str, str, int]] = {}
    for k, site in enumerate(placement.sites):
        node = by_name.get(site.node)
        dq = producer.get(node.input[0]) if node is not None else None
        if node is None or dq is None or dq.op_type != "DequantizeLinear":
            continue
        q = producer.get(dq.input[0])
        weight = constant(site.weight)
        if q is None or q.op_type != "QuantizeLinear" or weight is None:
            continue
        inputs = [q.input[0], f"__twin{k}_weight"]
        graph.initializer.append(numpy_helper.from_array(np.asarray(weight), inputs[1]))
        bias = constant(site.bias) if site.bias else None
        given = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if not own_bias and bias is not None:
            inputs.append(f"__twin{k}_bias")
            graph.initializer.append(numpy_helper.from_array(np.asarray(bias), inputs[2]))
        elif given is not None and (own_bias or getattr(producer.get(given), "op_type", "") != "DequantizeLinear"):
            inputs.append(given)  # its own quantized bias, or a bias that is not a constant (in both models)
        twin = onnx.helper.make_node(node.op_type, inputs, [f"__twin{k}_out"], name=f"__twin{k}")
        twin.attribute.extend(node.attribute)
        graph.node.append(twin)
        axis = 1 if node.op_type in ("Conv", "ConvTranspose") else -1
        pairs[site.node] = (node.output[0], twin.output[0], axis)
    return pairs


def correctable(placement: Placement, shifts: Shifts) -> dict[str, np.ndarray]:
    """The shifts that can be moved into a bias (not MatMul's)."""
    ops = {s.node: s.op_type for s in placement.sites}
    return {n: s for n, s in shifts.shift.items() if ops.get(n) in CORRECTED_OPS}
