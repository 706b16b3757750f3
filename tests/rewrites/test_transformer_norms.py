"""fuse-rms-norm and fuse-skip-norm: each exporter's form, the fused ops onnxruntime runs, and refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.rules import RULES
from tests.rewrites import transformer_norm_models as tm
from tests.rewrites.checks import assert_rewrite_is_sound, op_types
from tests.rewrites.test_fold_bn import fold

BOTH = ("fuse-rms-norm", "fuse-skip-norm")
SKIP_RMS = "SkipSimplifiedLayerNormalization"


def node(model: Model, op: str):
    [found] = [n for n in model.graph.nodes if n.op_type == op]
    return found


def fused_ops(model: Model) -> list[str]:
    return [n.op_type for n in model.graph.nodes if n.op_type != "Constant"]


# ------------------------------------------------------------------------------ pattern forms
RMS_FORMS = {
    "dynamo": (lambda: tm.rms_model(tm.rms_dynamo, opset=18), "rms-norm"),
    "dynamo_opset17": (lambda: tm.rms_model(tm.rms_dynamo, opset=17), "rms-norm"),
    "dynamo_llama": (lambda: tm.rms_model(tm.rms_dynamo_llama), "rms-norm"),
    "dynamo_llama_half": (lambda: tm.rms_model(tm.rms_dynamo_llama, dtype=np.float16), "rms-norm"),
    "torchscript": (lambda: tm.rms_model(tm.rms_torchscript, opset=17), "rms-norm"),
    "torchscript_cast": (lambda: tm.rms_model(tm.rms_torchscript, opset=17, cast=True), "rms-norm"),
    "llama_half": (lambda: tm.rms_model(tm.rms_llama_half, dtype=np.float16), "rms-norm"),
    "t5": (lambda: tm.rms_model(tm.rms_t5, opset=14), "rms-norm"),
    "t5_half": (lambda: tm.rms_model(tm.rms_t5, opset=14, dtype=np.float16), "rms-norm"),
    "div": (lambda: tm.rms_model(tm.rms_div, opset=17), "rms-norm"),
    "square_by_mul": (lambda: tm.rms_model(tm.rms_div, opset=17, square_by_mul=True), "rms-norm"),
    "no_weight": (lambda: tm.rms_model(tm.rms_dynamo, weight=False), "rms-norm-plain"),
}


@pytest.mark.parametrize("form", RMS_FORMS, ids=list(RMS_FORMS))
def test_each_rms_norm_form_is_one_match_covering_every_node(form):
    build, pattern = RMS_FORMS[form]
    model = Model(build())
    [match] = find_matches(get_pattern(pattern), model)
    # every node but the constants; dynamo's CastLike of ε or γ is constant too, and part of the norm
    pieces = {n.name for n in model.graph.nodes if n.op_type == "CastLike" or not model.graph.is_constant(n.outputs[0])}
    assert set(match.nodes.values()) == pieces


def test_the_skip_patterns_cover_the_residual_add_and_the_bias_before_it():
    model = Model(tm.post_norm_block())
    [match] = find_matches(get_pattern("skip-norm"), model)
    assert match.nodes == {"biased": "linear/Add", "sum": "residual", "out": "norm"}
    model = Model(tm.decoder_block(bias=True))
    matches = find_matches(get_pattern("skip-rms-norm"), model)
    assert sorted(m.nodes["sum"] for m in matches) == ["residual1", "residual2"]
    assert all(m.nodes["biased"] in ("o_proj/Add", "down_proj/Add") for m in matches)


# ------------------------------------------------------------------------------ fuse-rms-norm
@pytest.mark.parametrize("form", RMS_FORMS, ids=list(RMS_FORMS))
def test_fuse_rms_norm_below_opset_23_writes_the_skip_op_of_x_with_itself(form):
    original, model, session, report = fold(RMS_FORMS[form][0](), rules=["fuse-rms-norm"])
    assert report.applied["fuse-rms-norm"] == 1
    assert fused_ops(model) == [SKIP_RMS]  # half precision forms fuse in half: x, γ and y are float16
    fused = node(model, SKIP_RMS)
    assert fused.domain == "com.microsoft" and fused.inputs[0] == fused.inputs[1] == "x"
    assert fused.attrs["epsilon"] == pytest.approx(4 * (1e-5 if "dynamo" in form or form == "no_weight" else 1e-6))
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("form", ["dynamo", "llama_half", "no_weight"])  # the others have axes as attributes
def test_fuse_rms_norm_at_opset_23_writes_rms_normalization_which_onnxruntime_runs(form):
    proto = RMS_FORMS[form][0]()
    proto.opset_import[0].version = 23
    proto.ir_version = 10
    original, model, session, report = fold(proto, rules=["fuse-rms-norm"])
    assert report.applied["fuse-rms-norm"] == 1
    [kind] = {e.kind for e in report.edits if e.rule == "fuse-rms-norm"}
    assert kind == "rms-norm"
    fused = node(model, "RMSNormalization")
    assert fused.domain == "" and fused.inputs[0] == "x"
    assert fused.attrs["axis"] == -1 and fused.attrs["stash_type"] == 1
    assert_rewrite_is_sound(original, model, session)


def test_a_float_normalization_of_half_x_with_a_float_weight_casts_x_once():
    b = tm.Block(dtype=np.float16)
    x = b.input("x")
    up = b.op("Cast", "to_float", x, to=TensorProto.FLOAT)
    b.dtype = np.float32
    out = tm.rms_div(b, up, weight=b.weight("w"))
    original, model, session, report = fold(b.model([out], opset=17, out_dtype=np.float32), rules=["fuse-rms-norm"])
    assert report.applied["fuse-rms-norm"] == 1
    assert fused_ops(model) == ["Cast", SKIP_RMS]
    assert_rewrite_is_sound(original, model, session)


def test_a_rank_4_rms_norm_is_onnxruntimes_simplified_layer_norm_below_opset_23():
    """Qwen3's q_norm and k_norm normalize each head, [B, H, S, D]: SkipSimplifiedLayerNormalization takes rank 2 or
    3, so below opset 23 they become SimplifiedLayerNormalization, which onnxruntime registers in the default
    domain and the written model's check knows."""
    shape = [2, 2, 3, 8]
    original, model, session, report = fold(tm.rms_model(tm.rms_dynamo, shape=shape), rules=["fuse-rms-norm"])
    assert report.applied["fuse-rms-norm"] == 1 and fused_ops(model) == ["SimplifiedLayerNormalization"]
    assert_rewrite_is_sound(original, model, session)
    _, _, _, report = fold(tm.rms_model(tm.rms_dynamo, dtype=np.float64), rules=["fuse-rms-norm"])
    assert report.applied["fuse-rms-norm"] == 0  # a refusal is a site left, never silent
    assert [site.line() for site in report.left] == [
        "rms-norm left at 'norm/scale': 'x' is float64, and SkipSimplifiedLayerNormalization takes float32 or float16"]
    proto = tm.rms_model(tm.rms_dynamo, shape=shape, opset=23)
    original, model, session, report = fold(proto, rules=["fuse-rms-norm"])
    assert fused_ops(model) == ["RMSNormalization"]
    assert_rewrite_is_sound(original, model, session)


