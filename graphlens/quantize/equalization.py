"""Cross-layer equalization inside ``quantize``, applied where it lowers the quantized model's error.

The ``equalize`` rule (:mod:`graphlens.rewrites.rules.equalize`) judges by the weights alone; a
rescaled channel also widens or narrows the tensor between the layers, which only calibration data
show. So with ``QuantConfig.equalize = "auto"`` (the default) :func:`choose` quantizes the folded
model both ways, as it is and equalized, each with its own MinMax-or-configured ranges over all the
calibration samples and no bias correction, runs both on the first calibration samples
(:func:`trial_samples`) and keeps equalization only if the output SQNR against the float outputs rises
(with an ``evaluate`` function, if its score rises). The ranges of both come from one calibration pass
of the model as it is, which is also the quantization's own: equalizing divides each channel of the tensors
between a chain's layers by a positive factor (:class:`~graphlens.rewrites.edit.Rescaled`), so their ranges
follow from their originals' per channel, and the equalized model never runs in float. The trial adds two
quantized runs on a few samples; when the
arm kept is the model written (nothing later changes it), its run is the error report's, so the trial adds
one (the equalized arm always; the other while its activations are small, :data:`BOTH_EXPOSE_BYTES`).
``"on"`` applies it unasked, ``"off"`` never. The edits go into the quantization's undo group, so one
undo restores the model.
"""

from __future__ import annotations

import copy
import functools
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.core.types import TensorType
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import error_stats, finite, worst_sqnr_db
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import (
    CalibrationData,
    KeptRuns,
    QuantizedRuns,
    activation_params,
    collect_ranges,
    graph_fingerprint,
    run_batches,
)
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import (
    Placement,
    QuantizedTensor,
    WeightMemo,
    apply_quantization,
    find_sites,
    scratch_model,
)
from graphlens.quantize.ranges import Range
from graphlens.quantize.scoring import Evaluate, score
from graphlens.rewrites.driver import cleanup_edits, fold_model
from graphlens.rewrites.edit import EditHistory, GraphEdit, Rescaled
from graphlens.rewrites.rule import Rule

TRIAL_ELEMENTS = 2**18
"""Most input elements (summed over samples, at least one sample) the equalization trials, bias correction and
the error report run on: one page of the PP-OCRv4 detector, one batch of recognizer crops, 9 classifier crops.
Each pass on them is one run of each model there; on 2^20 (7 recognizer batches) the trials and the report
took 5 s of the recognizer's 7 (docs/quantize.md, "Where the time goes"). The ranges are over all samples
(:func:`choose`), so only the error is measured on fewer."""


@dataclass
class Equalization:
    """What ``quantize`` did about equalization, and what it measured to decide."""

    mode: str
    applied: bool
    chains: list[str] = field(default_factory=list)
    """The equalize edits' descriptions (one per chain: its layers and weight error before → after)."""
    sqnr_without_db: float = math.nan
    sqnr_with_db: float = math.nan
    score_without: float | None = None
    score_with: float | None = None
    samples: int = 0
    """Calibration samples the two trials ran on."""

    def line(self) -> str:
        if not self.chains:
            return "equalize: no chain of layers to equalize"
        n = len(self.chains)
        what = f"{n} chain{'s' if n != 1 else ''}"
        if self.mode == "on":
            return f"equalize applied ({what}; --equalize on, not measured)"
        verdict = "applied" if self.applied else "not applied (it did not raise the quantized output's accuracy)"
        samples = f"{self.samples} calibration sample{'s' if self.samples != 1 else ''}"
        figures = f"output SQNR on {samples} {self.sqnr_without_db:.1f} dB without, {self.sqnr_with_db:.1f} dB with"
        if self.score_with is not None:
            figures += f"; score {self.score_without:g} without, {self.score_with:g} with"
        return f"equalize {verdict}: {what}; {figures}"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "applied": self.applied, "chains": list(self.chains),
                "sqnr_without_db": finite(self.sqnr_without_db), "sqnr_with_db": finite(self.sqnr_with_db),
                "score_without": self.score_without, "score_with": self.score_with, "samples": self.samples}


