"""The attention and sdpa patterns on the forms exporters write, and fuse-attention: what it fuses,
what it refuses and why, and what explain says where a block does not fuse."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from graphlens.core.model import Model
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from tests.rewrites import transformer_attention_models as am
from tests.rewrites.checks import assert_rewrite_is_sound, count

ATTENTION, SDPA = get_pattern("attention"), get_pattern("sdpa")

FORMS = {
    # TorchScript BERT-like encoder: packed QKV cut by Slice, heads split by a Concat of shape pieces,
    # Kᵀ by one Transpose [0, 2, 3, 1], Mul 0.125-style after the scores, an added bias
    "torchscript packed slice, bias": am.variant(qkv="packed_slice", split_shape="concat", merge="concat", mask="add"),
    "packed split, causal where (GPT-2)": am.variant(qkv="packed_split", kt="transpose", scale="div_after",
                                                     mask="where_causal"),
    "separate, mul after": am.variant(),
    "div after, k transposed apart": am.variant(kt="transpose", scale="div_after"),
    "mul on q": am.variant(scale="mul_q", mask="add"),
    "div on q, one-row bias": am.variant(scale="div_q", mask="add_rows"),
    "√scale on q and kᵀ, dynamo kᵀ, rotary, trilu": am.variant(kt="dynamo", scale="split", q="rotary", mask="trilu"),
    "torchscript sdpa scale, computed trilu": am.variant(scale="torchscript", kt="transpose", mask="trilu_dynamic"),
    "castlike scale, where trilu, two layers": am.variant(scale="castlike", mask="where_trilu", layers=2),
    "scale in the projection, masked_fill, 2-d merge": am.variant(scale="none", mask="masked_fill", merge="rows"),
    "padding where": am.variant(mask="where_bool", scale="mul_q", bias=False),
    "cache concat": am.variant(past=True, kt="transpose", mask="add"),
    "heads as -1": am.variant(split_shape="minus_one", mask="causal_const"),
    "opset 23, one-row bias": am.variant(opset=23, mask="add_rows", split_shape="minus_one"),
    "opset 23, rotary, dynamo kᵀ": am.variant(opset=23, kt="dynamo", q="rotary", scale="split"),
    "rotate-half, cache": am.variant(q="rope", past=True, kt="transpose", mask="add"),
    "opset 23, multi-query": am.variant(opset=23, kv_heads=1, kt="transpose"),
    "torch.export dropout": am.variant(kt="dynamo", scale="split", dropout="inference", mask="add"),
    "torchscript sdpa, boolean mask, NaN guard": am.variant(scale="torchscript", kt="transpose", mask="sdpa_bool"),
    "grouped-query, K and V repeated, NaN guard": am.variant(kt="transpose", kv_heads=2, repeat_kv=True,
                                                            mask="sdpa_bool", scale="torchscript"),
    "T5: unscaled, position bias per head, casts around the softmax": am.variant(
        scale="unscaled", mask="add_heads", softmax_casts=True, kt="transpose", bias=False),
    "torchscript decoder: dynamic axes, heads as -1, rotated in heads layout, two layers": am.variant(
        symbolic=True, split_shape="minus_one", q="rope", kt="transpose", mask="sdpa_bool", scale="torchscript",
        layers=2),
    "BERT from optimum: the bias made from attention_mask, two layers": am.variant(mask="padding", layers=2),
    "the padding bias on MultiHeadAttention (packed by Slice)": am.variant(mask="padding", qkv="packed_slice"),
    "opset 23, grouped-query, K and V repeated": am.variant(opset=23, kt="transpose", kv_heads=2, repeat_kv=True,
                                                           mask="add"),
}
CAUSAL = {"where_causal", "trilu", "trilu_dynamic", "where_trilu", "causal_const"}
"""Masks that are the causal triangle: they become unidirectional / is_causal, not a bias."""


def fold(proto: onnx.ModelProto, rules=("fuse-attention",)):
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    report = fold_model(model, resolve_rules(list(rules)), session)
    return original, model, session, report


def model_of(form: am.AttentionForm) -> Model:
    proto = am.build(form)
    onnx.checker.check_model(proto, full_check=True)
    return Model(proto)


def expected_op(form: am.AttentionForm) -> str:
    """Attention (opset 23, or onnxruntime's with Q, K, V packed from one input's projections), else MHA."""
    packable = (form.qkv == "separate" and not form.past and form.q == "proj" and form.kv_heads == am.HEADS)
    return "Attention" if form.opset >= 23 or packable else "MultiHeadAttention"


def fused_nodes(model: Model):
    return [n for n in model.graph.nodes if n.op_type in ("MultiHeadAttention", "Attention")]


# ------------------------------------------------------------------------------ the patterns
UNCAST = {name: form for name, form in FORMS.items() if not form.softmax_casts}
"""Forms the pattern matches as they are: the fold bypasses T5's no-op Casts before matching."""


