"""Calibration: the range of every activation to quantize, from onnxruntime runs on samples.

Samples come from an ``.npz`` (one array per graph input, shaped ``(samples, *input shape)``)
or are random (standard normal, seeded), sized by the dynamic-dims search of
:mod:`graphlens.numerics.dims`. The activations are exposed as extra outputs of one onnxruntime
session and the samples run in batches along the batch dim when the model takes them (else one
at a time), as many per run as fit in :data:`BATCH_BYTES` of outputs.

Methods, per tensor x over all samples:

- ``minmax``: ``[min x, max x]``;
- ``ema``: TF's moving average of each run's min and max, ``m ← d·m + (1 − d)·m_run``
  (``d = 0.999``), starting at the first run's;
- ``percentile``: ``[P_(100−p)(x), P_p(x)]`` with ``p = 99.99``, read off a 2048-bin histogram
  over ``[min x, max x]`` (a second pass);
- ``mse``: the range ``α · [min x, max x]`` (α from 1 down to 0.05) that minimizes the expected
  quantization error Σ_bins count · e(x_bin), with ``e = s²/12`` inside the range (rounding to a
  step ``s``) and ``e = (x − clip(x))²`` outside it (clipping), on the same histogram.

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

BATCH_BYTES = 512 * 2**20
"""Most bytes of exposed tensors one run may return; larger batches are split."""
KEEP_BYTES = 64 * 2**20
"""Most bytes of the float model's calibration outputs kept for the error report (see :class:`KeptRuns`)."""
BINS = 2048

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


def load_calibration(path: str | Path, model: Model | onnx.ModelProto) -> CalibrationData:
    """Samples from an ``.npz``; a missing input or a shape that does not fit raises, in one line."""
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {k: np.asarray(data[k]) for k in data.files}
    except (OSError, ValueError, EOFError) as exc:
        raise GraphLensError(f"{path}: cannot read calibration samples ({exc})") from exc
    result: dict[str, np.ndarray] = {}
    counts = set()
    for value in graph_inputs(model):
        if value.name not in arrays:
            raise GraphLensError(f"{path}: has no array for input '{value.name}' (it has {', '.join(arrays) or 'none'})")
        array = arrays[value.name]
        declared = type_of_value_info(value).shape
        dtype = onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type)
        if declared is not None and array.ndim != len(declared) + 1:
            raise GraphLensError(f"{path}: array '{value.name}' has shape {list(array.shape)}; calibration needs "
                                 f"(samples, *input shape), {len(declared) + 1} dims")
        for axis, dim in enumerate(declared or ()):
            if isinstance(dim, int) and dim > 0 and array.shape[axis + 1] != dim:
                raise GraphLensError(f"{path}: array '{value.name}' has {array.shape[axis + 1]} at axis {axis + 1}; "
                                     f"input dim {axis} is {dim}")
        result[value.name] = array.astype(dtype, copy=False)
        counts.add(len(array))
    if not result or min(counts) == 0:
        raise GraphLensError(f"{path}: holds no samples")
    return CalibrationData(result, f"from {path}")


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
    the model runs that way; the batch is then as large as ``batch_size`` and :data:`BATCH_BYTES`
    allow, judged from the first run's outputs. Every runner gets the same feed.
    """
    n = data.samples
    batch, done = 1, 0
    stack = _batchable(model, data) and batch_size > 1
    while done < n:
        if cancelled is not None and cancelled():
            raise QuantizeCancelled("quantization cancelled")
        end = min(n, done + batch)
        feed = {k: v[done:end].reshape((-1, *v.shape[2:])) for k, v in data.arrays.items()} if stack else data.sample(done)
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

    def add(self, batch: Batch) -> None:
        if not self.complete:
            return
        self.nbytes += sum(a.nbytes for outputs in batch.outputs for a in outputs.values())
        if self.nbytes > self.budget:
            self.complete, self.batches = False, []
            return
        self.batches.append(batch)


@dataclass
class Range:
    """The calibrated range of one activation."""

    low: float
    high: float


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
    """The range of each of ``tensors`` by ``config.method`` (see the module docstring).

    ``runner``: a session of ``model`` exposing ``tensors``, to share with the error report;
    ``keep``: where to keep the runs' outputs for it.
    """
    runner = runner if runner is not None else ModelRunner(model, tensors)
    if runner.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the model for calibration: {runner.error}")
    passes = 2 if config.method in ("percentile", "mse") else 1
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
            progress(done / data.samples / passes)
    ranges = {name: Range(lows[name], highs[name]) for name in lows}
    if passes == 1:
        return ranges
    hists = {name: np.zeros(BINS, np.float64) for name in ranges}
    for done, (outputs,), _ in run_batches([runner], model, data, config.batch_size, cancelled):
        for name, r in ranges.items():
            x = outputs[name]
            hists[name] += np.histogram(x[np.isfinite(x)], bins=BINS, range=(r.low, max(r.high, r.low + 1e-12)))[0]
        if progress is not None:
            progress(0.5 + done / data.samples / 2)
    qtype = activation_qtype(config)
    for name, r in ranges.items():
        edges = np.linspace(r.low, max(r.high, r.low + 1e-12), BINS + 1)
        if config.method == "percentile":
            ranges[name] = percentile_range(hists[name], edges, config.percentile)
        else:
            ranges[name] = mse_range(hists[name], edges, qtype, config.symmetric_activations)
    return ranges


def percentile_range(counts: np.ndarray, edges: np.ndarray, p: float) -> Range:
    """``[P_(100−p), P_p]`` of the histogram (bin edges, interpolated inside a bin)."""
    cdf = np.concatenate([[0.0], np.cumsum(counts)])
    total = cdf[-1]
    if total == 0:
        return Range(float(edges[0]), float(edges[-1]))
    low = float(np.interp((100.0 - p) / 100.0 * total, cdf, edges))
    high = float(np.interp(p / 100.0 * total, cdf, edges))
    return Range(low, high)


def mse_range(counts: np.ndarray, edges: np.ndarray, qtype: QType, symmetric: bool) -> Range:
    """The shrunk range with the least expected rounding-plus-clipping error (module docstring)."""
    centers = (edges[:-1] + edges[1:]) / 2
    lo0, hi0 = min(float(edges[0]), 0.0), max(float(edges[-1]), 0.0)
    best, best_error = Range(float(edges[0]), float(edges[-1])), np.inf
    for alpha in np.linspace(1.0, 0.05, 96):
        params = scale_zero_point(lo0 * alpha, hi0 * alpha, qtype, symmetric)
        s, z = float(params.scale), float(params.zero_point)
        low, high = (qtype.qmin - z) * s, (qtype.qmax - z) * s  # what the integers can represent
        clipped = np.clip(centers, low, high)
        error = np.where(centers == clipped, s * s / 12.0, (centers - clipped) ** 2)
        total = float(np.dot(counts, error))
        if total < best_error:
            best, best_error = Range(lo0 * alpha, hi0 * alpha), total
    return best


def activation_qtype(config: QuantConfig) -> QType:
    return QType(8, config.activation_signed, False)


def activation_params(ranges: dict[str, Range], config: QuantConfig) -> dict[str, QParams]:
    """Scale and zero point of each calibrated activation (:func:`~graphlens.quantize.qdq.scale_zero_point`)."""
    qtype = activation_qtype(config)
    return {name: scale_zero_point(r.low, r.high, qtype, config.symmetric_activations) for name, r in ranges.items()}