def trial_samples(data: CalibrationData) -> CalibrationData:
    """The first samples within :data:`TRIAL_ELEMENTS` input elements, at least one: the equalization trials,
    bias correction and the error report run on these."""
    return data.first(TRIAL_ELEMENTS)


@functools.cache
def _equalize_rule() -> list[Rule]:
    """The equalize rule, its refusals without the figures nobody here reads."""
    from graphlens.rewrites.driver import resolve_rules
    from graphlens.rewrites.rules.equalize import Equalize

    rule = copy.copy(resolve_rules(["equalize"])[0])
    assert isinstance(rule, Equalize)
    rule.full_reasons = False
    return [rule]


def equalized(proto: onnx.ModelProto, *, own: bool = False) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``proto`` with every chain the rule takes equalized, and the edits' descriptions; ``own``:
    ``proto`` is the caller's copy to give away, equalized itself."""
    equal, edits = _equalized(proto if own else onnx.ModelProto.FromString(proto.SerializeToString()))
    return equal, [edit.description for edit in edits]


def _equalized(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[GraphEdit]]:
    """``proto`` equalized in place, and the rule's edits: the same edits equalize any copy of it."""
    scratch = Model(proto)
    report = fold_model(scratch, _equalize_rule(), EditHistory(scratch, keep_history=False))
    return scratch.to_proto(), report.edits


def _replay_edits(model: Model, session: EditHistory, edits: list[GraphEdit]) -> None:
    """The rule's edits, planned on a copy of ``model``, applied to it one at a time (a later round's edit may
    touch an earlier one's nodes), then the tidy that follows a fold: the rule is not planned twice."""
    for edit in edits:
        session.apply([edit])
    tidy = cleanup_edits(model, Counter())
    if tidy:
        session.apply(tidy)


@dataclass
class QuantizedArm:
    """One way the trial quantized the model: on a copy of it, its sites, and what was quantized."""

    model: Model
    placement: Placement
    records: list[QuantizedTensor]


@dataclass
class Calibrated:
    """What the trial's one calibration pass leaves for the quantization: every activation's range over all the
    calibration samples, for both ways, and the float runs on the trial samples (None: not all kept)."""

    ranges: dict[str, Range]
    kept: KeptRuns | None
    arm: QuantizedArm | None = None
    """The arm kept, when it is the model quantize writes (``for_report``, :func:`choose`): written as it is
    instead of quantized again."""


def rescaled_tensors(edits: list[GraphEdit]) -> dict[str, Rescaled]:
    """Every tensor the edits rescale, traced back to the original model's (a chain equalized again in a later round
    rescales an already rescaled tensor: the divisors multiply)."""
    own = {name: r for edit in edits for name, r in edit.rescaled.items()}
    traced = {}
    for name, r in own.items():
        source, divisor = r.source, r.divisor
        while source in own:
            source, divisor = own[source].source, divisor * own[source].divisor
        traced[name] = Rescaled(source, divisor)
    return traced


BOTH_EXPOSE_BYTES = 64 * 2**20
"""Float activations of the trial samples (as kept) up to which both arms' runs expose theirs for the report, so
that whichever arm is kept, the report reuses its run: the classifier's 9 crops (41 MB; exposing the arm it does
not keep too costs nothing measurable: 0.4 ms, median of 12 paired rounds), not the recognizer's batch (137 MB: the
copy cost what the run saved) nor a detector page."""


def _arm(proto: onnx.ModelProto, config: QuantConfig, types: dict[str, TensorType] | None,
         ) -> tuple[Model, Placement]:
    """A model of ``proto`` itself (the trial's own copy, which its quantization then edits), and its sites."""
    scratch = scratch_model(proto, types, copy=False)
    return scratch, find_sites(scratch.graph, config)


def equalized_types(types: dict[str, TensorType], rescaled: Mapping[str, Rescaled]) -> dict[str, TensorType]:
    """The types of a model equalized, from the model's: each tensor a chain renames has its source's (equalizing
    divides values, never changes a type or a shape)."""
    return {**types, **{name: types[r.source] for name, r in rescaled.items() if r.source in types}}


