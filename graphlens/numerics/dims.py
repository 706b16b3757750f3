"""Sizes for a model's dynamic input dims, chosen so that onnxruntime runs it.

Random inputs need a size for every dynamic dim: a named one (``height``), an unnamed one
(``?``, written ``x[2]`` for axis 2 of input ``x``) or a negative one (some exporters write -1).
One fixed default fails on models whose shapes must line up inside: an FPN adds a feature map
upsampled ×2 to a skip connection, and the two only agree when H and W are multiples of 32.
So the sizes are searched:

- a dim the user gives (``--dim``, the window's Inputs…) keeps its value, always;
- batch-like dims get 1: a name containing "batch", or N, n, B, b; the unnamed leading dim of
  an input of rank 2 or more; the named leading dim of a rank-4 (image) input when no input
  uses that name at another axis; the named leading dim of a KV cache input when every input
  that uses it has it first;
- a dim that a weight fixes (a Conv's input channels, the features a constant MatMul weight reads) takes
  that size (:mod:`graphlens.numerics.weight_dims`);
- every other dim takes the same size from :data:`LADDER`, smallest first, until the model runs.
  One size for all keeps equal the dims the model ties together (two inputs added together, a
  name used by several inputs); when none runs, each of them in turn is set to 1 with the others
  on the ladder (a recurrent state ``[2, ?, 128]`` whose middle dim is the batch);
- last, the fixed defaults of :func:`make_inputs`, so a model that ran with them still runs.

A dim written as an expression of others (``s16 + s62``, see :mod:`graphlens.numerics.dim_expressions`)
is computed from them for every try, never searched; one the user gives fixes the one part left
unknown, or is refused in one line when its parts say otherwise. A past length (a dim used only by
inputs named like ``past_key_values`` or ``*cache*``) gets :data:`PAST_DEFAULT`: a KV cache runs at
any length, and the ladder's lengths only cost memory. Before each try the memory it needs is
estimated (:mod:`graphlens.numerics.memory`); a try over the limit is not made, and when none ran
the reason says what the next size would have needed.

The reference model's onnxruntime session is created once and re-run for each try. The working
choice is remembered per :class:`Model` object and tried first the next time.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.types import type_of_value_info
from graphlens.numerics.dim_expressions import DimExpression, parse_dim_expression
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
from graphlens.numerics.memory import RunEstimate, memory_limit, over_limit
from graphlens.numerics.run import ModelRunner, RunResult
from graphlens.numerics.weight_dims import weight_fixed_dims

LADDER = (32, 64, 128, 224, 256, 320, 640)
"""Sizes tried for dims that are neither given nor batch-like: common image and sequence sizes."""
PAST_DEFAULT = 4
"""Size of a past length (KV cache) dim: short, so a large decoder's cache stays small."""
_PAST_INPUT = re.compile(r"past|cache", re.IGNORECASE)


@dataclass(frozen=True)
class DynamicDim:
    """One dynamic dim of the graph inputs: its name (or ``input[axis]`` label) and whether it is a batch."""

    label: str
    named: bool
    batch_like: bool
    where: tuple[str, ...] = ()
    """Where it is used, as ``input[axis]``: opaque names such as ``p2o.DynamicDimension.1`` need it."""
    past: bool = False
    """A past length: used only by inputs named like a KV cache."""
    expression: DimExpression | None = None
    """Set when the name is an expression of other dims, which then give its size."""
    weight_size: int | None = None
    """The one size a weight lets it have (:mod:`graphlens.numerics.weight_dims`)."""

    @property
    def searched(self) -> bool:
        """Whether it goes up the ladder (unless the user gives it)."""
        return not (self.batch_like or self.past or self.expression or self.weight_size)

    @property
    def default(self) -> int:
        """The size it takes when none is asked for: a weight's, :data:`PAST_DEFAULT` for past lengths, else
        what :func:`make_inputs` gives it."""
        if self.weight_size:
            return self.weight_size
        if not self.named:
            return UNKNOWN_DEFAULT
        if self.past and not self.batch_like:
            return PAST_DEFAULT
        return BATCH_DEFAULT if is_batch_like(self.label) else SYMBOL_DEFAULT


