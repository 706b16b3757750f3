"""Quantize a model: fold, calibrate, insert the QDQ pairs, measure; one undo step.

:func:`quantize_model` runs, in order: the fold rules (``config.fold_rules``), the opset raise a
feature needs (:mod:`~graphlens.quantize.opset`), calibration of the activations
(:mod:`~graphlens.quantize.calibrate`), the decisions taken on scratch copies
(:mod:`~graphlens.quantize.tuning`: bias corrections, the layers left float for a target SQNR or
score, the exact sensitivity scan), the QDQ edits (:mod:`~graphlens.quantize.place`), cleanup of
the float weights nothing reads any more, then the measurements (:mod:`~graphlens.quantize.evaluate`)
and, given an ``evaluate`` function, the quantized model's score. Every step goes through one
``EditHistory`` group, so one undo restores the model exactly.

The result is a :class:`QuantizeResult`; ``to_dict()`` is the command line's ``--report``.
For overlays, :meth:`QuantizeResult.per_node` gives ``{node name: value}`` for one metric, the
worst over that layer's quantized tensors: SQNR in dB and cosine are *lower is worse*, MSE and
max abs *higher is worse*.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.linear import nothing_found
from graphlens.core.model import Model
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.arena import shared_arena
from graphlens.numerics.metrics import finite
from graphlens.quantize.calibrate import (
    CalibrationData,
    KeptRuns,
    activation_params,
    collect_ranges,
    random_calibration,
)
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.evaluate import Measured, measure, record_key
from graphlens.quantize.opset import OpsetRaise, follow_history, raise_opset
from graphlens.quantize.place import (
    Placement,
    QuantizedTensor,
    WeightMemo,
    collect_if_large,
    find_sites,
)
from graphlens.quantize.write import insert_pairs
from graphlens.rewrites.driver import FoldReport, fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from graphlens.rewrites.rule import Rule

if TYPE_CHECKING:
    from graphlens.numerics.dims import SampleEstimate
    from graphlens.numerics.distributions import DistributionStats
    from graphlens.quantize.bias_correction import BiasCorrection
    from graphlens.quantize.equalization import Calibrated, Equalization
    from graphlens.quantize.ranges import Range
    from graphlens.quantize.rounding import Rounding
    from graphlens.quantize.target_result import TargetResult
    from graphlens.quantize.tuning import Tuning

METRICS = ("sqnr_db", "mse", "cosine", "max_abs", "sensitivity_db")
LOWER_IS_WORSE = ("sqnr_db", "cosine", "sensitivity_db")


@dataclass
class LayerError:
    """One quantized tensor's errors: accumulated (top level) and local (``local_*``)."""

    node: str
    tensor: str
    kind: str
    sqnr_db: float
    mse: float
    cosine: float
    max_abs: float
    local_sqnr_db: float
    local_mse: float
    local_cosine: float
    local_max_abs: float
    nodes: list[str]
    scale: list[float]
    zero_point: list[int]
    dtype: str
    sensitivity_db: float | None = None
    """Output SQNR with only this tensor's layer quantized (None: not scanned)."""

    def to_dict(self) -> dict[str, Any]:
        data = dict(self.__dict__)
        for key in ("sqnr_db", "mse", "max_abs", "local_sqnr_db", "local_mse", "local_max_abs", "sensitivity_db"):
            data[key] = None if data[key] is None else finite(data[key])
        return data


