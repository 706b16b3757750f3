"""fuse-bias-gelu, fuse-gelu, fuse-fast-gelu and silu-mlp: each exporter's form, each fusion, and refusals."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

from graphlens.core.model import Model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from tests.rewrites import transformer_gelu_models as tm
from tests.rewrites.checks import assert_rewrite_is_sound, op_types
from tests.rewrites.test_fold_bn import fold

GELU_RULES = ["fuse-bias-gelu", "fuse-gelu", "fuse-fast-gelu"]
MS = "com.microsoft"


def only_node(model: Model, op: str):
    [node] = [n for n in model.graph.nodes if n.op_type == op]
    return node


# ------------------------------------------------------------------------------------ pattern forms
def _all_but(*ops: str):
    """The match covers every node of the model except these ops (and Constant nodes)."""
    return lambda proto: sorted(n.name for n in proto.graph.node if n.op_type not in ("Constant", *ops))


FORMS = [
    ("bias-gelu", tm.bias_gelu_torchscript, _all_but("MatMul")),
    ("bias-gelu", tm.bias_gelu_dynamo, _all_but("MatMul")),
    ("bias-gelu", tm.bias_gelu_tf2onnx, _all_but("MatMul")),
    ("bias-gelu", tm.bias_then_gelu_op, _all_but("MatMul")),
    ("bias-gelu-ms", lambda: tm.bias_then_gelu_op(17, MS), _all_but("MatMul")),
    ("fast-gelu", tm.fast_gelu_torchscript, _all_but("MatMul")),
    ("fast-gelu", tm.fast_gelu_dynamo, _all_but("MatMul")),
    ("fast-gelu", tm.fast_gelu_phi2, _all_but("MatMul")),
    ("fast-gelu", lambda: tm.fast_gelu_torchscript(bias=False), _all_but("MatMul")),
    ("fast-gelu", lambda: tm.fast_gelu_dynamo(bias=False), _all_but("MatMul")),
    ("fast-gelu", lambda: tm.bias_then_gelu_op(approximate="tanh"), _all_but("MatMul")),
    ("silu-mlp", tm.silu_mlp, _all_but()),
    ("silu-mlp", lambda: tm.silu_mlp(transposed=False, up_first=True, opset=17), _all_but()),
    ("silu-mlp", lambda: tm.silu_mlp(swish=True, opset=24), _all_but()),
    ("silu-mlp", lambda: tm.silu_mlp(flattened=True), _all_but()),
]

NOT_MATCHED = [
    ("bias-gelu", tm.gelu_without_bias, "an erf GELU whose input is a MatMul, not a bias Add"),
    ("bias-gelu", lambda: tm.bias_then_gelu_op(approximate="tanh"), "Gelu(approximate='tanh')"),
    ("bias-gelu", tm.fast_gelu_torchscript, "the tanh form"),
    ("bias-gelu-ms", tm.bias_then_gelu_op, "ONNX's Gelu"),
    ("fast-gelu", tm.bias_gelu_torchscript, "the erf form"),
    ("fast-gelu", tm.bias_then_gelu_op, "Gelu without approximate"),
    ("silu-mlp", lambda: _up_reads_other_input(tm.silu_mlp()), "up reads another tensor than gate"),
]


def _up_reads_other_input(proto: onnx.ModelProto) -> onnx.ModelProto:
    up = [n for n in proto.graph.node if n.op_type == "MatMul"][1]
    up.input[0] = "x2"
    proto.graph.input.append(helper.make_tensor_value_info("x2", onnx.TensorProto.FLOAT, [tm.BATCH, tm.SEQ, tm.HIDDEN]))
    return proto


@pytest.mark.parametrize(("pattern", "build", "covered"), FORMS)
def test_each_exporters_form_is_one_match_over_the_whole_block(pattern, build, covered):
    proto = build()
    onnx.checker.check_model(proto, full_check=True)
    [match] = find_matches(get_pattern(pattern), Model(proto))
    assert sorted(match.nodes.values()) == covered(proto)


@pytest.mark.parametrize(("pattern", "build", "what"), NOT_MATCHED)
def test_a_pattern_leaves_other_forms_alone(pattern, build, what):
    assert find_matches(get_pattern(pattern), Model(build())) == [], what


@pytest.mark.parametrize(("pattern", "build", "label", "op"), [
    ("fast-gelu", tm.fast_gelu_torchscript, "square", "Mul"),
    ("fast-gelu", tm.fast_gelu_dynamo, "cube", "Pow"),
    ("fast-gelu", tm.fast_gelu_dynamo, "biased", "Add"),
    ("silu-mlp", tm.silu_mlp, "down_weight", "Transpose"),
    ("silu-mlp", lambda: tm.silu_mlp(swish=True, opset=24), "act", "Swish"),
])
def test_each_form_binds_its_own_nodes(pattern, build, label, op):
    model = Model(build())
    [match] = find_matches(get_pattern(pattern), model)
    assert model.graph.by_name[match.nodes[label]].op_type == op


# ------------------------------------------------------------------------------------------ fusions
@pytest.mark.parametrize("build", [
    tm.bias_gelu_torchscript, tm.bias_gelu_dynamo, tm.bias_gelu_tf2onnx, tm.bias_then_gelu_op,
    lambda: tm.bias_then_gelu_op(17, MS),
])
def test_a_bias_add_and_its_erf_gelu_become_bias_gelu(build):
    original, model, session, report = fold(build(), rules=GELU_RULES)
    assert report.applied == {"fuse-bias-gelu": 1} and report.fused == {"bias-gelu": 1}
    assert op_types(model) == ["MatMul", "BiasGelu"]
    fused = only_node(model, "BiasGelu")
    assert fused.domain == MS and fused.inputs == ["n0_matmul", "fc1_b"] and fused.outputs == ["y"]
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(("opset", "domain"), [(17, MS), (20, "")])
def test_an_erf_gelu_without_bias_becomes_the_gelu_the_opset_has(opset, domain):
    original, model, session, report = fold(tm.gelu_without_bias(opset), rules=GELU_RULES)
    assert report.applied == {"fuse-gelu": 1} and report.fused == {"gelu": 1}
    gelu = only_node(model, "Gelu")
    assert gelu.domain == domain and "approximate" not in gelu.attrs
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("build", [tm.fast_gelu_torchscript, tm.fast_gelu_dynamo, tm.fast_gelu_phi2,
                                   lambda: tm.fast_gelu_torchscript(20),
                                   lambda: tm.bias_then_gelu_op(approximate="tanh")])
def test_a_tanh_gelu_after_a_bias_becomes_fast_gelu_with_that_bias_at_every_opset(build):
    original, model, session, report = fold(build(), rules=GELU_RULES)
    assert report.applied == {"fuse-fast-gelu": 1} and report.fused == {"fast-gelu": 1}
    assert op_types(model) == ["MatMul", "FastGelu"]
    fused = only_node(model, "FastGelu")
    assert fused.domain == MS and fused.inputs == ["n0_matmul", "fc1_b"]
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize(("build", "op", "domain", "attrs"), [
    (lambda: tm.fast_gelu_torchscript(17, bias=False), "FastGelu", MS, {}),
    (lambda: tm.fast_gelu_dynamo(18, bias=False), "FastGelu", MS, {}),
    (lambda: tm.fast_gelu_torchscript(20, bias=False), "Gelu", "", {"approximate": "tanh"}),
])
def test_a_tanh_gelu_without_bias_becomes_the_op_the_opset_has(build, op, domain, attrs):
    original, model, session, report = fold(build(), rules=GELU_RULES)
    assert report.applied == {"fuse-fast-gelu": 1}
    assert op_types(model) == ["MatMul", op]
    fused = only_node(model, op)
    assert fused.domain == domain and dict(fused.attrs) == attrs
    assert_rewrite_is_sound(original, model, session)


def test_the_com_microsoft_domain_is_declared_only_while_a_fused_node_uses_it():
    _, model, session, _ = fold(tm.bias_gelu_torchscript(), rules=GELU_RULES)
    assert {(o.domain, o.version) for o in model.to_proto().opset_import} == {("", 17), (MS, 1)}
    session.undo()
    assert {o.domain for o in model.to_proto().opset_import} == {""}


# ----------------------------------------------------------------------------------------- refusals
@pytest.mark.parametrize(("bias_shape", "reason"), [
    ((1, tm.INNER),
     "Add 'n1_add' adds a bias of shape [1, 16], not the 1-D bias over the last axis that BiasGelu takes"),
    ((tm.SEQ, 1), "Add 'n1_add' adds a bias of shape [3, 1], not the 1-D bias over the last axis that BiasGelu takes"),
    ((1,), "Add 'n1_add' adds a bias of shape [1] to 'n0_matmul', whose last axis has 16, so BiasGelu, which takes "
           "one bias value per element of that axis, cannot take it"),
])
def test_a_bias_that_bias_gelu_cannot_take_stays_an_add_and_the_gelu_fuses_alone(bias_shape, reason):
    original, model, session, report = fold(tm.bias_gelu_torchscript(bias_shape=bias_shape), rules=GELU_RULES)
    assert report.applied == {"fuse-gelu": 1}
    assert report.refused[0].rule == "fuse-bias-gelu" and report.refused[0].reason == reason
    assert op_types(model) == ["MatMul", "Add", "Gelu"]
    assert_rewrite_is_sound(original, model, session)


def test_a_bias_that_fast_gelu_cannot_take_stays_an_add_before_the_fused_gelu():
    original, model, session, report = fold(tm.fast_gelu_torchscript(bias_shape=(1, tm.INNER)), rules=GELU_RULES)
    assert report.applied == {"fuse-fast-gelu": 1}
    assert op_types(model) == ["MatMul", "Add", "FastGelu"]
    add, fused = model.graph.nodes[1:]
    assert add.name == "n1_add" and fused.inputs == [add.outputs[0]]
    assert_rewrite_is_sound(original, model, session)


def test_a_fused_tanh_gelu_keeps_a_bias_it_cannot_take_and_says_why():
    proto = tm.bias_then_gelu_op(approximate="tanh")
    bias = next(t for t in proto.graph.initializer if t.name == "fc1_b")
    bias.dims[:] = [1, tm.INNER]
    _, model, _, report = fold(proto, rules=GELU_RULES)
    assert report.applied == {} and op_types(model) == ["MatMul", "Add", "Gelu"]
    assert [r.reason for r in report.refused] == [
        "Add 'n1_add' adds a bias of shape [1, 16], not the 1-D bias over the last axis that FastGelu takes"]


def test_fuse_gelu_alone_leaves_the_tanh_form_to_fuse_fast_gelu():
    _, model, _, report = fold(tm.fast_gelu_torchscript(20, bias=False), rules=["fuse-gelu"])
    assert report.applied == {} and "Tanh" in op_types(model)
    [refusal] = report.refused
    assert refusal.reason == "Tanh 'n8_tanh' makes this GELU the tanh approximation, which fuse-fast-gelu fuses"
    assert report.left == []  # fuse-gelu's sites are Erf nodes, and the tanh form has none


# ----------------------------------------------------------------------------------- SiLU-gated MLP
@pytest.mark.parametrize(("build", "silu"), [
    (tm.silu_mlp, "its SiLU (Sigmoid 'n2_sigmoid' and Mul 'n3_mul') would fuse into Swish from opset 24 "
                  "(the model has opset 18)"),
    (lambda: tm.silu_mlp(swish=True, opset=24), "its SiLU is already Swish 'n2_swish'"),
    (lambda: tm.silu_mlp(opset=24), "its SiLU (Sigmoid 'n2_sigmoid' and Mul 'n3_mul') fuses into Swish with "
                                    "fuse-activations"),
    (lambda: tm.silu_mlp(flattened=True), "its SiLU (Sigmoid 'n4_sigmoid' and Mul 'n5_mul') would fuse into Swish "
                                          "from opset 24 (the model has opset 18)"),
])
def test_the_silu_gated_mlp_is_recognised_and_explained_but_left_alone(build, silu):
    proto = build()
    original, model, _, report = fold(proto, rules=[*GELU_RULES, "silu-mlp"])
    assert report.applied == {} and model.to_proto().SerializeToString() == original
    [refusal] = report.refused
    gate, up, down = (n.name for n in model.graph.nodes if n.op_type == "MatMul")
    assert refusal.rule == "silu-mlp" and refusal.reason == (
        f"the SiLU-gated MLP ending at MatMul '{down}' (gate MatMul '{gate}', up MatMul '{up}') has no single operator "
        f"in ONNX or onnxruntime, so its three MatMuls stay; {silu}")
    [left] = report.left
    assert left.kind == "silu-mlp" and left.reason == refusal.reason


def test_the_gelu_rules_run_in_the_transformers_set_bias_first():
    from graphlens.rewrites.driver import resolve_rules

    names = [rule.name for rule in resolve_rules(["transformers"])]
    assert names.index("fuse-bias-gelu") < names.index("fuse-fast-gelu") < names.index("fuse-gelu")
    assert "silu-mlp" in names
