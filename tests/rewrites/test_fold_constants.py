"""fold-constants: Constant nodes, and values computed from constants alone, become initializers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.model import Model
from graphlens.rewrites.driver import resolve_rules
from graphlens.rewrites.rules.fold_constants import SMALL_BYTES, FoldConstants
from tests import models
from tests.rewrites.checks import array, assert_rewrite_is_sound, op_types
from tests.rewrites.test_fold_bn import fold

RULES = ["fold-constants"]
rng = np.random.default_rng(7)


def const(name: str, value, tensor_name: str | None = None) -> onnx.NodeProto:
    """A Constant node as dynamo writes them: the tensor bears the output's name."""
    tensor = numpy_helper.from_array(np.asarray(value), tensor_name if tensor_name is not None else name)
    return helper.make_node("Constant", [], [name], name=f"{name}_node", value=tensor)


def model(nodes, inputs, outputs, initializers=()) -> onnx.ModelProto:
    return models.make_model(nodes, inputs, outputs, initializers)


def test_fold_constants_is_whole_model_and_runs_first_among_the_transformer_rules():
    rule = FoldConstants()
    assert rule.patterns() == [] and rule.kind == "constants" and not rule.default
    assert resolve_rules(["transformers"])[0].name == "fold-constants"


def test_constant_nodes_become_initializers_of_the_same_name():
    w = rng.normal(size=(4, 4)).astype(np.float32)
    proto = model(
        [const("w", w), const("b", np.arange(4, dtype=np.float32), tensor_name="other"),
         helper.make_node("Constant", [], ["s"], name="s_node", value_ints=[2, 2]),
         helper.make_node("MatMul", ["x", "w"], ["m"], name="matmul"),
         helper.make_node("Add", ["m", "b"], ["a"], name="add"),
         helper.make_node("Reshape", ["a", "s"], ["y"], name="reshape")],
        [models.tensor("x", shape=[1, 4])], [models.tensor("y", shape=[2, 2])],
    )
    original, folded, session, report = fold(proto, RULES)
    assert report.applied == {"fold-constants": 1} and report.fused == {}  # a whole-model edit, not a site
    assert op_types(folded) == ["MatMul", "Add", "Reshape"]
    np.testing.assert_array_equal(array(folded, "w"), w)
    np.testing.assert_array_equal(array(folded, "b"), np.arange(4, dtype=np.float32))
    assert folded.graph.initializers["b"].name == "b"
    assert array(folded, "s").dtype == np.int64
    stored = "3 Constant nodes and 0 nodes computed from constants stored as 3 initializers"
    assert stored in report.edits[0].description
    assert_rewrite_is_sound(original, folded, session)