@dataclass
class QuantizeResult:
    """What :func:`quantize_model` did and measured; see the module docstring."""

    config: QuantConfig
    layers: list[LayerError]
    output_sqnr_db: float
    outputs_sqnr_db: dict[str, float]
    counts: dict[str, int]
    """Quantized tensors by kind (weight, activation, bias)."""
    qdq_nodes: int
    calibration: str
    samples: int
    fold: FoldReport | None = None
    opset: OpsetRaise | None = None
    skipped: list[tuple[str, str]] = field(default_factory=list)
    excluded_for_target: list[str] = field(default_factory=list)
    sensitivity: dict[str, dict[str, float]] = field(default_factory=dict)
    """Node -> {"alone_quantized_db", "alone_float_db"}, when scanned."""
    revision: int = -1
    range_methods: dict[str, str] = field(default_factory=dict)
    """Activation -> the calibration method its range came from (with ``auto``, the one chosen for it)."""
    target: TargetResult | None = None
    """The target search's choice and runs (:mod:`~graphlens.quantize.target`), when a target was given."""
    bias_correction: BiasCorrection | None = None
    estimated_db: dict[str, float] = field(default_factory=dict)
    """Layer -> the target search's estimate of the output SQNR with it alone quantized."""
    score: float | None = None
    """The user's ``evaluate`` score of the quantized model, when given one."""
    measured_samples: int = 0
    """The first calibration samples (within :data:`~graphlens.quantize.equalization.TRIAL_ELEMENTS` input
    elements) the errors were measured on; 0 when measured on separate evaluation samples."""
    equalization: Equalization | None = None
    """Whether cross-layer equalization went in, on which chains, and the output SQNR both ways (None: ``off``)."""
    output_samples: int = 0
    """The samples the output SQNR is on when they are the target search's, not the errors' (0: the errors')."""
    rounding: Rounding | None = None
    """What GPTQ rounding did (None: weights rounded to nearest)."""
    probabilities: dict[str, DistributionStats] = field(default_factory=dict)
    """Softmax outputs -> their top-1 agreement and KL divergence on the samples the errors are on."""
    random_samples: bool = False
    """The calibration samples were made up (no data given), so the ranges say little about real inputs."""

    @property
    def quantized_nodes(self) -> list[str]:
        return list(dict.fromkeys(n for layer in self.layers for n in layer.nodes))

    def per_node(self, metric: str = "sqnr_db", *, local: bool = False) -> dict[str, float]:
        """``{node: value}`` over the quantized layers, the worst of each layer's tensors."""
        if metric not in METRICS:
            raise GraphLensError(f"unknown metric '{metric}'; metrics: {', '.join(METRICS)}")
        key = f"local_{metric}" if local and metric != "sensitivity_db" else metric
        worse = min if metric in LOWER_IS_WORSE else max
        found: dict[str, float] = {}
        for layer in self.layers:
            value = getattr(layer, key)
            if value is None:
                continue
            for node in layer.nodes:
                found[node] = value if node not in found else worse(found[node], value)
        return found

    def worst(self, count: int = 5) -> list[LayerError]:
        """The layers with the lowest accumulated SQNR."""
        return sorted(self.layers, key=lambda layer: layer.sqnr_db)[:count]

    def lines(self) -> list[str]:
        out = []
        if self.fold is not None:
            out += [f"fold: {line}" for line in self.fold.lines()]
        if self.opset is not None:
            out.append(self.opset.line())
        plural = {"weight": "weights", "activation": "activations", "bias": "biases"}
        counts = ", ".join(f"{n} {plural[kind] if n != 1 else kind}" for kind, n in self.counts.items())
        out.append(f"quantized {counts} in {len(self.quantized_nodes)} layers ({self.qdq_nodes} Q/DQ nodes); "
                   f"calibration: {self.samples} sample{'' if self.samples == 1 else 's'} {self.calibration}")
        if self.skipped:
            out.append(f"left float: {len(self.skipped)} layer{'' if len(self.skipped) == 1 else 's'} (" +
                       "; ".join(f"'{n}': {why}" for n, why in self.skipped[:3])
                       + (", …" if len(self.skipped) > 3 else "") + ")")
        if self.equalization is not None:
            out.append(self.equalization.line())
        if self.bias_correction is not None:
            out.append(self.bias_correction.line())
        if self.rounding is not None:
            out.append(self.rounding.line())
        if self.target is not None:
            out.append(self.target.line())
        if self.config.method == "auto" and self.range_methods:
            chosen = Counter(self.range_methods.values())
            out.append("auto ranges: " + ", ".join(f"{m} {n}" for m, n in chosen.most_common()))
        on = (f" (errors on the first {self.measured_samples} of the {self.samples} calibration samples)"
              if 0 < self.measured_samples < self.samples else "")
        if self.output_samples:
            first = self.measured_samples if 0 < self.measured_samples < self.output_samples else 0
            searched = self.target.samples_line() if self.target is not None else ""
            on = f"{searched} the target search ran" + (
                f" (layer errors on the first {first})" if first else "")
        out.append(f"output SQNR: {self.output_sqnr_db:.1f} dB{on}" + ("" if self.score is None else
                                                                         f"; score: {self.score:g}"))
        out += [stats.line(name) for name, stats in self.probabilities.items() if stats.positions]
        if self.random_samples:
            out.append("note: no calibration data, so the ranges and errors come from random samples, which say "
                       "little about real inputs: give samples (--calibration DATA.npz or a folder of images) for a "
                       "model to use")
        for layer in self.worst(5):
            out.append(f"  {layer.sqnr_db:6.1f} dB  {layer.kind:10s} {layer.tensor}  ({layer.node})")
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_sqnr_db": finite(self.output_sqnr_db),
            "outputs_sqnr_db": {k: finite(v) for k, v in self.outputs_sqnr_db.items()},
            "layers": [layer.to_dict() for layer in self.layers],
            "counts": dict(self.counts),
            "qdq_nodes": self.qdq_nodes,
            "calibration": {"source": self.calibration, "samples": self.samples, "random": self.random_samples},
            "measured_samples": self.measured_samples,
            "probabilities": {k: v.to_dict() for k, v in self.probabilities.items() if v.positions},
            "config": self.config.to_dict(),
            "fold": self.fold.to_json() if self.fold is not None else None,
            "opset": None if self.opset is None else self.opset.__dict__,
            "skipped": [{"node": n, "reason": why} for n, why in self.skipped],
            "excluded_for_target": list(self.excluded_for_target),
            "sensitivity": self.sensitivity,
            "range_methods": dict(self.range_methods),
            "target": None if self.target is None else self.target.to_dict(),
            "bias_correction": None if self.bias_correction is None else self.bias_correction.to_dict(),
            "estimated_db": {k: finite(v) for k, v in self.estimated_db.items()},
            "score": self.score,
            "equalization": None if self.equalization is None else self.equalization.to_dict(),
            "rounding": None if self.rounding is None else self.rounding.to_dict(),
        }


