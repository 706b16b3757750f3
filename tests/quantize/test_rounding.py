"""GPTQ weight rounding: the patches it sums ``H`` over are the layer's own, it lowers the layer output error
nearest rounding leaves, and a model quantized with it is valid, better and undoes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.core.task import Cancelled, Task
from graphlens.numerics.metrics import sqnr_db
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize.calibrate import CalibrationData
from graphlens.quantize.layer_inputs import input_rows, layout_of, patches, weight_rows
from graphlens.quantize.place import find_sites
from graphlens.quantize.rounding import _error, gptq
from graphlens.rewrites.edit import EditHistory
from tests import models


def _smooth(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Images whose neighbouring pixels move together (cumulative sums along both axes), as photographs' do."""
    x = rng.normal(size=shape).cumsum(-1).cumsum(-2)
    return (x / np.abs(x).max(axis=(-1, -2), keepdims=True)).astype(np.float32)


def _conv_model(w: np.ndarray, x_shape: list[int], **attrs) -> onnx.ModelProto:
    node = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", **attrs)
    return models.make_model([node], [models.tensor("x", TensorProto.FLOAT, x_shape)],
                             [models.tensor("y", TensorProto.FLOAT, None)], [models.init("w", w)])


def _run(proto: onnx.ModelProto, feed: dict[str, np.ndarray]) -> list[np.ndarray]:
    return ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("groups,kernel,attrs", [
    (1, (3, 3), {"pads": [1, 1, 1, 1]}),
    (2, (3, 3), {"strides": [2, 2], "pads": [0, 1, 1, 0]}),
    (4, (3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),  # depthwise
    (1, (2, 3), {"auto_pad": "SAME_UPPER", "strides": [2, 1]}),
    (1, (2, 2), {"auto_pad": "SAME_LOWER"}),
    (1, (3, 3), {"auto_pad": "VALID"}),
    (1, (3,), {"pads": [1, 2], "strides": [2]}),  # 1-D
])
def test_conv_patches_times_the_rows_are_the_convolution(groups, kernel, attrs):
    rng = np.random.default_rng(0)
    c_in, c_out = 4, 8
    x_shape = [2, c_in, *([7, 9][:len(kernel)] if len(kernel) == 2 else [11])]
    w = rng.normal(size=(c_out, c_in // groups, *kernel)).astype(np.float32)
    proto = _conv_model(w, x_shape, group=groups, kernel_shape=list(kernel), **attrs)
    x = rng.normal(size=x_shape).astype(np.float32)
    (y,) = _run(proto, {"x": x})
    model = Model(proto)
    site = find_sites(model.graph, QuantConfig()).sites[0]
    layout = layout_of(model.graph, site, w)
    assert layout is not None and layout.groups == groups
    columns = patches(x, layout, 10**6, np.random.default_rng(0))  # every position
    got = np.matmul(weight_rows(w, layout), columns)  # (groups, rows, N·P)
    n, positions = y.shape[0], int(np.prod(y.shape[2:]))
    want = y.reshape(n, groups, c_out // groups, positions).transpose(1, 2, 0, 3).reshape(got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op,trans_b", [("MatMul", 0), ("Gemm", 0), ("Gemm", 1)])
def test_matmul_rows_are_the_product(op, trans_b):
    rng = np.random.default_rng(1)
    w = rng.normal(size=(6, 5) if trans_b else (5, 6)).astype(np.float32)
    node = helper.make_node(op, ["x", "w"], ["y"], name="layer", **({"transB": trans_b} if op == "Gemm" else {}))
    proto = models.make_model([node], [models.tensor("x", TensorProto.FLOAT, [3, 5])],
                              [models.tensor("y", TensorProto.FLOAT, [3, 6])], [models.init("w", w)])
    x = rng.normal(size=(3, 5)).astype(np.float32)
    (y,) = _run(proto, {"x": x})
    model = Model(proto)
    site = find_sites(model.graph, QuantConfig()).sites[0]
    layout = layout_of(model.graph, site, w)
    assert layout is not None
    columns = input_rows(x, layout, 100, np.random.default_rng(0))
    np.testing.assert_allclose(np.matmul(weight_rows(w, layout), columns)[0], y.T, rtol=1e-5, atol=1e-5)


def _nearest(rows: np.ndarray, scale: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(rows / scale[:, :, None]), -7, 7)


def test_uncorrelated_inputs_round_to_nearest():
    """With ``H`` diagonal no column's error can be moved onto another: GPTQ is nearest rounding."""
    rng = np.random.default_rng(2)
    rows = rng.normal(size=(2, 5, 9))
    scale = np.abs(rows).max(axis=2) / 7
    h = np.stack([np.diag(rng.uniform(0.5, 2.0, 9)) for _ in range(2)])
    levels = gptq(rows, h, scale, np.zeros_like(scale), -7, 7)
    np.testing.assert_array_equal(levels, _nearest(rows, scale))


def test_correlated_inputs_lower_the_layer_output_error():
    """On smooth inputs GPTQ's output error ``‖(Ŵ − W) X‖²`` (computed here from ``X`` itself) is far below
    nearest rounding's, every level in range and the scales untouched."""
    rng = np.random.default_rng(3)
    x = _smooth(rng, (64, 3, 3)).reshape(64, 9).T  # 9 taps of 3×3 patches, 64 patches
    rows = rng.normal(size=(1, 6, 9))
    scale = np.abs(rows).max(axis=2) / 7
    zero = np.zeros_like(scale)
    h = (x @ x.T)[None]
    levels = gptq(rows, h, scale, zero, -7, 7)
    assert levels.min() >= -7 and levels.max() <= 7
    assert np.array_equal(levels, np.rint(levels))

    def output_error(q: np.ndarray) -> float:
        return float((((q * scale[:, :, None] - rows)[0] @ x) ** 2).sum())

    assert output_error(levels) == pytest.approx(_error(rows, levels, scale, zero, h), rel=1e-6)
    assert output_error(levels) < 0.5 * output_error(_nearest(rows, scale))


def _smooth_convs() -> onnx.ModelProto:
    """x → 3×3 Conv → Relu → depthwise 3×3 whose taps nearly cancel (a folded BN's kind) → y."""
    rng = np.random.default_rng(4)
    wa = rng.normal(0, 0.5, (8, 3, 3, 3)).astype(np.float32)
    edge = np.array([[1.0, -0.9, 0.0], [0.8, -1.0, 0.1], [0.0, 0.05, 0.0]], np.float32)
    wb = (edge[None, None] * rng.uniform(0.5, 2.0, (8, 1, 1, 1))).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="a_relu"),
             helper.make_node("Conv", ["ar", "wb"], ["y"], name="b", group=8, pads=[1, 1, 1, 1])]
    return models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [1, 3, 16, 16])],
                             [models.tensor("y", TensorProto.FLOAT, [1, 8, 16, 16])],
                             [models.init("wa", wa), models.init("wb", wb)])


