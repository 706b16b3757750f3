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

``task`` is told the share done after every run and checked before each; a cancel raises
:class:`~graphlens.core.task.Cancelled`.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.inputs import structure
from graphlens.numerics.run import ModelRunner
from graphlens.numerics.samples import BATCH_BYTES

# samples are numerics'; quantize's API names them as before
from graphlens.numerics.samples import Batch as Batch
from graphlens.numerics.samples import CalibrationData as CalibrationData
from graphlens.numerics.samples import load_calibration as load_calibration
from graphlens.numerics.samples import random_calibration as random_calibration
from graphlens.numerics.samples import run_batches as run_batches
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
from graphlens.quantize.reductions import in_two_steps, model_opset, reductions
from graphlens.rewrites.edit import Rescaled

KEEP_BYTES = BATCH_BYTES
"""Most bytes of the float model's calibration outputs kept for the error report (see :class:`KeptRuns`): as
much as one run may return, so the report's samples (one detector page: 362 MB of activations) are not run
again in float."""
BINS = 2048
HISTOGRAM_METHODS = ("percentile", "mse", "entropy", "auto")
"""Methods that need the second pass over the samples."""


@dataclass
class QuantizedRuns:
    """A quantized model's outputs on every kept batch, and which model gave them (:func:`graph_fingerprint`)."""

    fingerprint: str
    runs: list[dict[str, np.ndarray]]


def graph_fingerprint(proto: onnx.ModelProto) -> str:
    """A digest of the main graph's inputs, outputs, nodes and initializers, in order: equal for two models that
    compute the same values the same way (names included), whatever else their files hold."""
    digest = hashlib.blake2b(digest_size=16)
    for part in (*proto.graph.input, *proto.graph.output, *proto.graph.node, *proto.graph.initializer):
        digest.update(part.SerializeToString())
    return digest.hexdigest()


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
    quantized: QuantizedRuns | None = None
    """A quantized model's runs on these batches, made before the model to report on was written (the
    equalization trial's): the report reuses them if that model is the one it reports on."""

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

    def rescale(self, derived: Mapping[str, Rescaled]) -> None:
        """Each derived tensor's values in place of its source's in every kept run: the runs, made of a model, then
        stand for the rescaled model's (an equalized one's) without running it."""
        readers = Counter(r.source for r in derived.values())
        for batch in self.batches:
            outputs = batch.outputs[0]
            values = {name: rescaled_values(outputs[r.source], r.divisor, in_place=readers[r.source] == 1)
                      for name, r in derived.items() if r.source in outputs}
            for r in derived.values():
                outputs.pop(r.source, None)
            outputs.update(values)

    def rerun(self, runner: ModelRunner, task: Task | None = None) -> list[dict[str, np.ndarray]] | None:
        """``runner`` (another model) on every kept batch's feed, its outputs batch by batch; ``task`` is told the
        share of the kept samples done after each. None if a run fails: the caller runs both models afresh, which
        says why."""
        task = task_or_idle(task)
        total = self.batches[-1].done if self.batches else 0
        runs = []
        for batch in self.batches:
            task.check("quantization")
            got = runner.run(batch.feed)
            if got.outputs is None:
                return None
            runs.append(got.outputs)
            task.report(batch.done / max(total, 1))
        return runs


