"""fold-affine, fuse-decomposed-bn, bn-to-affine and fuse-activations: positive and negative cases."""

from __future__ import annotations

import onnx
import pytest

from graphlens.rewrites.rules.fusion import op_since
from tests.matching import exporter_forms as ef
from tests.matching import pattern_models as pm
from tests.rewrites.checks import assert_rewrite_is_sound, count, op_types
from tests.rewrites.test_fold_bn import fold


def with_opset(proto: onnx.ModelProto, version: int) -> onnx.ModelProto:
    out = onnx.ModelProto()
    out.CopyFrom(proto)
    for entry in out.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = version
    return out


@pytest.mark.parametrize(("build", "removed"),
                         [(pm.conv_mul_add, ["Mul", "Add"]), (pm.conv_mul, ["Mul"]), (pm.conv_add, ["Add"])])
def test_fold_affine_folds_per_channel_mul_and_add(build, removed):
    original, model, session, report = fold(build(), rules=["fold-affine"])
    assert report.applied["fold-affine"] == 1
    assert op_types(model) == ["Conv"]
    assert_rewrite_is_sound(original, model, session)


def test_fold_affine_leaves_a_mul_by_a_graph_input():
    _, model, _, report = fold(pm.conv_mul_by_input(), rules=["fold-affine"])
    assert report.applied["fold-affine"] == 0 and count(model, "Mul") == 1


def test_fold_affine_refuses_constants_on_the_wrong_axis():
    _, model, _, report = fold(pm.conv_full_add_bn(), rules=["fold-affine"])  # Add of shape [C, 8, 8]
    assert report.applied["fold-affine"] == 0


@pytest.mark.parametrize("build", [pm.decomposed_bn_div, pm.decomposed_bn_reciprocal])
def test_fuse_decomposed_bn_then_nothing_else(build):
    original, model, session, report = fold(build(), rules=["fuse-decomposed-bn"])
    assert report.applied["fuse-decomposed-bn"] == 1
    assert op_types(model) == ["BatchNormalization"]
    assert_rewrite_is_sound(original, model, session)


def test_fused_bn_then_folds_into_the_conv_before_it():
    proto = pm.decomposed_bn_div()
    # put a conv in front: x -> Conv -> (decomposed BN)
    import numpy as np
    from onnx import helper

    from tests import models

    graph = proto.graph
    first_input = graph.input[0]
    channels = first_input.type.tensor_type.shape.dim[1].dim_value
    w_front = np.random.default_rng(0).normal(size=(channels, channels, 1, 1)).astype(np.float32)
    graph.initializer.append(models.init("w_front", w_front))
    for node in graph.node:
        for k, name in enumerate(node.input):
            if name == first_input.name:
                node.input[k] = "conv_out"
    graph.node.insert(0, helper.make_node("Conv", [first_input.name, "w_front"], ["conv_out"], name="front"))
    original, model, session, report = fold(proto, rules=["fuse-decomposed-bn", "fold-bn"])
    assert report.applied == {"fuse-decomposed-bn": 1, "fold-bn": 1} and report.rounds == 2
    assert op_types(model) == ["Conv"]
    assert_rewrite_is_sound(original, model, session)


def test_fuse_decomposed_bn_refuses_non_per_channel_gamma():
    _, _, _, report = fold(pm.decomposed_bn_gamma_not_per_channel(), rules=["fuse-decomposed-bn"])
    assert report.applied["fuse-decomposed-bn"] == 0


def test_bn_to_affine_is_off_by_default_and_turns_a_lonely_bn_into_mul_add():
    proto = pm.conv_feeds_bn_and_relu()  # the BN cannot fold: its conv output is shared
    _, _, _, report = fold(proto, rules=["fold-bn"])
    assert report.applied["fold-bn"] == 0
    original, model, session, report = fold(proto, rules=["fold-bn", "bn-to-affine"])
    assert report.applied["bn-to-affine"] == 1 and count(model, "BatchNormalization") == 0
    assert count(model, "Mul") == 1 and count(model, "Add") == 1
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(
    ("build", "opset", "fused"),
    [
        (pm.hard_swish_hard_sigmoid, 14, "HardSwish"),
        (pm.hard_swish_clip, 14, "HardSwish"),
        (pm.gelu_erf, 20, "Gelu"),
        (pm.gelu_tanh, 20, "Gelu"),
        (pm.layer_norm_opset17, 17, "LayerNormalization"),
        (pm.layer_norm_opset18, 18, "LayerNormalization"),
        (pm.leaky_relu_where, 17, "LeakyRelu"),
        (pm.leaky_relu_max, 17, "LeakyRelu"),
    ],
)
def test_fuse_activations(build, opset, fused):
    original, model, session, report = fold(with_opset(build(), opset), rules=["fuse-activations"])
    assert report.applied["fuse-activations"] == 1
    assert op_types(model) == [fused]
    assert_rewrite_is_sound(original, model, session)


def test_fuse_activations_needs_the_op_in_the_models_opset():
    _, model, _, report = fold(with_opset(pm.gelu_erf(), 17), rules=["fuse-activations"])
    assert report.applied["fuse-activations"] == 0
    assert report.refused[0].reason == "the model's opset 17 has no Gelu (it arrived in opset 20)"
    _, _, _, report = fold(pm.silu_x_first(), rules=["fuse-activations"])
    assert report.refused[0].reason == "the model's opset 17 has no Swish (it arrived in opset 24)"
    assert op_since("LeakyRelu") == 1 and op_since("Gelu") == 20 and op_since("NoSuchOp") is None