def dynamic_dims(model: Model | onnx.ModelProto) -> list[DynamicDim]:
    """Every dynamic dim of the graph inputs, in first-seen order, expressions last; a name used twice is
    one dim, and a name used only inside an expression is a dim too."""
    shapes = [(v.name, type_of_value_info(v).shape or ()) for v in graph_inputs(model)]
    inner = {d for _, shape in shapes for d in shape[1:] if isinstance(d, str) and not is_unnamed(d)}
    found: dict[str, DynamicDim] = {}
    expressions: dict[str, DynamicDim] = {}
    for name, shape in shapes:
        for axis, dim in enumerate(shape):
            position = unnamed_label(name, axis)
            if is_unnamed(dim):
                found[position] = DynamicDim(position, False, axis == 0 and len(shape) >= 2, (position,))
            elif not isinstance(dim, str):
                continue
            elif dim in found or dim in expressions:  # a name: one dim wherever it is used
                table = found if dim in found else expressions
                table[dim] = replace(table[dim], where=(*table[dim].where, position))
            elif (expression := parse_dim_expression(dim)) is not None:
                expressions[dim] = DynamicDim(dim, True, False, (position,), expression=expression)
                for part in expression.names:
                    found.setdefault(part, DynamicDim(part, True, is_batch_like(part)))
            else:
                image_batch = axis == 0 and len(shape) == 4 and dim not in inner
                found[dim] = DynamicDim(dim, True, is_batch_like(dim) or image_batch, (position,))
    ranks = dict((name, len(shape)) for name, shape in shapes)
    for label, dynamic in found.items():
        uses = [where.rpartition("[") for where in dynamic.where]
        past_uses = [name for name, _, axis in uses if _PAST_INPUT.search(name)]
        if not dynamic.named or dynamic.batch_like or not past_uses:
            continue
        if len(past_uses) == len(uses):
            found[label] = replace(dynamic, past=True)
        elif all(axis == "0]" for _, _, axis in uses) and any(ranks[name] >= 3 for name in past_uses):
            found[label] = replace(dynamic, batch_like=True)  # the leading dim of a KV cache and the other inputs
    total = found.get("total_sequence_length")
    if total is not None and total.named and {"past_sequence_length", "sequence_length"} <= set(found):
        # onnxruntime-genai and optimum name the mask's length so: the new tokens and the cached ones
        expression = parse_dim_expression("past_sequence_length + sequence_length")
        expressions["total_sequence_length"] = replace(total, expression=expression)
        del found["total_sequence_length"]
    for label, size in weight_fixed_dims(model).items():
        if label in found and not found[label].batch_like:
            found[label] = replace(found[label], weight_size=size)
    return [*found.values(), *expressions.values()]


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
        """``N=1 H=32 W=32``; dims computed from others after a comma: ``s16=32 s62=4, s16 + s62=36``."""
        plain = " ".join(f"{k}={v}" for k, v in self.values.items() if parse_dim_expression(k) is None)
        computed = ", ".join(f"{k}={v}" for k, v in self.values.items() if parse_dim_expression(k) is not None)
        return ", ".join(part for part in (plain, computed) if part)

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
        source = f"from {self.file}" if self.file else ("given arrays" if self.seed is None
                                                        else f"random (seed {self.seed})")
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
    too_big: tuple[DimChoice, int, int] | None = None
    """The first try not made for want of memory: its sizes, the bytes it would need, and the limit."""

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
    plain = [d for d in dims if d.expression is None]
    base = {d.label: given.get(d.label, d.default if d.past or d.weight_size else 1) for d in plain}
    free = [d.label for d in plain if d.searched and d.label not in given]
    candidates: list[tuple[dict[str, int], int | None]] = []
    if remembered is not None and set(remembered) == {d.label for d in dims}:
        candidates.append(({k: v for k, v in remembered.items() if k in base}, None))
    if free:
        candidates += [({**base, **{label: size for label in free}}, size) for size in LADDER]
        if len(free) > 1:  # one of them may be tied to a batch (a recurrent state's [2, batch, 128])
            candidates += [({**base, **{label: size for label in free}, one: 1}, None)
                           for one in free for size in LADDER]
    else:
        candidates.append((base, None))
    candidates.append(({d.label: given.get(d.label, d.default) for d in plain}, None))
    unique: list[tuple[dict[str, int], int | None]] = []
    for values, size in candidates:
        complete = _with_expressions(dims, values)
        if complete is not None and all(complete != seen for seen, _ in unique):
            unique.append((complete, size))
    return unique