def refusal(proto: onnx.ModelProto, rules=("fuse-rms-norm",)) -> str:
    original, model, _, report = fold(proto, rules=list(rules))
    # nothing fused; the cleanup may only bypass a CastLike to the type it already has
    assert not report.applied and set(report.cleanup) <= {"identity nodes bypassed"}
    assert not report.cleanup or {n.op_type for n in Model(onnx.ModelProto.FromString(original)).graph.nodes} - {
        n.op_type for n in model.graph.nodes} <= {"CastLike"}
    [refused] = report.refused
    return refused.reason


def test_rms_norm_refusals_name_the_node_and_the_reason():
    assert refusal(tm.rms_model(tm.rms_div, opset=17, axes=(1,))) == (
        "ReduceMean 'norm/mean' reduces over axes [1], not the last axis alone")
    assert refusal(tm.rms_model(tm.rms_div, opset=17, keepdims=0)) == (
        "ReduceMean 'norm/mean' drops the reduced axes (keepdims=0)")
    assert refusal(tm.rms_model(tm.rms_div, opset=17, eps=np.full(tm.HIDDEN, 1e-6))) == (
        "Add 'norm/add_eps' adds an ε of shape [8], not a scalar")
    as_double = tm.rms_model(tm.rms_div, opset=17, dtype=np.float64)
    assert refusal(as_double) == "'x' is float64, and SkipSimplifiedLayerNormalization takes float32 or float16"


