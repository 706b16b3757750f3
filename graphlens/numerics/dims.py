"""Sizes for a model's dynamic input dims, chosen so that onnxruntime runs it.

Random inputs need a size for every dynamic dim: a named one (``height``), an unnamed one
(``?``, written ``x[2]`` for axis 2 of input ``x``) or a negative one (some exporters write -1).
One fixed default fails on models whose shapes must line up inside: an FPN adds a feature map
upsampled ×2 to a skip connection, and the two only agree when H and W are multiples of 32.
So the sizes are searched:

- a dim the user gives (``--dim``, the window's Inputs…) keeps its value, always;
- batch-like dims get 1: a name containing "batch", or N, n, B, b; the unnamed leading dim of
  an input of rank 2 or more; the named leading dim of a rank-4 (image) input when no input
  uses that name at another axis;
- every other dim takes the same size from :data:`LADDER`, smallest first, until the model runs.
  One size for all keeps equal the dims the model ties together (two inputs added together, a
  name used by several inputs); when none runs, each of them in turn is set to 1 with the others
  on the ladder (a recurrent state ``[2, ?, 128]`` whose middle dim is the batch);
- last, the fixed defaults of :func:`make_inputs`, so a model that ran with them still runs.

The reference model's onnxruntime session is created once and re-run for each try. The working
choice is remembered per :class:`Model` object and tried first the next time.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.core.types import type_of_value_info
from graphlens.numerics.inputs import (
    BATCH_DEFAULT,
    SYMBOL_DEFAULT,
    UNKNOWN_DEFAULT,
    check_dim_names,
    graph_inputs,
    is_batch_like,
    is_unnamed,
    make_inputs,
    unnamed_label,
)
from graphlens.numerics.run import ModelRunner, RunResult

LADDER = (32, 64, 128, 224, 256, 320, 640)
"""Sizes tried for dims that are neither given nor batch-like: common image and sequence sizes."""


@dataclass(frozen=True)
class DynamicDim:
    """One dynamic dim of the graph inputs: its name (or ``input[axis]`` label) and whether it is a batch."""

    label: str
    named: bool
    batch_like: bool
    where: tuple[str, ...] = ()
    """Where it is used, as ``input[axis]``: opaque names such as ``p2o.DynamicDimension.1`` need it."""

    @property
    def default(self) -> int:
        """The fixed size :func:`make_inputs` gives it when none is asked for."""
        if not self.named:
            return UNKNOWN_DEFAULT
        return BATCH_DEFAULT if is_batch_like(self.label) else SYMBOL_DEFAULT


def dynamic_dims(model: Model | onnx.ModelProto) -> list[DynamicDim]:
    """Every dynamic dim of the graph inputs, in first-seen order; a name used twice is one dim."""
    shapes = [(v.name, type_of_value_info(v).shape or ()) for v in graph_inputs(model)]
    inner = {d for _, shape in shapes for d in shape[1:] if isinstance(d, str) and not is_unnamed(d)}
    found: dict[str, DynamicDim] = {}
    for name, shape in shapes:
        for axis, dim in enumerate(shape):
            position = unnamed_label(name, axis)
            if is_unnamed(dim):
                found[position] = DynamicDim(position, False, axis == 0 and len(shape) >= 2, (position,))
            elif isinstance(dim, str) and dim in found:  # a name: one dim wherever it is used
                found[dim] = replace(found[dim], where=(*found[dim].where, position))
            elif isinstance(dim, str):
                image_batch = axis == 0 and len(shape) == 4 and dim not in inner
                found[dim] = DynamicDim(dim, True, is_batch_like(dim) or image_batch, (position,))
    return list(found.values())


@dataclass(frozen=True)
class DimChoice:
    """The sizes the dynamic dims were given, and how they were found."""

    values: dict[str, int]
    """Every dynamic dim (name or ``input[axis]`` label) -> the size used, in first-seen order."""
    chosen: tuple[str, ...] = ()
    """The dims GraphLens sized itself; the others were given (or read from an .npz)."""
    tries: int = 0
    """onnxruntime runs made to find them."""
    remembered: bool = False
    """True when an earlier run's working choice was reused."""

    def text(self) -> str:
        """``N=1 H=32 W=32``."""
        return " ".join(f"{k}={v}" for k, v in self.values.items())

    def how(self) -> str:
        """How the sizes were found, for the end of a report line."""
        if not self.chosen:
            return ""
        found = "remembered" if self.remembered else f"{self.tries} tr{'y' if self.tries == 1 else 'ies'}"
        if len(self.chosen) == len(self.values):
            return f"chosen automatically, {found}"
        return f"{', '.join(self.chosen)} chosen automatically, {found}"

    def to_json(self) -> dict[str, Any]:
        return {"values": dict(self.values), "chosen": list(self.chosen), "tries": self.tries,
                "remembered": self.remembered}


@dataclass(frozen=True)
class InputsUsed:
    """Where a numeric check's inputs came from: an .npz file, arrays handed in, or random with a seed."""

    file: str | None = None
    seed: int | None = None
    dims: DimChoice | None = None

    def line(self) -> str:
        """One line for reports: ``inputs: random (seed 0); dims N=1 H=32 W=32 (chosen automatically, 1 try)``."""
        source = f"from {self.file}" if self.file else ("given arrays" if self.seed is None else f"random (seed {self.seed})")
        if self.dims is None or not self.dims.values:
            return f"inputs: {source}"
        how = self.dims.how()
        return f"inputs: {source}; dims {self.dims.text()}" + (f" ({how})" if how else "")

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "seed": self.seed, "dims": self.dims.to_json() if self.dims else None}