@pytest.mark.parametrize("form", UNCAST.values(), ids=UNCAST.keys())
def test_attention_pattern_matches_the_whole_block(form):
    matches = find_matches(ATTENTION, model_of(form))
    assert len(matches) == form.layers
    prefix = "l0/" if form.layers > 1 else ""
    nodes = matches[0].nodes
    assert {nodes[label] for label in ("scores", "probs", "attn", "merged", "out")} == {
        prefix + n for n in ("scores", "softmax", "context", "merge", "out")
    }
    if form.q == "proj":
        assert nodes["q_split"] == prefix + "q_split"
    if form.mask != "none":
        assert nodes["masked"] == prefix + "mask"


@pytest.mark.parametrize(("kt", "scale"), [("perm0231", "mul_after"), ("transpose", "div_q"), ("dynamo", "split")])
def test_sdpa_pattern_matches_the_core_alone(kt, scale):
    (match,) = find_matches(SDPA, model_of(am.variant(kt=kt, scale=scale, mask="add")))
    assert match.nodes["scores"] == "scores" and match.nodes["probs"] == "softmax" and match.nodes["out"] == "context"
    assert "merged" not in match.nodes


def test_a_softmax_not_followed_by_v_is_no_attention():
    proto = am.build(am.variant())
    context = next(n for n in proto.graph.node if n.name == "context")
    context.op_type = "ReduceSum"  # what rxnmap's last layer does with the probabilities: sum them over the heads
    del context.input[1:]
    assert find_matches(ATTENTION, Model(proto)) == [] and find_matches(SDPA, Model(proto)) == []


# ------------------------------------------------------------------------------ the fusion
@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_fuse_attention_is_sound(form):
    proto = am.build(form)
    original, model, session, report = fold(proto)
    assert report.applied["fuse-attention"] == form.layers and report.fused["attention"] == form.layers
    assert count(model, "Softmax") == 0 and report.left == []
    assert count(model, expected_op(form)) == form.layers
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


@pytest.mark.parametrize("form", FORMS.values(), ids=FORMS.keys())
def test_fused_attributes_say_the_heads_scale_and_mask(form):
    _, model, _, _ = fold(am.build(form))
    node = fused_nodes(model)[0]
    attrs = dict(node.attrs)
    expected = 1.0 if form.scale == "unscaled" else am.SCALE  # "none": the query projection's factor
    assert attrs["scale"] == pytest.approx(expected, rel=1e-5)
    causal = form.mask in CAUSAL
    if node.domain == "com.microsoft":  # MultiHeadAttention, or Attention with Q, K, V packed
        assert attrs["num_heads"] == am.HEADS and attrs.get("unidirectional", 0) == int(causal)
        has_bias = len(node.inputs) > 5 and bool(node.inputs[5])
        if form.mask == "padding":  # the mask itself, not a bias: Attention's mask_index, MHA's key_padding_mask
            slot = 3 if node.op_type == "Attention" else 4
            assert not has_bias and model.graph.producer(node.inputs[slot])[0].inputs == ["attention_mask"]
            return
    else:
        assert attrs.get("is_causal", 0) == int(causal)
        has_bias = len(node.inputs) > 3 and bool(node.inputs[3])
    assert has_bias == (form.mask not in CAUSAL | {"none"})