@pytest.mark.parametrize(
    ("per_position", "reason"),
    [
        (False, "Mul 'norm/scale' reads γ 'w', which comes from graph input 'w'"),
        (True, "Mul 'norm/scale' reads γ 'w' of shape [3, 8], not a vector over the last axis of size 8"),
    ],
)
def test_a_scale_that_is_not_a_constant_vector_is_refused_and_the_normalization_alone_fuses(per_position, reason):
    b = tm.Block()
    weight = b.weight("w", (3, tm.HIDDEN)) if per_position else b.input("w", [tm.HIDDEN])
    out = tm.rms_div(b, b.input("x"), weight=weight)
    original, model, session, report = fold(b.model([out], opset=17), rules=["fuse-rms-norm"])
    [refused] = report.refused
    assert refused.reason == reason
    assert report.applied["fuse-rms-norm"] == 1  # the plain normalization, scaled by ones, then the Mul by w
    assert fused_ops(model) == [SKIP_RMS, "Mul"]
    assert_rewrite_is_sound(original, model, session)


def test_a_result_cast_to_another_type_than_x_is_refused_and_the_normalization_alone_fuses():
    b = tm.Block()
    normalized = tm.rms_llama_half(b, b.input("x"))  # float x, cast "back" to half, a half weight
    b.inits[-1] = tm.init("norm.weight", tm.rng.uniform(0.5, 1.5, tm.HIDDEN).astype(np.float16))
    original, model, session, report = fold(b.model([normalized], out_dtype=np.float16), rules=["fuse-rms-norm"])
    [refused] = report.refused
    assert refused.reason == ("Cast 'norm/to_half' casts the result to float16 while 'x' is float32, and the fused "
                              "op takes x and γ of one type")
    assert fused_ops(model) == [SKIP_RMS, "Cast", "Mul"]
    assert_rewrite_is_sound(original, model, session)


def test_a_plain_rms_norm_of_unknown_width_is_refused():
    proto = tm.rms_model(tm.rms_dynamo, weight=False, shape=[2, 3, "width"])
    assert refusal(proto) == (
        "the last axis of 'x' has no fixed size, so Mul 'norm/mul' has no scale of ones to fuse with")


# ------------------------------------------------------------------------------ fuse-skip-norm
@pytest.mark.parametrize("bias", [False, True])
def test_a_decoder_block_fuses_one_lone_rms_norm_and_two_skip_ones(bias):
    original, model, session, report = fold(tm.decoder_block(bias=bias), rules=BOTH)
    assert report.applied == {"fuse-skip-norm": 2, "fuse-rms-norm": 1}
    kinds = sorted(e.kind for e in report.edits if e.rule != "cleanup")
    assert kinds == ["rms-norm", "skip-rms-norm", "skip-rms-norm"]
    lone, first, last = [n for n in model.graph.nodes if n.op_type == SKIP_RMS]
    assert lone.inputs == ["x", "x", "norm1/weight"]
    assert sorted(first.inputs[:2]) == ["o_proj/MatMul", "x"]
    assert sorted(last.inputs[:2]) == ["down_proj/MatMul", "residual1"]
    assert first.inputs[3:] == (["o_proj.bias"] if bias else [])
    assert last.inputs[3:] == (["down_proj.bias"] if bias else [])
    assert_rewrite_is_sound(original, model, session)


def test_the_residual_sum_read_later_comes_from_output_3():
    original, model, session, _ = fold(tm.decoder_block(), rules=BOTH)
    _, first, last = [n for n in model.graph.nodes if n.op_type == SKIP_RMS]
    assert first.outputs == ["norm2/scale", "", "", "residual1"]
    assert last.inputs[0] == "residual1"  # the second residual reads the first sum
    assert last.outputs == ["final_norm/scale"]  # the last sum is read by nothing else
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(
    ("norm", "opset", "dtype"),
    [(tm.rms_llama_half, 18, np.float16), (tm.rms_dynamo_llama, 18, np.float32), (tm.rms_t5, 14, np.float16),
     (tm.rms_t5, 14, np.float32), (tm.rms_torchscript, 17, np.float32)],
    ids=["llama_half", "dynamo_llama", "t5_half", "t5", "torchscript"],
)
def test_each_exporters_decoder_block_fuses_one_lone_and_two_skip_norms(norm, opset, dtype):
    proto = tm.decoder_block(norm, opset=opset, dtype=dtype, value_info=norm is tm.rms_dynamo_llama)
    original, model, session, report = fold(proto, rules=BOTH)
    assert report.applied == {"fuse-skip-norm": 2, "fuse-rms-norm": 1}
    assert fused_ops(model) == [SKIP_RMS, "MatMul", SKIP_RMS, "MatMul", SKIP_RMS]
    assert_rewrite_is_sound(original, model, session)