def test_castlike_of_a_constant_takes_the_declared_type_of_its_like_input():
    proto = model(
        [const("c", np.array(0.5, np.float32)),
         helper.make_node("CastLike", ["c", "x"], ["half"], name="castlike"),
         helper.make_node("Mul", ["x", "half"], ["y"], name="mul")],
        [models.tensor("x", TensorProto.FLOAT16, [2, 3])], [models.tensor("y", TensorProto.FLOAT16, [2, 3])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["Mul"]
    assert array(folded, "half").dtype == np.float16 and float(array(folded, "half")) == 0.5
    assert_rewrite_is_sound(original, folded, session)


def test_castlike_of_a_constant_takes_the_inferred_type_of_a_computed_like_input():
    """Dynamo's ``CastLike(-inf, mean)``: the like input is computed, with no value_info declared."""
    proto = model(
        [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[-1]),
         const("eps", np.array(1e-5, np.float64)),
         helper.make_node("CastLike", ["eps", "mean"], ["eps_cast"], name="castlike"),
         helper.make_node("Add", ["mean", "eps_cast"], ["y"], name="add")],
        [models.tensor("x", TensorProto.FLOAT16, [2, 3])], [models.tensor("y", TensorProto.FLOAT16, [2, 1])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["ReduceMean", "Add"]
    assert array(folded, "eps_cast").dtype == np.float16
    assert_rewrite_is_sound(original, folded, session)


def _transposed_weight_model(shared: bool) -> onnx.ModelProto:
    """MatMul(x, Transpose(W)) as dynamo writes a Linear, W larger than SMALL_BYTES; ``shared``: W is also an
    embedding."""
    w = rng.normal(size=(64, 128)).astype(np.float32)
    assert w.nbytes > SMALL_BYTES
    nodes = [const("W", w), helper.make_node("Transpose", ["W"], ["Wt"], name="t", perm=[1, 0]),
             helper.make_node("MatMul", ["x", "Wt"], ["y"], name="matmul")]
    inputs = [models.tensor("x", shape=[2, 128])]
    outputs = [models.tensor("y", shape=[2, 64])]
    if shared:
        nodes.insert(1, helper.make_node("Gather", ["W", "ids"], ["emb"], name="embed"))
        inputs.append(models.tensor("ids", TensorProto.INT64, [3]))
        outputs.append(models.tensor("emb", shape=[3, 128]))
    return model(nodes, inputs, outputs)


def test_transpose_of_a_weight_becomes_the_transposed_weight():
    proto = _transposed_weight_model(shared=False)
    w = numpy_helper.to_array(proto.graph.node[0].attribute[0].t)
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["MatMul"]
    np.testing.assert_array_equal(array(folded, "Wt"), w.T)
    assert set(folded.graph.initializers) == {"Wt"}  # W is gone: the model does not grow
    assert_rewrite_is_sound(original, folded, session)


def test_transpose_of_a_weight_read_elsewhere_is_left_as_it_would_copy_the_weight():
    original, folded, session, report = fold(_transposed_weight_model(shared=True), RULES)
    assert op_types(folded) == ["Gather", "Transpose", "MatMul"]
    assert set(folded.graph.initializers) == {"W"}
    assert "1 node left whose value would grow the model (Transpose 't')" in report.edits[0].description
    assert_rewrite_is_sound(original, folded, session)


def test_expand_into_a_large_shape_is_left():
    proto = model(
        [const("one", np.array(1.0, np.float32)), const("shape", np.array([64, 128], np.int64)),
         helper.make_node("Expand", ["one", "shape"], ["ones"], name="expand"),
         helper.make_node("Add", ["x", "ones"], ["y"], name="add")],
        [models.tensor("x", shape=[64, 128])], [models.tensor("y", shape=[64, 128])],
    )
    original, folded, session, report = fold(proto, RULES)
    assert op_types(folded) == ["Expand", "Add"]
    assert set(folded.graph.initializers) == {"one", "shape"}
    assert "Expand 'expand'" in report.edits[0].description
    assert_rewrite_is_sound(original, folded, session)


def test_a_folded_chain_leaves_only_its_last_value():
    """Dynamo's causal mask: ConstantOfShape -> Trilu -> Reshape, and a Reshape target computed by Div and Concat."""
    proto = model(
        [const("size", np.array([4, 4], np.int64)),
         helper.make_node("ConstantOfShape", ["size"], ["full"], name="fill",
                          value=numpy_helper.from_array(np.array([-np.inf], np.float32))),
         const("one", np.array(1, np.int64)),
         helper.make_node("Trilu", ["full", "one"], ["upper"], name="trilu"),
         const("mask_shape", np.array([1, 1, 4, 4], np.int64)),
         helper.make_node("Reshape", ["upper", "mask_shape"], ["mask"], name="mask"),
         helper.make_node("Add", ["x", "mask"], ["scores"], name="add_mask"),
         const("eight", np.array([8], np.int64)), const("four", np.array([4], np.int64)),
         helper.make_node("Div", ["eight", "four"], ["rows"], name="div"),
         const("rest", np.array([-1], np.int64)),
         helper.make_node("Concat", ["rows", "rest"], ["target"], name="concat", axis=0),
         helper.make_node("Reshape", ["scores", "target"], ["y"], name="reshape")],
        [models.tensor("x", shape=[1, 2, 4, 4])], [models.tensor("y", shape=[2, 16])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["Add", "Reshape"]
    assert set(folded.graph.initializers) == {"mask", "target"}
    assert array(folded, "target").tolist() == [2, -1]
    assert_rewrite_is_sound(original, folded, session)


def test_a_constant_that_is_a_graph_output_stays_a_node_and_its_readers_still_fold():
    proto = model(
        [const("c", np.arange(3, dtype=np.float32)),
         helper.make_node("Neg", ["c"], ["minus_c"], name="neg"),
         helper.make_node("Add", ["x", "minus_c"], ["y"], name="add")],
        [models.tensor("x", shape=[3])], [models.tensor("y", shape=[3]), models.tensor("c", shape=[3])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["Constant", "Add"]
    np.testing.assert_array_equal(array(folded, "minus_c"), -np.arange(3, dtype=np.float32))
    assert_rewrite_is_sound(original, folded, session)


@pytest.mark.parametrize("cond", [True, False])
def test_constants_in_an_if_branch_fold_there_reading_outer_constants(cond):
    then_branch = helper.make_graph(
        [const("two", np.array(2.0, np.float32)),
         helper.make_node("Mul", ["k", "two"], ["k2"], name="double_k"),  # reads the outer Constant k
         helper.make_node("Add", ["x", "k2"], ["then_out"], name="then_add")],
        "then_branch", [], [models.tensor("then_out", shape=[4])],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Sub", ["x", "k"], ["else_out"], name="else_sub")],
        "else_branch", [], [models.tensor("else_out", shape=[4])],
    )
    proto = model(
        [const("k", np.arange(4, dtype=np.float32)),
         helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_branch, else_branch=else_branch)],
        [models.tensor("x", shape=[4]), models.tensor("cond", TensorProto.BOOL, [])], [models.tensor("y", shape=[4])],
    )
    original, folded, session, report = fold(proto, RULES)
    assert report.applied == {"fold-constants": 2}  # one edit per graph
    assert sorted(op_types(folded)) == ["Add", "If", "Sub"]
    assert set(folded.graph.initializers) == {"k"}  # read by both branches
    then_graph = folded.graph_at("main/branch:then_branch")
    np.testing.assert_array_equal(then_graph.constant_value("k2"), 2 * np.arange(4, dtype=np.float32))
    assert set(then_graph.initializers) == {"k2"}
    assert_rewrite_is_sound(original, folded, session,
                            {"x": rng.normal(size=4).astype(np.float32), "cond": np.array(cond)})


def test_shape_of_static_dims_folds_and_symbolic_dims_stay():
    """TorchScript's ``Shape -> Gather``: the batch and hidden dims are numbers, ``seq`` is not."""
    proto = model(
        [helper.make_node("Shape", ["x"], ["s"], name="shape"),
         const("i0", np.array([0], np.int64)), const("i1", np.array([1], np.int64)),
         helper.make_node("Gather", ["s", "i0"], ["batch"], name="batch", axis=0),
         helper.make_node("Gather", ["s", "i1"], ["seq"], name="seq", axis=0),
         const("s_from", np.array([2], np.int64)), const("s_to", np.array([3], np.int64)),
         helper.make_node("Slice", ["s", "s_from", "s_to"], ["hidden"], name="hidden"),
         helper.make_node("Concat", ["batch", "seq", "hidden"], ["target"], name="concat", axis=0),
         helper.make_node("Reshape", ["x", "target"], ["r"], name="reshape"),
         helper.make_node("Shape", ["z"], ["zs"], name="z_shape"),
         helper.make_node("ConstantOfShape", ["zs"], ["zeros"], name="zeros"),
         helper.make_node("Add", ["z", "zeros"], ["z_out"], name="z_add")],
        [models.tensor("x", shape=[1, "seq", 8]), models.tensor("z", shape=[2, 3])],
        [models.tensor("r", shape=[1, "seq", 8]), models.tensor("z_out", shape=[2, 3])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["Shape", "Gather", "Concat", "Reshape", "Add"]
    assert array(folded, "batch").tolist() == [1] and array(folded, "hidden").tolist() == [8]
    np.testing.assert_array_equal(array(folded, "zeros"), np.zeros((2, 3), np.float32))
    assert_rewrite_is_sound(original, folded, session)


def test_identity_is_seen_through_and_left_to_the_cleanup():
    w = rng.normal(size=(4, 3)).astype(np.float32)
    proto = model(
        [const("w", w), helper.make_node("Identity", ["w"], ["w_copy"], name="copy"),
         helper.make_node("Transpose", ["w_copy"], ["wt"], name="t", perm=[1, 0]),
         helper.make_node("MatMul", ["x", "wt"], ["y"], name="matmul")],
        [models.tensor("x", shape=[2, 3])], [models.tensor("y", shape=[2, 4])],
    )
    original, folded, session, _ = fold(proto, RULES)
    assert op_types(folded) == ["MatMul"]
    np.testing.assert_array_equal(array(folded, "wt"), w.T)
    assert_rewrite_is_sound(original, folded, session)


def test_random_and_quantize_ops_are_never_folded():
    proto = model(
        [const("c", np.zeros(3, np.float32)),
         helper.make_node("RandomNormalLike", ["c"], ["noise"], name="noise"),
         const("q", np.array([1, 2, 3], np.int8)), const("scale", np.array(0.5, np.float32)),
         helper.make_node("DequantizeLinear", ["q", "scale"], ["dq"], name="dq"),
         helper.make_node("Add", ["noise", "dq"], ["y"], name="add")],
        [], [models.tensor("y", shape=[3])],
    )
    _, folded, _, _ = fold(proto, RULES)
    assert op_types(folded) == ["RandomNormalLike", "DequantizeLinear", "Add"]


def test_types_come_from_one_node_at_a_time_not_from_inferring_the_whole_model(monkeypatch):
    """Inferring a whole model serializes every weight: a 670 MB model needed 2 GB more for it."""
    def refuse(self):
        raise AssertionError("whole-model shape inference")

    proto = model(
        [helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[-1]),
         const("eps", np.array(1e-5, np.float32)),
         helper.make_node("CastLike", ["eps", "mean"], ["eps_cast"], name="castlike"),
         helper.make_node("Add", ["mean", "eps_cast"], ["y"], name="add")],
        [models.tensor("x", shape=[2, 3])], [models.tensor("y", shape=[2, 1])],
    )
    monkeypatch.setattr(Model, "infer_shapes", refuse)
    edits = FoldConstants().model_edits(Model(proto))
    assert set(edits[0].remove) == {"eps_node", "castlike"}


def test_a_malformed_constant_is_left_without_stopping_the_fold():
    bad = TensorProto(name="bad", data_type=TensorProto.FLOAT, dims=[4], raw_data=b"\x00" * 8)  # 2 floats for 4
    proto = model(
        [helper.make_node("Neg", ["bad"], ["minus_bad"], name="neg"),
         helper.make_node("Add", ["x", "minus_bad"], ["y"], name="add"),
         const("two", np.array(2.0, np.float32)), helper.make_node("Neg", ["two"], ["minus_two"], name="neg_two"),
         helper.make_node("Mul", ["y", "minus_two"], ["z"], name="mul")],
        [models.tensor("x", shape=[4])], [models.tensor("z", shape=[4])], [bad],
    )
    edits = FoldConstants().model_edits(Model(proto))
    assert set(edits[0].remove) == {"two_node", "neg_two"}


def test_a_large_transposed_weight_is_laid_out_exactly():
    from graphlens.rewrites.rules.fold_constants.evaluation import BLOCK, contiguous

    weight = np.random.default_rng(0).standard_normal((3 * BLOCK + 7, 2 * BLOCK + 5)).astype(np.float32)
    laid_out = contiguous(weight.T)
    assert laid_out.flags.c_contiguous and np.array_equal(laid_out, weight.T)
