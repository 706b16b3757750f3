"""Calibration: the range of every activation to quantize, from onnxruntime runs on samples.

The samples (an ``.npz``, a folder of images, or random) are :mod:`graphlens.numerics.samples`'s.
The activations are exposed as extra outputs of one onnxruntime session and the samples run in
batches along the batch dim when the model takes them (else one at a time), as many per run as fit
in :data:`~graphlens.numerics.samples.BATCH_ELEMENTS` of inputs and
:data:`~graphlens.numerics.samples.BATCH_BYTES` of outputs.

Methods, per tensor x over all samples:

- ``minmax``: ``[min x, max x]``;
- ``ema``: TF's moving average of each run's min and max, ``m ← d·m + (1 − d)·m_run``
  (``d = 0.999``), starting at the first run's;
- ``percentile``, ``mse``, ``entropy`` and ``auto``: from histograms filled in a second pass over
  the samples (2048 bins over ``[min x, max x]``; entropy's own), computed as
  :mod:`~graphlens.quantize.ranges` states.

``progress(fraction)`` is called after every run and ``cancelled()`` checked before each; a
cancel raises :class:`QuantizeCancelled`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.numerics import samples
from graphlens.numerics.run import ModelRunner
from graphlens.numerics.samples import BATCH_BYTES, RunCancelled

# samples are numerics'; quantize's API names them as before
from graphlens.numerics.samples import Batch as Batch
from graphlens.numerics.samples import CalibrationData as CalibrationData
from graphlens.numerics.samples import Cancelled as Cancelled
from graphlens.numerics.samples import load_calibration as load_calibration
from graphlens.numerics.samples import random_calibration as random_calibration
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.qdq import QParams, QType, scale_zero_point
from graphlens.quantize.ranges import (
    EntropyHistogram,
    Range,
    auto_range,
    entropy_histogram,
    entropy_range,
    mse_range,
    percentile_range,
)

KEEP_BYTES = BATCH_BYTES
"""Most bytes of the float model's calibration outputs kept for the error report (see :class:`KeptRuns`): as
much as one run may return, so the report's samples (one detector page: 362 MB of activations) are not run
again in float."""
BINS = 2048
HISTOGRAM_METHODS = ("percentile", "mse", "entropy", "auto")
"""Methods that need the second pass over the samples."""

Progress = Callable[[float], None]


class QuantizeCancelled(RunCancelled):
    """The user stopped a quantization; the model is left as it was."""


def run_batches(runners: list[ModelRunner], model: onnx.ModelProto, data: CalibrationData, batch_size: int,
                cancelled: Cancelled | None = None) -> Iterator[Batch]:
    """:func:`graphlens.numerics.samples.run_batches`, a cancel being a :class:`QuantizeCancelled`."""
    try:
        yield from samples.run_batches(runners, model, data, batch_size, cancelled)
    except RunCancelled as exc:
        raise QuantizeCancelled("quantization cancelled") from exc


@dataclass
class KeptRuns:
    """The float model's outputs on every calibration batch, kept while they fit in ``budget`` bytes.

    The error report runs on the calibration samples by default; with these it runs only the
    quantized model instead of both. Past the budget nothing is kept and the report runs both.
    """

    budget: int = KEEP_BYTES
    batches: list[Batch] = field(default_factory=list)
    nbytes: int = 0
    complete: bool = True
    upto: int | None = None
    """Keep only the batches of the first ``upto`` samples (the report measures on those); None: all."""

    def add(self, batch: Batch) -> None:
        if not self.complete:
            return
        if self.upto is not None:
            start = self.batches[-1].done if self.batches else 0
            if start >= self.upto:
                return
            if batch.done > self.upto:  # a batch across the limit: the report runs both models instead
                self.complete, self.batches = False, []
                return
        self.nbytes += sum(a.nbytes for outputs in batch.outputs for a in outputs.values())
        if self.nbytes > self.budget:
            self.complete, self.batches = False, []
            return
        self.batches.append(batch)


def collect_ranges(
    model: onnx.ModelProto,
    tensors: list[str],
    data: CalibrationData,
    config: QuantConfig,
    *,
    progress: Progress | None = None,
    cancelled: Cancelled | None = None,
    runner: ModelRunner | None = None,
    keep: KeptRuns | None = None,
) -> dict[str, Range]:
    """The range of each of ``tensors`` by ``config.method`` (see the module docstring); each
    :class:`Range` says which method gave it (for ``auto``, the one it chose).

    ``runner``: a session of ``model`` exposing ``tensors``, to share with the error report;
    ``keep``: where to keep the runs' outputs for it.
    """
    runner = runner if runner is not None else ModelRunner(model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model for calibration: {runner.error}")
    passes = 2 if config.method in HISTOGRAM_METHODS else 1
    ranges = _min_max_pass(runner, model, tensors, data, config, keep, _scaled(progress, 1 / passes), cancelled)
    if passes == 1:
        return ranges
    hists = _histogram_pass(runner, model, ranges, data, config, _later(progress), cancelled)
    return {name: _range_of(hists[name], config) for name in ranges}


def _scaled(progress: Progress | None, factor: float) -> Progress | None:
    return None if progress is None else (lambda f: progress(f * factor))


def _later(progress: Progress | None) -> Progress | None:
    return None if progress is None else (lambda f: progress(0.5 + f / 2))


def _min_max_pass(runner: ModelRunner, model: onnx.ModelProto, tensors: list[str], data: CalibrationData,
                  config: QuantConfig, keep: KeptRuns | None, progress: Progress | None,
                  cancelled: Cancelled | None) -> dict[str, Range]:
    """Each tensor's min and max over the samples (EMA: their moving averages over the runs)."""
    lows: dict[str, float] = {}
    highs: dict[str, float] = {}
    for batch in run_batches([runner], model, data, config.batch_size, cancelled):
        if keep is not None:
            keep.add(batch)
        done, (outputs,) = batch.done, batch.outputs
        for name in tensors:
            x = outputs.get(name)
            if x is None or x.size == 0 or x.dtype.kind != "f":
                continue
            lo, hi = float(x.min()), float(x.max())
            if not (math.isfinite(lo) and math.isfinite(hi)):
                finite = x[np.isfinite(x)]
                lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
            if name not in lows:
                lows[name], highs[name] = lo, hi
            elif config.method == "ema":
                d = config.ema_decay
                lows[name], highs[name] = d * lows[name] + (1 - d) * lo, d * highs[name] + (1 - d) * hi
            else:
                lows[name], highs[name] = min(lows[name], lo), max(highs[name], hi)
        if progress is not None:
            progress(done / data.samples)
    method = "minmax" if config.method in HISTOGRAM_METHODS else config.method
    return {name: Range(lows[name], highs[name], method) for name in lows}


