"""Weight-only quantization of transformers: MatMul and Gemm weights in int4 (or int8) blocks along K.

``quantize_model(model, QuantConfig(weight_only=True, weight_bits=4, block_size=32))`` comes here.
Activations stay float; every MatMul or Gemm of float32 with a constant 2-D weight ``W [K, N]`` (an
initializer, or a ``Constant`` behind Transpose/Identity as dynamo exports write it, however large; a
Gemm with ``transB = 1``, as exporters write a linear layer, stores it ``[N, K]``) has ``W`` quantized in
blocks of ``block_size`` values along K (:mod:`~graphlens.quantize.blocks`: the math and both layouts),
written as

- ``qdq`` (``weight_format``): ``DequantizeLinear(axis=K's axis, block_size=B)`` feeding the layer
  (opset 21, raised as :mod:`~graphlens.quantize.opset` does);
- ``matmulnbits``: onnxruntime's ``com.microsoft.MatMulNBits`` in place of the MatMul, same name and
  output (the model then imports ``com.microsoft``, see ``Model._sync_opset_imports``); a Gemm's ``C``
  is added after it. A Gemm with ``transA``, ``alpha`` or ``beta`` has no such form and is left float, saying
  so (``qdq`` takes it).

Nothing is calibrated (round to nearest per block); the samples (an ``.npz`` or random ones) are
those the report measures on. The report is the int8 quantizer's
(:class:`~graphlens.quantize.quantize.QuantizeResult`), one row per weight: its ``local_*`` numbers
are the weight against its dequantized blocks; the top-level ones the layer's output in the quantized
model against the float model's (so every earlier layer's error is in it); then the model's outputs.
Block scales are not listed in the rows (there are ``K / B · N`` of them). Fold, quantize and the
opset raise are one undo step.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import helper

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.blocks import BlockQuantized, matmulnbits_arrays, qdq_tensors, quantize_blocks, stored_bytes
from graphlens.quantize.calibrate import (
    Batch,
    CalibrationData,
    random_calibration,
    run_batches,
)
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.evaluate import Measured
from graphlens.quantize.opset import OpsetRaise, follow_history, raise_opset, set_opset
from graphlens.quantize.qdq import QType
from graphlens.quantize.quantize import LayerError, QuantizeResult
from graphlens.quantize.scoring import Evaluate, score
from graphlens.rewrites.driver import FoldReport, cleanup_edits, fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory, GraphEdit
from graphlens.rewrites.rule import Rule, clone_node, fresh_name

QDQ_OPSET = 21
"""DequantizeLinear's ``block_size`` and the int4/uint4 types."""


@dataclass
class WeightOnlyResult(QuantizeResult):
    """:class:`QuantizeResult` of a weight-only quantization, with the format and the weights' sizes."""

    weight_format: str = "qdq"
    float_bytes: int = 0
    """The quantized weights' float32 bytes before."""
    stored_bytes: int = 0
    """Their bytes after: integers, scales and zero points."""

    layer_ops: dict[str, int] = field(default_factory=dict)
    """The quantized weights' layers by op type: ``{"MatMul": 61}``."""

    def lines(self) -> list[str]:
        out = [f"fold: {line}" for line in self.fold.lines()] if self.fold is not None else []
        if self.opset is not None:
            out.append(self.opset.line())
        out.append(f"weight-only: {self.storage_line()}; measured on {self.samples} samples {self.calibration}")
        if self.skipped:
            n = len(self.skipped)
            out.append(f"left float: {n} layer{'s' if n != 1 else ''} (" + "; ".join(
                f"'{n}': {why}" for n, why in self.skipped[:3]) + (", …" if len(self.skipped) > 3 else "") + ")")
        out.append(f"output SQNR: {self.output_sqnr_db:.1f} dB" + ("" if self.score is None else
                                                                    f"; score: {self.score:g}"))
        for layer in self.worst(5):
            out.append(f"  {layer.sqnr_db:6.1f} dB  layer output (weight {layer.local_sqnr_db:.1f} dB)  "
                       f"{layer.tensor}  ({layer.node})")
        return out

    def storage_line(self) -> str:
        """``61 MatMul weights as int4 blocks of 32 (symmetric, qdq), 80.0 MB -> 12.5 MB`` (``2 MatMul and 1 Gemm
        weights``)."""
        c = self.config
        kind = f"{'int' if c.symmetric_weights else 'uint'}{c.weight_bits}"
        ops = " and ".join(f"{n} {op}" for op, n in self.layer_ops.items()) or f"{len(self.layers)} MatMul"
        return (f"{ops} weights as {kind} blocks of {c.block_size} "
                f"({'symmetric' if c.symmetric_weights else 'asymmetric'}, {self.weight_format}), "
                f"{_mib(self.float_bytes)} -> {_mib(self.stored_bytes)}")

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["weight_only"] = {"format": self.weight_format, "block_size": self.config.block_size,
                               "layer_ops": dict(self.layer_ops),
                               "bits": self.config.weight_bits, "symmetric": self.config.symmetric_weights,
                               "float_bytes": self.float_bytes, "stored_bytes": self.stored_bytes}
        return data


