"""A run's memory estimate sees the activations a file does not declare: an exporter that writes only its inputs
and outputs (Paddle2ONNX's detector), and shapes ONNX inference leaves unknown after a strided convolution on
symbolic dims. Without them a detector page was estimated at its input alone (8.8 MB against 190 MB measured)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics.dims import DimChoice, run_need
from graphlens.numerics.memory import (
    ACTIVATIONS_ALIVE,
    MEMORY_LIMIT_VARIABLE,
    RunEstimate,
    byte_size,
    over_limit,
    run_bytes,
    run_tensors,
)
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize.calibrate import CalibrationData
from graphlens.quantize.quantize import REPORT_COPIES, quantize_need
from tests.models import init, make_model, tensor

rng = np.random.default_rng(3)


def strided_stem(input_dims: list | None = None) -> onnx.ModelProto:
    """x [1, 3, H, W] -> Conv 3→16 stride 2 -> Relu -> Conv 16→4 stride 2 -> y; no intermediate shape declared,
    the output's neither."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], name="stem", strides=[2, 2], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"], name="relu"),
             helper.make_node("Conv", ["r1", "w2"], ["y"], name="head", strides=[2, 2], pads=[1, 1, 1, 1])]
    weights = [init("w1", rng.normal(size=(16, 3, 3, 3)).astype(np.float32)),
               init("w2", rng.normal(size=(4, 16, 3, 3)).astype(np.float32))]
    return make_model(nodes, [tensor("x", shape=input_dims or [1, 3, "H", "W"])], [tensor("y")], weights)


def test_activations_the_file_does_not_declare_are_sized_at_the_dims_asked_about():
    model = strided_stem()
    sizes = {"H": 64, "W": 96}.get
    input_bytes = 3 * 64 * 96 * 4
    assert run_bytes(run_tensors(model), sizes) == input_bytes  # what the declared shapes alone know
    largest = 16 * 32 * 48 * 4  # the stem's output, and the Relu's
    assert RunEstimate(model).need(sizes) == input_bytes + ACTIVATIONS_ALIVE * largest
    assert RunEstimate(Model(model)).need(sizes) == input_bytes + ACTIVATIONS_ALIVE * largest
    # the quantizer's check reads the same figure at a sample's sizes
    assert run_need(model, DimChoice({"H": 64, "W": 96}, ("H", "W"))) == input_bytes + ACTIVATIONS_ALIVE * largest


def test_an_unnamed_dim_is_sized_by_its_label():
    model = strided_stem([1, 3, "?", -1])
    need = RunEstimate(model).need({"x[2]": 32, "x[3]": 32}.get)
    assert need == 3 * 32 * 32 * 4 + ACTIVATIONS_ALIVE * 16 * 16 * 16 * 4


def test_a_dim_without_a_size_falls_back_to_the_declared_shapes():
    model = strided_stem()
    assert RunEstimate(model).need({"H": 64}.get) == 0  # W unknown: the input cannot be sized either


def test_quantize_refuses_samples_whose_activations_would_not_fit(monkeypatch):
    """The input is 48 KB; the report's activations (the two Convs' inputs, the input and the Relu's output, and
    the output) about 0.1 MB a sample, held :data:`REPORT_COPIES` times. A limit under that refuses before any
    run, in one line, and leaves the model as it was; at the estimate it runs."""
    model = Model(strided_stem())
    samples = CalibrationData({"x": rng.normal(size=(2, 1, 3, 64, 64)).astype(np.float32)}, "given")
    run = RunEstimate(model).need({"H": 64, "W": 64}.get)
    exposed = 3 * 64 * 64 * 4 + 16 * 32 * 32 * 4 + 4 * 16 * 16 * 4
    need = quantize_need(model, samples, QuantConfig())
    assert need == run + REPORT_COPIES * 2 * exposed  # both samples are the report's: 2 × 12,288 input elements
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(need - 1))
    with pytest.raises(GraphLensError, match=r"^calibration samples not run: quantizing at their sizes \(H=64 W=64\) "
                                             rf"would need {need:,} bytes of memory, over the limit of "
                                             rf"{need - 1:,} bytes"):
        quantize_model(model, QuantConfig(equalize="off"), samples)
    assert not model.graph.is_dirty
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(need))
    assert quantize_model(model, QuantConfig(equalize="off"), samples).layers


def test_a_model_of_fixed_shapes_still_counts_the_reports_activations():
    """Nothing in it changes with the dims, so a run's estimate is its input alone (made for every run, however
    fixed); the report's activations are memory all the same."""
    model = Model(strided_stem([1, 3, 64, 64]))
    samples = CalibrationData({"x": rng.normal(size=(1, 1, 3, 64, 64)).astype(np.float32)}, "given")
    assert RunEstimate(model).need({}.get) == 3 * 64 * 64 * 4
    exposed = 3 * 64 * 64 * 4 + 16 * 32 * 32 * 4 + 4 * 16 * 16 * 4
    assert quantize_need(model, samples, QuantConfig()) == 3 * 64 * 64 * 4 + REPORT_COPIES * exposed