def test_skip_rms_norm_at_opset_23_keeps_the_lone_norm_standard():
    proto = tm.decoder_block(opset=23)
    original, model, session, report = fold(proto, rules=BOTH)
    assert op_types(model).count("RMSNormalization") == 1 and op_types(model).count(SKIP_RMS) == 2
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(("weights_like", "bias"), [(False, True), (True, False), (False, False)])
def test_add_then_layer_normalization_becomes_skip_layer_normalization(weights_like, bias):
    original, model, session, report = fold(tm.post_norm_block(weights_like=weights_like, bias=bias), rules=BOTH)
    assert report.applied == {"fuse-skip-norm": 1}
    assert [e.kind for e in report.edits if e.rule == "fuse-skip-norm"] == ["skip-layer-norm"]
    fused = node(model, "SkipLayerNormalization")
    assert fused.domain == "com.microsoft" and fused.attrs["epsilon"] == pytest.approx(1e-5)
    assert len(fused.inputs) == (5 if bias else 4) and (not bias or fused.inputs[4] == "linear.bias")
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_layer_norm_in_pieces_after_a_residual_fuses_below_opset_17(dtype):
    b = tm.Block(dtype=dtype)
    x = b.input("x")
    total = b.op("Add", "residual", tm.projection(b, x, "linear"), x)
    proto = b.model([tm.layer_norm_pieces(b, total)], opset=14)
    original, model, session, report = fold(proto, rules=BOTH)
    assert report.applied == {"fuse-skip-norm": 1}
    assert fused_ops(model) == ["MatMul", "SkipLayerNormalization"]
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(
    ("op", "domain", "opset", "twice", "attrs"),
    [
        ("RMSNormalization", "", 23, False, {"epsilon": 1e-6}),
        ("SimplifiedLayerNormalization", "", 18, False, {"epsilon": 1e-6, "axis": -1}),
        (SKIP_RMS, "com.microsoft", 18, True, {"epsilon": 4e-6}),
        ("LayerNormalization", "", 17, False, {"epsilon": 1e-6, "axis": 2}),
    ],
    ids=["RMSNormalization", "SimplifiedLayerNormalization", "skip_of_itself", "LayerNormalization"],
)
def test_a_residual_before_a_norm_op_fuses_and_serves_the_later_add(op, domain, opset, twice, attrs):
    proto = tm.residual_then(op, opset=opset, domain=domain, twice=twice, **attrs)
    original, model, session, report = fold(proto, rules=["fuse-skip-norm"])
    assert report.applied == {"fuse-skip-norm": 1}
    fused = node(model, "SkipLayerNormalization" if op == "LayerNormalization" else SKIP_RMS)
    assert fused.inputs[:2] == ["x", "r"] and fused.outputs == ["normed", "", "", "residual"]
    assert fused.attrs["epsilon"] == pytest.approx(1e-6)
    assert node(model, "Add").inputs[0] == "residual"
    if op != "SimplifiedLayerNormalization":  # onnxruntime runs it, but the ONNX checker rejects the original
        assert_rewrite_is_sound(original, model, session)


def test_a_residual_sum_that_is_a_graph_output_keeps_its_name():
    proto = tm.residual_then("LayerNormalization", opset=17, read_later=False, epsilon=1e-5)
    proto.graph.output.append(tm.tensor("residual", TensorProto.FLOAT, tm.SHAPE))
    original, model, session, _ = fold(proto, rules=["fuse-skip-norm"])
    assert node(model, "SkipLayerNormalization").outputs == ["normed", "", "", "residual"]
    assert_rewrite_is_sound(original, model, session)


def test_a_batch_of_one_against_a_batch_the_model_leaves_open_is_the_skip():
    proto = tm.residual_then("LayerNormalization", opset=17, shape=[1, 3, 8], skip_shape=["batch", 3, 8],
                             out_shape=["batch", 3, 8], epsilon=1e-5)
    original, model, session, report = fold(proto, rules=["fuse-skip-norm"])
    assert report.applied == {"fuse-skip-norm": 1}
    assert node(model, "SkipLayerNormalization").inputs[:2] == ["r", "x"]
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("skip_shape", [[1, 3, 8], [3, 8], [2, 1, 8]], ids=str)
def test_a_residual_that_broadcasts_is_refused(skip_shape):
    proto = tm.residual_then("LayerNormalization", opset=17, skip_shape=skip_shape, epsilon=1e-5)
    assert refusal(proto, ["fuse-skip-norm"]) == (
        f"Add 'residual' adds shapes [2, 3, 8] and {skip_shape}, and the skip op takes input and skip of one shape, "
        "of rank 2 or 3")