def dims_of(model: Model | onnx.ModelProto, arrays: dict[str, np.ndarray]) -> DimChoice:
    """The sizes of the dynamic dims in arrays the user gave (an .npz), for reports."""
    values: dict[str, int] = {}
    for value in graph_inputs(model):
        array = arrays.get(value.name)
        shape = type_of_value_info(value).shape or ()
        if array is None or array.ndim != len(shape):
            continue
        for axis, dim in enumerate(shape):
            if is_unnamed(dim):
                values[unnamed_label(value.name, axis)] = int(array.shape[axis])
            elif isinstance(dim, str):
                values.setdefault(dim, int(array.shape[axis]))
    return DimChoice(values)


@dataclass
class DimSearch:
    """The outcome of :func:`search_dims`: the inputs and outputs of the run that worked, or why none did."""

    choice: DimChoice
    """The working choice; when none worked, the first one tried."""
    inputs: dict[str, np.ndarray] | None
    result: RunResult
    searched: tuple[str, ...] = ()
    """The dims that went up the ladder (neither given nor batch-like)."""
    sizes_tried: list[int] = field(default_factory=list)
    """The ladder sizes tried for them (for the reason when every try failed)."""

    @property
    def ran(self) -> bool:
        return self.result.error is None


_remembered: weakref.WeakKeyDictionary[Model, dict[str, int]] = weakref.WeakKeyDictionary()


def remembered_dims(model: Model, given: dict[str, int] | None = None) -> dict[str, int] | None:
    """The sizes that last worked for ``model``, with ``given`` put over them; None before any worked."""
    last = _remembered.get(model)
    return None if last is None else {**last, **(given or {})}


def remember_dims(model: Model, values: dict[str, int]) -> None:
    """Remember sizes that ran for ``model``: found by a search on a scratch copy of it, say."""
    _remembered[model] = dict(values)


def _candidates(
    dims: list[DynamicDim], given: dict[str, int], remembered: dict[str, int] | None
) -> list[tuple[dict[str, int], int | None]]:
    """(sizes for every dim, ladder size or None), in the order to try them, without repeats."""
    base = {d.label: given.get(d.label, 1) for d in dims}
    free = [d.label for d in dims if not d.batch_like and d.label not in given]
    candidates: list[tuple[dict[str, int], int | None]] = []
    if remembered is not None and set(remembered) == set(base):
        candidates.append((remembered, None))
    if free:
        candidates += [({**base, **{label: size for label in free}}, size) for size in LADDER]
        if len(free) > 1:  # one of them may be tied to a batch (a recurrent state's [2, batch, 128])
            candidates += [({**base, **{label: size for label in free}, one: 1}, None)
                           for one in free for size in LADDER]
    else:
        candidates.append((base, None))
    candidates.append(({d.label: given.get(d.label, d.default) for d in dims}, None))
    unique: list[tuple[dict[str, int], int | None]] = []
    for values, size in candidates:
        if all(values != seen for seen, _ in unique):
            unique.append((values, size))
    return unique


def search_dims(
    model: Model | onnx.ModelProto,
    runner: ModelRunner,
    *,
    given: dict[str, int] | None = None,
    seed: int = 0,
    remember: Model | None = None,
) -> DimSearch:
    """Random inputs for ``model`` with dims that ``runner`` (a session of ``model``) runs on.

    ``given`` dims are never changed; a bad name in it raises :class:`GraphLensError`.
    The working sizes are remembered on ``remember`` (default: ``model`` when it is a Model).
    """
    given = dict(given or {})
    check_dim_names(model, given)
    key = remember if remember is not None else (model if isinstance(model, Model) else None)
    dims = dynamic_dims(model)
    previous = remembered_dims(key, given) if key is not None else None
    chosen = tuple(d.label for d in dims if d.label not in given)
    searched = tuple(d.label for d in dims if not d.batch_like and d.label not in given)
    first: DimSearch | None = None
    tries, sizes = 0, []
    for values, size in _candidates(dims, given, previous):
        inputs = make_inputs(model, values, seed=seed)
        if runner.error is not None:  # the session could not be created: no size will help
            return DimSearch(DimChoice(values, chosen, 0), inputs, RunResult(None, runner.error))
        tries += 1
        if size is not None:
            sizes.append(size)
        result = runner.run(inputs)
        remembered = previous is not None and tries == 1
        choice = DimChoice(values, chosen, tries, remembered)
        if result.error is None:
            if key is not None:
                _remembered[key] = dict(values)
            return DimSearch(choice, inputs, result, searched, sizes)
        if first is None:
            first = DimSearch(choice, None, result)
    assert first is not None  # there is always at least one candidate
    return DimSearch(DimChoice(first.choice.values, chosen, tries), None, first.result, searched, sizes)


def failure_reason(search: DimSearch) -> str:
    """Why no size ran, in one line: which dims were tried at which sizes, and the first error."""
    choice = search.choice
    if choice.tries <= 1 or not search.searched:
        return search.result.error or "no run"
    sizes = ", ".join(map(str, search.sizes_tried))
    singles = len(search.searched) > 1 and choice.tries > len(search.sizes_tried) + 1
    then = ", then each at 1 with the others at those sizes" if singles else ""
    then += ", then the defaults" if choice.tries > len(search.sizes_tried) else ""
    return (f"no size tried runs ({choice.tries} tries: {', '.join(search.searched)} at {sizes}{then}); "
            f"at {choice.text()}: {search.result.error}")
