"""Each paired tensor's error on the same inputs: max |Δ|, SQNR and cosine, from onnxruntime.

Both models run once with the paired main-graph tensors exposed as outputs (in batches when
there are very many, so the arrays of one batch at a time are held); each pair's tensor is the
first output of its last node, so Conv+BN ↔ Conv compares the BN's output with the conv's.
Subgraph tensors cannot be exposed by onnxruntime, so pairs inside bodies get no numbers.

The measures, and their rule for NaN and infinities, are :mod:`graphlens.numerics.metrics`'s, with A the
reference: SQNR ``inf`` when the tensors are equal. Inputs holding NaN or infinities, and graph outputs (of A
or of B) holding NaN, are named in :attr:`Comparison.numeric_problems`: numbers measured on them prove nothing.
"""

from __future__ import annotations

import math

import numpy as np

from graphlens.compare.result import Comparison, Pair, TensorError
from graphlens.core.graph import Graph
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.diff import compare_tensors, input_problems, nonfinite
from graphlens.numerics.dims import InputsUsed, dims_of, failure_reason, search_dims, would_not_fit
from graphlens.numerics.inputs import graph_inputs
from graphlens.numerics.metrics import error_stats, measurable
from graphlens.numerics.run import ModelRunner

BATCH = 20_000
"""Exposed tensors per run: 20,000 small activations fit in memory; more run in several batches."""


def _last_output(graph: Graph, names: list[str]) -> str | None:
    positions = graph.positions()
    node = graph.by_name[max(names, key=lambda n: positions.get(n, -1))]
    return next((t for t in node.outputs if t), None)


def tensor_error(name_a: str, name_b: str, a: np.ndarray, b: np.ndarray) -> TensorError:
    """B's tensor against A's; one that cannot be measured (another shape, text) is an infinite error unless equal."""
    if a.shape == b.shape and measurable(a) and measurable(b):
        stats = error_stats(a, b, name=name_a)
        return TensorError(name_a, name_b, stats.max_abs, stats.sqnr_db, stats.cosine)
    diff = compare_tensors(name_a, a, b)
    return TensorError(name_a, name_b, diff.max_abs, -math.inf if diff.max_abs else math.inf, diff.cosine)


def _feeds_for_b(comparison: Comparison, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A's feeds under B's input names: by name where B has it, else by position."""
    names_a = [v.name for v in graph_inputs(comparison.a)]
    names_b = [v.name for v in graph_inputs(comparison.b)]
    out = {}
    for k, name in enumerate(names_b):
        if name in feeds:
            out[name] = feeds[name]
        elif k < len(names_a) and names_a[k] in feeds:
            out[name] = feeds[names_a[k]]
    return out


def output_problems(comparison: Comparison, ra: dict[str, np.ndarray], rb: dict[str, np.ndarray]) -> list[str]:
    """Each graph output of A or B holding NaN, named with its counts (an infinity can be meant: a mask)."""
    found = []
    for side, model, values in (("A", comparison.a, ra), ("B", comparison.b, rb)):
        for output in model.proto.graph.output:
            value = values.get(output.name)
            array = np.asarray(value) if value is not None else None
            counts = nonfinite(array, infinities=False) if array is not None and measurable(array) else ""
            if counts:
                found.append(f"output '{output.name}' of {side} ({model.name}) holds {counts}")
    return found


def attach_errors(
    comparison: Comparison,
    inputs: dict[str, np.ndarray] | None,
    dims: dict[str, int] | None,
    task: Task | None = None,
    inputs_file: str | None = None,
) -> tuple[str | None, str]:
    """Set ``error`` on every main-graph pair with both sides, and :attr:`Comparison.numeric_problems`; return
    (why no numbers, inputs line)."""
    a, b = comparison.a, comparison.b
    wanted: list[tuple[Pair, str, str]] = []
    for pair in comparison.pairs:
        if pair.a and pair.b and pair.graph == "main" and pair.path_b == "main":
            ta, tb = _last_output(a.graph, pair.a), _last_output(b.graph, pair.b)
            # values computed from weights alone (a decoder's Transpose(W)) are weights, compared as such
            # by the pairing; exposed, they would hold every weight a second time
            if ta and tb and not (a.graph.is_constant(ta) and b.graph.is_constant(tb)):
                wanted.append((pair, ta, tb))
    batches = [wanted[i:i + BATCH] for i in range(0, len(wanted), BATCH)] or [[]]
    used: InputsUsed | None = None
    feeds = inputs
    task = task_or_idle(task)
    for done, batch in enumerate(batches):
        task.check("the comparison")
        task.report(done / len(batches))
        runner_a = ModelRunner(a, [ta for _, ta, _ in batch])
        if feeds is None:
            search = search_dims(a, runner_a, given=dims)
            used = InputsUsed(seed=0, dims=search.choice)
            if not search.ran or search.inputs is None:
                return f"onnxruntime cannot run {a.name}: {failure_reason(search)}", used.line()
            feeds, result_a = search.inputs, search.result
        else:
            if used is None:
                given = dims_of(a, feeds)
                used = InputsUsed(file=inputs_file, dims=given)
                refusal = would_not_fit(a, given)
                if refusal is not None:
                    return f"not run: {refusal}", used.line()
            result_a = runner_a.run(feeds)
            if result_a.error is not None:
                return f"onnxruntime cannot run {a.name}: {result_a.error}", used.line()
        del runner_a  # one session at a time: A's is released before B's is made
        result_b = ModelRunner(b, [tb for _, _, tb in batch]).run(_feeds_for_b(comparison, feeds))
        if result_b.error is not None or result_b.outputs is None:
            return f"onnxruntime cannot run {b.name}: {result_b.error}", used.line()
        ra, rb = result_a.outputs or {}, result_b.outputs
        if batch is batches[0]:
            comparison.numeric_problems = input_problems(feeds) + output_problems(comparison, ra, rb)
        for pair, ta, tb in batch:
            if ta in ra and tb in rb:
                pair.error = tensor_error(ta, tb, ra[ta], rb[tb])
    return None, used.line() if used is not None else ""
