"""Measuring a quantized model against its float model, per tensor and at the outputs.

Both models run on the same batches (one onnxruntime session each, intermediate tensors
exposed; the float model's runs are the calibration's when they were kept, see
:class:`~graphlens.quantize.calibrate.KeptRuns`). For every quantized activation the float
model's value ``x`` is compared with ``DQ(Q(x))`` computed in numpy (local) and with the quantized
model's DequantizeLinear output (accumulated); weights and biases are compared with their stored
integers dequantized. Outputs a Softmax makes also get their top-1 agreement and KL divergence
(:mod:`graphlens.numerics.distributions`).

*Local* error: the tensor quantized alone, ``x̂ = DQ(Q(x))`` on the float model's own ``x``
(for a weight, its stored integers dequantized). *Accumulated* error: the quantized model's value
at that tensor (the DequantizeLinear output its readers see) against the float model's, so every
earlier layer's error is in it, as in onnxruntime's ``qdq_loss_debug`` cross-model comparison.
Both are the measures of :mod:`graphlens.numerics.metrics` (SQNR, MSE, cosine, max abs), the float
value the reference; they accumulate over batches, so no tensor is kept. Per-tensor sums take
float32 products (``fast``: there is one per activation), the outputs' are float64 throughout.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.distributions import DistributionStats, softmax_outputs
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats, error_stats, worst_sqnr_db
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import (
    Batch,
    CalibrationData,
    KeptRuns,
    graph_fingerprint,
    run_batches,
)
from graphlens.quantize.place import QuantizedTensor
from graphlens.quantize.qdq import dequantize, fake_quantize

PARALLEL_ELEMENTS = 1 << 22
"""Float activation elements (over all tensors and batches) from which :func:`_add` computes the activations'
statistics on several threads: below it, starting them costs more than they save."""


@dataclass
class Measured:
    """Local and accumulated errors by record key, and the outputs' errors."""

    local: dict[str, ErrorStats] = field(default_factory=dict)
    accumulated: dict[str, ErrorStats] = field(default_factory=dict)
    outputs: dict[str, ErrorStats] = field(default_factory=dict)
    distributions: dict[str, DistributionStats] = field(default_factory=dict)
    """The Softmax outputs' top-1 agreement and KL divergence (:mod:`graphlens.numerics.distributions`)."""

    @property
    def sqnr_db(self) -> float:
        """The output SQNR: the lowest of the float graph outputs' (:func:`~.metrics.worst_sqnr_db`)."""
        return worst_sqnr_db(self.outputs.values())


def record_key(record: QuantizedTensor) -> str:
    return f"{record.tensor}@{record.node}" if record.kind == "bias" else record.tensor


def intended_value(record: QuantizedTensor) -> np.ndarray | None:
    """What a weight's or bias's stored integers stand for: its float value, less the bias correction."""
    if record.correction is None:
        return None if record.float_value is None else np.asarray(record.float_value)
    base = np.zeros_like(record.correction) if record.float_value is None else record.float_value
    corrected: np.ndarray = (base.astype(np.float64) - record.correction).astype(np.float32)
    return corrected


