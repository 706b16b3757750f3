"""Comparing two models' outputs on the same inputs, tensor by tensor.

For a reference tensor ``a`` and a candidate ``b``: ``max_abs``, ``max_rel`` and ``cosine`` as
:mod:`graphlens.numerics.metrics` defines them (with its rule for NaN and infinities), and the
verdict ``max_abs <= atol + rtol * max|a|``, with (rtol, atol) from :data:`TOLERANCES`.

``max_rel`` is reported but never decides. Relative error explodes near zero: a sigmoid map
whose values run from about 1 down to 1e-6 is computed to an absolute precision near one
float32 ulp *of 1.0* (~6e-8), so its 1e-6 elements come out ~2% off from rounding alone, and
elements that are exactly 0 in ``a`` give astronomically large ratios. The verdict instead
uses the allclose form with the tensor's own scale, ``max|a|``: an error is judged against
the size of the values the next layer actually sees, not against the smallest element.

The measures count NaNs in the same places as equal and a NaN facing a number as an infinite
error, but the verdict never passes a NaN: an output holding one (in A or in B) fails, named with its
counts (:attr:`TensorDiff.not_finite`), and so does a check whose inputs hold a NaN or an infinity
(:attr:`NumericDiff.problems`). An output's infinities pass only where both models hold the same one (a
causal mask, the log of a zero probability), and are noted; an infinity facing anything else is an
infinite error.
Integer and bool tensors must match exactly; complex ones are measured as (real, imag) pairs.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.numerics import metrics
from graphlens.numerics.dims import InputsUsed, dims_of, failure_reason, search_dims, would_not_fit
from graphlens.numerics.run import ModelRunner, main_graph_tensors

_EXACT = (0.0, 0.0)
TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-5),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
    "float64": (1e-7, 1e-9),
    "complex64": (1e-4, 1e-5),
    "complex128": (1e-7, 1e-9),
    **{name: _EXACT for name in (
        "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    )},
}
"""dtype name -> (rtol, atol). Types not listed compare exactly."""

def _finite_or_none(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


@dataclass
class TensorDiff:
    """How far one tensor of B is from the same tensor of A, and whether that is within tolerance."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    max_abs: float
    max_rel: float
    cosine: float
    rtol: float
    atol: float
    limit: float
    passed: bool
    note: str | None = None
    """Why the numbers alone do not tell the story: shapes or dtypes differ, B names the tensor differently."""
    not_finite: str = ""
    """The NaNs and infinities A and B hold here (``A holds 3 NaN of 64 values``), which fail it; "" when none."""

    def to_json(self) -> dict[str, Any]:
        """Plain JSON values; infinities and NaNs become null."""
        return {
            "name": self.name,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "max_abs": _finite_or_none(self.max_abs),
            "max_rel": _finite_or_none(self.max_rel),
            "cosine": _finite_or_none(self.cosine),
            "rtol": self.rtol,
            "atol": self.atol,
            "limit": _finite_or_none(self.limit),
            "passed": self.passed,
            "note": self.note,
            "not_finite": self.not_finite or None,
        }


