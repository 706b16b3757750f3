"""fuse-rotary: each exporter's rotary form, the RotaryEmbedding onnxruntime runs (com.microsoft before opset 23,
the standard op from 23), the caches and position ids it is given, and the sites it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.model import Model
from graphlens.matching.matcher import find_matches
from graphlens.numerics import make_inputs
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.rules import RULE_SETS, RULES
from graphlens.rewrites.rules.transformers.rotary import FuseRotary
from tests.models import init, make_model, tensor
from tests.rewrites import transformer_rotary_models as rm
from tests.rewrites.checks import assert_rewrite_is_sound, op_types
from tests.rewrites.test_fold_bn import fold

MS = "com.microsoft"

# name: (builder taking opset=, the pattern that matches it, sites, the opset its exporter writes)
FORMS = {
    "llama_dynamo": (rm.llama_dynamo, "rotary-embedding", 2, 18),
    "llama_cached": (rm.llama_cached, "rotary-embedding", 1, 17),
    "llama_cast_shapes": (lambda **kw: rm.llama_dynamo(cast_shapes=True, **kw), "rotary-embedding", 2, 18),
    "phi2_partial": (rm.phi2_partial, "rotary-partial", 1, 18),
    "gptj": (rm.gptj, "rotary-interleaved", 1, 18),
    "gptj_sequence": (lambda **kw: rm.gptj(sequence=True, **kw), "rotary-interleaved", 1, 18),
    "gptj_partial": (lambda **kw: rm.gptj(rotary_dim=4, **kw), "rotary-partial", 1, 18),
}


def rotary_nodes(model: Model) -> list:
    return [n for n in model.graph.nodes if n.op_type == "RotaryEmbedding"]


def ops(model: Model) -> list[str]:
    return [op for op in op_types(model) if op != "Constant"]


def attrs(node) -> dict:
    return dict(node.attrs)


def rotation_pieces(model: Model, prefix: str) -> set[str]:
    """The nodes of one rotation: its Slices, Neg, Concat/stack, Muls and Add (not the head split, not the bounds)."""
    return {n.name for n in model.graph.nodes if n.name.startswith(f"{prefix}/")
            and n.op_type not in ("Constant", "CastLike")
            and n.name not in (f"{prefix}/view", f"{prefix}/transpose", f"{prefix}/heads_cast")}


# ------------------------------------------------------------------------------ pattern forms
@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_each_rotary_form_is_one_match_per_rotation_covering_its_pieces(form):
    build, pattern, sites, opset = FORMS[form]
    model = Model(build(opset=opset))
    matches = find_matches(get_pattern(pattern), model)
    assert len(matches) == sites
    for match in matches:
        prefix = match.nodes["out"].split("/")[0]
        assert set(match.nodes.values()) == rotation_pieces(model, prefix)


def test_the_rule_is_named_and_runs_with_the_transformer_fusions():
    assert RULES["fuse-rotary"].kind == "rotary-embedding"
    assert "fuse-rotary" in RULE_SETS["transformers"]


# ------------------------------------------------------------------------------ fusions
@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_before_opset_23_each_form_becomes_onnxruntimes_rotary_embedding(form):
    build, _, sites, opset = FORMS[form]
    original, model, session, report = fold(build(opset=opset), rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == sites and report.fused["rotary-embedding"] == sites
    assert [n.domain for n in rotary_nodes(model)] == [MS] * sites
    assert "Neg" not in op_types(model)
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("form", FORMS, ids=list(FORMS))
def test_at_opset_23_each_form_becomes_the_standard_rotary_embedding(form):
    build, _, sites, _ = FORMS[form]
    original, model, session, report = fold(build(opset=23), rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == sites
    assert [n.domain for n in rotary_nodes(model)] == [""] * sites
    assert "Neg" not in op_types(model)
    assert_rewrite_is_sound(original, model, session)


def test_cos_computed_in_the_graph_becomes_a_cache_read_from_row_zero():
    """One batch row of the per-token table is the cache; position_ids = [0] (the offset form) read it from row 0."""
    original, model, session, _ = fold(rm.llama_dynamo(), rules=["fuse-rotary"])
    q, k = rotary_nodes(model)
    assert q.inputs[1] == k.inputs[1]  # one position-ids initializer for both
    assert numpy_helper.to_array(model.graph.initializers[q.inputs[1]]).tolist() == [0]
    assert attrs(q) == {"num_heads": rm.HEADS}
    producers = [model.graph.producer(t)[0].op_type for t in q.inputs[2:]]
    assert producers == ["Reshape", "Reshape"]
    assert_rewrite_is_sound(original, model, session)


def test_a_gather_from_a_constant_cache_hands_the_op_half_the_cache_and_the_position_ids():
    for opset, cache_slots in ((17, (2, 3)), (23, (1, 2))):
        _, model, _, _ = fold(rm.llama_cached(opset=opset), rules=["fuse-rotary"])
        [node] = rotary_nodes(model)
        assert ops(model) == ["RotaryEmbedding", "Reshape", "Transpose"]
        assert "position_ids" in node.inputs
        for slot in cache_slots:
            cache = numpy_helper.to_array(model.graph.initializers[node.inputs[slot]])
            assert cache.shape == (rm.MAX_POS, rm.HEAD_DIM // 2)


def test_partial_rotary_sets_the_rotary_dim_and_passes_the_rest_through():
    _, model, _, _ = fold(rm.phi2_partial(), rules=["fuse-rotary"])
    [node] = rotary_nodes(model)
    assert node.inputs[0] == "q"  # the projection the heads are split from
    assert attrs(node) == {"rotary_embedding_dim": 4, "num_heads": rm.HEADS}


def test_at_opset_23_tables_of_one_batch_row_expand_to_a_batch_of_unknown_size():
    original, model, session, _ = fold(rm.phi2_partial(opset=23), rules=["fuse-rotary"])
    assert op_types(model).count("Expand") == 2
    assert_rewrite_is_sound(original, model, session, inputs=make_inputs(model, dims={"batch": 2}, seed=3))


def test_interleaved_on_batch_sequence_heads_rotates_the_projection_and_splits_the_heads_after():
    original, model, session, _ = fold(rm.gptj(rotary_dim=4), rules=["fuse-rotary"])
    [node] = rotary_nodes(model)
    assert node.inputs[0] == "q"
    assert attrs(node) == {"interleaved": 1, "rotary_embedding_dim": 4, "num_heads": rm.HEADS}
    [after] = [n for n, _ in model.graph.consumers(node.outputs[0])]
    assert after.op_type == "Reshape" and after.outputs[0] == "q/cat" and after.inputs[1] == "q/heads"
    assert "q/view" not in model.graph.by_name and not any(n.name.endswith("/merged") for n in model.graph.nodes)
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("opset", [17, 23])
def test_heads_split_from_a_projection_are_rotated_before_the_split(opset):
    """Reshape and Transpose of q to [B, H, S, D], then the rotation: the op rotates q [B, S, H·D] itself
    (num_heads says the heads), and the same Reshape and Transpose follow, for attention to read past."""
    original, model, session, _ = fold(rm.llama_dynamo(opset=opset), rules=["fuse-rotary"])
    for node, name in zip(rotary_nodes(model), ("q", "k")):
        assert node.inputs[0] == name and attrs(node)["num_heads"] == rm.HEADS
        [split] = [n for n, _ in model.graph.consumers(node.outputs[0])]
        [to_heads] = [n for n, _ in model.graph.consumers(split.outputs[0])]
        assert (split.op_type, to_heads.op_type, to_heads.outputs[0]) == ("Reshape", "Transpose", f"{name}/add")
        assert attrs(to_heads)["perm"] == [0, 2, 1, 3]
    assert_rewrite_is_sound(original, model, session)


def test_heads_read_elsewhere_are_rotated_where_they_are():
    """The heads view is also a graph output: rotating q before it would compute the view twice."""
    original, model, session, _ = fold(rm.llama_cached(view_output=True), rules=["fuse-rotary"])
    [node] = rotary_nodes(model)
    assert node.inputs[0] == "q/transpose" and ops(model) == ["Reshape", "Transpose", "RotaryEmbedding"]
    assert_rewrite_is_sound(original, model, session)


def test_constant_tables_become_initializers():
    original, model, session, _ = fold(rm.constant_tables(), rules=["fuse-rotary"])
    [node] = rotary_nodes(model)
    assert ops(model) == ["RotaryEmbedding", "Reshape", "Transpose"]
    assert numpy_helper.to_array(model.graph.initializers[node.inputs[2]]).shape == (rm.SEQ, rm.HEAD_DIM // 2)
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("opset", [18, 23])
def test_half_precision_and_a_scaling_of_cos_and_sin(opset):
    for proto in (rm.llama_dynamo(opset=opset, elem=TensorProto.FLOAT16), rm.llama_dynamo(opset=opset, scaling=True)):
        original, model, session, report = fold(proto, rules=["fuse-rotary"])
        assert report.applied["fuse-rotary"] == 2
        assert_rewrite_is_sound(original, model, session)


def test_tables_per_batch_row_fuse_at_opset_23():
    original, model, session, report = fold(rm.per_batch_positions(opset=23), rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == 1 and "Expand" not in op_types(model)
    assert_rewrite_is_sound(original, model, session, inputs=make_inputs(model, dims={"batch": 2}, seed=3))


def test_x_behind_a_com_microsoft_op_is_read_from_its_reshape_to_heads():
    proto = rm.behind_a_contrib_op()
    model = Model(proto)
    assert model.graph.tensor_type("q/transpose").shape is None  # shape inference stops at the contrib op
    original, model, session, report = fold(proto, rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == 1
    assert_rewrite_is_sound(original, model, session)


@pytest.mark.parametrize("rules", [["fuse-rotary"], ["fold-constants", "fuse-rotary"]])
def test_bounds_computed_from_x_s_shape_are_read_from_its_dims(rules):
    original, model, session, report = fold(rm.llama_torchscript_dynamic(), rules=rules)
    assert report.applied["fuse-rotary"] == 1
    assert_rewrite_is_sound(original, model, session, inputs=make_inputs(model, dims={"batch": 2}, seed=3))


def test_a_table_per_batch_row_is_read_per_token_over_a_batch_of_any_size():
    """HF decoders compute cos and sin from position_ids [batch, seq] (left padding shifts each row): the fused op
    reads the per-token tables as one cache, at ids 0 … B·S − 1 computed from x's shape."""
    proto = rm.per_batch_positions()
    original, model, session, report = fold(proto, rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == 1 and report.left == []
    inputs = make_inputs(model, dims={"batch": 3}, seed=3)
    inputs["position_ids"] = np.array([[0, 1, 2, 3, 4], [0, 0, 0, 1, 2], [0, 0, 1, 2, 3]], np.int64)
    assert_rewrite_is_sound(original, model, session, inputs=inputs)


def test_head_dim_comes_from_the_heads_split_when_shape_inference_gives_no_dim():
    """TorchScript decoders: the heads Reshape's target is computed, so inference knows no dim of q's heads; its
    constant entries (heads, head_dim) still say what the rotation needs."""
    proto = rm.llama_torchscript_heads()
    inferred = Model(proto).graph.tensor_type("q/transpose").shape
    assert inferred is None or not isinstance(inferred[3], int)
    original, model, session, report = fold(proto, rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == 1 and report.left == []
    inputs = make_inputs(model, dims={"batch": 2, "seq": rm.SEQ}, seed=3)
    assert_rewrite_is_sound(original, model, session, inputs=inputs)


# ------------------------------------------------------------------------------ refusals
REFUSALS = {
    "cos_from_inputs": (rm.cos_sin_from_inputs, "Mul 'q/mul_cos' multiplies by cos 'cos_4d', which comes from graph "
                        "input 'cos': nothing shows it to repeat its first half in its second"),
    "stack_not_last": (lambda: rm.gptj(stack_axis=-2), "Concat 'q/stack' stacks −x2 and x1 on axis -2, not a new last "
                       "axis: an interleave the rotary op cannot express"),
    "uneven_halves": (rm.uneven_halves, "Slice 'q/x1' takes x[..., 0:3] where the rotation over 8 channels needs "
                      "x[..., 0:4]"),
    "odd_width": (rm.odd_width, "Slice 'q/x1' splits 7 channels, an odd rotary width"),
    "unknown_head_dim": (rm.unknown_head_dim, "Slice 'q/x1' slices 'q' of shape [1, 3, 5, head_dim], not a "
                         "[batch, (heads,) sequence, head_dim] tensor with a known head_dim"),
    "float64": (lambda: rm.llama_dynamo(elem=TensorProto.DOUBLE), "Add 'q/add' works in float64, and RotaryEmbedding "
                "takes only float32, float16, bfloat16"),
}


@pytest.mark.parametrize("case", REFUSALS, ids=list(REFUSALS))
def test_refusals_name_the_node_and_the_reason_and_leave_the_site(case):
    build, reason = REFUSALS[case]
    original, model, _, report = fold(build(), rules=["fuse-rotary"])
    assert report.applied["fuse-rotary"] == 0
    assert report.refused and report.refused[0].reason.startswith(reason)
    assert "RotaryEmbedding" not in op_types(model)
    left = [site for site in report.left if site.kind == "rotary-embedding"]
    assert left and left[0].reason == report.refused[0].reason


def test_a_site_left_by_the_pattern_is_explained():
    """A Neg that is no rotation (no Mul by sin after it) is a site left, with explain's reason."""
    proto = rm.cos_sin_from_inputs()
    for node in proto.graph.node:
        if node.name == "q/mul_sin":
            node.op_type = "Sub"
    _, _, _, report = fold(proto, rules=["fuse-rotary"])
    [site] = report.left
    assert site.node == "q/neg" and site.reason
    assert not report.refused


def test_a_negated_half_of_integers_is_no_rotation_left():
    """T5's relative position buckets negate a gathered integer tensor and put it back beside another: no rotary."""
    proto = make_model([
        helper.make_node("Gather", ["positions", "index"], ["picked"], axis=1),
        helper.make_node("Neg", ["picked"], ["negated"], name="neg"),
        helper.make_node("Concat", ["negated", "picked"], ["y"], axis=-1),
    ], [tensor("positions", TensorProto.INT64, [4, 4])], [tensor("y", TensorProto.INT64, None)],
        [init("index", np.array([0, 1], np.int64))])
    graph = Model(proto).graph
    assert not FuseRotary().is_site(graph, graph.by_name["neg"])
