"""Running models with onnxruntime: outputs, intermediates, and failures as values, not exceptions."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort

from graphlens.core.model import Model, load_model
from graphlens.numerics import RunResult, run_model
from graphlens.numerics.run import one_line
from tests.numerics import numeric_models as nm

X = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype(np.float32)


def _bn_by_hand(proto: onnx.ModelProto, c: np.ndarray) -> np.ndarray:
    p = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64)[None, :, None, None] for t in proto.graph.initializer}
    return p["bn_scale"] * (c - p["bn_mean"]) / np.sqrt(p["bn_var"] + 1e-5) + p["bn_bias"]


def test_run_conv_bn_and_expose_the_conv_output():
    proto = nm.conv_bn()
    result = run_model(Model(proto), {"x": X}, extra_outputs=["c"])
    assert result.error is None
    assert list(result.outputs) == ["y", "c"]
    y, c = result.outputs["y"], result.outputs["c"]
    assert y.dtype == np.float32 and y.shape == (1, 4, 8, 8) and c.shape == (1, 4, 8, 8)
    np.testing.assert_allclose(y, _bn_by_hand(proto, c.astype(np.float64)), rtol=1e-5, atol=1e-5)


def test_extra_outputs_leave_the_model_alone(write_model):
    model = load_model(write_model(nm.conv_bn()))
    before = model.to_proto().SerializeToString()
    result = run_model(model, {"x": X}, extra_outputs=["c", "y", "w"])
    assert list(result.outputs) == ["y", "c", "w"]
    assert result.outputs["w"].shape == (4, 3, 3, 3)
    assert model.to_proto().SerializeToString() == before and not model.modified


def test_a_bare_proto_runs_too():
    result = run_model(nm.conv_bn(), {"x": X}, ["c"])
    assert result.error is None and set(result.outputs) == {"y", "c"}


def test_same_model_same_inputs_same_outputs():
    proto = nm.conv_bn()
    first, second = run_model(proto, {"x": X}), run_model(proto, {"x": X})
    np.testing.assert_array_equal(first.outputs["y"], second.outputs["y"])


def test_custom_op_is_an_error_not_an_exception():
    result = run_model(nm.custom_op(), {"x": X})
    assert result == RunResult(None, result.error)
    assert "'Mystery'" in result.error and "com.example" in result.error
    assert "\n" not in result.error and "[ONNXRuntimeError]" not in result.error


def test_wrong_input_shape_is_an_error():
    result = run_model(nm.conv_bn(), {"x": np.zeros((1, 3, 8, 9), np.float32)})
    assert result.outputs is None
    assert "invalid dimensions for input: x" in result.error and "\n" not in result.error


def test_missing_input_is_an_error():
    result = run_model(nm.conv_bn(), {})
    assert result.outputs is None and "x" in result.error


def test_unknown_extra_output_is_an_error():
    result = run_model(nm.conv_bn(), {"x": X}, ["nope"])
    assert result.outputs is None and result.error == "no tensor 'nope' in the main graph to expose as an output"


def test_graph_optimizations_are_disabled(monkeypatch):
    seen = []
    real = ort.InferenceSession

    def spy(data, options, providers):
        seen.append((options.graph_optimization_level, providers))
        return real(data, options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    assert run_model(nm.conv_bn(), {"x": X}).error is None
    assert seen == [(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, ["CPUExecutionProvider"])]


def test_calibration_sessions_spin_only_for_long_runs_and_give_the_same_ranges_either_way(monkeypatch):
    """Worker threads spin between operators for runs of large samples (a detector page), sleep for small ones;
    the ranges, and so the model written, do not depend on it."""
    from graphlens.numerics import run as run_module
    from graphlens.quantize import QuantConfig
    from graphlens.quantize.calibrate import CalibrationData, collect_ranges

    spins: list[str] = []
    real = ort.InferenceSession

    def spy(data, options, providers):
        spins.append(options.get_session_config_entry("session.intra_op.allow_spinning"))
        return real(data, options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    proto = nm.conv_bn()
    data = CalibrationData({"x": np.random.default_rng(1).standard_normal((4, 1, 3, 8, 8)).astype(np.float32)}, "t")
    tensors = [proto.graph.node[0].output[0]]
    small = collect_ranges(proto, tensors, data, QuantConfig())
    assert not data.long_runs and spins == ["0"]
    monkeypatch.setattr(run_module, "SPIN_ELEMENTS", data.sample_elements)
    monkeypatch.setattr("graphlens.numerics.samples.SPIN_ELEMENTS", data.sample_elements)
    long = collect_ranges(proto, tensors, data, QuantConfig())
    assert data.long_runs and spins == ["0", "1"]
    assert [(r.low, r.high) for r in long.values()] == [(r.low, r.high) for r in small.values()]


def _spy_levels(monkeypatch, fail_optimized: bool = False) -> list[tuple[object, str]]:
    """Every session opened: its optimization level and whether its Q/DQ pairs stay as written."""
    seen: list[tuple[object, str]] = []
    real = ort.InferenceSession

    def spy(data, options, providers):
        try:
            as_written = options.get_session_config_entry("session.disable_quant_qdq")
        except RuntimeError:  # not set
            as_written = ""
        seen.append((options.graph_optimization_level, as_written))
        if fail_optimized and options.graph_optimization_level != ort.GraphOptimizationLevel.ORT_DISABLE_ALL:
            raise RuntimeError("[ONNXRuntimeError] : 1 : FAIL : an optimizer failed")
        return real(data, options, providers=providers)

    monkeypatch.setattr(ort, "InferenceSession", spy)
    return seen


def test_long_calibrations_run_optimized_kernels_and_keep_their_ranges(monkeypatch):
    """A calibration over many input elements runs onnxruntime's optimized float kernels (Q/DQ pairs as written);
    its ranges are the model's as written to float rounding, and a small one runs the model as written."""
    from graphlens.numerics import run as run_module
    from graphlens.quantize import QuantConfig
    from graphlens.quantize.calibrate import CalibrationData, collect_ranges

    seen = _spy_levels(monkeypatch)
    proto = nm.conv_bn()
    data = CalibrationData({"x": np.random.default_rng(2).standard_normal((6, 1, 3, 8, 8)).astype(np.float32)}, "t")
    tensors = [proto.graph.node[0].output[0], proto.graph.output[0].name]
    plain = collect_ranges(proto, tensors, data, QuantConfig())
    assert not data.optimizes and seen == [(ort.GraphOptimizationLevel.ORT_DISABLE_ALL, "")]
    monkeypatch.setattr(run_module, "OPTIMIZE_ELEMENTS", data.samples * data.sample_elements)
    monkeypatch.setattr("graphlens.numerics.samples.OPTIMIZE_ELEMENTS", data.samples * data.sample_elements)
    optimized = collect_ranges(proto, tensors, data, QuantConfig())
    assert data.optimizes and seen[1:] == [(ort.GraphOptimizationLevel.ORT_ENABLE_ALL, "1")]
    for name in tensors:
        np.testing.assert_allclose([optimized[name].low, optimized[name].high], [plain[name].low, plain[name].high],
                                   rtol=1e-5)