def collect_ranges(
    model: Model | onnx.ModelProto,
    tensors: list[str],
    data: CalibrationData,
    config: QuantConfig,
    *,
    task: Task | None = None,
    keep: KeptRuns | None = None,
    derived: Mapping[str, Rescaled] | None = None,
    sizes: Mapping[str, int] | None = None,
) -> dict[str, Range]:
    """The range of each of ``tensors`` by ``config.method`` (see the module docstring); each
    :class:`Range` says which method gave it (for ``auto``, the one it chose).

    One session exposes every tensor and, beside it, its ReduceMin and ReduceMax (as onnxruntime's own
    calibrator does): the runs kept for the error report (``keep``) and the histograms take the tensors,
    every other run only their two scalars. ``derived``: tensors of ``tensors`` that ``model`` does not compute,
    each another's values divided per channel (an equalized model's); their ranges come from their sources' per
    channel (a ReduceMin and a ReduceMax of each channel), so the rescaled model need not run. ``sizes``: bytes of
    the tensors on one sample, where known (:meth:`~graphlens.numerics.dims.SampleEstimate.activation_bytes`): the
    large ones are reduced in two steps (:func:`~graphlens.quantize.reductions.reductions`). ``task``: see the module
    docstring.
    """
    task = task_or_idle(task)
    sources = Sources(dict(derived or {}))
    own = [t for t in tensors if t not in sources.derived]
    plain = [t for t in own if t not in sources.channels]
    opset, two_steps = model_opset(model), in_two_steps(model, [*plain, *sources.channels], sizes or {})
    nodes, reduced = reductions(plain, opset, two_steps)
    channel_nodes, channel_reduced = reductions(sources.channels, opset, two_steps, per_channel=True)
    wanted = [*plain, *sources.channels]
    scalars = [n for pair in (*reduced.values(), *channel_reduced.values()) for n in pair]
    runner = ModelRunner(model, [*wanted, *scalars], extra_nodes=[*nodes, *channel_nodes], spin=data.long_runs,
                         optimize=data.optimizes)
    if runner.error is not None:  # a model the reductions do not fit: every tensor whole
        runner, reduced, channel_reduced = ModelRunner(model, wanted, spin=data.long_runs,
                                                       optimize=data.optimizes), {}, {}
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model for calibration: {runner.error}")
    sources.reduced = channel_reduced
    shape = structure(model)
    passes = 2 if config.method in HISTOGRAM_METHODS else 1
    ranges = _min_max_pass(runner, shape, tensors, reduced, sources, data, config, keep, task.part(0.0, 1 / passes))
    if passes == 1:
        return ranges
    hists = _histogram_pass(runner.only(wanted), shape, ranges, sources, data, config, task.part(0.5, 1.0))
    return {name: _range_of(hists[name], config) for name in ranges}


def _finite_bounds(x: np.ndarray | None) -> tuple[float, float] | None:
    """A float tensor's min and max over its finite values (0, 0 with none); None for an empty or integer one."""
    if x is None or x.size == 0 or x.dtype.kind != "f":
        return None
    lo, hi = float(x.min()), float(x.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):
        finite = x[np.isfinite(x)]
        lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 0.0)
    return lo, hi


def rescaled_values(x: np.ndarray, divisor: np.ndarray, *, in_place: bool = False) -> np.ndarray:
    """``x`` divided channel by channel (axis 1) by ``divisor``, in float32 as the rescaled model computes it;
    ``in_place``: into ``x`` itself when it is a writable float32 array (the caller's own: a kept run's tensor
    nothing else reads: a detector page's seven in 1 ms, against 22 ms into new arrays)."""
    shape = [1] * x.ndim
    shape[1] = -1
    divisors = divisor.astype(np.float32).reshape(shape)
    if in_place and isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.writeable:
        x /= divisors
        return x
    values: np.ndarray = np.asarray(x, np.float32) / divisors
    return values


