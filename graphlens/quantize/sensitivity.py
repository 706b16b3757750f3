"""Which layers the output SQNR is sensitive to: the gated model, and the full per-layer scan.

One *gated* copy of the quantized model answers every question with one onnxruntime session:
each quantized tensor ``t`` is read through its gate, ``gate_t`` a boolean graph input: an activation
through ``If(gate_t)`` with ``DQ(Q(t))`` in its then-branch and ``t`` in its else-branch, a weight
through ``Where(gate_t, DQ(Q(t)), t)``. A layer's gates are those of its tensors (weight, bias, input
and output activations). All gates off is the float model, all on the quantized one; a gate is a scalar, so
every configuration runs on whole batches of samples.

:func:`scan` (``--sensitivity``) measures, per layer, on the evaluation samples:

- *alone quantized*: only that layer's gates on; the output SQNR (against all gates off, the
  float model) is the layer's ``sensitivity_db`` (lower: the layer hurts more);
- *alone float*: every gate on but that layer's; the gain over all on is what leaving it float buys.

That is two runs per layer; the target search (:mod:`~graphlens.quantize.target`) ranks the
layers from one pass instead.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.errors import GraphLensError
from graphlens.core.linear import LINEAR_OP_TYPES
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats, worst_sqnr_db
from graphlens.numerics.run import ModelRunner, RunResult
from graphlens.overlays.flops import linear_macs
from graphlens.quantize.calibrate import CalibrationData, run_batches
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import Placement, QuantizedTensor, apply_quantization, collect_if_large, scratch_model
from graphlens.quantize.qdq import QParams


@dataclass
class Scan:
    """Per layer: output SQNR alone quantized and alone float."""

    per_node: dict[str, dict[str, float]] = field(default_factory=dict)
    all_quantized_db: float = float("nan")


@dataclass
class Gate:
    """One record's switch in the gated model."""

    name: str
    """The boolean graph input."""
    record: QuantizedTensor
    source: str
    """The float value the switch passes when off (for an activation: what reaches its QuantizeLinear)."""
    switched: str
    """The DequantizeLinear output the switch passes when on."""


@dataclass
class GatedModel:
    """A quantized model whose every quantized tensor can be switched back to float; see the module docstring."""

    proto: onnx.ModelProto
    gates: list[Gate]
    layer_gates: dict[str, list[str]]
    """Quantized layer -> the gates of its tensors."""

    def kept(self, excluded: Iterable[str]) -> set[str]:
        """The gates on when ``excluded`` layers are float: a tensor another quantized layer reads stays on."""
        skip = set(excluded)
        return {g for node, gates in self.layer_gates.items() if node not in skip for g in gates}


def gated_model(quantized: onnx.ModelProto, records: list[QuantizedTensor]) -> tuple[onnx.ModelProto, list[Gate]]:
    """A copy of ``quantized`` whose every record is switched by a boolean input (one per record).

    An activation's QuantizeLinear/DequantizeLinear move into the then-branch of an ``If`` on its gate, whose
    else-branch passes the float value: a gate off costs a copy, not a rounding nobody reads (a gated run of
    the 736×992 detector: 0.16 s, against 0.25 s with ``Where``, which computes both). A weight's is a
    ``Where`` between two constants."""
    model = onnx.ModelProto()
    model.CopyFrom(quantized)
    graph = model.graph
    by_output = {o: i for i, n in enumerate(graph.node) for o in n.output}
    scale_types = {t.name: t.data_type for t in graph.initializer}  # what a DequantizeLinear gives
    readers: dict[str, int] = {}
    for n in graph.node:
        for i in n.input:
            readers[i] = readers.get(i, 0) + 1
    gates: list[Gate] = []
    inserts: list[tuple[int, onnx.NodeProto]] = []
    moved: set[int] = set()
    for k, record in enumerate(records):
        index = by_output.get(record.dequantized)
        if index is None:
            continue
        dq = graph.node[index]
        gate, switched = f"__gate{k}", f"{record.dequantized}__q{k}"
        graph.input.append(helper.make_tensor_value_info(gate, TensorProto.BOOL, []))
        dq.output[0] = switched
        if record.kind == "activation":
            q_index = by_output[dq.input[0]]
            source = graph.node[q_index].input[0]
            if readers.get(dq.input[0], 0) == 1:  # its own QuantizeLinear: both move into the branch
                elem = scale_types.get(dq.input[1], TensorProto.FLOAT)
                inserts.append((index, _branch(gate, graph.node[q_index], dq, source, switched, record, k, elem)))
                moved.update((q_index, index))
                gates.append(Gate(gate, record, source, switched))
                continue
        else:
            source = f"{record.dequantized}__float{k}"
            value = np.zeros(np.shape(np.asarray(record.quantized_value)), np.float32) if record.float_value is None \
                else np.asarray(record.float_value, np.float32)
            graph.initializer.append(numpy_helper.from_array(value, source))
        inserts.append((index, helper.make_node("Where", [gate, switched, source], [record.dequantized],
                                                name=f"__where{k}")))
        gates.append(Gate(gate, record, source, switched))
    for index, node in sorted(inserts, key=lambda p: -p[0]):
        graph.node.insert(index + 1, node)
    for index in sorted(moved, reverse=True):
        del graph.node[_shifted(index, inserts)]
    return model, gates