def test_mha_reads_the_projections_and_leaves_no_layout_nodes():
    _, model, _, _ = fold(am.build(FORMS["torchscript packed slice, bias"]))
    (node,) = fused_nodes(model)
    assert node.inputs[:3] == ["q_slice", "k_slice", "v_slice"]
    assert count(model, "Transpose") == 0 and count(model, "Reshape") == 0  # the heads split and merged inside


def test_a_factor_on_the_query_projection_becomes_the_scale():
    _, model, _, _ = fold(am.build(am.variant(scale="none")))
    (node,) = fused_nodes(model)
    assert node.op_type == "Attention" and node.inputs[0] == "x" and count(model, "Mul") == 0


def test_q_k_v_projected_from_one_input_are_packed_into_onnxruntimes_attention():
    """BERT-like: x·Wq + bq, x·Wk + bk, x·Wv + bv become one Attention reading [Wq | Wk | Wv] and [bq | bk | bv]."""
    proto = am.build(am.variant(mask="add"))
    original, model, session, _ = fold(proto)
    (node,) = fused_nodes(model)
    assert (node.op_type, node.domain, node.inputs[0]) == ("Attention", "com.microsoft", "x")
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    packed = model.graph.constant_value(node.inputs[1])
    assert np.array_equal(packed, np.concatenate([weights["w_q"], weights["w_k"], weights["w_v"]], axis=1))
    assert count(model, "MatMul") == 1 and count(model, "Add") == 0  # the output projection alone
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_a_causal_mask_built_for_the_model_goes_with_the_fusion():
    _, model, _, _ = fold(am.build(am.variant(mask="trilu")))
    assert count(model, "Trilu") == 0 and count(model, "ConstantOfShape") == 0


@pytest.mark.parametrize("opset", [17, 23])
def test_cache_concatenations_become_the_past_inputs_and_present_outputs(opset):
    """K = Concat(past_k, new K's heads): the fused op reads the new K before its heads split and the
    cache, and writes the present K under the Concat's name (a graph output); the same for V."""
    proto = am.build(am.variant(past=True, kt="transpose", mask="add", opset=opset))
    original, model, session, _ = fold(proto)
    (node,) = fused_nodes(model)
    past_at = 6 if opset < 23 else 4
    assert node.inputs[1:3] == ["k_bias", "v_bias"] and node.inputs[past_at:past_at + 2] == ["past_k", "past_v"]
    assert node.outputs[1:] == ["present_k", "present_v"]
    assert count(model, "Concat") == 0 and count(model, "Transpose") == 0 and count(model, "Reshape") == 0
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_a_cache_read_before_the_attention_ends_stays_a_concatenation():
    """A node between the Concat and the attention output reads the present K: the fused node, where the
    attention ends, would write it too late, so K and V are read whole, as the Concats make them."""
    proto = am.build(am.variant(past=True, kt="transpose", mask="add"))
    at = next(i for i, n in enumerate(proto.graph.node) if n.name == "present_k")
    proto.graph.node.insert(at + 1, onnx.helper.make_node("ReduceSum", ["present_k"], ["k_total"], name="k_total"))
    proto.graph.output.append(onnx.helper.make_tensor_value_info("k_total", onnx.TensorProto.FLOAT, [1, 1, 1, 1]))
    original, model, session, _ = fold(proto)
    (node,) = fused_nodes(model)
    assert node.inputs[1:3] == ["present_k", "present_v"] and count(model, "Concat") == 2 and len(node.inputs) == 6
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