@dataclass
class NumericDiff:
    """The outcome of running two models on the same inputs; ``reason`` says why it could not be had."""

    available: bool
    reason: str | None
    outputs: list[TensorDiff] = field(default_factory=list)
    boundary: list[TensorDiff] = field(default_factory=list)
    boundary_values: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list, repr=False, compare=False)
    """The boundary tensors themselves, (in A, in B) per pair: views that show them need not run the models again."""
    inputs: InputsUsed | None = None
    """Where the inputs came from and the sizes of the dynamic dims."""
    problems: list[str] = field(default_factory=list)
    """What fails the check besides the tensors' errors: inputs holding NaN or infinities, named with counts."""

    @property
    def passed(self) -> bool:
        return self.available and not self.problems and all(d.passed for d in (*self.outputs, *self.boundary))

    def failure(self) -> str | None:
        """Why the check failed, in one line (None when it passed or could not run): the summary's FAIL line."""
        if not self.available or self.passed:
            return None
        return self.summary_lines()[-1]

    @property
    def max_rel(self) -> float:
        """Over the outputs; NaN when there are none."""
        return max((d.max_rel for d in self.outputs), default=math.nan)

    @property
    def max_abs(self) -> float:
        """Over the outputs; NaN when there are none."""
        return max((d.max_abs for d in self.outputs), default=math.nan)

    def to_json(self) -> dict[str, Any]:
        return {
            "available": self.available,
            "reason": self.reason,
            "passed": self.passed,
            "max_abs": _finite_or_none(self.max_abs),
            "max_rel": _finite_or_none(self.max_rel),
            "outputs": [d.to_json() for d in self.outputs],
            "boundary": [d.to_json() for d in self.boundary],
            "inputs": self.inputs.to_json() if self.inputs is not None else None,
            "problems": list(self.problems),
        }

    def summary_lines(self) -> list[str]:
        """A table for the terminal: one row per tensor, then the verdict."""
        if not self.available:
            return [f"numeric diff not available: {self.reason}"]
        header = ("tensor", "dtype", "max abs", "max rel", "cosine", "limit", "")
        rows = [_row(d) for d in self.outputs]
        boundary_rows = [_row(d) for d in self.boundary]
        widths = [max(len(r[i]) for r in (header, *rows, *boundary_rows)) for i in range(len(header))]

        def fmt(row: tuple[str, ...]) -> str:
            return "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip()

        lines = [fmt(header)] + [fmt(r) for r in rows]
        if boundary_rows:
            lines.append("boundary tensors:")
            lines += [fmt(r) for r in boundary_rows]
        lines += [f"  note: {d.name}: {d.note}" for d in (*self.outputs, *self.boundary) if d.note]
        everything = [*self.outputs, *self.boundary]
        failed = [d.name for d in everything if not d.passed and not d.not_finite]
        not_finite = [f"'{d.name}': {d.not_finite}" for d in everything if d.not_finite]
        if self.problems or failed or not_finite:
            parts = list(self.problems)
            if failed:
                parts.append(f"{len(failed)} of {len(everything)} tensors outside tolerance ({', '.join(failed)})")
            lines.append("FAIL: " + "; ".join(parts + not_finite))
        else:
            count = len(everything)
            counted = f"all {count} tensors" if count > 1 else f"{count} tensor"
            lines.append(f"PASS: {counted} within tolerance")
        return lines


def _row(d: TensorDiff) -> tuple[str, ...]:
    return (
        d.name, d.dtype, f"{d.max_abs:.3g}", f"{d.max_rel:.3g}", f"{d.cosine:.6f}", f"{d.limit:.3g}",
        "PASS" if d.passed else "FAIL",
    )


def _tolerance(a: np.dtype, b: np.dtype) -> tuple[float, float]:
    """The looser of the two dtypes' tolerances: a float16 rewrite of a float32 model is judged as float16."""
    ra, aa = TOLERANCES.get(a.name, _EXACT)
    rb, ab = TOLERANCES.get(b.name, _EXACT)
    return max(ra, rb), max(aa, ab)


def _complex_as_pairs(x: np.ndarray) -> np.ndarray:
    """Complex numbers as (real, imag) pairs, so they are measured as two real numbers each."""
    return np.stack([x.real, x.imag], axis=-1) if x.dtype.kind == "c" else x


def _peak(x: np.ndarray) -> float:
    """max |x| over the finite elements, chunk by chunk."""
    peak = 0.0
    for a, _ in metrics.chunk_pairs(x, x):
        magnitude = np.abs(a.astype(np.float64))
        peak = max(peak, float(magnitude[np.isfinite(magnitude)].max(initial=0.0)))
    return peak


