"""Latency per node from onnxruntime's profiler."""

from __future__ import annotations

import pytest

from graphlens.core.model import load_model
from graphlens.core.task import Cancelled, Task
from graphlens.overlays import profile_model
from graphlens.overlays.profile import parse_trace


def test_profile_of_the_demo_times_every_executed_node(demo_path):
    model = load_model(demo_path)
    result = profile_model(model, runs=2)
    executed = {n.name for n in model.graph.nodes if n.op_type != "Constant"}  # onnxruntime folds Constants at load
    assert executed <= set(result.overlay.values)
    assert set(result.overlay.values) <= {n.name for n in model.graph.nodes}  # the model's names, not fused kernels
    assert all(v >= 0 for v in result.overlay.values.values())
    assert result.overlay.unit == "µs" and result.runs == 2
    assert result.op_us and "Conv" in result.op_us
    assert any("graph optimizations off" in note for note in result.overlay.notes)


def test_unnamed_nodes_are_timed_under_graphlens_names(write_model):
    from onnx import TensorProto, helper

    from tests.models import make_model, tensor

    proto = make_model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Neg", ["y"], ["z"])],
                       [tensor("x", TensorProto.FLOAT, [4])], [tensor("z", TensorProto.FLOAT, [4])])
    model = load_model(write_model(proto))
    result = profile_model(model, runs=1)
    assert set(result.overlay.values) == {n.name for n in model.graph.nodes}


def test_cancel_stops_between_runs(demo_path):
    with pytest.raises(Cancelled, match="profiling was cancelled"):
        profile_model(load_model(demo_path), runs=3, task=Task(cancelled=lambda: True))


def test_the_warm_up_run_is_not_counted():
    def run(ts):
        return {"cat": "Session", "name": "model_run", "ts": ts, "dur": 100}

    def kernel(ts, dur):
        return {"cat": "Node", "name": "conv_kernel_time", "ts": ts, "dur": dur, "args": {"op_name": "Conv"}}

    events = [run(0), kernel(10, 90), run(200), kernel(210, 4), run(400), kernel(410, 6)]
    totals, ops, run_us = parse_trace(events, runs=2)
    assert totals == {"conv": 10.0} and ops == {"conv": "Conv"} and run_us == 100