def _quantized(scratch: Model, placement: Placement, ranges: dict[str, Range], config: QuantConfig,
               memo: WeightMemo | None = None) -> tuple[onnx.ModelProto, list[str], QuantizedArm]:
    """``scratch`` quantized with ``ranges`` (no bias correction), its dequantized activations, and the arm."""
    params = activation_params({t: ranges[t] for t in placement.activations if t in ranges}, config)
    records = apply_quantization(scratch, placement, params, config, keep_values=False, memo=memo)
    return (scratch.to_proto(), [r.dequantized for r in records if r.kind == "activation"],
            QuantizedArm(scratch, placement, records))


def _arm_outputs(proto: onnx.ModelProto, runs: list[dict[str, np.ndarray]] | None, trial: CalibrationData,
                 config: QuantConfig, task: Task | None) -> dict[str, np.ndarray]:
    """An arm's float graph outputs on the trial samples, flattened in sample order: its runs', else run here."""
    if runs is None:
        return flat_outputs(proto, trial, config, task)
    return {n: np.concatenate([np.ravel(run[n]) for run in runs]) for n in float_outputs(proto)}


def _reference(proto: onnx.ModelProto, kept: KeptRuns, data: CalibrationData, config: QuantConfig,
               task: Task | None) -> dict[str, np.ndarray]:
    """The float outputs on ``data``, flattened in sample order: the kept runs', else a run of ``proto``."""
    names = float_outputs(proto)
    if kept.complete and kept.batches:
        return {n: np.concatenate([np.ravel(b.outputs[0][n]) for b in kept.batches]) for n in names}
    return flat_outputs(proto, data, config, task)


def flat_outputs(proto: onnx.ModelProto, data: CalibrationData, config: QuantConfig,
                 task: Task | None) -> dict[str, np.ndarray]:
    """Every float graph output of ``proto`` on ``data``, flattened in sample order (one session, released)."""
    names = float_outputs(proto)
    got: dict[str, list[np.ndarray]] = {name: [] for name in names}
    runner = ModelRunner(proto, spin=data.long_runs, optimize=data.optimizes)
    for batch in run_batches([runner], proto, data, config.batch_size, task):
        for name in names:
            got[name].append(np.ravel(batch.outputs[0][name]))
    return {name: np.concatenate(parts) for name, parts in got.items()}


def _sqnr(reference: dict[str, np.ndarray], quantized: dict[str, np.ndarray]) -> float:
    return worst_sqnr_db(error_stats(value, quantized[name]) for name, value in reference.items())


@dataclass(frozen=True, kw_only=True)
class Trial:
    """What the choice between equalizing and not is made with (see :func:`choose`).

    ``for_report``: the arm chosen is the model the error report will measure on the trial samples (no later step
    changes it), so its run is kept for the report when it exposed the activations. ``memo``: the weights the arms
    quantize, kept for the model written (:data:`~.place.WeightMemo`); ``sizes``: the activations' bytes on one
    sample, for the trial's calibration (:func:`~.calibrate.collect_ranges`).
    """

    config: QuantConfig
    data: CalibrationData
    evaluate: Evaluate | None = None
    task: Task | None = None
    for_report: bool = False
    memo: WeightMemo | None = None
    sizes: Mapping[str, int] = field(default_factory=dict)


