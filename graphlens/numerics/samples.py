"""Samples to run a model on: from an ``.npz``, a folder of images, or random, and runs over them in batches.

An ``.npz`` holds one array per graph input: ``(N, *input shape)`` with the samples along the input's
batch axis, or ``(samples, *input shape)``; a folder of images is read as
:mod:`~graphlens.numerics.image_samples` says; random samples are standard normal (seeded), sized by
the dynamic-dims search of :mod:`graphlens.numerics.dims`. Quantization calibrates on them and
binarization measures its error on them; neither owns them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.core.types import type_of_value_info
from graphlens.numerics.dims import DimChoice, search_dims
from graphlens.numerics.inputs import describe_random, graph_inputs, make_inputs, read_npz
from graphlens.numerics.run import OPTIMIZE_ELEMENTS, SPIN_ELEMENTS, ModelRunner

BATCH_BYTES = 512 * 2**20
"""Most bytes of exposed tensors one run may return; larger batches are split."""
BATCH_ELEMENTS = 2**17
"""Most input elements one run stacks: samples batch together only while they are small. A batch of large
samples runs slower than the same samples one at a time (each of its intermediate tensors is a fresh large
allocation): the PP-OCRv4 detector's 8 pages of 736×992 took 4.0 s in one batch and 1.2 s one by one, the
recognizer's 24 crops 3.0 s in batches of 8 and 1.6 s one by one; 32 classifier crops (27,648 elements
each) ran as fast either way."""


@dataclass
class CalibrationData:
    """Samples for every graph input: ``arrays[name]`` is ``(samples, *input shape)``."""

    arrays: dict[str, np.ndarray]
    source: str
    """``from FILE`` or ``random (seed S: x 1×3×64×64 normal)``, for reports."""
    dims: DimChoice | None = None
    random: bool = False
    """Made up (:func:`random_calibration`), not given: a report says what that means for its ranges."""

    @property
    def samples(self) -> int:
        return min(len(a) for a in self.arrays.values()) if self.arrays else 0

    @property
    def sample_elements(self) -> int:
        """Input elements of one sample, every input together (0 without samples)."""
        return sum(int(a[0].size) for a in self.arrays.values()) if self.samples else 0

    @property
    def long_runs(self) -> bool:
        """Whether a run of one sample is long enough for its session's threads to spin (:data:`SPIN_ELEMENTS`)."""
        return self.sample_elements >= SPIN_ELEMENTS

    @property
    def optimizes(self) -> bool:
        """Whether a session run on every sample gains from onnxruntime's graph optimizations
        (:data:`~graphlens.numerics.run.OPTIMIZE_ELEMENTS`): for runs whose float values are summarized or set
        against quantization error, never for a numeric diff."""
        return self.samples * self.sample_elements >= OPTIMIZE_ELEMENTS

    def first(self, budget: int) -> CalibrationData:
        """The first samples whose inputs hold at most ``budget`` elements in all, at least one; itself when
        that is every sample."""
        count = max(1, min(self.samples, budget // max(self.sample_elements, 1)))
        return self if count >= self.samples else self.take(range(count))

    def sample(self, index: int) -> dict[str, np.ndarray]:
        """One sample per input; a scalar input stays a 0-d array (onnxruntime refuses numpy scalars)."""
        return {k: np.asarray(v[index]) for k, v in self.arrays.items()}

    def take(self, indices: range | list[int]) -> CalibrationData:
        """The samples at ``indices``; a range of consecutive ones is a view, not a copy."""
        if isinstance(indices, range) and indices.step == 1:
            part = slice(indices.start, indices.stop)
            return CalibrationData({k: v[part] for k, v in self.arrays.items()}, self.source, self.dims, self.random)
        return CalibrationData({k: v[list(indices)] for k, v in self.arrays.items()}, self.source, self.dims,
                               self.random)


def load_calibration(path: str | Path, model: Model | onnx.ModelProto, *, preprocess: str | None = None,
                     ) -> CalibrationData:
    """Samples from an ``.npz`` or, for a folder, from its images (``preprocess``: see
    :mod:`~graphlens.numerics.image_samples`); a missing input or a shape that does not fit
    raises, in one line."""
    path = Path(path)
    if path.is_dir():
        from graphlens.numerics.image_samples import load_image_folder

        return load_image_folder(path, model, preprocess)
    if not path.exists():
        raise GraphLensError(f"{path}: no such file or folder")
    if preprocess:
        raise GraphLensError(f"{path}: a preprocessing is for a folder of images, not an .npz of samples")
    arrays = read_npz(path, "calibration samples")
    result: dict[str, np.ndarray] = {}
    for value in graph_inputs(model):
        if value.name not in arrays:
            raise GraphLensError(f"{path}: has no array for input '{value.name}' "
                                 f"(it has {', '.join(arrays) or 'none'})")
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        what = f"{path}: array '{value.name}'"
        array = as_samples(arrays[value.name], type_of_value_info(value).shape, what)
        result[value.name] = checked_values(array, dtype, what)
    if not result or min(len(a) for a in result.values()) == 0:
        raise GraphLensError(f"{path}: holds no samples")
    counts = {name: len(a) for name, a in result.items()}
    if len(set(counts.values())) > 1:
        read = ", ".join(f"{n}: {c} from {list(arrays[n].shape)}" for n, c in counts.items())
        raise GraphLensError(f"{path}: the inputs' arrays hold different numbers of samples ({read}); an array is "
                             f"read along its input's batch axis, or as (samples, *input shape)")
    return CalibrationData(result, f"from {path}")


def checked_values(array: np.ndarray, dtype: np.dtype, what: str) -> np.ndarray:
    """``array`` as the input's element type, refused in one line when that would change its values: NaN or
    infinite samples (every range calibrated from them would be too), values an integer input cannot hold (a cast
    wraps them, or drops their fractions), booleans or complex numbers for a number input, or an axis of length 0."""
    if 0 in array.shape[1:]:
        raise GraphLensError(f"{what} has shape {list(array.shape)}: a sample with no values")
    if array.dtype.kind not in "biuf" or (array.dtype.kind == "b") != (dtype.kind == "b"):
        raise GraphLensError(f"{what} holds {array.dtype} values; the input takes {dtype}")
    if dtype.kind in "iu" and array.size:
        info = np.iinfo(dtype)
        low, high = array.min(), array.max()
        if array.dtype.kind == "f" and not np.isfinite([low, high]).all() or low < info.min or high > info.max:
            raise GraphLensError(f"{what} has values from {low} to {high}; the input is {dtype} "
                                 f"({info.min}..{info.max})")
        fractional = np.trunc(array) != array if array.dtype.kind == "f" else None  # a cast would drop them
        if fractional is not None and fractional.any():
            fraction = array.flat[int(np.argmax(fractional))]
            raise GraphLensError(f"{what} has fractional values (such as {fraction}); the input is {dtype}")
    with np.errstate(over="ignore", invalid="ignore"):
        out = array.astype(dtype, copy=False)
    if dtype.kind == "f" and out.size and not np.isfinite([out.min(), out.max()]).all():  # NaN and ±inf reach both
        bad = ~np.isfinite(out)  # a mask the size of the data only to say where
        sample = int(np.argmax(bad.reshape(len(out), -1).any(axis=1)))
        raise GraphLensError(f"{what} has {int(bad.sum())} NaN or infinite values as {dtype} (the first in sample "
                             f"{sample}); calibration needs finite values")
    return out


def _misfit(shape: tuple[int, ...], declared: tuple[object, ...], offset: int, free: int = 0) -> str | None:
    """Where ``shape[offset:]`` differs from the declared fixed dims (axis ``free``, the batch axis, is free when
    ``offset`` is 0)."""
    for i, d in enumerate(declared):
        if (offset or i != free) and isinstance(d, int) and d > 0 and shape[i + offset] != d:
            return f"{shape[i + offset]} at axis {i + offset} where the input has {d}"
    return None


def _batch_axis(declared: tuple[object, ...]) -> int:
    """The axis an array of the input's rank holds its samples along: axis 0, unless that axis is fixed and one
    other is a symbolic dim named for the batch (silero-vad's state, ``[2, batch, 128]``)."""
    if declared and isinstance(declared[0], int) and declared[0] > 0:
        named = [i for i, d in enumerate(declared) if isinstance(d, str) and "batch" in d.lower()]
        if len(named) == 1:
            return named[0]
    return 0


def _shape_text(declared: tuple[object, ...]) -> str:
    return "[" + ", ".join(str(d) if isinstance(d, int) and d > 0 else "?" for d in declared) + "]"


def as_samples(array: np.ndarray, declared: tuple[object, ...] | None, what: str) -> np.ndarray:
    """``array`` as ``(samples, *input shape)``, for an input declared ``declared``.

    An array of the input's rank holds samples along the batch axis (:func:`_batch_axis`): ``N`` samples of
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
    axis = _batch_axis(declared)
    misfit = _misfit(array.shape, declared, 0, axis)
    if misfit is not None:
        raise GraphLensError(f"{what} has {misfit} ({shape})")
    batch = declared[axis]
    if not (isinstance(batch, int) and batch > 0):
        return np.expand_dims(np.moveaxis(array, axis, 0), axis + 1)  # N samples of batch 1
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
    if not search.ran and search.too_big is not None and search.choice.tries == 0:
        raise GraphLensError(f"random calibration samples not made: {search.result.error}")
    if not search.ran:
        raise GraphLensError(f"onnxruntime cannot run the model on random inputs ({search.result.error}); "
                             "give calibration samples it runs on")
    values = search.choice.values
    runs = [make_inputs(model, values, seed=seed + i) for i in range(samples)]
    arrays = {k: np.stack([r[k] for r in runs]) for k in runs[0]}
    drawn = describe_random(model, runs[0])  # empty for a model without inputs
    source = f"random (seed {seed}: {drawn})" if drawn else f"random (seed {seed})"
    return CalibrationData(arrays, source, search.choice, random=True)


def _batchable(model: onnx.ModelProto, data: CalibrationData) -> bool:
    """Whether samples can be stacked along a dynamic leading batch dim of every input."""
    for value in model.graph.input:
        if value.name not in data.arrays:
            continue
        shape = type_of_value_info(value).shape
        if not shape or isinstance(shape[0], int) and shape[0] > 0 or data.arrays[value.name].shape[1] != 1:
            return False
    return True


def samples_per_run(model: onnx.ModelProto | Model, data: CalibrationData, batch_size: int) -> int:
    """The most samples :func:`run_batches` stacks into one run: ``batch_size``, while they are small
    (:data:`BATCH_ELEMENTS`) and every input has a dynamic leading dim; else 1."""
    proto = model.proto if isinstance(model, Model) else model
    most = min(batch_size, max(1, BATCH_ELEMENTS // max(data.sample_elements, 1)))
    return most if most > 1 and _batchable(proto, data) else 1


class Batch(NamedTuple):
    """One run of every runner on the same feed."""

    done: int
    """Samples done, this batch included."""
    outputs: list[dict[str, np.ndarray]]
    """Each runner's outputs, in the runners' order."""
    feed: dict[str, np.ndarray]


def run_batches(
    runners: list[ModelRunner], model: onnx.ModelProto, data: CalibrationData, batch_size: int,
    task: Task | None = None,
) -> Iterator[Batch]:
    """Each runner's outputs on one batch at a time, over every sample.

    The samples are stacked along the batch dim when every input has a dynamic leading dim and
    the model runs that way; the batch is then as large as ``batch_size``, :data:`BATCH_ELEMENTS` and
    :data:`BATCH_BYTES` (judged from the first run's outputs) allow. Every runner gets the same feed.
    """
    n = data.samples
    batch, done = 1, 0
    batch_size = samples_per_run(model, data, batch_size)
    stack = batch_size > 1
    while done < n:
        if task is not None:
            task.check("running the model")
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