def test_quantize_with_gptq_is_valid_better_and_undoes():
    proto = _smooth_convs()
    data = CalibrationData({"x": _smooth(np.random.default_rng(5), (8, 1, 3, 16, 16))}, "smooth images")
    config = QuantConfig(weight_bits=4, equalize="off")
    nearest_model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    nearest = quantize_model(nearest_model, config, data)
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    session = EditHistory(model)
    before = model.to_proto().SerializeToString()
    result = quantize_model(model, config.with_changes(weight_rounding="gptq"), data, session)

    quantized = model.to_proto()
    onnx.checker.check_model(quantized, full_check=True)
    assert [i.name for i in quantized.graph.input] == ["x"] and [o.name for o in quantized.graph.output] == ["y"]
    assert result.rounding is not None and sorted(result.rounding.integers) == ["wa", "wb"]
    assert result.rounding.ratio < 0.8
    assert any(line.startswith("weights rounded by GPTQ: 2 of 2") for line in result.lines())
    assert result.to_dict()["rounding"]["weights"] == ["wa", "wb"]
    # only the integers change: the scales are nearest rounding's
    scales = {layer.tensor: layer.scale for layer in nearest.layers if layer.kind == "weight"}
    assert {layer.tensor: layer.scale for layer in result.layers if layer.kind == "weight"} == scales
    # the output error, measured here on fresh smooth images against the float model
    x = _smooth(np.random.default_rng(6), (1, 3, 16, 16))
    (want,) = _run(proto, {"x": x})
    assert sqnr_db(want, _run(quantized, {"x": x})[0]) > sqnr_db(want, _run(nearest_model.to_proto(), {"x": x})[0]) + 1
    session.undo()
    assert model.to_proto().SerializeToString() == before


def test_unknown_rounding_is_one_line():
    from graphlens.core.errors import GraphLensError

    with pytest.raises(GraphLensError, match="unknown weight rounding 'best'; roundings: nearest, gptq"):
        QuantConfig(weight_rounding="best")
    with pytest.raises(GraphLensError, match="weight-only blocks round to nearest"):
        QuantConfig(weight_only=True, weight_bits=4, weight_rounding="gptq")