def test_a_layer_norm_over_mismatched_axes_is_refused_under_the_one_rule_name():
    proto = pm.layer_norm_opset17()
    [var] = [n for n in proto.graph.node if n.name == "var"]
    [axes] = [a for a in var.attribute if a.name == "axes"]
    axes.ints[:] = [1]
    original, model, _, report = fold(proto, rules=["fuse-activations"])
    assert report.applied["fuse-activations"] == 0 and model.to_proto().SerializeToString() == original
    [refusal] = report.refused
    assert refusal.rule == "fuse-activations" and refusal.nodes["var"] == "var"
    assert refusal.reason == "ReduceMean 'mean' and ReduceMean 'var' reduce over different axes ([-1] and [1])"


# ------------------------------------------------------------------ exporters' own forms
FUSED_FORMS = [
    (ef.gelu_erf_torchscript, 20, ["Gelu"]),
    (ef.gelu_erf_dynamo, 20, ["Gelu"]),
    (ef.gelu_erf_halved_first, 20, ["Gelu"]),
    (ef.gelu_tanh_torchscript, 20, ["Gelu"]),
    (ef.gelu_tanh_dynamo, 20, ["Gelu"]),
    (ef.gelu_tanh_halved_first, 20, ["Gelu"]),
    (ef.silu_torch, 24, ["Swish"]),
    (ef.swish_paddle2onnx, 24, ["Swish"]),
    (ef.hardswish_torchscript_13, 14, ["HardSwish"]),
    (ef.hardswish_clip_div, 14, ["HardSwish"]),
    (ef.hardswish_keras, 14, ["HardSwish"]),
    (ef.layer_norm_torchscript, 17, ["LayerNormalization"]),
    (ef.layer_norm_torchscript_half, 17, ["LayerNormalization"]),
    (ef.layer_norm_hand_cast, 18, ["LayerNormalization"]),  # its Cast of float x to float is bypassed
    (ef.layer_norm_dynamo_tiny_eps, 18, ["LayerNormalization"]),
    (ef.layer_norm_paddle2onnx, 17, ["Constant", "Reshape", "Reshape", "LayerNormalization"]),  # gamma, beta reshaped
    (ef.layer_norm_tf_moments, 17, ["LayerNormalization"]),
    (ef.leaky_relu_where_torch, 13, ["LeakyRelu"]),
    (ef.leaky_relu_max_torch, 13, ["LeakyRelu"]),
]


@pytest.mark.parametrize(("build", "opset", "left"), FUSED_FORMS, ids=[f[0].__name__ for f in FUSED_FORMS])
def test_fuse_activations_on_each_exporters_form(build, opset, left):
    original, model, session, report = fold(with_opset(build().model, opset), rules=["fuse-activations"])
    assert report.applied["fuse-activations"] == 1
    assert op_types(model) == left
    assert_rewrite_is_sound(original, model, session)


def test_the_tanh_gelu_of_torchscript_fuses_to_the_tanh_approximation():
    _, model, _, _ = fold(with_opset(ef.gelu_tanh_torchscript().model, 20), rules=["fuse-activations"])
    [gelu] = model.graph.nodes
    assert gelu.attrs["approximate"] == "tanh"


def test_a_mixed_precision_layer_norm_fuses_in_gammas_type():
    # bfloat16 statistics, float gamma: x is cast up once and normalized in float (onnxruntime has no
    # bfloat16 ReduceMean on CPU, so the original cannot be run to compare).
    _, model, _, report = fold(with_opset(ef.layer_norm_torchscript_autocast().model, 17), rules=["fuse-activations"])
    assert report.applied["fuse-activations"] == 1
    cast_in, cast_up, norm = model.graph.nodes
    assert (cast_in.op_type, cast_up.op_type, norm.op_type) == ("Cast", "Cast", "LayerNormalization")
    assert cast_up.attrs["to"] == onnx.TensorProto.FLOAT and norm.inputs[0] == cast_up.outputs[0]
    onnx.checker.check_model(model.to_proto(), full_check=True)


def test_a_layer_norm_without_epsilon_fuses_with_epsilon_zero():
    _, model, _, _ = fold(with_opset(ef.layer_norm_dynamo_tiny_eps().model, 18), rules=["fuse-activations"])
    [norm] = model.graph.nodes
    assert norm.attrs["epsilon"] == 0.0


@pytest.mark.parametrize(
    "build", [ef.decomposed_bn_folded_div, ef.decomposed_bn_folded_rsqrt, ef.decomposed_bn_rsqrt_unfolded],
    ids=lambda f: f.__name__,
)
def test_fuse_decomposed_bn_on_torch_forms(build):
    original, model, session, report = fold(build().model, rules=["fuse-decomposed-bn"])
    assert report.applied["fuse-decomposed-bn"] == 1
    assert op_types(model) == ["BatchNormalization"]
    assert_rewrite_is_sound(original, model, session)


def test_a_folded_negative_scale_keeps_its_sign():
    proto = ef.decomposed_bn_folded_div().model
    std = next(i for i in proto.graph.initializer if i.name == "w1")  # the folded sqrt(var + eps)
    values = onnx.numpy_helper.to_array(std).copy()
    values[0, 1] *= -1  # (x - mean) / -s: not a batch norm's positive deviation
    std.CopyFrom(onnx.numpy_helper.from_array(values, "w1"))
    original, model, session, report = fold(proto, rules=["fuse-decomposed-bn"])
    assert report.applied["fuse-decomposed-bn"] == 1
    assert_rewrite_is_sound(original, model, session)


def test_fold_affine_on_the_torch_form():
    original, model, session, report = fold(ef.conv_mul_add_torch().model, rules=["fold-affine"])
    assert report.applied["fold-affine"] == 1 and op_types(model) == ["Conv"]
    assert_rewrite_is_sound(original, model, session)