@pytest.mark.parametrize("opset", [17, 23])
def test_rotated_q_and_k_are_read_before_their_heads_split(opset):
    """fuse-rotary rotates the projections themselves ([B, S, H·D], num_heads) and splits the heads after;
    the fused attention then reads the rotations, and the mask [B, 1, S, T] as it is (its rows are the
    queries: the RotaryEmbedding's output has its input's shape)."""
    proto = am.build(am.variant(q="rope", kt="dynamo", scale="split", mask="add", opset=opset))
    original, model, session, report = fold(proto, rules=("fuse-rotary", "fuse-attention"))
    assert report.applied["fuse-rotary"] == 2
    (node,) = fused_nodes(model)
    assert [model.graph.producer(t)[0].op_type for t in node.inputs[:2]] == ["RotaryEmbedding"] * 2
    assert node.inputs[2] == "v_bias" and node.inputs[5 if opset < 23 else 3] == "attention_bias"
    assert count(model, "Transpose") == 0
    assert not any(n.op_type == "Expand" and "attention_bias" in n.inputs for n in model.graph.nodes)
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


@pytest.mark.parametrize("opset", [17, 23])
def test_a_rotated_decoder_step_with_a_cache_fuses_whole(opset):
    """Phi-2's step: Q and K rotated, K and V appended to their caches: one rotation per projection and
    one fused attention reading the caches, writing the present K and V."""
    proto = am.build(am.variant(q="rope", past=True, kt="transpose", mask="add", opset=opset))
    original, model, session, _ = fold(proto, rules=("fuse-rotary", "fuse-attention"))
    (node,) = fused_nodes(model)
    assert node.outputs[1:] == ["present_k", "present_v"]
    assert [n.op_type for n in model.graph.nodes if n.op_type not in ("Expand", "Slice", "Reshape")] == [
        "MatMul", "Add", "MatMul", "Add", "MatMul", "Add", "RotaryEmbedding", "RotaryEmbedding", node.op_type, "MatMul"]
    assert count(model, "Transpose") == 0
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_opset_23_multi_query_attention_keeps_one_kv_head():
    _, model, _, _ = fold(am.build(FORMS["opset 23, multi-query"]))
    (node,) = fused_nodes(model)
    assert dict(node.attrs)["q_num_heads"] == am.HEADS and dict(node.attrs)["kv_num_heads"] == 1


def test_core_without_a_heads_merge_fuses_as_sdpa():
    proto = am.build(am.variant(mask="add"))
    _keep_core_only(proto)
    for opset in (17, 23):
        proto.opset_import[0].version = opset
        original, model, session, report = fold(proto)
        assert report.applied["fuse-attention"] == 1 and count(model, "Softmax") == 0
        assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def _keep_core_only(proto: onnx.ModelProto) -> None:
    """The attention output [batch, heads, seq, head_size] itself is the graph output."""
    keep = [n for n in proto.graph.node if n.name not in ("merge", "out", "o_proj")]
    del proto.graph.node[:]
    proto.graph.node.extend(keep)
    del proto.graph.output[:]
    proto.graph.output.append(onnx.helper.make_tensor_value_info(
        "context", onnx.TensorProto.FLOAT, [am.BATCH, am.HEADS, am.SEQ, am.HEAD_SIZE]))


# ------------------------------------------------------------------------------ refusals
REFUSALS = {
    "computed head count": (am.variant(split_shape="computed"),
                            "Reshape 'q_split' splits the heads with a shape whose head count is not constant"),
    "softmax over the queries": (am.variant(softmax_axis=2),
                                 "Softmax 'softmax' normalizes over axis 2, not over the keys"),
    "scale from an input": (am.variant(scale="input"), "the scale 'temperature' of Mul 'scaled' is not constant"),
    "multi-query for MHA": (am.variant(kv_heads=1, kt="transpose"),
                            "K and V have 1 head where Q has 4 (grouped-query attention), which MultiHeadAttention "
                            "does not support"),
    "where that zeroes": (am.variant(mask="where_zero"),
                          "Where 'mask' replaces scores by 'fill', not by a large negative constant"),
    "scores also an output": (am.variant(scores_output=True),
                              "the output of MatMul 'scores' is also read by a graph output"),
    "dropout in training": (am.variant(dropout="training"), "Dropout 'dropout' may run in training mode"),
    "mask with one column": (am.variant(mask="add_column"),
                             "the mask 'attention_bias' has shape [2, 1, 5, 1], not one value per key"),
}