def test_the_command_rounds_by_gptq(tmp_path, capsys):
    import json

    from graphlens.cli import main

    source, calibration = tmp_path / "convs.onnx", tmp_path / "smooth.npz"
    onnx.save(_smooth_convs(), source)
    np.savez(calibration, x=_smooth(np.random.default_rng(5), (8, 1, 3, 16, 16)))
    reports = {}
    for rounding in ("nearest", "gptq"):
        report = tmp_path / f"{rounding}.json"
        assert main(["quantize", str(source), "-o", str(tmp_path / f"{rounding}.onnx"), "--calibration",
                     str(calibration), "--weight-bits", "4", "--weight-rounding", rounding,
                     "--report", str(report)]) == 0
        reports[rounding] = json.loads(report.read_text())
    out = capsys.readouterr().out
    assert out.count("weights rounded by GPTQ: 2 of 2, on the first 8 calibration samples") == 1
    assert reports["nearest"]["rounding"] is None and reports["gptq"]["config"]["weight_rounding"] == "gptq"
    assert reports["gptq"]["output_sqnr_db"] > reports["nearest"]["output_sqnr_db"]
    assert main(["quantize", str(source), "-o", str(tmp_path / "x.onnx"), "--weight-rounding", "best"]) == 2


def test_weights_past_the_memory_budget_take_a_pass_each(monkeypatch):
    """``H`` are built a chunk of weights at a time (a decoder's would not fit at once); the integers are the same."""
    from graphlens.quantize import rounding

    data = CalibrationData({"x": _smooth(np.random.default_rng(5), (8, 1, 3, 16, 16))}, "smooth images")
    passes = []
    real = rounding.hessians

    def counted(model, targets, *args, **kwargs):
        passes.append(sorted(targets))
        return real(model, targets, *args, **kwargs)

    monkeypatch.setattr(rounding, "hessians", counted)
    results = {}
    for budget in (1 << 30, 1):
        monkeypatch.setattr(rounding, "HESSIAN_BYTES", budget)
        model = Model(_smooth_convs())
        results[budget] = quantize_model(model, QuantConfig(weight_bits=4, weight_rounding="gptq"), data).rounding
    assert passes == [["wa", "wb"], ["wa"], ["wb"]]
    for name in ("wa", "wb"):
        np.testing.assert_array_equal(results[1].integers[name], results[1 << 30].integers[name])


def test_a_cancel_while_rounding_leaves_the_model(monkeypatch):
    from graphlens.quantize import rounding

    data = CalibrationData({"x": _smooth(np.random.default_rng(5), (8, 1, 3, 16, 16))}, "smooth images")
    stop = []
    real = rounding.hessians

    def then_cancel(*args, **kwargs):
        real(*args, **kwargs)
        stop.append(True)

    monkeypatch.setattr(rounding, "hessians", then_cancel)
    model = Model(_smooth_convs())
    session = EditHistory(model)
    before = model.to_proto().SerializeToString()
    with pytest.raises(Cancelled):
        quantize_model(model, QuantConfig(weight_rounding="gptq"), data, session,
                       task=Task(cancelled=lambda: bool(stop)))
    assert model.to_proto().SerializeToString() == before


def test_progress_covers_the_rounding_then_the_rest():
    data = CalibrationData({"x": _smooth(np.random.default_rng(5), (8, 1, 3, 16, 16))}, "smooth images")
    seen: list[float] = []
    quantize_model(Model(_smooth_convs()), QuantConfig(weight_rounding="gptq"), data, task=Task(progress=seen.append))
    assert seen == sorted(seen) and seen[-1] == 1.0
    assert [f for f in seen if f <= 0.2] == [0.1, 0.2]  # one report per weight rounded, in the first fifth