def _needed_opset(config: QuantConfig) -> tuple[int, str]:
    if config.weight_bits == 4:
        return 21, "int4 weights"
    if config.per_channel:
        return 13, "per-channel scales"
    return 10, "QuantizeLinear"


def quantize_model(
    model: Model,
    config: QuantConfig | None = None,
    calibration: CalibrationData | None = None,
    session: EditHistory | None = None,
    *,
    samples: int = 8,
    evaluation: CalibrationData | None = None,
    task: Task | None = None,
    evaluate: Callable[[str], float] | None = None,
) -> QuantizeResult:
    """Quantize ``model`` in place (one undo step of ``session``) and measure it.

    ``calibration``: samples for the ranges (default: ``samples`` random ones, seeded by
    ``config.seed``); ``evaluation``: samples for the errors (default: the first calibration samples, as many as
    :func:`~graphlens.quantize.equalization.trial_samples` takes: all of them unless they are large).
    ``task`` is told the fraction done; cancelling it stops with :class:`~graphlens.core.task.Cancelled` and
    leaves the model as it was.
    """
    with shared_arena():  # the calibration's, the trial's and the report's sessions reuse each other's memory
        return _quantize_model(model, config or QuantConfig(), calibration, session, samples, evaluation,
                               task_or_idle(task), evaluate)