def test_a_model_the_optimizer_fails_on_runs_as_written(monkeypatch):
    from graphlens.numerics.run import ModelRunner

    seen = _spy_levels(monkeypatch, fail_optimized=True)
    proto = nm.conv_bn()
    runner = ModelRunner(proto, ["c"], optimize=True)
    assert runner.error is None
    assert [level for level, _ in seen] == [ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
                                            ort.GraphOptimizationLevel.ORT_DISABLE_ALL]
    expected = run_model(proto, {"x": X}, ["c"]).outputs
    np.testing.assert_array_equal(runner.run({"x": X}).outputs["y"], expected["y"])


def test_optimized_runs_keep_fake_quantization_as_written(monkeypatch, tmp_path):
    """Q/DQ pairs run as the model states them, never as onnxruntime's int8 kernels, whose rounding differs (a
    recognizer's quantized output: 20.3 dB as written, 16.5 dB on those kernels)."""
    from graphlens.numerics import run as run_module
    from graphlens.numerics.run import ModelRunner
    from graphlens.quantize import QuantConfig
    from graphlens.quantize.calibrate import CalibrationData
    from graphlens.quantize.quantize import quantize_model

    model = Model(nm.conv_bn())
    data = CalibrationData({"x": np.random.default_rng(3).standard_normal((4, 1, 3, 8, 8)).astype(np.float32)}, "t")
    quantize_model(model, QuantConfig(), data)
    real = run_module.session_options
    executed = tmp_path / "executed.onnx"

    def keeping(**kwargs):
        options = real(**kwargs)
        options.optimized_model_filepath = str(executed)
        return options

    monkeypatch.setattr(run_module, "session_options", keeping)
    written = ModelRunner(model.to_proto()).run({"x": X}).outputs
    optimized = ModelRunner(model.to_proto(), optimize=True).run({"x": X}).outputs
    ops = {n.op_type for n in onnx.load(executed).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops and not any(op.startswith("QLinear") for op in ops), ops
    np.testing.assert_allclose(optimized["y"], written["y"], rtol=1e-5, atol=1e-5)


def test_one_line_strips_onnxruntime_prefixes():
    raw = RuntimeError(
        "[ONNXRuntimeError] : 1 : FAIL : /onnxruntime_src/onnxruntime/core/graph/graph.cc:1587 void "
        "onnxruntime::Graph::Init() This is an invalid model.\n  Graph output (nope) does not exist."
    )
    assert one_line(raw) == "This is an invalid model. Graph output (nope) does not exist."
