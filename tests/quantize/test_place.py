"""QDQ placement per layer kind: what a user gets from ``quantize_model`` is valid, runs, and undoes."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import numpy_helper

from graphlens.core.model import Model
from graphlens.numerics.metrics import sqnr_db
from graphlens.quantize import QuantConfig, quantize_model, random_calibration
from graphlens.quantize.qdq import QType, fake_quantize, weight_params
from graphlens.rewrites.edit import EditHistory
from tests.quantize.quant_models import conv_if_conv, layer, two_convs


def _run(proto: onnx.ModelProto, feed: dict, optimize: bool) -> list[np.ndarray]:
    options = ort.SessionOptions()
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"]).run(None, feed)


def _quantize(proto: onnx.ModelProto, **config):
    model = Model(proto)
    session = EditHistory(model)
    before = proto.SerializeToString()
    result = quantize_model(model, QuantConfig(**config), session=session)
    return model, session, result, before


def _by_op(proto: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    return [n for n in proto.graph.node if n.op_type == op]


@pytest.mark.parametrize("kind,group,trans_b,axis", [
    ("Conv", 1, 0, 0), ("Conv", 2, 0, 0),
    ("ConvTranspose", 1, 0, 1), ("ConvTranspose", 2, 0, 1),
    ("Gemm", 1, 0, 1), ("Gemm", 1, 1, 0), ("MatMul", 1, 0, 1),
])
def test_each_layer_kind_gets_its_pairs_and_runs(kind, group, trans_b, axis):
    model, session, result, before = _quantize(layer(kind, group=group, trans_b=trans_b))
    proto = model.to_proto()
    onnx.checker.check_model(proto, full_check=True)
    assert [v.name for v in proto.graph.input] == ["x"] and [v.name for v in proto.graph.output] == ["y"]
    weight_dq = next(n for n in _by_op(proto, "DequantizeLinear") if n.output[0].startswith("w_"))
    assert onnx.helper.get_attribute_value(next(a for a in weight_dq.attribute if a.name == "axis")) == axis
    stored = next(t for t in proto.graph.initializer if t.name == weight_dq.input[0])
    assert stored.data_type == onnx.TensorProto.INT8
    # x and the Relu's output are quantized activations, the weight and (but for MatMul) the bias
    assert result.counts == ({"weight": 1, "activation": 2} if kind == "MatMul" else
                             {"weight": 1, "activation": 2, "bias": 1})
    x = np.random.default_rng(5).standard_normal([d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim])
    feed = {"x": x.astype(np.float32)}
    fast, plain = _run(proto, feed, True)[0], _run(proto, feed, False)[0]
    reference = _run(onnx.ModelProto.FromString(before), feed, False)[0]
    assert sqnr_db(reference, plain) > 25 and sqnr_db(reference, fast) > 25
    session.undo()
    assert model.to_proto().SerializeToString() == before


def test_grouped_conv_transpose_bias_scales_repeat_the_weight_scales():
    model, _, _, before = _quantize(layer("ConvTranspose", group=2))
    proto = model.to_proto()
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    w = numpy_helper.to_array(next(t for t in onnx.ModelProto.FromString(before).graph.initializer if t.name == "w"))
    x_scale = float(inits["x_scale"])
    w_scale = inits["w_scale"]
    assert w_scale.shape == (3,)  # C_out / g scales along axis 1 of [C_in, C_out/g, k, k]
    assert np.allclose(w_scale, np.abs(w).max(axis=(0, 2, 3)) / 127)
    assert np.allclose(inits["b_scale"], x_scale * np.tile(w_scale, 2))
    assert inits["b_quantized"].dtype == np.int32


def test_output_error_matches_an_independent_numpy_fake_quant():
    model, _, result, before = _quantize(layer("Gemm", trans_b=1, relu=False), quantize_outputs=False,
                                         bias_correction=False)  # the plain QDQ math; corrections: test_bias_correction
    original = {t.name: numpy_helper.to_array(t) for t in onnx.ModelProto.FromString(before).graph.initializer}
    data = random_calibration(onnx.ModelProto.FromString(before), 8)  # the samples quantize_model drew
    x = data.arrays["x"]
    x_params = result.layers[0].scale, result.layers[0].zero_point
    x_scale, x_zero = np.float32(x_params[0][0]), x_params[1][0]
    assert np.isclose(x_scale, (max(x.max(), 0) - min(x.min(), 0)) / 255)
    x_hat = ((np.clip(np.rint(x / x_scale) + x_zero, 0, 255) - x_zero) * x_scale).astype(np.float32)
    w_params = weight_params(original["w"], QType(8, True, True), symmetric=True, axis=0)
    w_hat = fake_quantize(original["w"], w_params)
    b_scale = x_scale * w_params.scale.astype(np.float32)
    b_hat = np.rint(original["b"] / b_scale) * b_scale
    expected = x_hat @ w_hat.T + b_hat
    got = np.stack([_run(model.to_proto(), {"x": s}, False)[0] for s in x])
    assert np.allclose(got, expected, atol=1e-5)
    float_out = x @ original["w"].T + original["b"]
    assert result.output_sqnr_db == pytest.approx(sqnr_db(float_out, expected), abs=0.01)
    weight = next(row for row in result.layers if row.kind == "weight")
    assert weight.local_sqnr_db == pytest.approx(sqnr_db(original["w"], w_hat), abs=1e-6)


def test_an_activation_between_two_layers_is_quantized_once_after_the_relu():
    model, session, result, before = _quantize(two_convs())
    proto = model.to_proto()
    qs = _by_op(proto, "QuantizeLinear")
    assert sorted(q.input[0] for q in qs) == ["ar", "b", "x"]  # after a_relu, not between conv and relu
    row = next(r for r in result.layers if r.tensor == "ar")
    assert sorted(row.nodes) == ["a", "b"]
    assert result.per_node("sqnr_db")["a"] <= row.sqnr_db


def test_exclusions_by_name_op_type_and_scope_leave_layers_float():
    for config in ({"exclude_nodes": ("b",)}, {"exclude_scopes": ("b",)}, {"op_types": ("Conv",),
                                                                            "exclude_op_types": ()}):
        model, _, result, _ = _quantize(two_convs(), **config)
        if "op_types" in config:
            assert set(result.quantized_nodes) == {"a", "b"}
            continue
        assert "b" not in [r.node for r in result.layers if r.kind == "weight"]
        assert ("b", "excluded") in result.skipped
        wb = next(t for t in model.to_proto().graph.initializer if t.name == "wb")
        assert wb.data_type == onnx.TensorProto.FLOAT


def test_old_opset_is_raised_for_per_channel_and_undo_puts_it_back():
    model, session, result, before = _quantize(two_convs(opset=11))
    assert result.opset is not None and (result.opset.before, result.opset.after) == (11, 13)
    assert result.opset.converted  # Softmax changed meaning at 13
    proto = model.to_proto()
    onnx.checker.check_model(proto, full_check=True)
    feed = {"x": np.random.default_rng(0).standard_normal([1, 3, 8, 8]).astype(np.float32)}
    reference = _run(onnx.ModelProto.FromString(before), feed, False)[0]
    assert sqnr_db(reference, _run(proto, feed, True)[0]) > 25
    session.undo()
    assert model.opset("") == 11 and model.to_proto().SerializeToString() == before
    session.redo()
    assert model.opset("") == 13


def test_int4_weights_raise_the_opset_to_21_and_run():
    model, _, result, before = _quantize(layer("Conv"), weight_bits=4)
    proto = model.to_proto()
    assert model.opset("") == 21
    onnx.checker.check_model(proto, full_check=True)
    stored = {t.name for t in proto.graph.initializer if t.data_type == onnx.TensorProto.INT4}
    assert stored == {"w_quantized", "w_zero_point"}
    weight = next(r for r in result.layers if r.kind == "weight")
    assert weight.dtype == "int4 narrow" and 10 < weight.local_sqnr_db < 30
    feed = {"x": np.ones([1, 4, 6, 6], np.float32)}
    assert _run(proto, feed, True)[0].shape == (1, 6, 6, 6)


def test_a_layer_whose_output_only_a_subgraph_reads_is_kept_and_the_if_keeps_its_bodies():
    proto = conv_if_conv()
    x = {"x": np.random.default_rng(3).normal(size=(1, 3, 8, 8)).astype(np.float32)}
    model, session, result, before = _quantize(proto)
    out = model.to_proto()
    onnx.checker.check_model(out, full_check=True)
    assert [n.name for n in _by_op(out, "Conv")] == ["conv1", "conv2"]  # the If reads conv1's output from inside
    assert [n.name for n in model.graph.subgraphs()] and "y" in model.graph.outer_reads()
    assert sqnr_db(_run(proto, x, False)[0], _run(out, x, False)[0]) > 25
    session.undo()
    assert model.to_proto().SerializeToString() == before
