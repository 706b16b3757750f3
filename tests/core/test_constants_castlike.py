"""CastLike of a constant is constant when the type it casts to is known, as dynamo exports write scalars."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphlens.core.model import load_model
from tests import models


def _graph(write_model, like_type: int | None, like_shape=(4,)):
    """x (input) -> Relu -> r; CastLike(Constant 0.5 as float64, r) -> half; Mul(r, half) -> y."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Constant", [], ["c"], name="c", value=helper.make_tensor("c", TensorProto.DOUBLE, [], [0.5])),
        helper.make_node("CastLike", ["c", "r"], ["half"], name="castlike"),
        helper.make_node("Mul", ["r", "half"], ["y"], name="mul"),
    ]
    proto = models.make_model(nodes, [models.tensor("x", shape=list(like_shape))], [models.tensor("y", shape=None)])
    if like_type is not None:
        proto.graph.value_info.append(helper.make_tensor_value_info("r", like_type, list(like_shape)))
    return load_model(write_model(proto)).graph


def test_castlike_of_a_constant_is_a_constant_of_the_like_inputs_type(write_model):
    g = _graph(write_model, TensorProto.FLOAT16)
    assert g.is_constant("half"), g.why_not_constant("half")
    value = g.constant_value("half")
    assert value is not None and value.dtype == np.float16 and value.shape == ()
    assert float(value) == 0.5


def test_castlike_uses_the_inferred_type_when_none_is_declared(write_model):
    g = _graph(write_model, None)  # Relu of a float input: shape inference says float
    assert g.constant_value("half").dtype == np.float32


def test_castlike_of_a_runtime_value_is_not_constant(write_model):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("CastLike", ["r", "x"], ["y"], name="castlike"),
    ]
    proto = models.make_model(nodes, [models.tensor("x", shape=[4])], [models.tensor("y", shape=None)])
    g = load_model(write_model(proto)).graph
    assert g.why_not_constant("y") == (
        "is produced by CastLike 'castlike', whose input 'r' is computed by Relu 'relu', not a constant"
    )


def test_castlike_to_an_unknown_type_is_not_constant_and_says_why(write_model):
    nodes = [
        helper.make_node("Constant", [], ["c"], name="c", value_float=0.5),
        helper.make_node("Custom", ["x"], ["r"], name="custom", domain="example.custom"),
        helper.make_node("CastLike", ["c", "r"], ["y"], name="castlike"),
    ]
    proto = models.make_model(nodes, [models.tensor("x", shape=[4])], [models.tensor("y", shape=None)])
    proto.opset_import.append(helper.make_opsetid("example.custom", 1))
    g = load_model(write_model(proto)).graph
    assert g.why_not_constant("y") == "is produced by CastLike 'castlike', whose target type (that of 'r') is unknown"
    assert g.constant_value("y") is None