@pytest.mark.parametrize(("form", "reason"), REFUSALS.values(), ids=REFUSALS.keys())
def test_fuse_attention_refuses_with_one_sentence(form, reason):
    _, model, _, report = fold(am.build(form))
    assert report.applied["fuse-attention"] == 0 and count(model, "Softmax") == 1
    assert report.refused and report.refused[0].reason.startswith(reason)
    (left,) = report.left
    assert left.kind == "attention" and left.node == "softmax" and left.reason.startswith(reason)


# ------------------------------------------------------------------------------ explain
def test_explain_names_the_node_where_a_block_stops_being_attention():
    proto = am.build(am.variant())
    merge = next(n for n in proto.graph.node if n.name == "merge")
    merge.attribute[0].ints[:] = [0, 1, 2, 3]  # the heads are not moved back before the merge
    model = Model(proto)
    result = explain(ATTENTION, model, at="softmax")
    assert not result.matched and result.failure.node == "merge"
    assert result.message == "Transpose 'merge' has perm=[0, 1, 2, 3] where perm=[0, 2, 1, 3] was expected"
    assert {"scores", "probs", "attn"} <= set(result.mapping)
    misses = explain(ATTENTION, model)
    assert misses.match_count == 0 and misses.near_misses[0].failure.node == "merge"
    original, model, session, report = fold(proto)  # the core alone still fuses; the odd merge stays
    assert report.applied["fuse-attention"] == 1 and "merge" in model.graph.by_name
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_explain_and_the_report_show_probabilities_read_elsewhere():
    proto = am.build(am.variant(probs_output=True))
    result = explain(ATTENTION, Model(proto), at="softmax")
    assert not result.matched and result.failure.node == "softmax" and result.failure.kind == "graph_output"
    _, _, _, report = fold(proto)
    (left,) = report.left
    assert left.node == "softmax" and left.failed_node == "softmax" and "is a graph output" in left.reason


def test_explain_matches_where_the_rule_refuses_and_the_report_says_why():
    form, reason = REFUSALS["computed head count"]
    result = explain(ATTENTION, model_of(form), at="softmax")
    assert result.matched
    _, _, _, report = fold(am.build(form))
    assert report.left[0].reason.startswith(reason)


def test_scale_is_the_product_of_every_factor():
    _, model, _, _ = fold(am.build(am.variant(scale="split", kt="dynamo")))
    (node,) = fused_nodes(model)
    assert dict(node.attrs)["scale"] == pytest.approx(float(np.float32(np.sqrt(am.SCALE)) ** 2), rel=1e-6)


def test_explain_agrees_with_the_matcher_at_every_node():
    model = model_of(FORMS["√scale on q and kᵀ, dynamo kᵀ, rotary, trilu"])
    for pattern in (ATTENTION, SDPA):
        in_a_match = {n for m in find_matches(pattern, model) for n in m.nodes.values()}
        for node in model.graph.nodes:
            assert explain(pattern, model, at=node.name).matched == (node.name in in_a_match), node.name


@pytest.mark.parametrize("opset", [17, 23])
def test_rows_that_see_no_key_stay_zero_as_the_exporter_guard_makes_them(opset):
    """TorchScript's Where(IsNaN(p), 0, p) after a boolean mask: kept on the fused output, so a query whose keys
    are all hidden gives 0, not NaN, and the NaN does not reach the next layer."""
    proto = am.build(am.variant(scale="torchscript", kt="transpose", mask="sdpa_bool", layers=2, opset=opset))
    feeds = am.inputs_for(proto)
    for name in ("l0/keep", "l1/keep"):
        feeds[name][1] = False  # every key of the second sequence hidden
        feeds[name][0, :, 2:, 0] = False  # and the first key for later queries: partly hidden rows
    original, model, session, report = fold(proto)
    assert report.fused["attention"] == 2 and count(model, "IsNaN") == 2
    assert_rewrite_is_sound(original, model, session, inputs=feeds)


