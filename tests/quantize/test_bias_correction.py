"""Bias correction: a layer's mean output shift on the calibration samples moved into its bias."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

from graphlens.core.model import Model
from graphlens.quantize import CalibrationData, QuantConfig, quantize_model
from graphlens.rewrites.edit import EditHistory
from tests.quantize.quant_models import layer, two_convs

INT4_PER_TENSOR = {"weight_bits": 4, "per_channel": False, "quantize_outputs": False}
"""Coarse weights with one scale: their rounding leaves each output channel a clear mean shift."""


def _positive(shape: tuple[int, ...], samples: int = 16, seed: int = 1) -> CalibrationData:
    """Inputs of mean 0.5: a weight's rounding error times a nonzero mean input is a shift."""
    x = np.random.default_rng(seed).uniform(0, 1, (samples, *shape)).astype(np.float32)
    return CalibrationData({"x": x}, "uniform [0, 1)")


def _quantized(proto: onnx.ModelProto, data: CalibrationData, **config) -> tuple[onnx.ModelProto, object]:
    """Quantized with bias correction unless ``config`` says ``bias_correction=False``."""
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    result = quantize_model(model, QuantConfig(**{"bias_correction": True, **config}), data, EditHistory(model))
    return model.to_proto(), result


def _outputs(proto: onnx.ModelProto, data: CalibrationData) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return np.stack([session.run(None, {"x": x})[0] for x in data.arrays["x"]])


def _mean_shift(proto: onnx.ModelProto, quantized: onnx.ModelProto, data: CalibrationData, axis: int) -> float:
    """RMS over output channels of the mean (quantized − float) output."""
    d = _outputs(quantized, data) - _outputs(proto, data)
    per_channel = np.moveaxis(d, axis + 1, -1).reshape(-1, d.shape[axis + 1]).mean(axis=0)
    return float(np.sqrt(np.mean(per_channel ** 2)))


def test_bias_correction_lowers_the_mean_output_shift():
    proto = layer("Conv", relu=False)
    data = _positive((1, 4, 6, 6))
    plain, _ = _quantized(proto, data, bias_correction=False, **INT4_PER_TENSOR)
    corrected, result = _quantized(proto, data, **INT4_PER_TENSOR)
    before, after = _mean_shift(proto, plain, data, 1), _mean_shift(proto, corrected, data, 1)
    assert before > 1e-3  # the model was built to have one
    assert after < before / 5
    report = result.bias_correction
    assert report is not None and report.layers == ["layer"]
    assert report.after["layer"] < report.before["layer"] / 5
    assert result.to_dict()["bias_correction"]["layers"]["layer"]["before"] == report.before["layer"]


def test_corrected_bias_equals_a_numpy_computation():
    proto = layer("Gemm", trans_b=1, relu=False)
    data = _positive((3, 4))
    quantized, _ = _quantized(proto, data, **INT4_PER_TENSOR)
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    w, b, x = inits["w"], inits["b"], data.arrays["x"].reshape(-1, 4)
    scale = np.float32(x.max() / 255)  # uint8 minmax over [0, max]: zero point 0
    x_hat = np.clip(np.rint(x / scale), 0, 255) * scale
    w_scale = np.float32(np.abs(w).max() / 7)  # int4 narrow range, one scale
    w_hat = np.clip(np.rint(w / w_scale), -7, 7) * w_scale
    shift = (x_hat @ w_hat.T - x @ w.T).mean(axis=0)
    expected = b - shift
    got = _bias_value(quantized)
    step = float(scale * w_scale)
    assert np.allclose(got, expected, atol=step / 2 + 1e-6)
    assert not np.allclose(got, b, atol=step / 2 + 1e-6)  # it did move


def _bias_value(proto: onnx.ModelProto) -> np.ndarray:
    """The dequantized bias the Gemm reads."""
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    gemm = next(n for n in proto.graph.node if n.op_type == "Gemm")
    dq = next(n for n in proto.graph.node if n.output[0] == gemm.input[2])
    return (inits[dq.input[0]].astype(np.float64) * inits[dq.input[1]]).astype(np.float32)


def test_a_layer_without_a_bias_gets_one():
    proto = two_convs()
    data = _positive((1, 3, 8, 8), samples=8)
    quantized, result = _quantized(proto, data, **INT4_PER_TENSOR)
    convs = [n for n in quantized.graph.node if n.op_type == "Conv"]
    assert all(len(n.input) == 3 and n.input[2] for n in convs)
    assert set(result.bias_correction.layers) == {"a", "b"}
    onnx.checker.check_model(quantized)
    assert [o.name for o in quantized.graph.output] == ["y"]
    assert _mean_shift(proto, quantized, data, 1) <= _mean_shift(
        proto, _quantized(proto, data, bias_correction=False, **INT4_PER_TENSOR)[0], data, 1)


def test_bias_correction_is_off_unless_asked():
    """Off by default: on the OCR models it lowered no character error rate and raised the classifier's
    (docs/quantize.md); the report then has no bias correction line, and the model's bias is the float one."""
    proto = layer("Conv", relu=False)
    data = _positive((1, 4, 6, 6))
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    result = quantize_model(model, QuantConfig(**INT4_PER_TENSOR), data, EditHistory(model))
    assert QuantConfig().bias_correction is False
    assert result.bias_correction is None and not any("bias correction" in line for line in result.lines())
    assert result.to_dict()["bias_correction"] is None
    corrected, _ = _quantized(proto, data, **INT4_PER_TENSOR)
    assert _mean_shift(proto, corrected, data, 1) < _mean_shift(proto, model.to_proto(), data, 1) / 5


def test_the_command_turns_bias_correction_on(tmp_path):
    import json

    from graphlens.cli import main

    source = tmp_path / "layer.onnx"
    onnx.save(layer("Conv", relu=False), source)
    reports = {}
    for flags in ([], ["--bias-correction"]):
        report = tmp_path / f"report{len(flags)}.json"
        assert main(["quantize", str(source), "-o", str(tmp_path / "q.onnx"), "--weight-bits", "4", "--no-per-channel",
                     "--report", str(report), *flags]) == 0
        reports[len(flags)] = json.loads(report.read_text())
    assert reports[0]["bias_correction"] is None and reports[0]["config"]["bias_correction"] is False
    assert reports[1]["bias_correction"]["layers"] and reports[1]["config"]["bias_correction"] is True


def test_a_model_with_nothing_to_correct_says_so():
    """A transformer's layers are MatMuls without a bias of their own: asked for, bias correction says it found
    nothing to correct instead of saying nothing."""
    proto = layer("MatMul")
    model = Model(proto)
    result = quantize_model(model, QuantConfig(bias_correction=True), _positive((3, 4)))
    assert result.bias_correction is not None and not result.bias_correction.kept
    assert "bias correction: no layer to correct" in "\n".join(result.lines())
    assert result.to_dict()["bias_correction"]["applied"] is False


def test_outputs_whose_squares_overflow_float32_are_measured_without_a_warning():
    """resnet-50 with random weights: activations past 1e19, whose float32 sum of squares overflows."""
    import warnings

    proto = layer("Conv")
    data = _positive((1, 4, 6, 6))
    data.arrays["x"] *= np.float32(1e19)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        result = quantize_model(Model(proto), QuantConfig(bias_correction=True), data)
    assert result.bias_correction is not None and result.bias_correction.before
    assert all(np.isfinite(v) for v in result.bias_correction.before.values())