def _quantize_model(model: Model, config: QuantConfig, calibration: CalibrationData | None,
                    session: EditHistory | None, samples: int, evaluation: CalibrationData | None,
                    task: Task, evaluate: Callable[[str], float] | None) -> QuantizeResult:
    if config.weight_only:  # MatMul and Gemm weights alone, in blocks along K
        from graphlens.quantize.weight_only import quantize_weights

        return quantize_weights(model, config, calibration, session, samples=samples, evaluation=evaluation,
                                task=task, evaluate=evaluate)
    session = session or EditHistory(model)
    rules = resolve_rules(list(config.fold_rules)) if config.fold_rules else []
    model.infer_shapes()
    if not find_sites(model.graph, config).sites:
        raise GraphLensError(nothing_found("quantize", model.graph, config.op_types, "float32"))
    data = calibration
    with session.all_or_nothing("quantize") as change:  # a failure or a cancel leaves the model as it was
        result = _quantize(model, config, data, session, rules, samples, evaluation, task, evaluate)
    if result.opset is not None:
        follow_history(session, change, result.opset)
    result.revision = model.revision
    return result


def _quantize(model: Model, config: QuantConfig, data: CalibrationData | None, session: EditHistory,
              rules: list[Rule], samples: int, evaluation: CalibrationData | None, task: Task,
              evaluate: Callable[[str], float] | None = None) -> QuantizeResult:
    fold = fold_model(model, rules, session, task=task) if rules else None
    opset = None
    needed, reason = _needed_opset(config)
    if (model.opset("") or 1) < needed:
        opset, _ = raise_opset(model, session, needed, reason)
    model.infer_shapes()
    if data is None:
        data = random_calibration(model, samples, seed=config.seed)  # sized for a run
    from graphlens.numerics.dims import estimate_at

    estimate = estimate_at(model, data.sample(0)) if data.samples else None
    memory_need = _refuse_what_would_not_fit(model, data, config, evaluation, estimate)
    sizes = estimate.activation_bytes() if estimate is not None else {}  # the calibration's reductions by size
    from graphlens.quantize.equalization import Trial, choose, trial_samples

    # the report reads the trial's run of the model it measures when no later step changes that model's numbers
    for_report = evaluation is None and config.weight_rounding == "nearest" and not _tunes(config)
    memo: WeightMemo = {}  # the weights the trial quantizes, for the model written
    equalization, calibrated = choose(model, session, Trial(config=config, data=data, evaluate=evaluate,
                                                            task=task.quiet(), for_report=for_report, memo=memo,
                                                            sizes=sizes))
    if equalization is not None and equalization.applied:
        model.infer_shapes()
    arm = calibrated.arm if calibrated is not None else None  # the model to write, quantized by the trial
    if calibrated is not None:
        calibrated.arm = None  # held here only, and dropped once written: its protobuf holds a copy of every weight
    placement = arm.placement if arm is not None else find_sites(model.graph, config)
    rounding = None
    if config.weight_rounding == "gptq":
        from graphlens.quantize.rounding import round_weights

        rounding = round_weights(model, placement, config, data, task.part(0.0, 0.2))
        placement.rounded = rounding.integers
        task = task.part(0.2, 1.0)  # the steps below report within the rest
    forget_values(model)
    report_on = evaluation or trial_samples(data)  # by default the first calibration samples, as bias correction's
    ranges, kept = _calibrate(model, placement, calibrated, data, config, report_on, evaluation, task, sizes)
    params = activation_params(ranges, config)
    # a copy of the float model only for what runs it again after the edits: the tuning, the report when the
    # calibration did not keep its runs, a score; else its structure names the outputs
    replayed = evaluate is None and kept is not None and kept.complete
    float_proto = model.weightless_proto() if replayed and not _tunes(config) else _copy(model)
    from graphlens.quantize.tuning import tune

    tuning = tune(float_proto, placement, params, config, data, evaluation or data, model.graph.constant_value,
                  evaluate=evaluate, task=task.part(0.5, 0.8), memory_base=memory_need)
    forget_values(model)
    excluded = tuning.excluded
    records = insert_pairs(model, session, arm, placement, params, config, tuning, memo)
    del arm
    forget_values(model)
    quantized_proto = _copy(model)
    measured = measure(float_proto, quantized_proto, records, report_on, batch_size=config.batch_size,
                       task=task.part(0.8, 1.0), kept=kept)
    _add_stored_errors(measured, records)
    task.report(1.0)
    score = None
    if tuning.target is not None and tuning.target.metric == "score":
        score = tuning.target.reached  # the chosen candidate's, already scored
    elif evaluate is not None:
        from graphlens.quantize.scoring import Candidates

        score = Candidates(float_proto, placement, params, config, evaluate).score_proto(quantized_proto)
    done = _Done(fold=fold, opset=opset, equalization=equalization, rounding=rounding, tuning=tuning, ranges=ranges,
                 skipped=[*placement.skipped, *((n, "left float to reach the target") for n in excluded)],
                 qdq=sum(1 for n in model.graph.nodes if n.op_type in ("QuantizeLinear", "DequantizeLinear")),
                 measured_samples=report_on.samples if evaluation is None else 0, score=score)
    return _result(config, records, measured, data, done)


