"""Cross-layer equalization inside ``quantize``, applied where it lowers the quantized model's error.

The ``equalize`` rule (:mod:`graphlens.rewrites.rules.equalize`) judges by the weights alone; a
rescaled channel also widens or narrows the tensor between the layers, which only calibration data
show. So with ``QuantConfig.equalize = "auto"`` (the default) :func:`choose` quantizes the folded
model twice on the first calibration samples (:func:`trial_samples`), once as it is and once
equalized, each with its own MinMax-or-configured ranges from those samples and no bias correction,
and keeps equalization only if the output SQNR against the float outputs rises (with an ``evaluate``
function, if its score rises). ``"on"`` applies it unasked, ``"off"`` never. The edits go into the
quantization's undo group, so one undo restores the model.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, Cancelled, KeptRuns, activation_params, collect_ranges, run_batches
from graphlens.quantize.config import QuantConfig
from graphlens.numerics.metrics import ErrorStats, finite
from graphlens.quantize.evaluate import float_outputs
from graphlens.quantize.place import build_edits, find_sites
from graphlens.quantize.scoring import Evaluate, score
from graphlens.rewrites.driver import cleanup_edits, fold_model
from graphlens.rewrites.edit import RewriteSession

TRIAL_ELEMENTS = 2**18
"""Most input elements (summed over samples, at least one sample) the equalization trials, bias correction and
the error report run on: one page of the PP-OCRv4 detector, one batch of recognizer crops, 9 classifier crops.
Each pass on them is one run of each model there; on 2^20 (7 recognizer batches) the trials and the report
took 5 s of the recognizer's 7 (docs/quantize.md, "Where the time goes"). Fewer samples make a noisier trial:
on the classifier's first 9 crops equalization wins, on all 32 it loses (its CER is the same either way)."""


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
        verdict = "applied" if self.applied else "not applied (it lowered the quantized output's accuracy)"
        figures = (f"output SQNR on {self.samples} calibration samples {self.sqnr_without_db:.1f} dB without, "
                   f"{self.sqnr_with_db:.1f} dB with")
        if self.score_with is not None:
            figures += f"; score {self.score_without:g} without, {self.score_with:g} with"
        return f"equalize {verdict}: {what}; {figures}"

    def to_dict(self) -> dict[str, Any]:
        return {"mode": self.mode, "applied": self.applied, "chains": list(self.chains),
                "sqnr_without_db": finite(self.sqnr_without_db), "sqnr_with_db": finite(self.sqnr_with_db),
                "score_without": self.score_without, "score_with": self.score_with, "samples": self.samples}


def trial_samples(data: CalibrationData, budget: int | None = None) -> CalibrationData:
    """The first samples whose inputs hold at most ``budget`` (:data:`TRIAL_ELEMENTS`) elements in all, at least
    one: the equalization trials, bias correction and the error report run on these."""
    budget = TRIAL_ELEMENTS if budget is None else budget
    per_sample = sum(int(a[0].size) for a in data.arrays.values()) if data.samples else 0
    count = max(1, min(data.samples, budget // max(per_sample, 1)))
    return data if count >= data.samples else data.take(range(count))


def _equalize_rule() -> list:
    from graphlens.rewrites.driver import resolve_rules

    return resolve_rules(["equalize"])


def equalized(proto: onnx.ModelProto) -> tuple[onnx.ModelProto, list[str]]:
    """A copy of ``proto`` with every chain the rule takes equalized, and the edits' descriptions."""
    scratch = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    report = fold_model(scratch, _equalize_rule(), RewriteSession(scratch, keep_history=False))
    return scratch.to_proto(), [edit.description for edit in report.edits]


def _quantized_copy(proto: onnx.ModelProto, config: QuantConfig, data: CalibrationData,
                    cancelled: Cancelled | None) -> tuple[onnx.ModelProto, KeptRuns]:
    """``proto`` quantized with ranges from ``data`` (no bias correction), and the float runs on ``data``."""
    scratch = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    scratch.infer_shapes()
    placement = find_sites(scratch.graph, config)
    kept = KeptRuns(budget=2**62)
    runner = ModelRunner(proto, placement.activations)
    ranges = collect_ranges(proto, placement.activations, data, config, runner=runner, keep=kept, cancelled=cancelled)
    session = RewriteSession(scratch, keep_history=False)
    edits, _ = build_edits(scratch.graph, placement, activation_params(ranges, config), config)
    session.apply(edits)
    tidy = cleanup_edits(scratch, Counter())
    if tidy:
        session.apply(tidy)
    return scratch.to_proto(), kept


def _output_sqnr(float_proto: onnx.ModelProto, quantized: onnx.ModelProto, kept: KeptRuns, data: CalibrationData,
                 config: QuantConfig, cancelled: Cancelled | None) -> float:
    """Output SQNR of ``quantized`` against the float outputs kept from the same batches."""
    names = float_outputs(float_proto)
    runner = ModelRunner(quantized)
    got: dict[str, list[np.ndarray]] = {name: [] for name in names}
    for batch in run_batches([runner], quantized, data, config.batch_size, cancelled):
        for name in names:
            got[name].append(np.ravel(batch.outputs[0][name]))
    total = ErrorStats()
    for name in names:  # the two runs may batch the samples differently: compared flattened, in sample order
        reference = np.concatenate([np.ravel(b.outputs[0][name]) for b in kept.batches])
        total.add(reference, np.concatenate(got[name]))
    return total.sqnr_db


def choose(model: Model, session: RewriteSession, config: QuantConfig, data: CalibrationData, *,
           evaluate: Evaluate | None = None, cancelled: Cancelled | None = None) -> Equalization | None:
    """Equalize ``model`` (through ``session``) when ``config.equalize`` says so or, for ``auto``, when the
    trials in the module docstring find it better; what was decided, or None with ``off``."""
    if config.equalize == "off":
        return None
    proto = model.to_proto()
    equalized_proto, chains = equalized(proto)
    result = Equalization(config.equalize, False, chains)
    if not chains:
        return result
    if config.equalize == "auto":
        trial = trial_samples(data)
        result.samples = trial.samples
        without, kept = _quantized_copy(proto, config, trial, cancelled)
        result.sqnr_without_db = _output_sqnr(proto, without, kept, trial, config, cancelled)
        with_, kept = _quantized_copy(equalized_proto, config, trial, cancelled)
        result.sqnr_with_db = _output_sqnr(equalized_proto, with_, kept, trial, config, cancelled)
        if evaluate is not None:
            result.score_without, result.score_with = _score(evaluate, without), _score(evaluate, with_)
            better = result.score_with > result.score_without
        else:
            better = _finite(result.sqnr_with_db) > _finite(result.sqnr_without_db)
        if not better:
            return result
    fold_model(model, _equalize_rule(), session)
    result.applied = True
    return result


def _finite(value: float) -> float:
    return -math.inf if math.isnan(value) else value


def _score(evaluate: Evaluate, proto: onnx.ModelProto) -> float:
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory(prefix="graphlens-equalize-") as folder:
        path = Path(folder) / "candidate.onnx"
        onnx.save_model(proto, path)
        return score(evaluate, path)
