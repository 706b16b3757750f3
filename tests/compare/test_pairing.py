"""Pairing two models' nodes: the statuses and sentences users read in the summary and the window."""

from __future__ import annotations

import numpy as np

from graphlens.compare import compare_models
from graphlens.core.model import Model
from graphlens.rewrites.driver import fold_model
from tests.compare.models import (
    chain,
    copy,
    gelu_decomposed,
    gelu_fused,
    if_model,
    quantized_chain,
    rename_everything,
)
from tests.models import conv_bn


def test_identical_models_pair_every_node_as_same_with_no_error():
    proto = chain()
    result = compare_models(Model(proto), Model(copy(proto)))
    assert result.counts == {"same": 4, "changed": 0, "added": 0, "removed": 0}
    assert all(p.how == "name" and p.a == p.b for p in result.pairs)
    assert result.numeric_reason is None
    assert all(p.error is not None and p.error.max_abs == 0.0 and p.error.sqnr_db == float("inf") for p in result.pairs)


def test_a_folded_batch_norm_groups_with_its_conv_which_changed():
    proto = conv_bn()
    folded = Model(copy(proto))
    fold_model(folded)
    result = compare_models(Model(proto), folded)
    (pair,) = result.pairs
    assert (pair.a, pair.b, pair.status, pair.how) == (["conv", "bn"], ["conv"], "changed", "group")
    assert pair.changes[0] == "folded BatchNormalization 'bn' into it"
    assert any(c.startswith("weight 'w' max |Δ| ") for c in pair.changes)
    assert pair.error is not None and pair.error.max_abs < 1e-4 and pair.error.sqnr_db > 80
    assert result.status_of("a", "main", "bn") == result.status_of("b", "main", "conv") == "changed"


def test_one_changed_attribute_is_named_with_both_values():
    result = compare_models(Model(chain(pads=1)), Model(chain(pads=0)), numeric=False)
    changed = result.differences()
    assert [(p.a, p.status, p.changes) for p in changed] == [
        (["conv2"], "changed", ["attribute pads: [1,1,1,1] → [0,0,0,0]"])]
    assert result.numeric_reason


def test_renamed_tensors_alone_are_not_changes():
    proto = chain()
    result = compare_models(Model(proto), Model(rename_everything(proto)), numeric=False)
    assert result.counts["same"] == 4
    assert {p.how for p in result.pairs} == {"structure"}
    assert result.pair_of_a("main", "conv2").b == ["r_node" + result.pair_of_a("main", "conv2").b[0][6:]]


def test_an_added_and_a_removed_branch():
    one, two = chain(), chain(extra_branch=True)
    added = compare_models(Model(one), Model(rename_everything(two)), numeric=False)
    assert added.counts == {"same": 4, "changed": 0, "added": 2, "removed": 0}
    removed = compare_models(Model(two), Model(one), numeric=False)
    assert removed.counts == {"same": 4, "changed": 0, "added": 0, "removed": 2}
    assert {n for p in removed.pairs if p.status == "removed" for n in p.a} == {"side_conv", "side_tanh"}


def test_a_decomposed_gelu_groups_with_gelu():
    result = compare_models(Model(gelu_decomposed()), Model(rename_everything(gelu_fused())))
    group = next(p for p in result.pairs if p.how == "group")
    assert sorted(group.a) == ["g_add", "g_div", "g_erf", "g_half", "g_mul"] and len(group.b) == 1
    assert group.status == "changed"
    assert result.counts == {"same": 2, "changed": 1, "added": 0, "removed": 0}
    assert group.error is not None and group.error.cosine > 0.999


def test_if_bodies_pair_through_their_if_node():
    result = compare_models(Model(if_model(1)), Model(rename_everything(if_model(0))), numeric=False)
    if_pair = result.pair_of_a("main", "branch")
    assert if_pair is not None and if_pair.status == "changed"
    assert "body then_branch: 1 node differ" in if_pair.changes
    conv = result.pair_of_a("main/branch:then_branch", "then_conv")
    assert conv is not None and conv.status == "changed" and conv.graph_b is not None
    assert conv.changes == ["attribute pads: [1,1,1,1] → [0,0,0,0]"]
    assert result.pair_of_b(conv.graph_b, conv.b[0]) is conv
    assert result.status_of("a", "main/branch:else_branch", "else_relu") == "same"


def test_a_node_added_in_an_if_body_is_added_there_and_the_if_changed():
    result = compare_models(Model(if_model()), Model(rename_everything(if_model(then_extra=True))))
    added = [p for p in result.pairs if p.status == "added"]
    assert len(added) == 1 and added[0].graph == "main/branch:then_branch"
    assert added[0].graph_b is not None and added[0].graph_b.endswith(":then_branch")
    assert result.pair_of_a("main", "branch").changes == ["body then_branch: 1 node differ"]
    assert result.counts == {"same": 4, "changed": 1, "added": 1, "removed": 0}
    back = compare_models(Model(if_model(then_extra=True)), Model(if_model()), numeric=False)
    assert [(p.a, p.status) for p in back.differences()] == [(["branch"], "changed"), (["then_sig"], "removed")]


