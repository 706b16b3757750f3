"""Shapes of constants without their values: the same shape computing the value gives, or None to compute it."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphlens.core.constant_shapes import constant_shape
from graphlens.core.model import load_model
from graphlens.layout.labels import constant_text
from tests.models import init, make_model, tensor


def _chain_model():
    """A weight through every op constants pass through, each step an output of its own."""
    nodes = [
        helper.make_node("Identity", ["w"], ["id"]),
        helper.make_node("Transpose", ["id"], ["tr"], perm=[1, 0]),
        helper.make_node("Transpose", ["tr"], ["tr_default"]),
        helper.make_node("Reshape", ["tr", "target"], ["rs"]),
        helper.make_node("Reshape", ["tr", "zero_target"], ["rs_zero"]),
        helper.make_node("Unsqueeze", ["rs", "axes"], ["un"]),
        helper.make_node("Squeeze", ["un", "axes"], ["sq"]),
        helper.make_node("Squeeze", ["un"], ["sq_all"]),
        helper.make_node("Flatten", ["un"], ["fl"], axis=2),
        helper.make_node("Flatten", ["un"], ["fl_neg"], axis=-1),
        helper.make_node("Cast", ["fl"], ["cast"], to=TensorProto.FLOAT16),
        helper.make_node("CastLike", ["cast", "x"], ["like"]),
        helper.make_node("Constant", [], ["const"], value=helper.make_tensor("c", TensorProto.FLOAT, [3, 5],
                                                                             np.zeros(15).tolist())),
        helper.make_node("Constant", [], ["const_ints"], value_ints=[1, 2, 3, 4, 5, 6, 7]),
        helper.make_node("Constant", [], ["const_int"], value_int=3),
        helper.make_node("ConstantOfShape", ["dims"], ["filled"]),
        helper.make_node("Transpose", ["filled"], ["filled_t"], perm=[2, 0, 1]),
        helper.make_node("Reshape", ["tr", "wrong_target"], ["bad_reshape"]),
        helper.make_node("Transpose", ["id"], ["bad_perm"], perm=[0, 0]),
        helper.make_node("Squeeze", ["id", "axes"], ["bad_squeeze"]),
        helper.make_node("Add", ["id", "id"], ["computed"]),
        helper.make_node("Add", ["x", "computed"], ["y"]),
    ]
    inits = [init("w", np.arange(48, dtype=np.float32).reshape(8, 6)), init("target", np.array([-1, 4])),
             init("zero_target", np.array([0, 2, -1])), init("axes", np.array([0])),
             init("dims", np.array([2, 3, 4])), init("wrong_target", np.array([5, -1]))]
    return make_model(nodes, [tensor("x", shape=[8, 6])], [tensor("y")], inits)


COMPUTABLE = ["w", "id", "tr", "tr_default", "rs", "rs_zero", "un", "sq", "sq_all", "fl", "fl_neg", "cast", "like",
              "const", "const_ints", "const_int", "filled", "filled_t"]


def test_every_shape_is_the_shape_of_the_value(write_model):
    graph = load_model(write_model(_chain_model())).graph
    for name in COMPUTABLE:
        value = graph.constant_value(name)
        assert value is not None, name
        assert constant_shape(graph, name) == value.shape, name


def test_what_does_not_fit_or_is_not_constant_has_no_shape(write_model):
    graph = load_model(write_model(_chain_model())).graph
    for name in ("bad_reshape", "bad_perm", "bad_squeeze", "computed", "y", "x", ""):
        assert constant_shape(graph, name) is None, name


def test_a_label_shows_a_large_constant_by_its_shape_without_computing_it(write_model):
    graph = load_model(write_model(_chain_model())).graph
    assert [constant_text(graph, t) for t in ("id", "tr", "like", "filled_t")] == ["⟨8×6⟩", "⟨6×8⟩", "⟨12×4⟩",
                                                                                     "⟨4×2×3⟩"]
    assert graph.constants_cache.values == {}  # the labels computed no value (a weight's copy, in a transformer)
    assert constant_text(graph, "const_int") == "= 3"  # tiny ones still show their value