def _trial(proto: onnx.ModelProto, equalized_proto: onnx.ModelProto, rescaled: dict[str, Rescaled],
           result: Equalization, types: dict[str, TensorType] | None, settings: Trial) -> tuple[bool, Calibrated]:
    """Both ways quantized with their ranges over all the calibration samples, from one calibration of the model as
    it is that is also the quantization's (the equalized tensors' ranges derived from their sources' per channel:
    ``rescaled``), then run on the trial samples; ``types``: the model's own
    (:meth:`~graphlens.core.model.Model.inferred_types`), which the arms take instead of inferring theirs.
    ``proto`` and ``equalized_proto`` are the trial's own: each becomes its arm's quantized model."""
    config, data, evaluate, task = settings.config, settings.data, settings.evaluate, settings.task
    for_report, memo, sizes = settings.for_report, settings.memo, settings.sizes
    trial = trial_samples(data)
    result.samples = trial.samples
    arms = [_arm(proto, config, types),
            _arm(equalized_proto, config, None if types is None else equalized_types(types, rescaled))]
    tensors = list(dict.fromkeys(t for _, placement in arms for t in placement.activations))
    derived = {t: r for t, r in rescaled.items() if t in set(tensors)}
    kept = KeptRuns(upto=trial.samples)
    # the arm as it is, not its protobuf: its inferred shapes give the reductions the tensors' ranks
    ranges = collect_ranges(arms[0][0], tensors, data, config, keep=kept, derived=derived, task=task,
                            sizes=sizes)
    reference = _reference(proto, kept, trial, config, task)  # before the arms' edits are written into proto
    quantized = [_quantized(scratch, placement, ranges, config, memo) for scratch, placement in arms]
    del proto, equalized_proto  # each now its arm's quantized model
    replayable = kept.complete and bool(kept.batches)
    # An arm's run also exposes the activations the error report reads: when that arm is kept and is the model
    # quantize writes, the report reuses its run instead of making it again. Large activations only in the
    # equalized arm's run: both at once (a detector page: 320 MB each) cost more than the run they save.
    exposes = [for_report and (i == 1 or kept.nbytes <= BOTH_EXPOSE_BYTES) for i in range(2)]
    runs = [kept.rerun(ModelRunner(q, exposed if exposes[i] else (), spin=data.long_runs, optimize=trial.optimizes),
                       task)
            if replayable else None for i, (q, exposed, _) in enumerate(quantized)]
    result.sqnr_without_db, result.sqnr_with_db = (
        _sqnr(reference, _arm_outputs(q, arm, trial, config, task)) for (q, _, _), arm in zip(quantized, runs))
    if evaluate is not None:
        result.score_without, result.score_with = (_score(evaluate, q) for q, _, _ in quantized)
        better = result.score_with > result.score_without
    else:
        better = _finite(result.sqnr_with_db) > _finite(result.sqnr_without_db)
    kept_arm = 1 if better else 0
    if better:
        kept.rescale(derived)
    kept_runs = runs[kept_arm]
    if exposes[kept_arm] and kept_runs is not None:
        kept.quantized = QuantizedRuns(graph_fingerprint(quantized[kept_arm][0]), kept_runs)
    return better, Calibrated(ranges, kept if kept.complete else None, quantized[kept_arm][2] if for_report else None)


def choose(model: Model, session: EditHistory, settings: Trial) -> tuple[Equalization | None, Calibrated | None]:
    """Equalize ``model`` (through ``session``) when ``settings.config.equalize`` says so or, for ``auto``, when the
    trial in the module docstring finds it better; what was decided (None with ``off``), and for ``auto`` the
    calibration the trial made."""
    config = settings.config
    if config.equalize == "off":
        return None, None
    payload = model.serialize()  # the model as it is, in protobufs of their own (freed when dropped)
    equalized_proto, edits = _equalized(onnx.ModelProto.FromString(payload))
    result = Equalization(config.equalize, False, [edit.description for edit in edits])
    chains = result.chains
    if not chains:
        return result, None
    proto = onnx.ModelProto.FromString(payload)
    del payload
    calibrated, types, rescaled = None, model.inferred_types(), rescaled_tensors(edits)
    if config.equalize == "auto":
        better, calibrated = _trial(proto, equalized_proto, rescaled, result, types, settings)
        if not better:
            return result, calibrated
    _replay_edits(model, session, edits)
    if types is not None:
        model.adopt_types(equalized_types(types, rescaled))
    result.applied = True
    return result, calibrated


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _score(evaluate: Evaluate, proto: onnx.ModelProto) -> float:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="graphlens-equalize-") as folder:
        path = Path(folder) / "candidate.onnx"
        onnx.save_model(proto, path)
        return score(evaluate, path)
