"""The report's top-1 agreement and KL divergence on outputs a Softmax makes, against a direct computation."""

from __future__ import annotations

import json

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from graphlens.cli import main
from graphlens.numerics.distributions import DistributionStats, class_axis, softmax_outputs
from graphlens.quantize import QuantConfig
from graphlens.workspace import Workspace
from tests import models
from tests.quantize.quant_models import two_convs


def _run(path, x: np.ndarray) -> np.ndarray:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL  # the model's own nodes, as written
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return np.concatenate([session.run(None, {"x": sample})[0] for sample in x])


def test_report_counts_changed_top_classes_and_kl_as_computed_directly(tmp_path):
    model, npz, out = tmp_path / "m.onnx", tmp_path / "cal.npz", tmp_path / "q.onnx"
    onnx.save(two_convs(), model)
    x = np.random.default_rng(7).normal(0, 1, (6, 1, 3, 8, 8)).astype(np.float32)
    np.savez(npz, x=x)
    ws = Workspace()
    ws.open(model)
    result = ws.quantization.quantize(QuantConfig(), npz)
    ws.save_as(out)
    stats = result.probabilities["y"]
    assert result.measured_samples == 6  # small samples: the report is on all of them

    p = _run(model, x).astype(np.float64)  # (6, 5, 8, 8): classes on axis 1
    q = _run(out, x).astype(np.float64)
    changed = int(np.count_nonzero(p.argmax(axis=1) != q.argmax(axis=1)))
    kl = (p * np.log(p / q)).sum(axis=1)  # every probability here is far above the floor
    assert stats.axis == 1 and stats.positions == 6 * 8 * 8
    assert stats.positions - stats.same_top1 == changed
    assert abs(stats.kl_mean - kl.mean()) <= 1e-9 + 1e-6 * kl.mean()
    assert abs(stats.kl_max - kl.max()) <= 1e-9 + 1e-6 * kl.max()
    assert kl.max() > 0  # int8 moved the probabilities: the figures are not zero by construction
    line = next(line for line in result.lines() if line.startswith("probabilities 'y'"))
    assert f"top class changed at {changed} of 384 positions" in line


def test_the_json_report_carries_them_and_a_sigmoid_output_gets_none(tmp_path):
    model, out, report = tmp_path / "m.onnx", tmp_path / "q.onnx", tmp_path / "r.json"
    onnx.save(two_convs(), model)
    assert main(["quantize", str(model), "-o", str(out), "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    assert set(data["probabilities"]) == {"y"}
    assert 0.0 <= data["probabilities"]["y"]["top1_agreement"] <= 1.0
    sigmoid = two_convs()
    sigmoid.graph.node[-1].CopyFrom(helper.make_node("Sigmoid", ["b"], ["y"], name="sigmoid"))
    assert softmax_outputs(sigmoid) == []


def test_a_softmax_found_through_the_reshapes_exporters_put_around_it():
    """Opset-11 Softmax converted to opset 13: Flatten -> Softmax -> Reshape, and an exporter's Identity after."""
    shape = models.init("shape", np.array([1, 3, 4], np.int64))
    nodes = [helper.make_node("Flatten", ["x"], ["flat"], axis=1),
             helper.make_node("Softmax", ["flat"], ["soft"], axis=-1),
             helper.make_node("Reshape", ["soft", "shape"], ["back"]),
             helper.make_node("Identity", ["back"], ["probs"]),
             helper.make_node("Relu", ["x"], ["other"])]
    model = models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [1, 3, 4])],
                              [models.tensor("probs", TensorProto.FLOAT, [1, 3, 4]),
                               models.tensor("other", TensorProto.FLOAT, [1, 3, 4])], [shape], opset=13)
    assert softmax_outputs(model) == ["probs"]


def test_class_axis_and_the_figures_of_equal_and_swapped_distributions():
    p = np.array([[[0.7, 0.2, 0.1]], [[0.1, 0.1, 0.8]]], np.float32)  # (2, 1, 3): classes last, a length-1 axis
    assert class_axis(p) == 2
    assert class_axis(np.full((2, 3), 0.3, np.float32)) is None  # no axis sums to 1
    same = DistributionStats()
    same.add(p, p.copy())
    assert (same.positions, same.same_top1, same.kl_max) == (2, 2, 0.0)
    swapped = DistributionStats()
    q = p[..., ::-1].copy()  # the first position's top class moves; the second's too
    swapped.add(p, q)
    expected = [0.7 * np.log(0.7 / 0.1) + 0.1 * np.log(0.1 / 0.7), 0.1 * np.log(0.1 / 0.8) + 0.8 * np.log(0.8 / 0.1)]
    assert swapped.positions - swapped.same_top1 == 2
    assert np.isclose(swapped.kl_mean, np.mean(expected), rtol=1e-6)
    zero = DistributionStats()
    zero.add(np.array([[1.0, 0.0]], np.float32), np.array([[0.0, 1.0]], np.float32))  # q = 0 where p is not
    assert np.isclose(zero.kl_max, np.log(1 / 1e-12))


def test_a_quantized_output_gone_to_nan_is_null_in_the_json_report():
    stats = DistributionStats()
    stats.add(np.array([[0.6, 0.4]], np.float32), np.array([[np.nan, np.nan]], np.float32))
    data = stats.to_dict()
    assert json.loads(json.dumps(data, allow_nan=False))["kl_mean_nats"] is None