def test_sizes_read_in_the_largest_unit_and_never_as_zero():
    assert [byte_size(n) for n in (640, 1000, 98_300, 512_000_000, 999_960, 3_210_000_000)] == [
        "640 bytes", "1 KB", "98.3 KB", "512 MB", "1 MB", "3.2 GB"]
    assert over_limit(1_300_000, 1_000_000).startswith("would need 1.3 MB of memory, over the limit of 1 MB")


@pytest.mark.parametrize("value", ["abc", "0", "-5", "nan"])
def test_a_memory_limit_that_is_no_number_of_bytes_is_refused_in_one_line(monkeypatch, capsys, tmp_path, value):
    """Not dropped (``abc`` used to mean the default) nor read as 0 (every try then failed, blamed on onnxruntime)."""
    from graphlens.cli import main
    from tests.models import conv_bn

    path = tmp_path / "m.onnx"
    onnx.save(conv_bn(), path)
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, value)
    assert main(["quantize", str(path), "-o", str(tmp_path / "q.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == (f"graphlens: {MEMORY_LIMIT_VARIABLE}={value!r}: not a number of bytes (such as 4e9); "
                   "unset it for half the memory available")
    assert not (tmp_path / "q.onnx").exists()


def test_a_fixed_shape_refusal_names_no_sizes(monkeypatch):
    model = Model(strided_stem([1, 3, 64, 64]))
    samples = CalibrationData({"x": rng.normal(size=(1, 1, 3, 64, 64)).astype(np.float32)}, "given")
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "1000")
    with pytest.raises(GraphLensError, match=r"^calibration samples not run: quantizing with them would need "):
        quantize_model(model, QuantConfig(equalize="off"), samples)


def test_binarize_and_weight_only_refuse_samples_that_would_not_fit(monkeypatch, tmp_path):
    """Both used to run whatever they were given. Binarize: two runs of the first sample's size; weight-only: the
    layers' outputs on every sample, projected from the first run; each refused in one line, the model as it was."""
    from graphlens.binarize import BinarizeConfig, binarize_model

    model = Model(strided_stem())
    samples = CalibrationData({"x": rng.normal(size=(3, 1, 3, 64, 64)).astype(np.float32)}, "given")
    one = RunEstimate(model).need({"H": 64, "W": 64}.get)
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(2 * one - 1))
    with pytest.raises(GraphLensError, match=r"^calibration samples not run: binarizing at their sizes \(H=64 W=64\) "
                                             r"would need .* over the limit of"):
        binarize_model(model, BinarizeConfig(), calibration=samples)
    assert not model.graph.is_dirty
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(2 * one))
    assert binarize_model(model, BinarizeConfig(), calibration=samples).layers

    k = 256
    rows = rng.normal(size=(40, 1, 8, k)).astype(np.float32)  # 40 samples of 8 rows: the kept outputs grow with them
    mm = Model(make_model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
                          [tensor("x", onnx.TensorProto.FLOAT, ["n", 8, k])],
                          [tensor("y", onnx.TensorProto.FLOAT, ["n", 8, k])],
                          [init("w", rng.normal(size=(k, k)).astype(np.float32))]))
    kept = 2 * 40 * 8 * k * 4  # the MatMul's output is the graph's: KEPT_COPIES of it on every sample
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(kept - 1))
    with pytest.raises(GraphLensError, match=r"^calibration samples not run: measuring weight-only blocks at their "
                                             r"sizes \(n=1\) would need"):
        quantize_model(mm, QuantConfig(weight_only=True), CalibrationData({"x": rows}, "given"))
    assert not mm.graph.is_dirty
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(kept + 2**20))
    assert quantize_model(mm, QuantConfig(weight_only=True), CalibrationData({"x": rows}, "given")).layers


def test_an_input_of_fixed_size_too_large_for_memory_is_refused_not_allocated(tmp_path, capsys):
    """A [100000, 100000, 100] float input is 4 TB: random inputs for it were allocated (exit 3, MemoryError)
    because only dynamic dims were checked."""
    from graphlens.cli import main

    relu = make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                      [tensor("x", onnx.TensorProto.FLOAT, [100000, 100000, 100])],
                      [tensor("y", onnx.TensorProto.FLOAT, [100000, 100000, 100])])
    path = tmp_path / "huge.onnx"
    onnx.save(relu, path)
    assert RunEstimate(Model(relu)).need({}.get) == 4 * 10**12
    for args in (["diff", str(path), str(path)], ["profile", str(path)]):
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert "a run at its fixed input sizes would need 4.0 TB of memory, over the limit of" in err, err