def _shifted(index: int, inserts: list[tuple[int, onnx.NodeProto]]) -> int:
    """Where node ``index`` of the graph before the inserts sits after them (each goes after its own index)."""
    return index + sum(1 for at, _ in inserts if at < index)


def _branch(gate: str, q: onnx.NodeProto, dq: onnx.NodeProto, source: str, switched: str, record: QuantizedTensor,
            k: int, elem: int) -> onnx.NodeProto:
    """``If(gate)``: the record's QuantizeLinear and DequantizeLinear, else its float value."""
    then = onnx.NodeProto()
    then.CopyFrom(q)
    rounded = onnx.NodeProto()
    rounded.CopyFrom(dq)
    then_branch = helper.make_graph([then, rounded], f"__quantized{k}", [],
                                    [helper.make_tensor_value_info(switched, elem, None)])
    else_branch = helper.make_graph([helper.make_node("Identity", [source], [f"{source}__float{k}"])],
                                    f"__float{k}", [],
                                    [helper.make_tensor_value_info(f"{source}__float{k}", elem, None)])
    return helper.make_node("If", [gate], [record.dequantized], name=f"__if{k}", then_branch=then_branch,
                            else_branch=else_branch)


def build_gated(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
                config: QuantConfig, bias_shift: dict[str, np.ndarray] | None = None) -> GatedModel:
    """Quantize a scratch copy of ``float_proto`` as :func:`~graphlens.quantize.quantize.quantize_model`
    would (bias corrections included) and gate every quantized tensor."""
    scratch = scratch_model(float_proto)
    records = apply_quantization(scratch, placement, params, config, bias_shift=bias_shift)
    proto, gates = gated_model(scratch.to_proto(), records)
    del scratch
    collect_if_large(proto)
    layer_gates: dict[str, list[str]] = {}
    for gate in gates:
        for node in gate.record.nodes:
            layer_gates.setdefault(node, []).append(gate.name)
    return GatedModel(proto, gates, layer_gates)


class GatedRunner:
    """A runner of the gated model with a fixed set of gates on, for :func:`run_batches`."""

    def __init__(self, runner: ModelRunner, gates: list[Gate], on: set[str]) -> None:
        self.runner, self.error = runner, runner.error
        self.feed = {g.name: np.asarray(g.name in on) for g in gates}

    def run(self, inputs: dict[str, np.ndarray]) -> RunResult:
        return self.runner.run({**inputs, **self.feed})


def open_gated(gated: GatedModel, extra: list[str] | None = None, *, spin: bool = False) -> ModelRunner:
    """A session of the gated model; ``spin``: for long runs (:func:`~graphlens.numerics.run.session_options`)."""
    runner = ModelRunner(gated.proto, extra or (), spin=spin)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the gated model: {runner.error}")
    return runner


def reference_outputs(runner: ModelRunner, gated: GatedModel, data: CalibrationData, batch_size: int,
                      task: Task | None = None) -> list[dict[str, np.ndarray]]:
    """The float model's graph outputs (every gate off), batch by batch."""
    names = float_outputs(gated.proto)
    off = GatedRunner(runner, gated.gates, set())
    return [{n: np.ravel(b.outputs[0][n]) for n in names}
            for b in run_batches([off], gated.proto, data, batch_size, task)]  # type: ignore[list-item]