@pytest.mark.parametrize("groups,d", [(1, 200), (3, 9), (2, 129)])
def test_the_factor_of_the_inverse_is_choleskys(groups, d):
    """``U`` from one factorization and a triangular inverse by halves equals the upper Cholesky factor of ``H⁻¹``."""
    from graphlens.quantize.rounding import _upper_inverse_factor

    x = np.random.default_rng(7).normal(size=(groups, d, 3 * d))
    h = x @ x.transpose(0, 2, 1) + np.eye(d)
    u = _upper_inverse_factor(h)
    assert np.array_equal(u, np.triu(u))
    np.testing.assert_allclose(u, np.swapaxes(np.linalg.cholesky(np.linalg.inv(h)), 1, 2), rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("groups,kernel,attrs", [
    (1, (3, 3), {"strides": [2, 2], "pads": [1, 1, 1, 1], "output_padding": [1, 1]}),
    (2, (2, 2), {"strides": [2, 2]}),  # the DB head's upsampling kind, grouped
    (4, (3, 3), {"dilations": [2, 1], "pads": [0, 1, 2, 0]}),
    (1, (4,), {"strides": [3], "pads": [1, 0]}),  # 1-D
])
def test_transposed_patches_times_the_rows_are_the_transposed_convolution(groups, kernel, attrs):
    from graphlens.quantize.layer_inputs import transposed_patches, unrows

    rng = np.random.default_rng(8)
    c_in, c_out = 4, 8
    x_shape = [2, c_in, *([5, 6] if len(kernel) == 2 else [7])]
    w = rng.normal(size=(c_in, c_out // groups, *kernel)).astype(np.float32)
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], name="up", group=groups, kernel_shape=list(kernel),
                            **attrs)
    proto = models.make_model([node], [models.tensor("x", TensorProto.FLOAT, x_shape)],
                              [models.tensor("y", TensorProto.FLOAT, None)], [models.init("w", w)])
    x = rng.normal(size=x_shape).astype(np.float32)
    (y,) = _run(proto, {"x": x})
    model = Model(proto)
    site = find_sites(model.graph, QuantConfig()).sites[0]
    layout = layout_of(model.graph, site, w)
    assert layout is not None and layout.op_type == "ConvTranspose"
    rows = weight_rows(w, layout)
    np.testing.assert_array_equal(unrows(rows, w.shape, layout), w)
    got = np.matmul(rows, transposed_patches(x, layout, 10**6, np.random.default_rng(0)))
    n, positions = y.shape[0], int(np.prod(y.shape[2:]))
    want = y.reshape(n, groups, c_out // groups, positions).transpose(1, 2, 0, 3).reshape(got.shape)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_grouped_conv_transpose_is_rounded_with_its_per_group_scales():
    from tests.quantize.quant_models import layer

    proto = layer("ConvTranspose", group=2, relu=False)
    data = CalibrationData({"x": _smooth(np.random.default_rng(9), (8, 1, 4, 6, 6))}, "smooth images")
    config = QuantConfig(weight_bits=4, equalize="off")
    nearest = quantize_model(Model(onnx.ModelProto.FromString(proto.SerializeToString())), config, data)
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    result = quantize_model(model, config.with_changes(weight_rounding="gptq"), data)
    assert result.rounding is not None and list(result.rounding.integers) == ["w"]
    stored = result.rounding.integers["w"]
    assert stored.shape == (4, 3, 3, 3) and stored.min() >= -7 and stored.max() <= 7
    assert result.rounding.ratio < 1.0
    weights = {layer.tensor: layer.scale for layer in nearest.layers if layer.kind == "weight"}
    assert {layer.tensor: layer.scale for layer in result.layers if layer.kind == "weight"} == weights
    assert len(weights["w"]) == 3  # C_out / group scales, along axis 1
    quantized = model.to_proto()
    onnx.checker.check_model(quantized, full_check=True)
    x = _smooth(np.random.default_rng(10), (1, 4, 6, 6))
    (want,) = _run(proto, {"x": x})
    assert sqnr_db(want, _run(quantized, {"x": x})[0]) > 10


def test_huge_activations_round_as_their_scaled_down_copy():
    """Inputs of 2^60 (old exporters' constant-weight test models reach 1e18) square past float32's range; ``H`` is
    summed without overflowing, and since GPTQ does not change when ``H`` is scaled, the integers are those of the
    same inputs 2^60 times smaller (every value here scales exactly by a power of two)."""
    x = _smooth(np.random.default_rng(5), (8, 1, 3, 16, 16))
    results = {}
    for factor in (1.0, 2.0 ** 60):
        model = Model(_smooth_convs())
        data = CalibrationData({"x": (x * factor).astype(np.float32)}, "smooth images")
        results[factor] = quantize_model(model, QuantConfig(weight_bits=4, weight_rounding="gptq"), data).rounding
    huge = results[2.0 ** 60]
    assert sorted(huge.integers) == ["wa", "wb"] and huge.not_finite == []
    for name in ("wa", "wb"):
        np.testing.assert_array_equal(huge.integers[name], results[1.0].integers[name])
    assert huge.ratio == pytest.approx(results[1.0].ratio, rel=1e-5)


def test_a_weight_whose_inputs_are_not_finite_keeps_nearest_rounding_and_says_so():
    from graphlens.quantize.rounding import Rounding, _Hessian, _round, _targets

    model = Model(_smooth_convs())
    config = QuantConfig(weight_bits=4, weight_rounding="gptq")
    targets = _targets(model.graph, find_sites(model.graph, config))
    result = Rounding({}, 2, 1)
    for name, target in targets.items():
        d = target.layout.d
        h = np.eye(d)[None].repeat(target.layout.groups, axis=0)
        if name == "wb":
            h[0, 0, 0] = np.inf
        _round(model.graph, name, _Hessian(target.layout, h, target.sites), config, result)
    assert sorted(result.integers) == ["wa"] and result.not_finite == ["wb"]
    assert result.line().endswith("; 1 rounded to nearest, their inputs or values not finite in float32 (wb)")
    assert result.to_dict()["not_finite"] == ["wb"]
