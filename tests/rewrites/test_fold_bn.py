"""fold-bn on every layer kind and configuration, and where it must not fold."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from tests import models
from tests.rewrites.checks import assert_rewrite_is_sound, count
from tests.rewrites.linear_models import Config, linear_bn


def fold(proto: onnx.ModelProto, rules=("fold-bn",)):
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    report = fold_model(model, resolve_rules(list(rules)), session)
    return original, model, session, report


@pytest.mark.parametrize(
    "cfg",
    [
        Config(),
        Config(bias=False),
        Config(rank=1),
        Config(rank=3, c_in=2, c_out=4, kernel=2, pad=0),
        Config(group=2),
        Config(c_in=6, c_out=6, group=6),  # depthwise
        Config(stride=2, dilation=2, pad=2),
        Config(bias_add=True, bias=False),
        Config(kind="ConvTranspose"),
        Config(kind="ConvTranspose", group=2, c_in=4, c_out=6, stride=2),
        Config(kind="ConvTranspose", c_in=6, c_out=6, group=3, bias=False, bias_add=True),
        Config(kind="Gemm"),
        Config(kind="Gemm", trans_b=1, alpha=0.5, beta=2.0),
        Config(kind="Gemm", bias=False),
        Config(kind="Gemm", c_shape="full", beta=0.3),
        Config(kind="Gemm", c_shape="scalar", trans_b=1),
        Config(kind="MatMul"),
        Config(kind="MatMul", bias_add=True),
        Config(kind="Gemm", dtype=TensorProto.DOUBLE, trans_b=1),
    ],
    ids=lambda c: (f"{c.kind}-r{c.rank}-g{c.group}-s{c.stride}-bias{int(c.bias)}-add{int(c.bias_add)}-tB{c.trans_b}"
                   f"-{TensorProto.DataType.Name(c.dtype)}"),
)
def test_folds_and_keeps_outputs(cfg):
    original, model, session, report = fold(linear_bn(cfg))
    assert report.applied["fold-bn"] == 1
    assert count(model, "BatchNormalization") == 0 and count(model, "Add") == 0
    layer = model.graph.node("layer")
    assert layer.op_type == ("Gemm" if cfg.kind == "MatMul" else cfg.kind)
    assert layer.outputs == ["y"]  # the folded layer writes the BN's (graph output) tensor
    assert_rewrite_is_sound(original, model, session)


def test_float16_model_folds_in_float64_and_stays_float16():
    cfg = Config(kind="Gemm", dtype=TensorProto.FLOAT16, trans_b=1)
    original, model, session, _ = fold(linear_bn(cfg))
    weight = model.graph.constant_value(model.graph.node("layer").inputs[1])
    assert weight.dtype == np.float16
    assert_rewrite_is_sound(original, model, session)


def test_float64_conv_folds_even_though_onnxruntime_cannot_run_it():
    from graphlens.numerics import diff_models, make_inputs

    original, model, session, report = fold(linear_bn(Config(dtype=TensorProto.DOUBLE)))
    assert report.applied["fold-bn"] == 1
    onnx.checker.check_model(model.to_proto(), full_check=True)
    assert model.graph.constant_value(model.graph.node("layer").inputs[1]).dtype == np.float64
    diff = diff_models(onnx.ModelProto.FromString(original), model, make_inputs(model))
    assert not diff.available and "Conv" in diff.reason  # the diff says why; the fold stands


def test_shared_weight_is_cloned_not_edited_in_place():
    params = {**models.bn_params(4, "a"), **models.bn_params(4, "b")}
    w = np.random.default_rng(0).normal(size=(4, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["ca"], name="conv_a", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["ca", "a_scale", "a_bias", "a_mean", "a_var"], ["ya"], name="bn_a"),
        helper.make_node("Conv", ["x", "w"], ["cb"], name="conv_b", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["cb", "b_scale", "b_bias", "b_mean", "b_var"], ["yb"], name="bn_b"),
    ]
    inits = [models.init("w", w)] + [models.init(k, v) for k, v in params.items()]
    proto = models.make_model(nodes, [models.tensor("x", shape=[1, 3, 6, 6])],
                              [models.tensor("ya", shape=[1, 4, 6, 6]), models.tensor("yb", shape=[1, 4, 6, 6])], inits)
    original, model, session, report = fold(proto)
    assert report.applied["fold-bn"] == 2
    wa, wb = (model.graph.node(n).inputs[1] for n in ("conv_a", "conv_b"))
    assert wa != wb and "w" not in model.graph.initializers  # each conv has its own folded copy
    assert_rewrite_is_sound(original, model, session)


def test_bn_params_behind_constant_nodes_fold():
    original, model, session, report = fold(models.conv_bn_params_behind_constants())
    assert report.applied["fold-bn"] == 1
    assert count(model, "Constant") == count(model, "ConstantOfShape") == 0  # left dead, then removed
    assert_rewrite_is_sound(original, model, session)


def test_fold_inside_an_if_branch():
    original, model, session, report = fold(models.if_with_conv_bn())
    assert report.applied["fold-bn"] == 1
    then_graph = model.graph.node("branch").subgraphs["then_branch"][0]
    assert [n.op_type for n in then_graph.nodes] == ["Conv"]
    for cond in (True, False):
        assert_rewrite_is_sound(original, model, session, inputs={
            "x": np.random.default_rng(1).normal(size=(1, 3, 8, 8)).astype(np.float32), "cond": np.array(cond)})
        fold_model(model, resolve_rules(["fold-bn"]), session)


@pytest.mark.parametrize(
    ("proto", "reason"),
    [
        (linear_bn(Config()), None),
        (models.conv_bn_mean_from_input(),
         "input 3 (mean) of BatchNormalization 'bn' comes from graph input 'bn_mean' and is not constant"),
    ],
)
def test_bn_left_in_place_is_reported_with_the_reason(proto, reason):
    _, model, _, report = fold(proto)
    if reason is None:
        assert report.bn_left == []
    else:
        assert report.bn_left == [{"node": "bn", "graph": "main", "reason": reason}]
        assert count(model, "BatchNormalization") == 1


def test_training_mode_and_second_consumer_do_not_fold():
    training = linear_bn(Config())
    next(n for n in training.graph.node
         if n.op_type == "BatchNormalization").attribute.append(helper.make_attribute("training_mode", 1))
    _, _, _, report = fold(training)
    assert report.applied["fold-bn"] == 0
    assert "has training_mode=1" in report.bn_left[0]["reason"]

    shared = linear_bn(Config())
    shared.graph.node.append(helper.make_node("Relu", ["lin"], ["side"], name="side"))
    shared.graph.output.append(models.tensor("side", shape=[None] * 4))
    original, model, session, report = fold(shared)
    assert report.applied["fold-bn"] == 0
    assert report.bn_left[0]["reason"] == ("the output of Conv 'layer' has 2 consumers ('bn', 'side'), so folding "
                                           "would change 'side'")
    assert model.to_proto().SerializeToString() == original  # nothing changed, not even cleanup


def test_matmul_with_3d_input_is_refused_with_a_reason():
    proto = linear_bn(Config(kind="MatMul"))
    proto.graph.input[0].CopyFrom(models.tensor("x", shape=[2, 3, 4]))
    proto.graph.output[0].CopyFrom(models.tensor("y", shape=None))
    _, _, _, report = fold(proto)
    assert report.applied["fold-bn"] == 0
    assert report.bn_left[0]["reason"].startswith("the input of MatMul 'layer' has rank 3; only a 2-D MatMul")
    [refused] = report.to_json()["refused"]  # the report file's shape
    assert refused == {"rule": "fold-bn", "graph": "main", "nodes": {"matmul": "layer", "bn": "bn"},
                       "reason": report.bn_left[0]["reason"]}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    kind=st.sampled_from(["Conv", "ConvTranspose", "Gemm"]),
    rank=st.integers(1, 3),
    groups=st.sampled_from([1, 2]),
    stride=st.integers(1, 2),
    dilation=st.integers(1, 2),
    pad=st.integers(0, 1),
    bias=st.booleans(),
    bias_add=st.booleans(),
    trans_b=st.integers(0, 1),
    alpha=st.sampled_from([1.0, 0.5, 2.0]),
    beta=st.sampled_from([1.0, 0.25]),
    dtype=st.sampled_from([TensorProto.FLOAT, TensorProto.DOUBLE]),
    seed=st.integers(0, 1000),
)
def test_fold_is_sound_for_random_configurations(kind, rank, groups, stride, dilation, pad, bias, bias_add, trans_b,
                                                 alpha, beta, dtype, seed):
    cfg = Config(kind=kind, rank=rank, c_in=2 * groups, c_out=2 * groups, group=groups, kernel=2, stride=stride,
                 dilation=dilation, pad=pad, bias=bias, bias_add=bias_add and kind != "Gemm", trans_b=trans_b,
                 alpha=alpha, beta=beta, dtype=dtype, seed=seed)
    if kind != "Gemm":
        cfg = Config(**{**cfg.__dict__, "dtype": TensorProto.FLOAT})  # onnxruntime has no float64 convolutions
    original, model, session, report = fold(linear_bn(cfg))
    assert report.applied["fold-bn"] == 1
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(("var", "epsilon", "reason"), [
    (-2.0, 1e-5, "its variance plus epsilon is -1.99999 at channel 2, not a positive number"),
    (np.nan, 1e-5, "its variance plus epsilon is nan at channel 2, not a positive number"),
    (0.0, 0.0, "its variance plus epsilon is 0 at channel 2, not a positive number"),
])
def test_a_bn_whose_statistics_would_fold_into_nan_is_left_with_the_reason(var, epsilon, reason):
    """Folding σ² + ε ≤ 0 or NaN wrote NaN or infinite weights and printed numpy's warnings; decomposing too."""
    import warnings

    proto = models.conv_bn()
    for t in proto.graph.initializer:
        if t.name == "bn_var":
            values = onnx.numpy_helper.to_array(t).copy()
            values[2] = var
            t.CopyFrom(onnx.numpy_helper.from_array(values, "bn_var"))
    next(n for n in proto.graph.node if n.op_type == "BatchNormalization").attribute[0].f = epsilon
    for rule, verb in (("fold-bn", "folded"), ("bn-to-affine", "decomposed")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            original, model, _, report = fold(proto, (rule,))
        assert count(model, "BatchNormalization") == 1 and model.to_proto().SerializeToString() == original
        assert report.bn_left == [{"node": "bn", "graph": "main",
                                   "reason": f"BatchNormalization 'bn' cannot be {verb}: {reason}"}]


def test_a_bn_left_because_fold_bn_was_not_run_says_so():
    """Other rules alone used to report "conv-bn matches here" as the reason a foldable BN stayed."""
    _, model, _, report = fold(models.conv_bn(), ("fuse-activations",))
    assert count(model, "BatchNormalization") == 1
    assert report.bn_left[0]["reason"].startswith("fold-bn was not among the rules run (conv-bn matches here")