def output_sqnr(runner: ModelRunner, gated: GatedModel, on: set[str], data: CalibrationData,
                reference: list[dict[str, np.ndarray]], batch_size: int, task: Task | None = None,
                outputs: dict[str, ErrorStats] | None = None) -> float:
    """The output SQNR (the lowest of the float outputs', :func:`~.metrics.worst_sqnr_db`) with the gates ``on``
    on; ``reference``: the float outputs, flattened, batch by batch in sample order; ``outputs`` takes each
    output's errors."""
    each = outputs if outputs is not None else {}
    run = GatedRunner(runner, gated.gates, on)
    joined = {name: np.concatenate([np.ravel(r[name]) for r in reference]) for name in reference[0]}
    at = dict.fromkeys(joined, 0)  # batches may differ from the reference's: compare by position in sample order
    for batch in run_batches([run], gated.proto, data, batch_size, task):  # type: ignore[list-item]
        for name, x in joined.items():
            y = np.ravel(batch.outputs[0][name])
            each.setdefault(name, ErrorStats()).add(x[at[name]:at[name] + y.size], y)
            at[name] += y.size
    return worst_sqnr_db(each[name] for name in joined)


def scan(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams], config: QuantConfig,
         data: CalibrationData, *, bias_shift: dict[str, np.ndarray] | None = None,
         task: Task | None = None) -> Scan:
    """Every layer quantized alone and left float alone (two runs each), on a gated scratch copy; ``task`` is told
    the share of the layers done."""
    task = task_or_idle(task)
    gated = build_gated(float_proto, placement, params, config, bias_shift)
    runner = open_gated(gated, spin=data.long_runs)
    reference = reference_outputs(runner, gated, data, config.batch_size, task)

    def sqnr(on: set[str]) -> float:
        return output_sqnr(runner, gated, on, data, reference, config.batch_size, task)

    everything = {g.name for g in gated.gates}
    result = Scan(all_quantized_db=sqnr(everything))
    layers = list(gated.layer_gates)
    for i, node in enumerate(layers):
        mine = set(gated.layer_gates[node])
        result.per_node[node] = {"alone_quantized_db": sqnr(mine), "alone_float_db": sqnr(everything - mine)}
        task.report((i + 1) / max(len(layers), 1))
    return result


def greedy_float(gated: GatedModel, layers: list[str], data: CalibrationData,
                 reference: list[dict[str, np.ndarray]], batch_size: int, base: float | None = None,
                 task: Task | None = None, runner: ModelRunner | None = None,
                 ) -> tuple[float, dict[str, float], list[str]]:
    """Each of ``layers`` in turn left float on top of those already kept float, kept float when the output
    SQNR rose: the output SQNR with every layer quantized (``base`` when known), each layer's run, and
    the layers kept float, in order; on ``data`` (``reference``: the float outputs of at least its
    samples, in sample order); ``runner``: a session of the gated model to reuse."""
    runner = runner or open_gated(gated, spin=data.long_runs)
    if base is None:
        base = output_sqnr(runner, gated, gated.kept([]), data, reference, batch_size, task)
    best, runs, kept = base, dict[str, float](), list[str]()
    for layer in layers:
        runs[layer] = output_sqnr(runner, gated, gated.kept([*kept, layer]), data, reference, batch_size, task)
        if runs[layer] > best:
            best = runs[layer]
            kept.append(layer)
    return base, runs, kept


def mac_tensors(gated: GatedModel) -> list[str]:
    """The tensors whose shapes give the quantized layers' multiply-accumulates: each one's input, weight, output."""
    layers = [n for n in gated.proto.graph.node if n.name in gated.layer_gates and n.op_type in LINEAR_OP_TYPES]
    return list(dict.fromkeys(t for n in layers for t in (n.input[0], n.input[1], n.output[0])))


def layer_macs(gated: GatedModel, shapes: dict[str, list[int]]) -> dict[str, float]:
    """Each quantized Conv/ConvTranspose/Gemm/MatMul layer's multiply-accumulates at ``shapes`` (those of
    :func:`mac_tensors` in a run): ``output elements × kernel elements per output channel`` (ConvTranspose: per
    input element); a layer whose shapes are missing is left out."""
    found = {n.name: node_macs(n, shapes) for n in gated.proto.graph.node
             if n.name in gated.layer_gates and n.op_type in LINEAR_OP_TYPES}
    return {name: macs for name, macs in found.items() if macs is not None}


def node_macs(node: onnx.NodeProto, shapes: dict[str, list[int]]) -> float | None:
    """One Conv/ConvTranspose/Gemm/MatMul node's multiply-accumulates from its tensors' shapes (None: unknown)."""
    x, w, y = (shapes.get(t) for t in (node.input[0], node.input[1], node.output[0]))
    if not x or not w or not y or 0 in x + w + y:
        return None
    return linear_macs(node.op_type, x, w, y, any(a.name == "transA" and a.i for a in node.attribute))