def compare_tensors(name: str, a: np.ndarray, b: np.ndarray) -> TensorDiff:
    """Compare candidate ``b`` with reference ``a`` (see the module docstring for the measures)."""
    a, b = np.asarray(a), np.asarray(b)
    rtol, atol = _tolerance(a.dtype, b.dtype)
    note = f"dtype {a.dtype.name} in A, {b.dtype.name} in B" if a.dtype != b.dtype else None
    shape = tuple(int(d) for d in a.shape)
    if a.dtype.kind in "USO" or b.dtype.kind in "USO":
        same = a.shape == b.shape and np.array_equal(a, b)
        error = 0.0 if same else math.inf
        return TensorDiff(name, a.dtype.name, shape, error, error, 1.0 if same else math.nan,
                          rtol, atol, atol, same, note)
    x, y = _complex_as_pairs(a), _complex_as_pairs(b)
    limit = atol + rtol * _peak(x)
    if a.shape != b.shape:
        mismatch = f"shape {list(a.shape)} in A, {list(b.shape)} in B"
        return TensorDiff(name, a.dtype.name, shape, math.inf, math.inf, math.nan, rtol, atol, limit, False,
                          f"{mismatch}; {note}" if note else mismatch)
    stats = metrics.error_stats(x, y, name=name)
    passed = stats.max_abs <= limit
    if a.dtype.kind in "biu" and b.dtype.kind in "biu":
        passed = bool(np.array_equal(a, b))  # exact even where float64 cannot hold the integers
    not_finite = ""
    nan_a, nan_b = nonfinite(x, infinities=False), nonfinite(y, infinities=False)
    if nan_a or nan_b:  # NaNs in the same places are no error, but no output to pass either
        passed = False
        not_finite = ", ".join(f"{side} holds {counts}" for side, counts in (("A", nonfinite(x)), ("B", nonfinite(y)))
                               if counts)
    elif passed and nonfinite(x):  # the same infinities on both sides (a mask, a log of 0): said, not a failure
        matched = f"A and B hold {nonfinite(x)}, in the same places"
        note = f"{matched}; {note}" if note else matched
    return TensorDiff(name, a.dtype.name, shape, stats.max_abs, metrics.max_rel(x, y, name), stats.cosine,
                      rtol, atol, limit, passed, note, not_finite)


def nonfinite(x: np.ndarray, *, infinities: bool = True) -> str:
    """How many NaNs (and ``infinities``) ``x`` holds, in words (``3 NaN, 1 inf of 64 values``); "" when none."""
    if not (x.dtype.kind in "fc" or x.dtype.name in metrics.FLOAT_EXTENSIONS):
        return ""
    nan = inf = 0
    for part, _ in metrics.chunk_pairs(x, x):
        values = part.astype(np.float64)
        nan += int(np.isnan(values).sum())
        inf += int(np.isinf(values).sum()) if infinities else 0
    counted = [f"{n:,} {what}" for n, what in ((nan, "NaN"), (inf, "inf")) if n]
    return f"{', '.join(counted)} of {x.size:,} values" if counted else ""


def input_problems(inputs: dict[str, np.ndarray]) -> list[str]:
    """Each input holding NaN or infinities, named with its counts: a check on such inputs proves nothing."""
    found = []
    for name, value in inputs.items():
        array = np.asarray(value)
        counts = nonfinite(_complex_as_pairs(array)) if array.dtype.kind != "O" else ""
        if counts:
            found.append(f"input '{name}' holds {counts}")
    return found


def _proto(model: Model | onnx.ModelProto, file: object = None) -> onnx.ModelProto:
    """The structure read here; without weights when onnxruntime reads the model from ``file``."""
    if not isinstance(model, Model):
        return model
    return model.weightless_proto() if file is not None else model.to_proto()


def _labels(a: Model | onnx.ModelProto, b: Model | onnx.ModelProto) -> tuple[str, str]:
    """How reasons name the two models: the file name when there is one."""
    def label(model: Model | onnx.ModelProto, fallback: str) -> str:
        if isinstance(model, Model):
            return model.name
        return model.graph.name or fallback

    la, lb = label(a, "model A"), label(b, "model B")
    return (f"{la} (A)", f"{lb} (B)") if la == lb else (la, lb)


def diff_models(
    a: Model | onnx.ModelProto,
    b: Model | onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    boundary: Sequence[tuple[str, str]] = (),
) -> NumericDiff:
    """Run A (the reference) and B on the same inputs and compare outputs by position, then boundary pairs."""
    return check_models(a, b, inputs=inputs, boundary=boundary)