def default_sizes(dims: list[DynamicDim], known: dict[str, int], plain: int) -> dict[str, int]:
    """A size for every dim of :func:`dynamic_dims`: ``known`` ones as they are, an expression from its
    parts, batches 1, past lengths :data:`PAST_DEFAULT`, the rest ``plain`` (what a view shows before any run)."""
    sizes: dict[str, int] = {}
    for d in dims:  # expressions last: their parts are sized by then
        if d.label in known:
            sizes[d.label] = known[d.label]
        elif d.expression is not None and all(n in sizes for n in d.expression.names):
            sizes[d.label] = max(d.expression.value(sizes), 1)
        else:
            sizes[d.label] = 1 if d.batch_like else d.default if d.past or d.weight_size else plain
    return sizes


def _with_expressions(dims: list[DynamicDim], values: dict[str, int]) -> dict[str, int] | None:
    """``values`` with every expression dim computed from them, in ``dims`` order; None when one is below 0."""
    full = dict(values)
    for dim in dims:
        if dim.expression is not None:
            full[dim.label] = dim.expression.value(values)
            if full[dim.label] < 0:
                return None
    return {d.label: full[d.label] for d in dims}


def _fix_given_expressions(dims: list[DynamicDim], given: dict[str, int]) -> dict[str, int]:
    """The given plain dims, plus the parts that given expression dims fix; one-line error on a contradiction.

    The one part of an expression left unknown is solved for; past lengths and batches left unknown
    beside it take their defaults first.
    """
    by_label = {d.label: d for d in dims}
    fixed = {k: v for k, v in given.items() if k not in by_label or by_label[k].expression is None}
    for dim in dims:
        expression = dim.expression
        if expression is None or dim.label not in given:
            continue
        target = given[dim.label]
        unknown = [name for name in expression.names if name not in fixed]
        for name in list(unknown):
            if len(unknown) > 1 and (by_label[name].past or by_label[name].batch_like):
                fixed[name] = by_label[name].default
                unknown.remove(name)
        if len(unknown) > 1:
            raise GraphLensError(f"dimension '{dim.label}' adds up {', '.join(unknown)}; give all but one of "
                                 "them with --dim too")
        if unknown:
            solved = expression.solve(unknown[0], target, fixed)
            if solved is not None:
                fixed[unknown[0]] = solved
                continue
        if unknown or expression.value(fixed) != target:
            parts = " ".join(f"{name}={fixed[name]}" for name in expression.names if name in fixed)
            raise GraphLensError(f"--dim '{dim.label}={target}' contradicts {parts or 'its parts'}: "
                                 f"'{dim.label}' is computed from "
                                 f"{', '.join(expression.names)} and cannot be {target} with them")
    return fixed


def _canonical_names(dims: list[DynamicDim], given: dict[str, int]) -> dict[str, int]:
    """Given names with the model's own spelling: ``s16+s62`` for the model's ``s16 + s62``."""
    spelled = {"".join(d.label.split()): d.label for d in dims if d.expression is not None}
    return {spelled.get("".join(k.split()), k): v for k, v in given.items()}


def search_dims(
    model: Model | onnx.ModelProto,
    runner: ModelRunner,
    *,
    given: dict[str, int] | None = None,
    seed: int = 0,
    remember: Model | None = None,
) -> DimSearch:
    """Random inputs for ``model`` with dims that ``runner`` (a session of ``model``) runs on.

    ``given`` dims are never changed; a bad name in it, or an expression dim its parts contradict,
    raises :class:`GraphLensError`. Tries over :func:`memory_limit` are not made.
    The working sizes are remembered on ``remember`` (default: ``model`` when it is a Model).
    """
    dims = dynamic_dims(model)
    given = _canonical_names(dims, dict(given or {}))
    check_dim_names(model, given)
    fixed = _fix_given_expressions(dims, given)
    key = remember if remember is not None else (model if isinstance(model, Model) else None)
    previous = remembered_dims(key, fixed) if key is not None else None
    chosen = tuple(d.label for d in dims if d.label not in given)
    searched = tuple(d.label for d in dims if d.searched and d.label not in fixed)
    estimate, limit = RunEstimate(model), memory_limit()
    first: DimSearch | None = None
    too_big: tuple[DimChoice, int, int] | None = None
    tries, sizes = 0, []
    for values, size in _candidates(dims, fixed, previous):
        need = estimate.need(sizes_of(values))
        if need > limit:  # a larger ladder size needs more still; later candidates may be smaller
            too_big = too_big or (DimChoice(values, chosen), need, limit)
            continue
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
    if first is None:  # every try was over the limit
        assert too_big is not None
        return DimSearch(too_big[0], None, RunResult(None, _memory_reason(too_big, smallest=True)),
                         searched, sizes, too_big)
    return DimSearch(DimChoice(first.choice.values, chosen, tries), None, first.result, searched, sizes, too_big)


