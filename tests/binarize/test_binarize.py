"""binarize_model on small models: the weights it stores, both forms, exclusions, the report, undo."""

from __future__ import annotations

import math

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.binarize import BinarizeConfig, binarize_model
from graphlens.core.bundled import demo_model_path
from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model
from graphlens.core.task import Cancelled, Task
from graphlens.quantize.calibrate import CalibrationData
from graphlens.rewrites.edit import EditHistory
from tests import models
from tests.binarize.test_bits import reference
from tests.quantize.quant_models import layer, two_convs


def run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


def stored_weight(proto: onnx.ModelProto, name: str = "w") -> np.ndarray:
    """The weight the layer reads: the emulated initializer, or Σ αᵢ·Bᵢ of the structured form's tensors."""
    inits = {t.name: numpy_helper.to_array(t) for t in proto.graph.initializer}
    if f"{name}_binarized" in inits:
        return inits[f"{name}_binarized"]
    return (inits[f"{name}_bits"].astype(np.float64) * inits[f"{name}_alpha"]).sum(axis=0)


def binarized(proto: onnx.ModelProto, config: BinarizeConfig, **kwargs):
    model = Model(proto)
    session = EditHistory(model)
    before = model.to_proto().SerializeToString()
    result = binarize_model(model, config, session, **kwargs)
    after = onnx.ModelProto()
    after.CopyFrom(model.to_proto())
    onnx.checker.check_model(after, full_check=True)
    assert [v.name for v in after.graph.input] == [v.name for v in proto.graph.input]
    assert [v.name for v in after.graph.output] == [v.name for v in proto.graph.output]
    session.undo()
    assert model.to_proto().SerializeToString() == before  # undo restores the model exactly
    return result, after


@pytest.mark.parametrize(("kind", "group", "trans_b", "axis"), [
    ("Conv", 1, 0, 0), ("Conv", 2, 0, 0), ("ConvTranspose", 1, 0, 1), ("ConvTranspose", 2, 0, 1),
    ("Gemm", 1, 0, 1), ("Gemm", 1, 1, 0), ("MatMul", 1, 0, 1)])
@pytest.mark.parametrize("form", ["emulated", "structured"])
def test_each_layer_reads_the_recurrence_along_its_kernel_axis(kind, group, trans_b, axis, form):
    proto = layer(kind, group=group, trans_b=trans_b)
    w = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "w"))
    result, after = binarized(proto, BinarizeConfig(bits=2, form=form, fold_rules=()))
    groups = group if kind == "ConvTranspose" else 1  # a grouped Conv's weight already has a row per output channel
    expected_w = reference(w, 2, axis, groups=groups)
    np.testing.assert_allclose(stored_weight(after), expected_w, rtol=1e-6, atol=1e-7)
    (row,) = result.layers
    assert (row.node, row.tensor, row.bits, row.axis, row.per_kernel) == ("layer", "w", 2, axis, True)
    assert row.groups == groups and row.distinct_values <= 4
    expected = 10 * math.log10(np.sum(w.astype(np.float64) ** 2) / np.sum((w - expected_w) ** 2))
    assert row.sqnr_db == pytest.approx(expected, abs=1e-4)
    assert "w" not in {t.name for t in after.graph.initializer}  # nothing reads the float weight any more