def _channel_bounds(x: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
    """A float tensor's min and max per channel (axis 1) over its finite values (a channel with none: +inf, −inf);
    None for an empty or integer one."""
    if x is None or x.size == 0 or x.dtype.kind != "f" or x.ndim < 2:
        return None
    rows = np.moveaxis(x, 1, 0).reshape(x.shape[1], -1)
    if np.isfinite(rows).all():
        return rows.min(axis=1), rows.max(axis=1)
    finite = np.isfinite(rows)
    return np.where(finite, rows, np.inf).min(axis=1), np.where(finite, rows, -np.inf).max(axis=1)


@dataclass
class Sources:
    """Tensors a calibration derives instead of running them (:func:`collect_ranges`'s ``derived``), and the
    per-channel reductions of the tensors they come from (:attr:`channels`), by tensor."""

    derived: dict[str, Rescaled]
    reduced: dict[str, tuple[str, str]] = field(default_factory=dict)
    channels: list[str] = field(init=False)

    def __post_init__(self) -> None:
        self.channels = list(dict.fromkeys(r.source for r in self.derived.values()))

    def bounds(self, runner: ModelRunner, name: str, outputs: dict[str, np.ndarray], feed: dict[str, np.ndarray],
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """A source's per-channel bounds on one run: from its reductions; from the tensor when they are not finite,
        or missing (the tensor the run returned, else a run of it)."""
        if name in self.reduced:
            lo, hi = (outputs.get(n) for n in self.reduced[name])
            if lo is not None and hi is not None and lo.dtype.kind == "f" and np.isfinite(lo).all() \
                    and np.isfinite(hi).all():
                return lo, hi
        if name in outputs:
            return _channel_bounds(outputs[name])
        again = runner.only([name]).run(feed).outputs
        return None if again is None else _channel_bounds(again.get(name))

    def tensor_bounds(self, name: str, channels: dict[str, tuple[np.ndarray, np.ndarray] | None],
                      ) -> tuple[float, float] | None:
        """A source's or a derived tensor's min and max from the sources' per-channel bounds of the same run."""
        rescaled = self.derived.get(name)
        found = channels.get(rescaled.source if rescaled is not None else name)
        if found is None:
            return None
        lo, hi = found
        alive = lo <= hi  # channels with a finite value
        if not alive.any():
            return 0.0, 0.0
        if rescaled is not None:
            if rescaled.divisor.size != lo.size:
                raise GraphLensError(f"'{name}' rescales {rescaled.divisor.size} channels of '{rescaled.source}', "
                                     f"which has {lo.size}")
            lo, hi = rescaled_values(lo[None], rescaled.divisor)[0], rescaled_values(hi[None], rescaled.divisor)[0]
        return float(lo[alive].min()), float(hi[alive].max())

    def values(self, name: str, outputs: dict[str, np.ndarray]) -> np.ndarray:
        """A tensor's values on one run: returned by it, or derived from its source's."""
        rescaled = self.derived.get(name)
        if rescaled is None:
            return outputs[name]
        return rescaled_values(outputs[rescaled.source], rescaled.divisor)


@dataclass
class _Bounds:
    """Each tensor's min and max so far (EMA: their moving averages over the runs)."""

    config: QuantConfig
    lows: dict[str, float] = field(default_factory=dict)
    highs: dict[str, float] = field(default_factory=dict)

    def add(self, name: str, found: tuple[float, float] | None) -> None:
        if found is None:
            return
        lo, hi = found
        if name not in self.lows:
            self.lows[name], self.highs[name] = lo, hi
        elif self.config.method == "ema":
            d = self.config.ema_decay
            self.lows[name], self.highs[name] = d * self.lows[name] + (1 - d) * lo, d * self.highs[name] + (1 - d) * hi
        else:
            self.lows[name], self.highs[name] = min(self.lows[name], lo), max(self.highs[name], hi)


def _min_max_pass(runner: ModelRunner, model: onnx.ModelProto, tensors: list[str], reduced: dict[str, tuple[str, str]],
                  sources: Sources, data: CalibrationData, config: QuantConfig, keep: KeptRuns | None,
                  task: Task) -> dict[str, Range]:
    """Each tensor's min and max over the samples: from the tensors on the samples kept for the report (all of
    them without reductions), from their reductions on the rest."""
    bounds, n = _Bounds(config), data.samples
    whole = _whole_runs(n, {**reduced, **sources.reduced}, keep)
    scalars = [name for pair in (*reduced.values(), *sources.reduced.values()) for name in pair]
    # onnxruntime computes the reductions on every run, so the runs returning whole tensors take them too: a
    # tensor's bounds are its reductions' (the tensor's own only when they are not finite)
    # The runs that return whole tensors go last, except for EMA (its averages depend on the order): the tensors
    # kept hold memory onnxruntime would reuse, so the run after them allocates afresh (a detector page: +0.08 s).
    parts = ((0, whole), (whole, n)) if config.method == "ema" else ((whole, n), (0, whole))
    done = 0
    for start, stop in parts:
        if start >= stop:
            continue
        part = data if stop - start == n else data.take(range(start, stop))
        tensor_runs = start == 0 and whole > 0
        for batch in run_batches([runner if tensor_runs else runner.only(scalars)], model, part,
                                 config.batch_size, task):
            outputs = batch.outputs[0]
            if tensor_runs and keep is not None:
                keep.add(batch)
            channels = {name: sources.bounds(runner, name, outputs, batch.feed) for name in sources.channels}
            for name in tensors:
                if name in sources.derived or name in channels:
                    bounds.add(name, sources.tensor_bounds(name, channels))
                elif name in reduced:
                    bounds.add(name, _reduced_bounds(runner, name, reduced[name], outputs, batch.feed))
                else:
                    bounds.add(name, _finite_bounds(outputs.get(name)))
            task.report((done + batch.done) / n)
        done += stop - start
    method = "minmax" if config.method in HISTOGRAM_METHODS else config.method
    return {name: Range(bounds.lows[name], bounds.highs[name], method) for name in bounds.lows}


def _whole_runs(n: int, reduced: dict[str, tuple[str, str]], keep: KeptRuns | None) -> int:
    """How many first samples run with their tensors whole: every one without reductions, else those the
    error report keeps."""
    if not reduced:
        return n
    if keep is None:
        return 0
    return n if keep.upto is None else min(n, keep.upto)


def _reduced_bounds(runner: ModelRunner, name: str, reduced: tuple[str, str], outputs: dict[str, np.ndarray],
                    feed: dict[str, np.ndarray]) -> tuple[float, float] | None:
    """A tensor's min and max from its reductions; from the tensor itself when they are not finite (an infinity
    or NaN in it, or an empty tensor), or not float: the tensor the run returned, else a run of it."""
    lo, hi = outputs.get(reduced[0]), outputs.get(reduced[1])
    if lo is not None and hi is not None and lo.dtype.kind == "f":
        low, high = float(lo), float(hi)
        if math.isfinite(low) and math.isfinite(high):
            return low, high
    if name in outputs:
        return _finite_bounds(outputs[name])
    again = runner.only([name]).run(feed)
    return None if again.outputs is None else _finite_bounds(again.outputs.get(name))


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
    def span(self) -> tuple[float, float]:
        """The histogram's range: the observed one, widened when it is too narrow for :data:`BINS` bins in float32
        (a constant tensor: densenet-121's ``fc6_1``, 0.46095 everywhere; numpy bins float32 data in float32)."""
        r = self.observed
        return r.low, max(r.high, r.low + max(1e-12, abs(r.low) * 2.0**-10))

    @property
    def edges(self) -> np.ndarray:
        return np.linspace(*self.span, BINS + 1)

    def add(self, x: np.ndarray) -> None:
        x = x[np.isfinite(x)]
        if self.counts is not None:
            self.counts += np.histogram(x, bins=BINS, range=self.span)[0]
            self.zeros += float(np.count_nonzero(x == 0))
        if self.entropy is not None and self.entropy_counts is not None:  # exact zeros left out (ranges.py)
            self.entropy_counts += self.entropy.counts(x[x != 0])


def _histogram_pass(runner: ModelRunner, model: onnx.ModelProto, ranges: dict[str, Range], sources: Sources,
                    data: CalibrationData, config: QuantConfig, task: Task) -> dict[str, Histograms]:
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
    for done, (outputs,), _ in run_batches([runner], model, data, config.batch_size, task):
        for name, h in hists.items():
            h.add(sources.values(name, outputs))
        task.report(done / data.samples)
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
