"""What keeps quantization's memory and run time bounded gives the same numbers as the plain way: ranges from
onnxruntime's reductions, weights quantized a block of rows at a time, errors measured without kept copies,
sessions of an edited model staged from its live graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.model import Model
from graphlens.numerics import run
from graphlens.numerics.metrics import error_stats
from graphlens.numerics.run import ModelRunner
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize import qdq as qdq_module
from graphlens.quantize.calibrate import CalibrationData, KeptRuns, collect_ranges
from graphlens.quantize.place import apply_quantization, find_sites, scratch_model
from graphlens.quantize.qdq import QType, quantize, quantize_stored, stored_error, weight_params
from tests.quantize.quant_models import layer, two_convs


def _samples(values: list[np.ndarray]) -> CalibrationData:
    return CalibrationData({"x": np.stack([v.reshape(3, 4).astype(np.float32) for v in values])}, "given")


@pytest.mark.parametrize("method", ["minmax", "ema"])
@pytest.mark.parametrize("infinite", [0, 3])
def test_ranges_from_reductions_equal_those_from_the_tensors(method, infinite):
    """Every run's bounds come from ReduceMin/ReduceMax, the kept runs' too (whose tensors are returned); the range
    is the same either way, and an infinity in a sample, kept (0) or not (3), is left out of it as before."""
    rng = np.random.default_rng(0)
    values = [rng.normal(size=12) * (k + 1) for k in range(5)]
    values[infinite][2] = np.inf
    config = QuantConfig(method=method, batch_size=1)
    summarized = collect_ranges(layer("MatMul"), ["x"], _samples(values), config, keep=KeptRuns(upto=1))["x"]
    whole = collect_ranges(layer("MatMul"), ["x"], _samples(values), config, keep=KeptRuns(upto=None))["x"]
    assert (summarized.low, summarized.high) == pytest.approx((whole.low, whole.high))
    assert np.isfinite([summarized.low, summarized.high]).all()
    if method == "minmax":  # against numpy: every sample's finite values, as float32 as the model reads them
        finite = np.concatenate(values).astype(np.float32)
        finite = finite[np.isfinite(finite)]
        assert (summarized.low, summarized.high) == (finite.min(), finite.max())


def test_the_kept_runs_hold_the_tensors_and_outputs_of_the_first_samples_only():
    values = [np.linspace(-1, 1, 12) * (k + 1) for k in range(4)]
    kept = KeptRuns(upto=2)
    collect_ranges(layer("MatMul"), ["x"], _samples(values), QuantConfig(batch_size=1), keep=kept)
    assert kept.complete and [b.done for b in kept.batches] == [1, 2]
    assert {"x", "y"} <= set(kept.batches[0].outputs[0])


@pytest.mark.parametrize("axis", [0, 1, None])
def test_quantizing_in_blocks_of_rows_gives_the_same_integers_and_error(monkeypatch, axis):
    monkeypatch.setattr(qdq_module, "ROWS_BYTES", 64)  # several rows at a time, channels cut along axis 0
    w = np.random.default_rng(1).normal(size=(37, 5, 3)).astype(np.float32)
    params = weight_params(w, QType(8, True, True), symmetric=True, axis=axis)
    stored = quantize_stored(w, params)
    assert stored.dtype == np.int8 and np.array_equal(stored, quantize(w, params))
    plain = error_stats(w, qdq_module.dequantize(quantize(w, params), params), fast=True)
    assert stored_error(w, stored, params).sqnr_db == pytest.approx(plain.sqnr_db, rel=1e-6)


def test_records_without_values_carry_the_same_weight_error():
    proto = two_convs()
    config = QuantConfig()
    placement = find_sites(scratch_model(proto).graph, config)
    kept = apply_quantization(scratch_model(proto), placement, {}, config)
    dropped = apply_quantization(scratch_model(proto), placement, {}, config, keep_values=False)
    for a, b in zip(kept, dropped, strict=True):
        assert b.float_value is None and b.quantized_value is None and b.error is not None
        measured = error_stats(a.float_value, qdq_module.dequantize(a.quantized_value, a.params), fast=True)
        assert b.error.sqnr_db == pytest.approx(measured.sqnr_db, rel=1e-6)


def test_the_report_lists_every_weight_with_its_error():
    model = Model(two_convs())
    result = quantize_model(model, QuantConfig(equalize="off"), samples=2)
    weights = [layer for layer in result.layers if layer.kind == "weight"]
    assert len(weights) == 2 and all(np.isfinite(w.sqnr_db) and w.sqnr_db > 30 for w in weights)


def _wide(width: int = 256, rows: int | str = 2) -> onnx.ModelProto:
    w = numpy_helper.from_array(np.random.default_rng(0).normal(size=(width, width)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"), helper.make_node("Relu", ["h"], ["y"], name="r")],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, width])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, width])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_edited_model_runs_staged_without_being_written_into_its_protobuf(monkeypatch):
    monkeypatch.setattr(run, "STAGE_BYTES", 1024)  # the 256 KB weight counts as large
    model = Model(_wide())
    quantize_model(model, QuantConfig(equalize="off"), samples=1)
    assert model.graph.is_dirty
    x = {"x": np.ones((2, 256), np.float32)}
    staged = ModelRunner(model, ["h"]).run(x)
    assert model.graph.is_dirty  # nothing synced into model.proto
    assert staged.outputs is not None
    plain = ModelRunner(onnx.ModelProto.FromString(model.serialize()), ["h"]).run(x)
    assert plain.outputs is not None
    assert np.array_equal(staged.outputs["y"], plain.outputs["y"]) and np.array_equal(staged.outputs["h"],
                                                                                       plain.outputs["h"])


def test_a_runner_asked_for_some_outputs_returns_those_alone():
    runner = ModelRunner(_wide(), ["h", "top"],
                         extra_nodes=[helper.make_node("ReduceMax", ["h"], ["top"], keepdims=0)])
    x = {"x": np.ones((2, 256), np.float32)}
    every = runner.run(x).outputs
    assert every is not None and set(every) == {"y", "h", "top"}
    top = runner.only(["top"]).run(x).outputs
    assert top is not None and set(top) == {"top"} and float(top["top"]) == float(every["h"].max())


def test_samples_that_would_not_fit_are_refused_before_any_run(monkeypatch):
    from graphlens.core.errors import GraphLensError
    from graphlens.numerics.memory import MEMORY_LIMIT_VARIABLE

    model = Model(_wide(rows="n"))
    samples = CalibrationData({"x": np.ones((2, 4096, 256), np.float32)}, "given")
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "1000")
    refusal = r"^calibration samples not run: quantizing at their sizes \(n=4096\) would need"
    with pytest.raises(GraphLensError, match=refusal):
        quantize_model(model, QuantConfig(equalize="off"), samples)
    assert not model.graph.is_dirty  # left as it was