REPORT_COPIES = 4
"""Times the error report's samples' activations are held at once: the float run's, kept from the calibration;
the quantized run's, as onnxruntime returns them and as numpy arrays; the statistics' temporaries. `graphlens
quantize` on RapidOCR's detector, recognizer and classifier: peak resident memory less 60 MB for the interpreter
and its libraries 1.48, 0.70 and 0.22 GB, estimated 1.41, 0.55 and 0.16 GB (the weights, in several copies, are not
in the estimate)."""


def quantize_need(model: Model, data: CalibrationData, config: QuantConfig,
                  report_on: CalibrationData | None = None, estimate: SampleEstimate | None = None) -> int:
    """Estimated bytes a quantization needs beyond the weights: a run of the first sample, and
    :data:`REPORT_COPIES` times the activations the error report exposes on ``report_on`` (default: the
    calibration's first samples, :func:`~graphlens.quantize.equalization.trial_samples`), as many samples as one
    run may return (:data:`~graphlens.numerics.samples.BATCH_BYTES`), at least one. ``estimate``: the model's at the
    first sample's sizes, if made already."""
    from graphlens.numerics.dims import estimate_at
    from graphlens.numerics.samples import BATCH_BYTES
    from graphlens.quantize.equalization import trial_samples

    if not data.samples:
        return 0
    report_on = report_on or trial_samples(data)
    estimate = estimate or estimate_at(model, data.sample(0))
    per_sample = estimate.tensors_bytes(find_sites(model.graph, config).activations)
    exposed = min(per_sample * report_on.samples, max(per_sample, BATCH_BYTES))
    return estimate.need() + REPORT_COPIES * exposed


def _refuse_what_would_not_fit(model: Model, data: CalibrationData, config: QuantConfig,
                               evaluation: CalibrationData | None, estimate: SampleEstimate | None) -> int:
    """Samples whose quantization would need more memory than the limit are refused before any run, in one
    line; the bytes it needs (:func:`quantize_need`)."""
    from graphlens.numerics.dims import refuse_samples_over_limit

    need = quantize_need(model, data, config, evaluation, estimate)
    refuse_samples_over_limit(model, data.sample(0), "quantizing", need)
    return need


def forget_values(model: Model) -> None:
    """Drop the numpy values the graphs computed for their constants (a decoder's Constant weights: a copy of
    every one; what is needed again is read again), and collect the scratch models and sessions of the step
    before: a model's graph and nodes refer to each other, so they go only when the cycle collector runs."""
    for graph in model.graphs():
        graph.constants_cache.values.clear()
    collect_if_large(model.proto)


def _copy(model: Model) -> onnx.ModelProto:
    """The model as it is now, in a protobuf of its own: freed when dropped, unlike a copy of every node written
    into the model's own protobuf (:meth:`~graphlens.core.model.Model.to_proto` after an edit)."""
    copy: onnx.ModelProto = onnx.ModelProto.FromString(model.serialize())
    return copy