def measure(
    float_model: onnx.ModelProto,
    quantized_model: onnx.ModelProto,
    records: list[QuantizedTensor],
    data: CalibrationData,
    *,
    batch_size: int = 8,
    task: Task | None = None,
    reference: ModelRunner | None = None,
    kept: KeptRuns | None = None,
) -> Measured:
    """Every record's local and accumulated error, and the outputs', on ``data``.

    ``reference``: a session of ``float_model`` exposing every activation (the calibration's), reused;
    ``kept``: its outputs on ``data``, batch by batch, if the calibration kept them all; ``task`` is told the share
    of the samples done.
    """
    task = task_or_idle(task)
    result = Measured()
    for record in records:
        intended = intended_value(record)
        if intended is not None and record.quantized_value is not None:
            stats = error_stats(intended, dequantize(record.quantized_value, record.params), fast=True)
            result.local[record_key(record)] = stats
            result.accumulated[record_key(record)] = stats
    activations = [r for r in records if r.kind == "activation"]
    outputs = float_outputs(float_model)
    for r in activations:
        result.local[r.tensor] = ErrorStats(fast=True)
        result.accumulated[r.tensor] = ErrorStats(fast=True)
    for name in outputs:
        result.outputs[name] = ErrorStats()
    for name in softmax_outputs(float_model):
        result.distributions[name] = DistributionStats()
    exposed = [r.dequantized for r in activations]
    made = _made(kept, quantized_model, [*float_outputs(quantized_model), *exposed]) if kept is not None else None
    if made is not None and kept is not None:
        _add(result, activations, outputs, [b.outputs[0] for b in kept.batches], made)
        return result
    test = ModelRunner(quantized_model, exposed, spin=data.long_runs, optimize=data.optimizes)
    replayed = None
    if kept is not None and kept.complete and test.error is None:
        replayed = _replay(test, kept, task)
    if replayed is not None:  # every batch at once: one computation per tensor, not one per sample
        _add(result, activations, outputs, [b.outputs[0] for b in replayed], [b.outputs[1] for b in replayed])
        return result
    ref = reference if reference is not None else ModelRunner(float_model, [r.tensor for r in activations],
                                                              spin=data.long_runs, optimize=data.optimizes)
    for runner, which in ((ref, "float"), (test, "quantized")):
        if runner.error is not None:
            raise GraphLensError(f"onnxruntime cannot run the {which} model: {runner.error}")
    for done, (a, b), _ in run_batches([ref, test], float_model, data, batch_size, task):
        _add(result, activations, outputs, [a], [b])
        task.report(done / data.samples)
    return result


def _replay(test: ModelRunner, kept: KeptRuns, task: Task) -> list[Batch] | None:
    """The quantized model run on the kept batches' feeds, paired with the float outputs; None if a run fails
    (the caller then runs both models afresh, which says why)."""
    runs = kept.rerun(test, task)
    if runs is None:
        return None
    return [Batch(b.done, [b.outputs[0], run], b.feed) for b, run in zip(kept.batches, runs, strict=True)]


def _made(kept: KeptRuns, quantized: onnx.ModelProto, wanted: list[str]) -> list[dict[str, np.ndarray]] | None:
    """The runs the equalization trial made of this very model, with every tensor in ``wanted``, if it made them
    on every kept batch."""
    made, kept.quantized = kept.quantized, None  # used once; the arrays go with the report's statistics
    if made is None or not kept.complete or len(made.runs) != len(kept.batches):
        return None
    if made.fingerprint != graph_fingerprint(quantized):
        return None
    return made.runs if all(set(wanted) <= run.keys() for run in made.runs) else None


def _add(result: Measured, activations: list[QuantizedTensor], outputs: list[str],
         floats: list[dict[str, np.ndarray]], quantized: list[dict[str, np.ndarray]]) -> None:
    """Add batches of both models' values to every statistic; a tensor's batches are joined first
    when its parameters are per tensor (as activations' are), else added one at a time. The activations'
    statistics are independent, numpy's loops release the interpreter, and the float runs are finished, so
    large ones are computed on every core (a detector page's 105 on 2 cores: 0.21 → 0.17 s)."""

    def add_activation(r: QuantizedTensor) -> None:
        if r.params.axis is None:
            x = _joined([a[r.tensor] for a in floats])
            result.local[r.tensor].add(x, fake_quantize(x, r.params))
            result.accumulated[r.tensor].add(x, _joined([b[r.dequantized] for b in quantized]))
            return
        for a, b in zip(floats, quantized):
            result.local[r.tensor].add(a[r.tensor], fake_quantize(a[r.tensor], r.params))
            result.accumulated[r.tensor].add(a[r.tensor], b[r.dequantized])

    elements = sum(np.size(a[r.tensor]) for r in activations for a in floats)
    workers = min(os.cpu_count() or 1, 4) if elements >= PARALLEL_ELEMENTS else 1
    if workers > 1:
        with ThreadPoolExecutor(workers) as pool:
            list(pool.map(add_activation, activations))
    else:
        for r in activations:
            add_activation(r)
    for name in outputs:
        x, y = _joined([a[name] for a in floats]), _joined([b[name] for b in quantized])
        result.outputs[name].add(x, y)
    for name, stats in result.distributions.items():
        for a, b in zip(floats, quantized):
            stats.add(a[name], b[name])


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    return parts[0] if len(parts) == 1 else np.concatenate([np.asarray(p).reshape(-1) for p in parts])