def _mib(size: int) -> str:
    """``80.0 MB`` (of 2^20 bytes); a small weight's ``20.0 KB`` rather than ``0.0 MB``."""
    return f"{size / 2**20:.1f} MB" if size >= 2**20 / 10 else f"{size / 2**10:.1f} KB"


LINEAR_OPS = ("MatMul", "Gemm")
"""The layers whose weights are quantized."""


@dataclass
class Layer:
    """One MatMul or Gemm whose weight is quantized."""

    node: str
    weight: str
    value: np.ndarray
    """``W [K, N]``, as the layer multiplies by it."""
    transposed: bool = False
    """The weight is stored ``[N, K]`` (a Gemm with ``transB = 1``): its blocks run along axis 1."""

    @property
    def key(self) -> tuple[str, bool]:
        """The stored weight and its orientation: one quantization serves every layer reading it the same way."""
        return self.weight, self.transposed


def weight_value(graph: Graph, tensor: str) -> np.ndarray | None:
    """A constant weight's value: what constant resolution gives, else (past its size limit) a ``Constant`` or a
    ``ConstantOfShape`` read through Transpose/Identity, the way dynamo exports store every linear layer's weight."""
    value = graph.constant_value(tensor)
    if value is not None:
        return value
    found = graph.producer(tensor)
    if found is None:
        return None
    node = found[0]
    if node.op_type == "Constant" and "value" in node.attrs:
        return np.asarray(node.attrs["value"])
    if node.op_type == "ConstantOfShape" and node.inputs and node.inputs[0]:  # onnx's light zoo: every weight
        shape = graph.constant_value(node.inputs[0])
        fill = np.asarray(node.attrs.get("value", np.zeros(1, np.float32))).reshape(-1)
        return None if shape is None else np.full([int(d) for d in np.ravel(shape)], fill[0], fill.dtype)
    if node.op_type in ("Transpose", "Identity") and node.inputs and node.inputs[0]:
        inner = weight_value(graph, node.inputs[0])
        if inner is None or node.op_type == "Identity":
            return inner
        perm = node.attrs.get("perm")
        return np.transpose(inner, None if perm is None else list(perm))
    return None


def _refusal(graph: Graph, node: Node, value: np.ndarray | None, config: QuantConfig) -> str | None:
    if len(node.inputs) < 2 or not node.inputs[0] or not node.inputs[1]:
        return "it has no weight input"
    if value is None:
        return "its weight is not a constant"
    if value.ndim != 2:
        return f"its weight is {value.ndim}-D, not [K, N]"
    if value.dtype != np.float32 or graph.tensor_type(node.inputs[0]).dtype not in ("float32", None):
        return "it is not float32"
    if graph.constant_value(node.inputs[0]) is not None:
        return "its input is a constant"
    if node.op_type == "Gemm" and config.weight_format == "matmulnbits" and not _plain_gemm(node):
        return "a Gemm with transA, alpha or beta has no MatMulNBits form (--weight-format qdq quantizes it)"
    return None


def _plain_gemm(node: Node) -> bool:
    """``A·B (+ C)``: what a MatMulNBits and an Add compute (``beta`` matters only with a ``C``)."""
    a = node.attrs
    has_c = len(node.inputs) > 2 and bool(node.inputs[2])
    return (not a.get("transA", 0) and float(a.get("alpha", 1.0)) == 1.0
            and (not has_c or float(a.get("beta", 1.0)) == 1.0))