def test_a_nan_guard_that_fills_something_else_is_refused():
    proto = am.build(am.variant(scale="torchscript", kt="transpose", mask="sdpa_bool"))
    for node in proto.graph.node:
        if node.name == "nan_zero_node":
            node.attribute[0].t.CopyFrom(onnx.numpy_helper.from_array(np.array([0.5], np.float32), "nan_zero"))
    _, model, _, report = fold(proto)
    assert report.fused["attention"] == 0
    assert "replaces NaN probabilities by 'nan_zero', not by a constant 0" in report.left[0].reason


def test_opset_23_reads_k_and_v_before_their_repeat_as_grouped_query_attention():
    proto = am.build(am.variant(opset=23, kt="transpose", kv_heads=2, repeat_kv=True, mask="sdpa_bool",
                                scale="torchscript"))
    original, model, session, _ = fold(proto)
    [node] = fused_nodes(model)
    assert (node.attrs["q_num_heads"], node.attrs["kv_num_heads"]) == (am.HEADS, 2)
    assert node.inputs[1:3] == ["k_bias", "v_bias"]  # the projections, [B, S, 2·D]
    assert count(model, "Expand") == 0 and count(model, "Unsqueeze") == 0
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_multi_head_attention_keeps_k_and_v_repeated_to_every_head():
    """MultiHeadAttention has one head count: the repeated K and V are what it can read."""
    proto = am.build(am.variant(kt="transpose", kv_heads=2, repeat_kv=True, mask="sdpa_bool", scale="torchscript"))
    original, model, session, _ = fold(proto)
    [node] = fused_nodes(model)
    assert node.attrs["num_heads"] == am.HEADS and count(model, "Expand") == 2
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_explain_names_a_no_op_cast_for_what_it_is_and_the_fold_looks_through_it():
    """T5 casts the scores to float before its Softmax and back after: no-ops on a float model."""
    proto = am.build(am.variant(scale="unscaled", mask="add_heads", softmax_casts=True, kt="transpose", bias=False))
    result = explain(ATTENTION, Model(proto).graph, at="softmax")
    assert result.message == ("the output of Softmax 'softmax' goes to Cast 'softmax_type_as' (a no-op: a Cast to the "
                              "type its input already has, which fold bypasses before matching), where MatMul was "
                              "expected")
    original, model, session, report = fold(proto)
    assert report.fused["attention"] == 1 and count(model, "Cast") == 0
    assert_rewrite_is_sound(original, model, session, inputs=am.inputs_for(proto))


def test_a_padding_bias_becomes_the_mask_itself_and_rows_with_no_key_left_come_out_as_before():
    """HF's (1 - mask) · lowest bias: the fused op reads attention_mask and is told the lowest value, so even a
    sequence whose every key is padding gives what the bias gave (a uniform average), not another answer."""
    proto = am.build(am.variant(mask="padding", layers=2))
    feeds = am.inputs_for(proto)
    feeds["attention_mask"][1] = 0
    original, model, session, _ = fold(proto)
    node = fused_nodes(model)[0]
    assert node.attrs["mask_filter_value"] == pytest.approx(float(np.finfo(np.float32).min))
    assert count(model, "Sub") == 0 and count(model, "Mul") == 0  # (1 - mask) · lowest is gone
    assert_rewrite_is_sound(original, model, session, inputs=feeds)


def test_a_bias_of_minus_infinity_stays_a_bias():
    """(1 - mask) · -inf: a row of hidden keys is NaN there, which no mask value reproduces, so the bias stays."""
    proto = am.build(am.variant(mask="padding"))
    for tensor_proto in proto.graph.initializer:
        if tensor_proto.name == "mask_lowest":
            tensor_proto.CopyFrom(onnx.numpy_helper.from_array(np.array(-np.inf, np.float32), "mask_lowest"))
    _, model, _, _ = fold(proto)
    node = fused_nodes(model)[0]
    assert "mask_filter_value" not in node.attrs and node.inputs[5]