def sizes_of(values: dict[str, int]) -> Callable[[str], int | None]:
    """Size of a dim name at ``values``; expressions of known names (``s16 + s62 + 1``) are computed."""

    def size(name: str) -> int | None:
        if name in values:
            return values[name]
        expression = parse_dim_expression(name)
        if expression is None or any(part not in values for part in expression.names):
            return None
        return max(expression.value(values), 0)

    return size


def _memory_reason(too_big: tuple[DimChoice, int, int], smallest: bool = False) -> str:
    choice, need, limit = too_big
    sizes = choice.text()
    if not sizes:  # every input's shape is fixed: there was nothing to choose
        return f"stopped before any try: a run at its fixed input sizes {over_limit(need, limit)}"
    which = "before any try: the first sizes" if smallest else "because the next size"
    return f"stopped {which} ({sizes}) {over_limit(need, limit)}"


@dataclass
class SampleEstimate:
    """A :class:`~.memory.RunEstimate` at the sizes of one sample's dims (a calibration set's first)."""

    estimate: RunEstimate
    size: Callable[[str], int | None]

    def need(self) -> int:
        """Bytes one run of the sample needs beyond the weights."""
        return self.estimate.need(self.size)

    def tensors_bytes(self, names: Iterable[str]) -> int:
        """Bytes of the tensors ``names`` on the sample, together."""
        return self.estimate.tensors_bytes(self.size, names)

    def activation_bytes(self) -> dict[str, int]:
        """Each activation's bytes on the sample, where its shape is inferred whole at the sample's sizes."""
        return self.estimate.activation_bytes(self.size)


def estimate_at(model: Model | onnx.ModelProto, sample: dict[str, np.ndarray]) -> SampleEstimate:
    """The memory estimate of ``model`` at the sizes of ``sample``'s dims."""
    return SampleEstimate(RunEstimate(model), sizes_of(dims_of(model, sample).values))


def run_need(model: Model | onnx.ModelProto, choice: DimChoice) -> int:
    """Estimated bytes one run at ``choice`` needs beyond the weights (:class:`~.memory.RunEstimate`)."""
    return RunEstimate(model).need(sizes_of(choice.values))


def refuse_samples_over_limit(model: Model | onnx.ModelProto, sample: dict[str, np.ndarray], doing: str,
                              need: int) -> None:
    """Calibration samples whose work (``doing``: ``quantizing``) would need ``need`` bytes, over the memory
    limit, are refused in one line naming their sizes, before any run: a command refuses, it is not killed."""
    limit = memory_limit()
    if need > limit:
        sizes = dims_of(model, sample).text()
        what = f"at their sizes ({sizes})" if sizes else "with them"
        raise GraphLensError(f"calibration samples not run: {doing} {what} {over_limit(need, limit)}")


def would_not_fit(model: Model | onnx.ModelProto, choice: DimChoice) -> str | None:
    """Why a run at ``choice`` (sizes of inputs the user gave) is not made, in one line; None when it fits."""
    need, limit = run_need(model, choice), memory_limit()
    if need <= limit:
        return None
    return f"the inputs given ({choice.text()}) {over_limit(need, limit)}"


def failure_reason(search: DimSearch) -> str:
    """Why no size ran, in one line: which dims were tried at which sizes, and the first error."""
    choice = search.choice
    if search.too_big is not None and choice.tries == 0:
        return search.result.error or "no run"
    if choice.tries <= 1 or not search.searched:
        reason = search.result.error or "no run"
        return reason + (f"; {_memory_reason(search.too_big)}" if search.too_big is not None else "")
    sizes = ", ".join(map(str, search.sizes_tried))
    singles = len(search.searched) > 1 and choice.tries > len(search.sizes_tried) + 1
    then = ", then each at 1 with the others at those sizes" if singles else ""
    then += ", then the defaults" if choice.tries > len(search.sizes_tried) else ""
    stopped = f"; {_memory_reason(search.too_big)}" if search.too_big is not None else ""
    return (f"no size tried runs ({choice.tries} tries: {', '.join(search.searched)} at {sizes}{then}); "
            f"at {choice.text()}: {search.result.error}{stopped}")