def _tunes(config: QuantConfig) -> bool:
    """Whether :func:`~graphlens.quantize.tuning.tune` runs anything (then on the float model)."""
    return bool(config.bias_correction or config.sensitivity or config.target_sqnr_db is not None
                or config.target_score is not None)


def _calibrate(model: Model, placement: Placement, calibrated: Calibrated | None, data: CalibrationData,
               config: QuantConfig, report_on: CalibrationData, evaluation: CalibrationData | None,
               task: Task, sizes: dict[str, int]) -> tuple[dict[str, Range], KeptRuns | None]:
    """Every activation's range (the equalization trial's, when it calibrated them) and the float runs kept for the
    report; the calibration's session is released before the next one is made."""
    if calibrated is not None and set(placement.activations) <= set(calibrated.ranges):
        return {t: calibrated.ranges[t] for t in placement.activations}, (
            calibrated.kept if evaluation is None else None)
    kept = KeptRuns(upto=report_on.samples) if evaluation is None else None  # their float runs, for the report
    ranges = collect_ranges(model, placement.activations, data, config, task=task.part(0.0, 0.5), keep=kept,
                            sizes=sizes)
    return ranges, kept


def _add_stored_errors(measured: Measured, records: list[QuantizedTensor]) -> None:
    """The weights' errors, measured as they were quantized (their values are not kept for the report)."""
    for record in records:
        if record.error is not None:
            measured.local[record_key(record)] = measured.accumulated[record_key(record)] = record.error


@dataclass(frozen=True, kw_only=True)
class _Done:
    """What the quantization's steps did, gathered for its result."""

    fold: FoldReport | None
    opset: OpsetRaise | None
    equalization: Equalization | None
    rounding: Rounding | None
    tuning: Tuning
    ranges: dict[str, Range]
    skipped: list[tuple[str, str]]
    qdq: int
    measured_samples: int
    score: float | None


def _result(config: QuantConfig, records: list[QuantizedTensor], measured: Measured, data: CalibrationData,
            done: _Done) -> QuantizeResult:
    """The result, built once: the target search's own figures for the model written when it ran (its runs are
    of that very model), else the error report's."""
    sensitivity, target = done.tuning.sensitivity, done.tuning.target
    searched = target is not None and bool(target.outputs_db)
    layers = []
    for record in records:
        if record.kind == "bias":
            continue
        key = record_key(record)
        acc, local = measured.accumulated[key], measured.local[key]
        alone = [sensitivity[n]["alone_quantized_db"] for n in record.nodes if n in sensitivity]
        layers.append(LayerError(
            record.node, record.tensor, record.kind, acc.sqnr_db, acc.mse, acc.cosine, acc.max_abs,
            local.sqnr_db, local.mse, local.cosine, local.max_abs, list(record.nodes),
            [float(s) for s in record.params.scale.reshape(-1)], [int(z) for z in record.params.zero_point.reshape(-1)],
            record.params.qtype.name, min(alone) if alone else None))
    counts = Counter(r.kind for r in records)
    return QuantizeResult(
        config=config, layers=layers,
        output_sqnr_db=target.reached if searched and target is not None else measured.sqnr_db,
        outputs_sqnr_db=(dict(target.outputs_db) if searched and target is not None
                         else {k: v.sqnr_db for k, v in measured.outputs.items()}),
        counts={k: counts[k] for k in ("weight", "activation", "bias") if counts[k]}, qdq_nodes=done.qdq,
        calibration=data.source, samples=data.samples, fold=done.fold, opset=done.opset, skipped=done.skipped,
        excluded_for_target=done.tuning.excluded, sensitivity=sensitivity,
        range_methods={name: r.method for name, r in done.ranges.items()}, target=target,
        bias_correction=done.tuning.bias_correction, estimated_db=done.tuning.estimated_db, score=done.score,
        measured_samples=done.measured_samples, equalization=done.equalization,
        output_samples=target.samples if searched and target is not None else 0, rounding=done.rounding,
        probabilities=measured.distributions, random_samples=data.random)