def test_a_collapsed_group_shows_its_worst_member():
    result = compare_models(Model(chain(pads=1)), Model(chain(pads=0)), numeric=False)
    assert result.status_of_group("a", "main", ["conv1", "relu1"]) == "same"
    assert result.status_of_group("a", "main", ["conv1", "conv2"]) == "changed"


def test_the_overlay_gives_each_node_its_pairs_number():
    proto = conv_bn()
    folded = Model(copy(proto))
    fold_model(folded)
    result = compare_models(Model(proto), folded)
    values = result.overlay("max_abs", side="a")
    assert set(values) == {"conv", "bn"} and values["conv"] == values["bn"] < 1e-4
    assert set(result.overlay("cosine", side="b")) == {"conv"}
    assert np.isfinite(result.as_overlay("sqnr_db").values["bn"])


def test_q_dq_around_a_conv_joins_the_conv_as_one_group():
    result = compare_models(Model(chain()), Model(quantized_chain()))
    conv1 = result.pair_of_a("main", "conv1")
    assert conv1 is not None and conv1.how == "group" and conv1.status == "changed"
    assert sorted(conv1.b) == ["q_conv1", "w1_DQ", "x_DQ", "x_Q"]
    assert "weight 'w1' now quantized (DequantizeLinear 'w1_DQ')" in conv1.changes
    assert result.pair_of_a("main", "relu1").b[0] == "q_relu1"
    assert result.counts["added"] == result.counts["removed"] == 0
    assert conv1.error is not None and 20 < conv1.error.sqnr_db < 80 and conv1.error.cosine > 0.99


def test_unnamed_constants_read_only_by_a_nested_body_pair_with_themselves():
    """As in Silero VAD: a branch's unnamed Constants feed a Loop body inside it, so nothing in the
    branch itself consumes them; comparing the model with itself must still call everything same."""
    from onnx import TensorProto, helper

    def tensor(name, shape):
        return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)

    w = helper.make_tensor("wv", TensorProto.FLOAT, [2], [0.5, 2.0])
    inner = helper.make_graph(
        [helper.make_node("Mul", ["x_in", "w"], ["y_in"], name="inner_mul")], "loop_body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         tensor("x_in", [2])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []), tensor("y_in", [2])],
    )
    inner.node.insert(0, helper.make_node("Identity", ["c"], ["c_out"]))
    branch_nodes = [
        helper.make_node("Constant", [], ["w"], value=w),  # unnamed, read only inside the Loop body
        helper.make_node("Constant", [], ["trip"], value=helper.make_tensor("t", TensorProto.INT64, [], [2])),
        helper.make_node("Constant", [], ["cond"], value=helper.make_tensor("k", TensorProto.BOOL, [], [True])),
        helper.make_node("Loop", ["trip", "cond", "x"], ["y_loop"], name="loop", body=inner),
    ]
    then_branch = helper.make_graph(branch_nodes, "then", [], [tensor("y_loop", [2])])
    else_branch = helper.make_graph([helper.make_node("Identity", ["x"], ["y_id"], name="same")], "else", [],
                                    [tensor("y_id", [2])])
    graph = helper.make_graph(
        [helper.make_node("If", ["flag"], ["y"], name="if", then_branch=then_branch, else_branch=else_branch)], "g",
        [helper.make_tensor_value_info("flag", TensorProto.BOOL, []), tensor("x", [2])], [tensor("y", [2])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    result = compare_models(Model(proto), Model(proto), numeric=False)
    assert result.counts["changed"] == result.counts["added"] == result.counts["removed"] == 0, result.summary_lines()


def test_a_bn_folded_before_quantizing_joins_its_conv_not_the_quantize_pair_in_its_place():
    """Quantizing folds the BN, then quantizes the conv's output where the BN was: both sides have one
    stretch between the same two convs, but the Q/DQ pair is not what the BN became."""
    from onnx import helper

    from graphlens.quantize.quantize import quantize_model
    from tests.models import bn_params, init, make_model, tensor

    rng = np.random.default_rng(5)
    params = bn_params(4)
    nodes = [helper.make_node("Conv", ["x", "wa"], ["ca"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["ca", *params], ["n"], name="bn"),
             helper.make_node("Conv", ["n", "wb"], ["y"], name="b")]
    inits = [init("wa", rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)),
             init("wb", rng.normal(0, 0.5, (2, 4, 1, 1)).astype(np.float32)),
             *(init(k, v) for k, v in params.items())]
    proto = make_model(nodes, [tensor("x", shape=[1, 3, 6, 6])], [tensor("y", shape=[1, 2, 6, 6])], inits)
    quantized = Model(copy(proto))
    quantize_model(quantized, samples=2)
    result = compare_models(Model(proto), quantized, numeric=False)
    pair = result.pair_of_a("main", "bn")
    assert pair is not None and "a" in pair.a and "a" in pair.b
    assert pair.changes[0] == "folded BatchNormalization 'bn' into it"
    assert any(n.endswith("QuantizeLinear") for n in pair.b)  # the conv output's Q/DQ joined the same group
    assert result.counts["removed"] == 0
