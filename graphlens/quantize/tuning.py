"""What :func:`~graphlens.quantize.quantize.quantize_model` decides between calibration and the QDQ edits:
bias corrections (:mod:`~.bias_correction`), the layers left float for a target (:mod:`~.target`, measured
by output SQNR or by the user's score, :mod:`~.scoring`) and the exact sensitivity scan (:mod:`~.sensitivity`).
Each works on scratch copies; the model itself is edited once, afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.metrics import worst_sqnr_db
from graphlens.quantize.bias_correction import BiasCorrection, correctable, measure_shifts
from graphlens.quantize.calibrate import CalibrationData
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import Placement
from graphlens.quantize.qdq import QParams
from graphlens.quantize.scoring import Candidates, Evaluate
from graphlens.quantize.target import ESTIMATE_ELEMENTS, int8_share, rank_layers, search, sqnr_search
from graphlens.quantize.target_result import TargetResult


@dataclass
class Tuning:
    """The decisions, and what was measured to take them."""

    bias_shift: dict[str, np.ndarray] = field(default_factory=dict)
    bias_correction: BiasCorrection | None = None
    target: TargetResult | None = None
    sensitivity: dict[str, dict[str, float]] = field(default_factory=dict)
    estimated_db: dict[str, float] = field(default_factory=dict)
    """Layer -> estimated output SQNR with it alone quantized (the target search's ranking)."""

    @property
    def excluded(self) -> list[str]:
        return [] if self.target is None else list(self.target.excluded)


def tune(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams], config: QuantConfig,
         data: CalibrationData, evaluation: CalibrationData, constant: Callable[[str], np.ndarray | None], *,
         evaluate: Evaluate | None = None, task: Task | None = None, memory_base: int = 0) -> Tuning:
    """Bias shifts on ``data`` (calibration), then the target search and the scan on ``evaluation``.
    ``memory_base``: the bytes the quantization itself needs (the search's come on top)."""
    task = task_or_idle(task)
    if config.target_score is not None and evaluate is None:
        raise GraphLensError("a target score needs an evaluate function (--evaluate SCRIPT.py)")
    tuning = Tuning()
    if config.bias_correction:
        tuning.bias_shift, tuning.bias_correction = _bias_correction(float_proto, placement, params, config, data,
                                                                     constant, task)
    task.report(0.3)
    if config.target_sqnr_db is not None or config.target_score is not None:
        tuning.target, tuning.estimated_db = _target(float_proto, placement, params, config, evaluation,
                                                     tuning.bias_shift, evaluate, task, memory_base)
    task.report(0.6)
    if config.sensitivity:
        from graphlens.quantize.sensitivity import scan

        scanned = scan(float_proto, placement, params, config, evaluation, bias_shift=tuning.bias_shift,
                       task=task.part(0.6, 1.0))
        tuning.sensitivity = scanned.per_node
    return tuning


def _bias_correction(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
                     config: QuantConfig, data: CalibrationData, constant: Callable[[str], np.ndarray | None],
                     task: Task) -> tuple[dict[str, np.ndarray], BiasCorrection | None]:
    """The shifts measured, measured again with them applied (the corrections of earlier layers change later
    layers' inputs), and what is left measured for the report; kept only if the output SQNR rises. All on the
    first calibration samples within :data:`~.equalization.TRIAL_ELEMENTS` input elements: a channel's mean
    is over every position of every sample, and a large image has plenty."""
    from graphlens.quantize.equalization import trial_samples

    data = trial_samples(data)
    first = measure_shifts(float_proto, placement, params, config, data, constant, task=task)
    shift = correctable(placement, first)
    if not shift:
        return {}, BiasCorrection({}, {}, samples=data.samples)  # the report says there was nothing to correct
    again = measure_shifts(float_proto, placement, params, config, data, constant, bias_shift=shift,
                           reference=first.reference, task=task)
    shift = {n: again.shift.get(n, s) for n, s in shift.items()}
    after = measure_shifts(float_proto, placement, params, config, data, constant, bias_shift=shift,
                           reference=first.reference, residual=True, task=task)
    report = BiasCorrection({n: first.relative[n] for n in shift}, {n: after.relative[n] for n in shift
                                                                    if n in after.relative},
                            worst_sqnr_db(first.outputs.values()), worst_sqnr_db(after.outputs.values()), data.samples)
    return (shift if report.kept else {}), report


def _target(float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams], config: QuantConfig,
            data: CalibrationData, bias_shift: dict[str, np.ndarray], evaluate: Evaluate | None,
            task: Task, memory_base: int = 0) -> tuple[TargetResult, dict[str, float]]:
    from graphlens.quantize.sensitivity import build_gated, open_gated

    given, data = data.samples, data.first(ESTIMATE_ELEMENTS)
    _refuse_a_search_that_would_not_fit(float_proto, data, memory_base)
    gated = build_gated(float_proto, placement, params, config, bias_shift)
    if config.target_score is None:  # one session of the gated model for the measured pass and the search
        assert config.target_sqnr_db is not None
        runner = open_gated(gated, spin=data.long_runs)
        ranking = rank_layers(gated, data, config.batch_size, task, runner)
        found = sqnr_search(gated, ranking, config.target_sqnr_db, data, config.batch_size, task, runner)
        found.given_samples = given
        return found, ranking.estimated_db
    assert evaluate is not None
    ranking = rank_layers(gated, data, config.batch_size, task)
    candidates = Candidates(float_proto, placement, params, config, evaluate, bias_shift)
    try:
        best = candidates.float_score()
        start = candidates([])
        result = search(ranking.order, ranking.gain, config.target_score, start, candidates, as_noise=False,
                        end_value=best, steady=ranking.steady)
        result.int8_macs = int8_share(ranking, result.excluded)
    finally:
        candidates.close()
    return result, ranking.estimated_db


SEARCH_WEIGHT_COPIES = 5
"""Copies of the weights the target search holds beyond a plain quantization's: the gated model (float and
int8 weights) and its side-by-side twin, as protobufs and in onnxruntime's sessions. Measured peaks over the
plain run's: onnxscript's Whisper decoder build (168 MB of weights) 0.75 GB, chython-rxnmap (85 MB) 0.41 GB."""


def search_need(float_proto: onnx.ModelProto, data: CalibrationData) -> int:
    """Estimated bytes the target search needs beyond what a plain quantization holds: :data:`SEARCH_WEIGHT_COPIES`
    of the weights, and two runs of a sample at once (the float and the quantized model side by side)."""
    from graphlens.core.tensors import all_tensors
    from graphlens.core.types import tensor_nbytes
    from graphlens.numerics.dims import dims_of, run_need

    weights = sum(tensor_nbytes(t) for t in all_tensors(float_proto))
    runs = 2 * run_need(float_proto, dims_of(float_proto, data.sample(0))) if data.samples else 0
    return SEARCH_WEIGHT_COPIES * weights + runs


def _refuse_a_search_that_would_not_fit(float_proto: onnx.ModelProto, data: CalibrationData, base: int) -> None:
    """A search the memory left cannot hold (with the quantization's own ``base`` bytes) is refused before anything
    is built for it, in one line."""
    from graphlens.numerics.memory import memory_limit, over_limit

    need, limit = base + search_need(float_proto, data), memory_limit()
    if need > limit:
        raise GraphLensError(f"target search not run: it {over_limit(need, limit)}; without a target every layer "
                             "is quantized")
