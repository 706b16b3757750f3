"""Per-node latency from onnxruntime's profiler.

The model runs on CPU with graph optimizations off (``ORT_DISABLE_ALL``), as every GraphLens run
does: with them on, onnxruntime fuses nodes (Conv+BN+Relu become one kernel named after the
Conv, say) and the profile would name kernels of its own graph, not the model's. So each timing
belongs to one node of the file, reported under that node's name; nodes without a name are
given GraphLens's names (``Conv_12``) on the copy that runs (main graph; unnamed nodes of
If/Loop bodies keep onnxruntime's own names). The figures are those of the
unoptimized graph: the total is larger than an optimized session's.

The inputs are an .npz the user gives, or random ones at input sizes found as for numeric checks
(:func:`graphlens.numerics.dims.search_dims`). The first run warms caches up and is not counted;
each node's value is its mean time per run over the next ``runs`` (a node inside a Loop body sums
over its iterations), in microseconds.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task, task_or_idle
from graphlens.core.tensors import add_external_data_to_session
from graphlens.numerics.dims import InputsUsed, dims_of, failure_reason, search_dims
from graphlens.numerics.run import ModelRunner, one_line
from graphlens.overlays.overlay import Overlay

KERNEL_SUFFIX = "_kernel_time"


@dataclass
class ProfileResult:
    """A profile: mean latency per node (µs) as an overlay, and what was run."""

    overlay: Overlay
    runs: int
    inputs: InputsUsed
    run_us: float
    """Mean wall time of one whole run (µs), as onnxruntime measured it."""
    op_us: dict[str, float]
    """Mean time per run (µs) summed per op type, slowest first."""


def profile_model(
    model: Model,
    runs: int = 10,
    *,
    dims: dict[str, int] | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    inputs_file: str | None = None,
    seed: int = 0,
    task: Task | None = None,
) -> ProfileResult:
    """Run ``model`` ``runs`` times (after one warm-up) under onnxruntime's profiler; see the module docstring."""
    task = task_or_idle(task)
    if runs < 1:
        raise GraphLensError(f"--runs must be at least 1 (got {runs})")
    where = str(model.path) if model.path else model.name
    if inputs is None:
        search = search_dims(model, ModelRunner(model), given=dims or {}, seed=seed)
        if not search.ran or search.inputs is None:
            raise GraphLensError(f"{where}: onnxruntime cannot run it: {failure_reason(search)}")
        inputs, used = search.inputs, InputsUsed(seed=seed, dims=search.choice)
    else:
        used = InputsUsed(file=inputs_file, dims=dims_of(model, inputs))
    try:
        import onnxruntime as ort
    except ImportError as exc:
        raise GraphLensError(f"onnxruntime is not installed ({exc})") from None

    proto = _named_copy(model)
    with tempfile.TemporaryDirectory(prefix="graphlens-profile-") as folder:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        options.log_severity_level = 4
        options.enable_profiling = True
        options.profile_file_prefix = str(Path(folder) / "profile")
        serialized = proto.SerializeToString()
        # mapped files: kept until the session is done
        external = add_external_data_to_session(options, proto, serialized)
        try:
            session = ort.InferenceSession(serialized, options, providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime's own pybind errors
            raise GraphLensError(f"{where}: onnxruntime cannot load it: {one_line(exc)}") from None
        wanted = {i.name for i in session.get_inputs()}
        feed = {k: v for k, v in inputs.items() if k in wanted}
        names = [o.name for o in session.get_outputs()]
        try:
            for k in range(runs + 1):
                if task.stopped:
                    session.end_profiling()
                    task.check("profiling")
                session.run(names, feed)
                task.report((k + 1) / (runs + 1))
        except GraphLensError:
            raise
        except Exception as exc:
            session.end_profiling()
            raise GraphLensError(f"{where}: onnxruntime failed while running it: {one_line(exc)}") from None
        trace = Path(session.end_profiling())
        events = json.loads(trace.read_text(encoding="utf-8"))
        del session, external
    return _summarize(events, runs, used, where, model)


def _named_copy(model: Model) -> onnx.ModelProto:
    """The model as onnxruntime will run it, every main-graph node carrying GraphLens's name for it."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model.to_proto())
    for proto_node, node in zip(copy.graph.node, model.graph.nodes):
        if proto_node.name != node.name:
            proto_node.name = node.name
    return copy


def parse_trace(events: list[dict[str, Any]], runs: int) -> tuple[dict[str, float], dict[str, str], float]:
    """(node -> total µs, node -> op type, mean µs of a whole run) over the last ``runs`` runs of a trace."""
    model_runs = sorted((e for e in events if e.get("cat") == "Session" and e.get("name") == "model_run"),
                        key=lambda e: e.get("ts", 0))
    start = 0
    if len(model_runs) > runs:  # the warm-up run(s) come first
        first = model_runs[len(model_runs) - runs - 1]
        start = first.get("ts", 0) + first.get("dur", 0)
    counted = model_runs[-runs:] if model_runs else []
    run_us = sum(e.get("dur", 0) for e in counted) / max(len(counted), 1)
    totals: dict[str, float] = {}
    ops: dict[str, str] = {}
    for event in events:
        name = event.get("name", "")
        if event.get("cat") != "Node" or not name.endswith(KERNEL_SUFFIX) or event.get("ts", 0) < start:
            continue
        node = name[: -len(KERNEL_SUFFIX)]
        totals[node] = totals.get(node, 0.0) + float(event.get("dur", 0))
        ops[node] = (event.get("args") or {}).get("op_name", "")
    return totals, ops, run_us


def _summarize(events: list[dict[str, Any]], runs: int, used: InputsUsed, where: str, model: Model) -> ProfileResult:
    totals, ops, run_us = parse_trace(events, runs)
    if not totals:
        raise GraphLensError(f"{where}: onnxruntime's profile lists no node timings")
    values = {node: total / runs for node, total in totals.items()}
    per_op: dict[str, float] = {}
    for node, value in values.items():
        per_op[ops.get(node) or "?"] = per_op.get(ops.get(node) or "?", 0.0) + value
    notes = [f"onnxruntime {_ort_version()} profiler, CPU, graph optimizations off; mean of {runs} "
             f"run{'s' if runs != 1 else ''} after a warm-up", used.line()]
    overlay = Overlay("Latency", "µs", values, source=f"profile of {model.name}, {runs} runs", notes=notes)
    return ProfileResult(overlay, runs, used, run_us, dict(sorted(per_op.items(), key=lambda kv: -kv[1])))


def _ort_version() -> str:
    import onnxruntime as ort

    return str(ort.__version__)