def check_models(
    a: Model | onnx.ModelProto,
    b: Model | onnx.ModelProto,
    *,
    inputs: dict[str, np.ndarray] | None = None,
    inputs_file: str | None = None,
    dims: dict[str, int] | None = None,
    seed: int = 0,
    boundary: Sequence[tuple[str, str]] = (),
    remember: Model | None = None,
    files: tuple[str | os.PathLike[str] | None, str | os.PathLike[str] | None] = (None, None),
    names: tuple[str, str] | None = None,
) -> NumericDiff:
    """Compare B with A on ``inputs``, or on random inputs whose dynamic dims are searched until A runs.

    ``dims`` are the sizes the user gave (never changed); the rest are chosen as
    :mod:`graphlens.numerics.dims` describes and remembered on ``remember``. A is run once per
    try on one onnxruntime session; B only on the inputs that worked. ``files``: saved copies of A
    and B exactly as they are, which onnxruntime then reads itself (see :class:`ModelRunner`).
    ``names``: how reasons name A and B (default: their file or graph names).
    """
    pa, pb = _proto(a, files[0]), _proto(b, files[1])
    la, lb = _labels(a, b) if names is None else names
    if la == lb:
        la, lb = f"{la} (A)", f"{lb} (B)"
    outs_a, outs_b = [v.name for v in pa.graph.output], [v.name for v in pb.graph.output]
    if len(outs_a) != len(outs_b):
        return NumericDiff(False, f"{la} has {len(outs_a)} outputs but {lb} has {len(outs_b)}; "
                                  "outputs are compared by position", [], [])
    for side, (model_label, proto) in enumerate(((la, pa), (lb, pb))):
        tensors = main_graph_tensors(proto)
        for pair in boundary:
            if pair[side] not in tensors:
                return NumericDiff(False, f"boundary tensor '{pair[side]}' is not in the main graph of {model_label}")
    # read from a file, a model's weights stay out of this process: its runner and the dims search get the structure
    a_read = pa if files[0] is not None and not boundary else a
    runner_a = ModelRunner(a_read, [p[0] for p in boundary], file=files[0])
    if inputs is None:
        search = search_dims(a_read, runner_a, given=dims, seed=seed, remember=remember)
        used = InputsUsed(seed=seed, dims=search.choice)
        if not search.ran or search.inputs is None:
            return NumericDiff(False, f"onnxruntime cannot run {la}: {failure_reason(search)}", inputs=used)
        inputs, result_a = search.inputs, search.result
    else:
        given = dims_of(a, inputs)
        used = InputsUsed(file=inputs_file, dims=given)
        refusal = would_not_fit(pa, given)
        if refusal is not None:
            return NumericDiff(False, f"not run: {refusal}", inputs=used)
        result_a = runner_a.run(inputs)
        if result_a.error is not None:
            return NumericDiff(False, f"onnxruntime cannot run {la}: {result_a.error}", inputs=used)
    del runner_a  # one session at a time: A's weights are released before B's are read
    b_read = pb if files[1] is not None and not boundary else b
    result_b = ModelRunner(b_read, [p[1] for p in boundary], file=files[1]).run(inputs)
    if result_b.error is not None or result_b.outputs is None:
        return NumericDiff(False, f"onnxruntime cannot run {lb}: {result_b.error}", inputs=used)
    ra, rb = result_a.outputs or {}, result_b.outputs
    outputs = [_compare_pair(na, nb, ra, rb) for na, nb in zip(outs_a, outs_b)]
    compared = [_compare_pair(ta, tb, ra, rb) for ta, tb in boundary]
    return NumericDiff(True, None, outputs, compared, [(ra[ta], rb[tb]) for ta, tb in boundary], inputs=used,
                       problems=input_problems(inputs))


def _compare_pair(na: str, nb: str, ra: dict[str, np.ndarray], rb: dict[str, np.ndarray]) -> TensorDiff:
    """Named after A's tensor; the note says what B calls it when that differs."""
    result = compare_tensors(na, ra[na], rb[nb])
    if na != nb:
        renamed = f"'{nb}' in B"
        result.note = f"{renamed}; {result.note}" if result.note else renamed
    return result