def find_layers(graph: Graph, config: QuantConfig) -> tuple[list[Layer], list[tuple[str, str]]]:
    """The MatMuls and Gemms of the main graph whose weights to quantize, and (node, why) for those left float."""
    layers, skipped = [], []
    for node in graph.nodes:
        if node.op_type not in LINEAR_OPS or node.domain not in ("", "ai.onnx"):
            continue
        if config.excludes(node.name, node.op_type):
            skipped.append((node.name, "excluded"))
            continue
        value = weight_value(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else None
        why = _refusal(graph, node, value, config)
        if why is not None:
            skipped.append((node.name, why))
            continue
        assert value is not None
        transposed = node.op_type == "Gemm" and bool(node.attrs.get("transB", 0))
        layers.append(Layer(node.name, node.inputs[1], value.T if transposed else value, transposed))
    return layers, skipped


def _qtype(config: QuantConfig) -> QType:
    if config.symmetric_weights:
        return QType(config.weight_bits, True, config.narrow_range)
    return QType(config.weight_bits, False)


@dataclass
class _Written:
    """The edits and what each weight became."""

    edits: list[GraphEdit]
    sites: list[tuple[str, tuple[str, bool], str]]
    """(layer, its weight's :attr:`Layer.key`, output) per edit."""
    quantized: dict[tuple[str, bool], BlockQuantized]
    float_bytes: int
    stored_bytes: int
    layer_ops: Counter[str] = field(default_factory=Counter)


def build_weight_edits(graph: Graph, layers: list[Layer], config: QuantConfig,
                       task: Task | None = None) -> _Written:
    """One edit per layer: its weight in blocks, behind a DequantizeLinear or inside a MatMulNBits.

    A weight several layers read the same way is quantized (and, as QDQ, dequantized) once.
    """
    task = task_or_idle(task)
    taken: set[str] = set()
    qtype, block = _qtype(config), config.block_size
    written = _Written([], [], {}, 0, 0)
    shared: dict[tuple[str, bool], list[str]] = {}
    for layer in layers:
        task.check("quantization")
        node = graph.by_name[layer.node]
        first = layer.key not in written.quantized
        if first:
            written.quantized[layer.key] = quantize_blocks(layer.value, qtype, block,
                                                           symmetric=config.symmetric_weights)
            written.float_bytes += layer.value.size * 4
        bq = written.quantized[layer.key]
        if config.weight_format == "qdq":
            add, inits = _qdq(graph, node, layer, bq, config, taken, shared)
        else:
            add, inits = _nbits(graph, node, layer, bq, config, taken, shared)
        if first:
            written.stored_bytes += stored_bytes(list(inits.values()))
        written.sites.append((node.name, layer.key, node.outputs[0]))
        written.layer_ops[node.op_type] += 1
        written.edits.append(GraphEdit(graph.path, "quantize", f"weight-only quantize {node.op_type} '{node.name}'",
                                       remove=[node.name], add=add, initializers=inits))
    return written


def _qdq(graph: Graph, node: Node, layer: Layer, bq: BlockQuantized, config: QuantConfig, taken: set[str],
         shared: dict[tuple[str, bool], list[str]]) -> tuple[list[onnx.NodeProto], dict[str, onnx.TensorProto]]:
    add, inits = [], {}
    weight = layer.weight
    if layer.key not in shared:  # stored as the layer reads it: [N, K] with blocks along axis 1 for transB
        names = [fresh_name(graph, f"{weight}_quantized", taken), fresh_name(graph, f"{weight}_scale", taken)]
        if not config.symmetric_weights:
            names.append(fresh_name(graph, f"{weight}_zero_point", taken))
        tensors = qdq_tensors(bq, names[0], names[1], names[2] if len(names) > 2 else None,
                              transposed=layer.transposed)
        inits = {t.name: t for t in tensors}
        out = fresh_name(graph, f"{weight}_dequantized", taken)
        dq = fresh_name(graph, f"{weight}_DequantizeLinear", taken)
        add.append(helper.make_node("DequantizeLinear", names, [out], name=dq, axis=int(layer.transposed),
                                    block_size=config.block_size))
        shared[layer.key] = [out]
    inputs = [node.inputs[0], shared[layer.key][0], *node.inputs[2:]]
    add.append(clone_node(node, inputs=inputs, outputs=list(node.outputs), name=node.name))
    return add, inits


def _nbits(graph: Graph, node: Node, layer: Layer, bq: BlockQuantized, config: QuantConfig, taken: set[str],
           shared: dict[tuple[str, bool], list[str]]) -> tuple[list[onnx.NodeProto], dict[str, onnx.TensorProto]]:
    inits: dict[str, onnx.TensorProto] = {}
    weight = layer.weight
    if layer.key not in shared:
        packed, scales, zeros = matmulnbits_arrays(bq, with_zero_point=not config.symmetric_weights)
        names = [fresh_name(graph, f"{weight}_Q{bq.qtype.bits}", taken), fresh_name(graph, f"{weight}_scales", taken)]
        arrays = [packed, scales]
        if zeros is not None:
            names.append(fresh_name(graph, f"{weight}_zero_points", taken))
            arrays.append(zeros)
        inits = {n: onnx.numpy_helper.from_array(a, n) for n, a in zip(names, arrays)}
        shared[layer.key] = names
    bias = node.inputs[2] if node.op_type == "Gemm" and len(node.inputs) > 2 and node.inputs[2] else None
    product = fresh_name(graph, f"{node.outputs[0]}_product", taken) if bias else node.outputs[0]
    nodes = [helper.make_node("MatMulNBits", [node.inputs[0], *shared[layer.key]], [product], name=node.name,
                              domain="com.microsoft", K=bq.k, N=bq.n, bits=bq.qtype.bits, block_size=bq.block_size)]
    if bias:  # a plain Gemm (_plain_gemm): A·B, then its C as Add broadcasts it
        nodes.append(helper.make_node("Add", [product, bias], [node.outputs[0]],
                                      name=fresh_name(graph, f"{node.name}_bias", taken)))
    return nodes, inits


def float_runs(float_model: onnx.ModelProto, tensors: list[str], data: CalibrationData, *, batch_size: int,
               task: Task | None = None) -> list[Batch]:
    """The float model's outputs and ``tensors`` on every batch, with the feeds, kept for :func:`compare`.

    Run before the weights change, so that the float model's session is gone before the quantized one
    opens: one model's weights in onnxruntime at a time (the kept outputs are activations, far smaller). ``task`` is
    told the share of the samples done.
    """
    task = task_or_idle(task)
    runner = ModelRunner(float_model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the float model: {runner.error}")
    kept: list[Batch] = []
    for batch in run_batches([runner], float_model, data, batch_size, task):
        if not kept:
            _refuse_what_the_first_run_says(float_model, data, batch)
        kept.append(batch)
        task.report(batch.done / data.samples)
    return kept


def _refuse_what_the_first_run_says(model: onnx.ModelProto, data: CalibrationData, first: Batch) -> None:
    """The layers' outputs on every sample, projected from their bytes on the first run (a transformer's shapes,
    computed by Reshapes, are mostly unknown before it): more than the memory limit is refused before the rest."""
    from graphlens.numerics.dims import refuse_samples_over_limit

    per_sample = sum(a.nbytes for a in first.outputs[0].values()) / max(first.done, 1)
    refuse_samples_over_limit(model, data.sample(0), "measuring weight-only blocks",
                              int(KEPT_COPIES * per_sample * data.samples))


def compare(quantized_model: onnx.ModelProto, kept: list[Batch], layers: dict[str, str], outputs: list[str], *,
            task: Task | None = None) -> Measured:
    """Each layer's output (``layers``: ``{node: its output}``) and the model's ``outputs``, the quantized
    model's against the float model's on the same feeds; ``accumulated`` is keyed by node; ``task`` is told the
    share of the samples done."""
    task = task_or_idle(task)
    result = Measured()
    tensors = list(dict.fromkeys(layers.values()))
    runner = ModelRunner(quantized_model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the quantized model: {runner.error}")
    per_tensor = {t: ErrorStats() for t in tensors}
    result.outputs = {name: ErrorStats() for name in outputs}
    total = kept[-1].done if kept else 0
    for batch in kept:
        task.check("quantization")
        run = runner.run(batch.feed)
        if run.outputs is None:
            raise GraphLensError(f"onnxruntime cannot run the quantized model: {run.error}")
        a, b = batch.outputs[0], run.outputs
        for t in tensors:
            per_tensor[t].add(a[t], b[t])
        for name in outputs:
            result.outputs[name].add(a[name], b[name])
        task.report(batch.done / max(total, 1))
    result.accumulated = {node: per_tensor[t] for node, t in layers.items()}
    return result


def quantize_weights(model: Model, config: QuantConfig, calibration: CalibrationData | None = None,
                     session: EditHistory | None = None, *, samples: int = 8,
                     evaluation: CalibrationData | None = None, task: Task | None = None,
                     evaluate: Evaluate | None = None) -> WeightOnlyResult:
    """Quantize ``model``'s MatMul and Gemm weights in place (one undo step of ``session``) and measure it, as
    :func:`~graphlens.quantize.quantize.quantize_model` does for int8 (see the module docstring); ``task``: as
    there; ``evaluate``: the quantized model's score is reported."""
    session = session or EditHistory(model)
    rules = resolve_rules(list(config.fold_rules)) if config.fold_rules else []
    model.infer_shapes()
    opset_before = model.opset("")
    try:
        with session.all_or_nothing("quantize") as change:  # a failure or a cancel leaves the model as it was
            result = _quantize(model, config, calibration, evaluation, session, rules, samples, task_or_idle(task))
            if evaluate is not None:
                result.score = _score(model, evaluate)
    except BaseException:
        if opset_before is not None and model.opset("") != opset_before:
            set_opset(model, opset_before)  # the number lives on the model, not in the undone edits
        raise
    if result.opset is not None:
        follow_history(session, change, result.opset)
    result.revision = model.revision
    return result


def _quantize(model: Model, config: QuantConfig, data: CalibrationData | None, evaluation: CalibrationData | None,
              session: EditHistory, rules: list[Rule], samples: int, task: Task) -> WeightOnlyResult:
    fold = fold_model(model, rules, session, task=task) if rules else None
    layers, skipped = find_layers(model.graph, config)
    if not layers:
        why = f" ({skipped[0][0]}: {skipped[0][1]})" if skipped else ""
        raise GraphLensError(f"nothing to quantize: no MatMul or Gemm with a constant float32 2-D weight{why}")
    opset = None
    if config.weight_format == "qdq" and (model.opset("") or 1) < QDQ_OPSET:
        opset, _ = raise_opset(model, session, QDQ_OPSET, "blocked DequantizeLinear")
    float_model = model.to_proto()
    data = evaluation or data or random_calibration(float_model, samples, seed=config.seed)
    graph = model.graph
    outputs = {layer.node: graph.by_name[layer.node].outputs[0] for layer in layers}
    names = float_outputs(float_model)
    _refuse_what_would_not_fit(model, data, [*outputs.values(), *names], config.batch_size)
    kept = float_runs(float_model, list(dict.fromkeys(outputs.values())), data, batch_size=config.batch_size,
                      task=task.part(0.0, 0.4))
    del float_model  # the model's own protobuf, rewritten by the edits below
    written = build_weight_edits(graph, layers, config, task)
    del layers  # the float values: an LM head's is hundreds of MB
    session.apply(written.edits)
    tidy = cleanup_edits(model, Counter())
    if tidy:
        session.apply(tidy)
    measured = compare(model.to_proto(), kept, outputs, names, task=task.part(0.6, 1.0))
    return _result(config, written, measured, data, fold, opset, skipped)


def _score(model: Model, evaluate: Evaluate) -> float:
    """The user's score of the model as quantized, saved as a file (with its external data, if it has some)."""
    with tempfile.TemporaryDirectory(prefix="graphlens-weight-only-") as folder:
        return score(evaluate, model.save(Path(folder) / "candidate.onnx"))


KEPT_COPIES = 2
"""Times the layers' float outputs on every sample are counted: kept from the float runs, and the statistics'
temporaries. rxnmap on 8 and 32 random samples: estimated 258 and 1032 MB (from the first run), peak resident
memory 1166 and 1672 MB, so 21 MB a sample measured against 32 estimated; the rest (sessions, runs whose shapes
Reshapes compute) is not in the estimate."""


def _refuse_what_would_not_fit(model: Model, data: CalibrationData, kept: list[str], batch_size: int) -> None:
    """Samples the report could not hold are refused before any run: one run of as many samples as a run stacks,
    and the layers' outputs on every sample, kept from the float runs to compare the quantized runs with."""
    from graphlens.numerics.dims import estimate_at, refuse_samples_over_limit
    from graphlens.numerics.samples import samples_per_run

    sample = data.sample(0)
    estimate = estimate_at(model, sample)
    need = (estimate.need() * samples_per_run(model, data, batch_size)
            + KEPT_COPIES * estimate.tensors_bytes(kept) * data.samples)
    refuse_samples_over_limit(model, sample, "measuring weight-only blocks", need)


def _result(config: QuantConfig, written: _Written, measured: Measured, data: CalibrationData,
            fold: FoldReport | None, opset: OpsetRaise | None,
            skipped: list[tuple[str, str]]) -> WeightOnlyResult:
    rows = []
    for node, (weight, transposed), _ in written.sites:
        bq = written.quantized[weight, transposed]
        acc, local = measured.accumulated[node], bq.error
        rows.append(LayerError(node, weight, "weight", acc.sqnr_db, acc.mse, acc.cosine, acc.max_abs,
                               local.sqnr_db, local.mse, local.cosine, local.max_abs, [node], [], [],
                               f"{bq.qtype.name}, blocks of {bq.block_size}"))
    qdq = sum(1 for e in written.edits for n in e.add if n.op_type == "DequantizeLinear")
    return WeightOnlyResult(
        config, rows, measured.sqnr_db, {k: v.sqnr_db for k, v in measured.outputs.items()},
        {"weight": len(written.quantized)}, qdq, data.source, data.samples, fold, opset, skipped,
        weight_format=config.weight_format, float_bytes=written.float_bytes, stored_bytes=written.stored_bytes,
        random_samples=data.random, layer_ops=dict(written.layer_ops))
