"""Calibration: the range of every activation to quantize, from onnxruntime runs on samples.

Samples come from an ``.npz`` (one array per graph input: ``(N, *input shape)`` with the samples
along the input's batch axis, or ``(samples, *input shape)``), a folder of images
(:mod:`~graphlens.quantize.calibration_images`), or are random (standard normal, seeded), sized
by the dynamic-dims search of :mod:`graphlens.numerics.dims`. The activations are exposed as
extra outputs of one onnxruntime session and the samples run in batches along the batch dim when
the model takes them (else one at a time), as many per run as fit in :data:`BATCH_ELEMENTS` of inputs
and :data:`BATCH_BYTES` of outputs.

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
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.types import type_of_value_info
from graphlens.numerics.dims import DimChoice, search_dims
from graphlens.numerics.inputs import graph_inputs, make_inputs
from graphlens.numerics.run import ModelRunner
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

BATCH_BYTES = 512 * 2**20
"""Most bytes of exposed tensors one run may return; larger batches are split."""
BATCH_ELEMENTS = 2**17
"""Most input elements one run stacks: samples batch together only while they are small. A batch of large
samples runs slower than the same samples one at a time (each of its intermediate tensors is a fresh large
allocation): the PP-OCRv4 detector's 8 pages of 736×992 took 4.0 s in one batch and 1.2 s one by one, the
recognizer's 24 crops 3.0 s in batches of 8 and 1.6 s one by one; 32 classifier crops (27,648 elements
each) ran as fast either way."""
KEEP_BYTES = BATCH_BYTES
"""Most bytes of the float model's calibration outputs kept for the error report (see :class:`KeptRuns`): as
much as one run may return, so the report's samples (one detector page: 362 MB of activations) are not run
again in float."""
BINS = 2048
HISTOGRAM_METHODS = ("percentile", "mse", "entropy", "auto")
"""Methods that need the second pass over the samples."""

Progress = Callable[[float], None]
Cancelled = Callable[[], bool]


class QuantizeCancelled(GraphLensError):
    """The user stopped a quantization; the model is left as it was."""


@dataclass
class CalibrationData:
    """Samples for every graph input: ``arrays[name]`` is ``(samples, *input shape)``."""

    arrays: dict[str, np.ndarray]
    source: str
    """``from FILE`` or ``random (seed S)``, for reports."""
    dims: DimChoice | None = None

    @property
    def samples(self) -> int:
        return min(len(a) for a in self.arrays.values()) if self.arrays else 0

    def sample(self, index: int) -> dict[str, np.ndarray]:
        """One sample per input; a scalar input stays a 0-d array (onnxruntime refuses numpy scalars)."""
        return {k: np.asarray(v[index]) for k, v in self.arrays.items()}

    def take(self, indices: range | list[int]) -> CalibrationData:
        return CalibrationData({k: v[list(indices)] for k, v in self.arrays.items()}, self.source, self.dims)


def load_calibration(path: str | Path, model: Model | onnx.ModelProto, *, preprocess: str | None = None,
                     ) -> CalibrationData:
    """Samples from an ``.npz`` or, for a folder, from its images (``preprocess``: see
    :mod:`~graphlens.quantize.calibration_images`); a missing input or a shape that does not fit
    raises, in one line."""
    path = Path(path)
    if path.is_dir():
        from graphlens.quantize.calibration_images import load_image_folder

        return load_image_folder(path, model, preprocess)
    if preprocess:
        raise GraphLensError(f"{path}: a preprocessing is for a folder of images, not an .npz of samples")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise GraphLensError(f"{path}: cannot read calibration samples ({exc})") from exc
    result: dict[str, np.ndarray] = {}
    for value in graph_inputs(model):
        if value.name not in arrays:
            raise GraphLensError(f"{path}: has no array for input '{value.name}' "
                                 f"(it has {', '.join(arrays) or 'none'})")
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        array = as_samples(arrays[value.name], type_of_value_info(value).shape, f"{path}: array '{value.name}'")
        result[value.name] = array.astype(dtype, copy=False)
    if not result or min(len(a) for a in result.values()) == 0:
        raise GraphLensError(f"{path}: holds no samples")
    return CalibrationData(result, f"from {path}")


def _misfit(shape: tuple[int, ...], declared: tuple, offset: int) -> str | None:
    """Where ``shape[offset:]`` differs from the declared fixed dims (the batch axis is free when ``offset`` is 0)."""
    for i, d in enumerate(declared):
        if (offset or i) and isinstance(d, int) and d > 0 and shape[i + offset] != d:
            return f"{shape[i + offset]} at axis {i + offset} where the input has {d}"
    return None


def _shape_text(declared: tuple) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in declared) + "]"


def as_samples(array: np.ndarray, declared: tuple | None, what: str) -> np.ndarray:
    """``array`` as ``(samples, *input shape)``, for an input declared ``declared``.

    An array of the input's rank holds samples along the batch axis (axis 0): ``N`` samples of
    batch 1 when that axis is dynamic, one sample when it is fixed (and the array matches it). One
    more dim is the ``(samples, *input shape)`` layout. Each layout must fit the declared fixed dims.
    """
    if declared is None:
        return array  # rank unknown: the (samples, *input shape) layout, as always
    rank, shape = len(declared), _shape_text(declared)
    if array.ndim == rank + 1:
        misfit = _misfit(array.shape, declared, 1)
        if misfit is None:
            return array
        raise GraphLensError(f"{what} (samples, *input shape) has {misfit} ({shape})")
    if rank == 0:
        raise GraphLensError(f"{what} has shape {list(array.shape)}; the input is a scalar: give one value per sample")
    if array.ndim != rank:
        raise GraphLensError(f"{what} has shape {list(array.shape)}, which does not fit input {shape}: give (N, ...) "
                             f"with the samples along the batch axis ({rank} dims) or (samples, *input shape) "
                             f"({rank + 1} dims)")
    misfit = _misfit(array.shape, declared, 0)
    if misfit is not None:
        raise GraphLensError(f"{what} has {misfit} ({shape})")
    batch = declared[0]
    if not (isinstance(batch, int) and batch > 0):
        return array[:, None]  # N samples of batch 1
    if array.shape[0] == batch:
        return array[None]  # exactly one input of the fixed batch
    raise GraphLensError(f"{what} has {array.shape[0]} along the batch axis, which the input fixes at {batch} "
                         f"({shape}): give (samples, *input shape), {rank + 1} dims")


def random_calibration(model: Model | onnx.ModelProto, samples: int, *, seed: int = 0,
                       dims: dict[str, int] | None = None) -> CalibrationData:
    """``samples`` random samples (standard normal for floats), dims chosen so that the model runs."""
    if samples < 1:
        raise GraphLensError(f"need at least 1 calibration sample, not {samples}")
    search = search_dims(model, ModelRunner(model), given=dims, seed=seed)
    if not search.ran:
        raise GraphLensError(f"onnxruntime cannot run the model: {search.result.error}")
    values = search.choice.values
    runs = [make_inputs(model, values, seed=seed + i) for i in range(samples)]
    arrays = {k: np.stack([r[k] for r in runs]) for k in runs[0]}
    return CalibrationData(arrays, f"random (seed {seed})", search.choice)


def _batchable(model: onnx.ModelProto, data: CalibrationData) -> bool:
    """Whether samples can be stacked along a dynamic leading batch dim of every input."""
    for value in model.graph.input:
        if value.name not in data.arrays:
            continue
        shape = type_of_value_info(value).shape
        if not shape or isinstance(shape[0], int) and shape[0] > 0 or data.arrays[value.name].shape[1] != 1:
            return False
    return True


class Batch(NamedTuple):
    """One run of every runner on the same feed."""

    done: int
    """Samples done, this batch included."""
    outputs: list[dict[str, np.ndarray]]
    """Each runner's outputs, in the runners' order."""
    feed: dict[str, np.ndarray]


def run_batches(
    runners: list[ModelRunner], model: onnx.ModelProto, data: CalibrationData, batch_size: int,
    cancelled: Cancelled | None = None,
) -> Iterator[Batch]:
    """Each runner's outputs on one batch at a time, over every sample.

    The samples are stacked along the batch dim when every input has a dynamic leading dim and
    the model runs that way; the batch is then as large as ``batch_size``, :data:`BATCH_ELEMENTS` and
    :data:`BATCH_BYTES` (judged from the first run's outputs) allow. Every runner gets the same feed.
    """
    n = data.samples
    batch, done = 1, 0
    per_sample = sum(int(a[0].size) for a in data.arrays.values()) if n else 0
    batch_size = min(batch_size, max(1, BATCH_ELEMENTS // max(per_sample, 1)))
    stack = _batchable(model, data) and batch_size > 1
    while done < n:
        if cancelled is not None and cancelled():
            raise QuantizeCancelled("quantization cancelled")
        end = min(n, done + batch)
        feed = ({k: v[done:end].reshape((-1, *v.shape[2:])) for k, v in data.arrays.items()} if stack
                else data.sample(done))
        results = [runner.run(feed) for runner in runners]
        failed = next((r for r in results if r.outputs is None), None)
        if failed is not None:
            if batch > 1:  # the model's inside does not take a batch after all: one at a time
                stack, batch = False, 1
                continue
            raise GraphLensError(f"onnxruntime cannot run the model on sample {done}: {failed.error}")
        if done == 0 and stack:  # size the batches from the first run's outputs
            size = sum(a.nbytes for r in results for a in (r.outputs or {}).values())
            batch = max(1, min(batch_size, BATCH_BYTES // max(size, 1)))
        done = end
        yield Batch(done, [r.outputs or {} for r in results], feed)


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