@dataclass
class Histograms:
    """One tensor's histograms for the second pass: over its min–max range (percentile, mse, auto's
    error), and the entropy method's (:func:`~graphlens.quantize.ranges.entropy_histogram`)."""

    observed: Range
    counts: np.ndarray | None = None
    entropy: EntropyHistogram | None = None
    entropy_counts: np.ndarray | None = None
    zeros: float = 0.0
    """Values exactly 0 (auto leaves them out of its error)."""

    @property
    def edges(self) -> np.ndarray:
        r = self.observed
        return np.linspace(r.low, max(r.high, r.low + 1e-12), BINS + 1)

    def add(self, x: np.ndarray) -> None:
        x = x[np.isfinite(x)]
        if self.counts is not None:
            r = self.observed
            self.counts += np.histogram(x, bins=BINS, range=(r.low, max(r.high, r.low + 1e-12)))[0]
            self.zeros += float(np.count_nonzero(x == 0))
        if self.entropy is not None and self.entropy_counts is not None:
            self.entropy_counts += self.entropy.counts(x)


def _histogram_pass(runner: ModelRunner, model: onnx.ModelProto, ranges: dict[str, Range], data: CalibrationData,
                    config: QuantConfig, progress: Progress | None,
                    cancelled: Cancelled | None) -> dict[str, Histograms]:
    """Every tensor's histograms over its observed range, from a second run over the samples."""
    qtype = activation_qtype(config)
    hists = {}
    for name, r in ranges.items():
        h = Histograms(r)
        if config.method != "entropy":
            h.counts = np.zeros(BINS, np.float64)
        if config.method in ("entropy", "auto"):
            h.entropy = entropy_histogram(r.low, r.high, qtype, config.symmetric_activations)
            h.entropy_counts = np.zeros(h.entropy.bins, np.float64)
        hists[name] = h
    for done, (outputs,), _ in run_batches([runner], model, data, config.batch_size, cancelled):
        for name, h in hists.items():
            h.add(outputs[name])
        if progress is not None:
            progress(done / data.samples)
    return hists


def _range_of(h: Histograms, config: QuantConfig) -> Range:
    """The range ``config.method`` takes from a tensor's histograms (:mod:`~graphlens.quantize.ranges`)."""
    qtype, symmetric, r = activation_qtype(config), config.symmetric_activations, h.observed
    candidates: dict[str, Range] = {"minmax": r}
    if h.counts is not None:
        candidates["percentile"] = percentile_range(h.counts, h.edges, config.percentile)
        candidates["mse"] = mse_range(h.counts, h.edges, qtype, symmetric)
    if h.entropy is not None and h.entropy_counts is not None:
        candidates["entropy"] = entropy_range(h.entropy_counts, h.entropy, r.low, r.high)
    if config.method != "auto":
        return candidates[config.method]
    assert h.counts is not None
    return auto_range(candidates, h.counts, h.edges, h.zeros, qtype, symmetric)[0]


def activation_qtype(config: QuantConfig) -> QType:
    return QType(8, config.activation_signed, False)


def activation_params(ranges: dict[str, Range], config: QuantConfig) -> dict[str, QParams]:
    """Scale and zero point of each calibrated activation (:func:`~graphlens.quantize.qdq.scale_zero_point`)."""
    qtype = activation_qtype(config)
    return {name: scale_zero_point(r.low, r.high, qtype, config.symmetric_activations) for name, r in ranges.items()}