def conv_transpose(c_in: int, c_out: int, group: int, seed: int = 0) -> onnx.ModelProto:
    """x (1, c_in, 5, 5) -> ConvTranspose 'up' (3×3, stride 2, pads 1, group) with bias -> y (1, c_out, 9, 9)."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.5, (c_in, c_out // group, 3, 3)).astype(np.float32)
    w[: c_in // group] *= 5.0  # the first group's weights far larger, so sharing an α across groups shows
    inits = [models.init("w", w), models.init("b", rng.normal(0, 0.3, c_out).astype(np.float32))]
    node = helper.make_node("ConvTranspose", ["x", "w", "b"], ["y"], name="up", group=group, strides=[2, 2],
                            pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    return models.make_model([node], [models.tensor("x", TensorProto.FLOAT, [1, c_in, 5, 5])],
                             [models.tensor("y", TensorProto.FLOAT, [1, c_out, 9, 9])], inits, opset=17)


def numpy_conv_transpose(x: np.ndarray, w: np.ndarray, b: np.ndarray, group: int) -> np.ndarray:
    """ConvTranspose (stride 2, pads 1, 3×3) by its definition: input channel c of group g adds
    x[c]·w[c, j] at 2·i + k − 1 to output channel g·(M/g) + j."""
    c_in, per_group, _, _ = w.shape
    y = np.zeros((per_group * group, 2 * x.shape[1] + 1, 2 * x.shape[2] + 1))
    for c in range(c_in):
        g = c // (c_in // group)
        for j in range(per_group):
            for i in range(x.shape[1]):
                for k in range(x.shape[2]):
                    y[g * per_group + j, 2 * i:2 * i + 3, 2 * k:2 * k + 3] += x[c, i, k] * w[c, j]
    return y[:, 1:-1, 1:-1] + b[:, None, None]


@pytest.mark.parametrize(("c_in", "c_out", "group"), [(4, 6, 2), (6, 6, 6), (6, 4, 2)])
@pytest.mark.parametrize("form", ["emulated", "structured"])
def test_a_grouped_conv_transpose_gets_one_alpha_per_output_channel(c_in, c_out, group, form):
    proto = conv_transpose(c_in, c_out, group)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    w, b = inits["w"], inits["b"]
    result, after = binarized(proto, BinarizeConfig(bits=1, form=form, fold_rules=()))
    alphas = result.weights["w"].alphas[0]
    rows, per_group = c_in // group, c_out // group
    expected = [np.abs(w[(m // per_group) * rows:(m // per_group + 1) * rows, m % per_group]).mean()
                for m in range(c_out)]  # mean |w| over output channel m's kernel
    np.testing.assert_allclose(alphas, expected, rtol=1e-12)
    w_hat = np.zeros_like(w)
    for m in range(c_out):
        g, j = divmod(m, per_group)
        kernel = w[g * rows:(g + 1) * rows, j]
        w_hat[g * rows:(g + 1) * rows, j] = expected[m] * np.where(kernel > 0, 1.0, -1.0)
    np.testing.assert_allclose(stored_weight(after), w_hat, rtol=1e-6, atol=1e-7)
    assert result.layers[0].groups == group and result.to_dict()["layers"][0]["groups"] == group
    x = np.random.default_rng(4).normal(0, 1, (1, c_in, 5, 5)).astype(np.float32)
    want = numpy_conv_transpose(x[0].astype(np.float64), w_hat, b, group)
    np.testing.assert_allclose(run(after, x)[0], want, rtol=1e-4, atol=1e-4)
    if form == "structured":
        bits = numpy_helper.to_array(next(t for t in after.graph.initializer if t.name == "w_bits"))
        assert bits.dtype == np.int8 and bits.shape == (1, *w.shape)


def test_a_numpy_conv_transpose_is_onnxruntimes():
    """The numpy reference above computes what onnxruntime computes for the float model."""
    proto = conv_transpose(6, 4, 2, seed=1)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    x = np.random.default_rng(5).normal(0, 1, (1, 6, 5, 5)).astype(np.float32)
    want = numpy_conv_transpose(x[0].astype(np.float64), inits["w"], inits["b"], 2)
    np.testing.assert_allclose(run(proto, x)[0], want, rtol=1e-4, atol=1e-4)


def test_both_forms_compute_the_same_outputs():
    proto = two_convs()
    x = np.random.default_rng(0).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    for bits in (1, 3):
        outs = [run(binarized(proto, BinarizeConfig(bits=bits, form=form))[1], x)
                for form in ("emulated", "structured")]
        np.testing.assert_allclose(outs[0], outs[1], rtol=1e-5, atol=1e-6)
    _, structured = binarized(proto, BinarizeConfig(bits=3, form="structured"))
    inits = {t.name: numpy_helper.to_array(t) for t in structured.graph.initializer}
    assert inits["wa_bits"].dtype == np.int8 and inits["wa_bits"].shape == (3, 4, 3, 3, 3)
    assert set(np.unique(inits["wa_bits"])) <= {-1, 1} and inits["wa_alpha"].shape == (3, 4, 1, 1, 1)
    assert {"Cast", "ReduceSum"} <= {n.op_type for n in structured.graph.node}


def test_output_sqnr_matches_numpy():
    proto = layer("Gemm", trans_b=1, relu=False)
    inits = {t.name: numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    x = np.random.default_rng(1).normal(0, 1, (5, 3, 4)).astype(np.float32)
    data = CalibrationData({"x": x}, "test")
    for per_kernel in (True, False):
        result, _ = binarized(proto, BinarizeConfig(bits=1, per_kernel=per_kernel, fold_rules=()), calibration=data)
        w_hat = reference(inits["w"], 1, 0 if per_kernel else None)
        y = x.astype(np.float64) @ inits["w"].T + inits["b"]
        y_hat = x.astype(np.float64) @ w_hat.T + inits["b"]
        expected = 10 * math.log10(np.sum(y**2) / np.sum((y - y_hat) ** 2))
        assert result.output_sqnr_db == pytest.approx(expected, abs=1e-3)
        assert result.samples == 5


def test_output_sqnr_grows_with_bits_on_the_demo():
    values = []
    for bits in (1, 2, 4):
        model = load_model(demo_model_path())
        values.append(binarize_model(model, BinarizeConfig(bits=bits), samples=2).output_sqnr_db)
    assert values[0] < values[1] < values[2]


def test_exclusions_and_layer_bits():
    proto = two_convs()
    result, after = binarized(proto, BinarizeConfig(exclude_nodes=("b",)))
    assert [r.node for r in result.layers] == ["a"] and ("b", "excluded") in result.skipped
    assert "wb" in {t.name for t in after.graph.initializer}
    with pytest.raises(GraphLensError, match="nothing to binarize"):
        binarize_model(Model(proto), BinarizeConfig(exclude_op_types=("Conv",)))
    result, _ = binarized(proto, BinarizeConfig(bits=1, layer_bits={"b": 3}))
    assert {r.node: r.bits for r in result.layers} == {"a": 1, "b": 3}
    result, _ = binarized(proto, BinarizeConfig(only_nodes=("b",)))
    assert [r.node for r in result.layers] == ["b"]
    with pytest.raises(GraphLensError, match="did you mean 'a'"):
        binarize_model(Model(proto), BinarizeConfig(exclude_nodes=("aa",)))


def test_exclude_scopes():
    model = load_model(demo_model_path())
    nodes = [n.name for n in model.graph.nodes if n.op_type == "Conv"]
    scope = nodes[0].rsplit("/", 1)[0]
    result = binarize_model(model, BinarizeConfig(exclude_scopes=(scope,)), samples=1)
    assert all(not r.node.startswith(scope + "/") for r in result.layers) and result.layers


def test_a_random_bit_map_is_seeded_and_keeps_its_mean():
    proto = two_convs()
    config = BinarizeConfig(bits=4, mean_bits=2.0, seed=5)
    first, a = binarized(proto, config)
    _, b = binarized(proto, config)
    assert stored_weight(a, "wa").tolist() == stored_weight(b, "wa").tolist()
    assert 1.0 <= first.layers[0].mean_bits <= 4.0 and first.layers[0].bits == 4
    _, c = binarized(proto, config.with_changes(seed=6))
    assert stored_weight(a, "wa").tolist() != stored_weight(c, "wa").tolist()


def test_binarized_activations_are_signs_with_a_warning():
    proto = two_convs()
    result, after = binarized(proto, BinarizeConfig(binarize_activations=True, fold_rules=()))
    assert sum(n.op_type == "Where" for n in after.graph.node) == 2
    assert any("binarized activations" in w for w in result.warnings)
    x = np.random.default_rng(2).normal(0, 1, (1, 3, 8, 8)).astype(np.float32)
    x[0, 0, 0, :3] = 0.0
    sign = np.where(x > 0, 1.0, -1.0).astype(np.float32)  # sign(0) = -1, as for the weights
    exposed = onnx.ModelProto()
    exposed.CopyFrom(after)
    exposed.graph.output.append(onnx.helper.make_empty_tensor_value_info("x_sign"))
    session = ort.InferenceSession(exposed.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(session.run(["x_sign"], {"x": x})[0], sign)


def test_report_fields():
    result, _ = binarized(two_convs(), BinarizeConfig(bits=2))
    data = result.to_dict()
    assert {"output_sqnr_db", "layers", "form", "warnings", "fold"} <= set(data)
    assert data["layers"] and all({"node", "bits", "sqnr_db", "distinct_values"} <= set(r) for r in data["layers"])
    assert result.per_node("sqnr_db") == {r.node: r.sqnr_db for r in result.layers}
    assert result.per_node("bits") == {"a": 2.0, "b": 2.0}
    with pytest.raises(GraphLensError):
        result.per_node("latency")


@pytest.mark.parametrize("changes", [{"bits": 0}, {"bits": 9}, {"form": "binary"}, {"layer_bits": {"a": 12}},
                                     {"op_types": ("Relu",)}, {"mean_bits": 3.0}, {"exclude_nodes": "a"}])
def test_bad_config_is_one_line(changes):
    with pytest.raises(GraphLensError) as info:
        BinarizeConfig(**changes)
    assert "\n" not in str(info.value)


def test_a_cancel_leaves_the_model_as_it_was():
    model = Model(two_convs())
    session = EditHistory(model)
    before = model.to_proto().SerializeToString()
    task = Task()
    task.cancel()
    with pytest.raises(Cancelled):
        binarize_model(model, BinarizeConfig(), session, task=task)
    assert model.to_proto().SerializeToString() == before and not session.undo_stack


def test_structured_form_before_opset_13_takes_reduce_sum_axes_as_an_attribute():
    proto = layer("Conv", opset=11)
    w = numpy_helper.to_array(next(t for t in proto.graph.initializer if t.name == "w"))
    _, after = binarized(proto, BinarizeConfig(bits=3, form="structured", fold_rules=()))
    (reduce,) = [n for n in after.graph.node if n.op_type == "ReduceSum"]
    assert len(reduce.input) == 1 and [a.name for a in reduce.attribute] == ["axes", "keepdims"]
    x = np.random.default_rng(0).normal(size=(1, 4, 6, 6)).astype(np.float32)
    emulated = binarized(proto, BinarizeConfig(bits=3, fold_rules=()))[1]
    np.testing.assert_allclose(run(after, x), run(emulated, x), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(stored_weight(after), reference(w, 3, 0), rtol=1e-6, atol=1e-7)
