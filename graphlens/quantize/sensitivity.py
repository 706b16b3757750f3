"""Which layers the output SQNR is sensitive to, and leaving the worst ones float.

One *gated* copy of the quantized model answers every question with one onnxruntime session:
each quantized tensor ``t`` is read through ``Where(gate_t, DQ(Q(t)), t)``, with ``gate_t`` a
boolean graph input. A layer's gates are those of its tensors (weight, bias, input and output
activations). Then, on the evaluation samples:

- *alone quantized*: only that layer's gates on; the output SQNR (against all gates off, the
  float model) is the layer's ``sensitivity_db`` (lower: the layer hurts more);
- *alone float*: every gate on but that layer's; the gain over all on is what leaving it float buys;
- :func:`exclude_until`: leave layers float, largest gain first, until the output SQNR reaches
  the target (a tensor another quantized layer still reads stays quantized).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, Cancelled, Progress, QuantizeCancelled
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.errors import ErrorStats
from graphlens.quantize.evaluate import float_outputs
from graphlens.quantize.place import Placement, QuantizedTensor, build_edits
from graphlens.quantize.qdq import QParams
from graphlens.rewrites.driver import cleanup_edits
from graphlens.rewrites.edit import RewriteSession


@dataclass
class Scan:
    """Per layer: output SQNR alone quantized and alone float; the layers left float for a target."""

    per_node: dict[str, dict[str, float]] = field(default_factory=dict)
    all_quantized_db: float = float("nan")
    excluded: list[str] = field(default_factory=list)
    reached_db: float | None = None


def gated_model(quantized: onnx.ModelProto, records: list[QuantizedTensor]) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``quantized`` whose every record is switched by a boolean input (one per record)."""
    model = onnx.ModelProto()
    model.CopyFrom(quantized)
    graph = model.graph
    by_output = {o: i for i, n in enumerate(graph.node) for o in n.output}
    by_name = {n.name: n for n in graph.node}
    gates: list[str] = []
    inserts: list[tuple[int, onnx.NodeProto]] = []
    for k, record in enumerate(records):
        index = by_output.get(record.dequantized)
        if index is None:
            continue
        dq = graph.node[index]
        if record.kind == "activation":
            q = next(n for n in by_name.values() if n.op_type == "QuantizeLinear" and n.output[0] == dq.input[0])
            source = q.input[0]
        else:
            source = f"{record.dequantized}__float{k}"
            graph.initializer.append(numpy_helper.from_array(np.asarray(record.float_value, np.float32), source))
        gate, switched = f"__gate{k}", f"{record.dequantized}__q{k}"
        dq.output[0] = switched
        graph.input.append(helper.make_tensor_value_info(gate, TensorProto.BOOL, []))
        inserts.append((index, helper.make_node("Where", [gate, switched, source], [record.dequantized],
                                                name=f"__where{k}")))
        gates.append(gate)
    for index, node in sorted(inserts, key=lambda p: -p[0]):
        graph.node.insert(index + 1, node)
    return model, gates


def _output_sqnr(runner: ModelRunner, model: onnx.ModelProto, data: CalibrationData, gates: dict[str, bool],
                 reference: list[dict[str, np.ndarray]], batch_size: int, cancelled: Cancelled | None) -> float:
    total = ErrorStats()
    outputs = float_outputs(model)
    with_gates = CalibrationData({**data.arrays, **{g: np.full(data.samples, v) for g, v in gates.items()}},
                                 data.source)
    for i, (_, (out,)) in enumerate(_unbatched_gates(runner, model, with_gates, batch_size, cancelled)):
        for name in outputs:
            total.add(reference[i][name], out[name])
    return total.sqnr_db


def _unbatched_gates(runner, model, data, batch_size, cancelled):
    """Gates are scalars, so samples run one at a time (same order as the reference)."""
    for index in range(data.samples):
        if cancelled is not None and cancelled():
            raise QuantizeCancelled("quantization cancelled")
        result = runner.run({k: np.asarray(v) for k, v in data.sample(index).items()})
        if result.outputs is None:
            raise GraphLensError(f"onnxruntime cannot run the gated model: {result.error}")
        yield index + 1, (result.outputs,)


def scan(model: Model, float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
         config: QuantConfig, data: CalibrationData, *, progress: Progress | None = None,
         cancelled: Cancelled | None = None) -> Scan:
    """Scan every layer (on a scratch copy of ``model``); exclude for ``config.target_sqnr_db`` if set."""
    scratch = Model(onnx.ModelProto.FromString(float_proto.SerializeToString()))
    scratch.infer_shapes()
    session = RewriteSession(scratch, keep_history=False)
    edits, records = build_edits(scratch.graph, placement, params, config)
    session.apply(edits)
    tidy = cleanup_edits(scratch, Counter())
    if tidy:
        session.apply(tidy)
    gated, gates = gated_model(scratch.to_proto(), records)
    runner = ModelRunner(gated)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the gated model: {runner.error}")
    reference = []
    for _, (out,) in _unbatched_gates(runner, gated, CalibrationData(
            {**data.arrays, **{g: np.zeros(data.samples, bool) for g in gates}}, data.source), 1, cancelled):
        reference.append(out)
    layer_gates: dict[str, list[str]] = {}
    for gate, record in zip(gates, records):
        for node in record.nodes:
            layer_gates.setdefault(node, []).append(gate)
    result = Scan()

    def sqnr(on: set[str]) -> float:
        return _output_sqnr(runner, gated, data, {g: g in on for g in gates}, reference, 1, cancelled)

    everything = set(gates)
    result.all_quantized_db = sqnr(everything)
    layers = list(layer_gates)
    for i, node in enumerate(layers):
        mine = set(layer_gates[node])
        result.per_node[node] = {"alone_quantized_db": sqnr(mine), "alone_float_db": sqnr(everything - mine)}
        if progress is not None:
            progress((i + 1) / max(len(layers), 1) * (0.7 if config.target_sqnr_db is not None else 1.0))
    if config.target_sqnr_db is not None:
        result.excluded, result.reached_db = exclude_until(
            config.target_sqnr_db, result, layer_gates, sqnr, result.all_quantized_db)
    return result


def exclude_until(target: float, scanned: Scan, layer_gates: dict[str, list[str]], sqnr, start: float,
                  ) -> tuple[list[str], float]:
    """Leave layers float, largest alone-float gain first, until ``sqnr`` of the rest reaches ``target``."""
    order = sorted(layer_gates, key=lambda n: -scanned.per_node[n]["alone_float_db"])
    excluded: list[str] = []
    reached = start
    for node in order:
        if reached >= target:
            break
        excluded.append(node)
        kept = {g for n, gs in layer_gates.items() if n not in excluded for g in gs}
        reached = sqnr(kept)
    return excluded, reached