def test_a_norm_op_left_after_the_fold_is_reported_with_why():
    _, _, _, report = fold(tm.residual_then("LayerNormalization", opset=17, skip_shape=[3, 8], epsilon=1e-5),
                           rules=["fuse-skip-norm"])
    [left] = report.left
    assert (left.kind, left.node) == ("skip-norm", "norm") and left.reason == report.refused[0].reason
    b = tm.Block()  # the first norm of phi-2 (dynamo): weights as CastLike(weight, x), x not a residual sum
    x = b.input("x")
    gamma = b.op("CastLike", "gamma_like", b.const("w", np.ones(tm.HIDDEN)), x)
    beta = b.op("CastLike", "beta_like", b.const("b", np.zeros(tm.HIDDEN)), x)
    b.op("LayerNormalization", "lone", x, gamma, beta)
    _, _, _, report = fold(b.model(["lone"], opset=17), rules=["fuse-skip-norm"])
    assert report.left == []  # a norm of no sum is no skip norm missed (a first layer's, a per-head q_norm)


def test_skip_norm_refusals_name_the_node_and_the_reason():
    middle_axis = tm.residual_then("LayerNormalization", opset=17, axis=1, epsilon=1e-5)
    assert refusal(middle_axis, ["fuse-skip-norm"]) == (
        "LayerNormalization 'norm' normalizes from axis 1, not over the last axis alone")
    rank4 = tm.residual_then("RMSNormalization", opset=23, shape=[2, 2, 3, 8], skip_shape=[2, 2, 3, 8])
    assert refusal(rank4, ["fuse-skip-norm"]) == (
        "Add 'residual' adds shapes [2, 2, 3, 8] and [2, 2, 3, 8], and the skip op takes input and skip of one shape, "
        "of rank 2 or 3")


def test_a_layer_norm_whose_mean_is_read_is_refused():
    proto = tm.residual_then("LayerNormalization", opset=17, read_later=False, epsilon=1e-5)
    norm = next(n for n in proto.graph.node if n.name == "norm")
    norm.output.append("mean")
    proto.graph.output.append(tm.tensor("mean", TensorProto.FLOAT, [2, 3, 1]))
    assert refusal(proto, ["fuse-skip-norm"]) == (
        "LayerNormalization 'norm''s output 1 ('mean') is read, and the fused op does not give it")


def test_a_reader_of_the_sum_placed_before_the_norm_is_refused():
    proto = tm.residual_then("LayerNormalization", opset=17, read_later=False, epsilon=1e-5)
    early = helper.make_node("Shape", ["residual"], ["residual_shape"], name="early_shape")
    proto.graph.node.insert(1, early)
    proto.graph.output.append(tm.tensor("residual_shape", TensorProto.INT64, [3]))
    assert refusal(proto, ["fuse-skip-norm"]) == (
        "Shape 'early_shape' reads the sum of Add 'residual' before LayerNormalization 'norm', where the fused op "
        "would stand")


def test_a_constant_added_before_the_residual_that_is_not_a_bias_stays():
    b = tm.Block(constant_nodes=False)
    x = b.input("x")
    shifted = b.op("Add", "position", x, b.weight("table", (3, tm.HIDDEN)))
    total = b.op("Add", "residual", shifted, b.input("r"))
    out = b.op("LayerNormalization", "norm", total, b.weight("g"), b.weight("b"), epsilon=1e-5)
    original, model, session, report = fold(b.model([out], opset=17), rules=["fuse-skip-norm"])
    assert report.applied == {"fuse-skip-norm": 1}
    assert fused_ops(model) == ["Add", "SkipLayerNormalization"]
    assert node(model, "SkipLayerNormalization").inputs[:2] == ["position", "r"]
    assert_rewrite_is_sound(original, model, session)


def test_the_rules_are_registered_off_by_default_with_their_kinds():
    skip, rms = RULES["fuse-skip-norm"], RULES["fuse-rms-norm"]
    assert not skip.default and not rms.default
    assert rms.kind == "rms-norm" and skip.pattern_names == ("skip-norm", "skip-layer-norm", "skip-rms-norm")
