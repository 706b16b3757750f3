"""Constant resolution: each way a value can be constant, and the reasons when it is not."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import load_model
from tests import models


def _single(write_model, nodes, initializers=(), inputs=()):
    m = models.make_model(
        nodes, [models.tensor(n, shape=[4]) for n in inputs], [models.tensor("y", shape=None)], initializers
    )
    # shape-free outputs are fine for loading; tests here never save
    return load_model(write_model(m)).graph


def test_params_behind_constant_constantofshape_identity_and_cast(write_model):
    g = load_model(write_model(models.conv_bn_params_behind_constants(channels=4))).graph
    for name in ("scale", "bias", "mean", "var", "shape"):
        assert g.is_constant(name), g.why_not_constant(name)
    np.testing.assert_array_equal(g.constant_value("bias"), np.full(4, 0.25, np.float32))
    assert g.constant_value("var").dtype == np.float32
    assert g.constant_value("shape").tolist() == [4]
    assert not g.is_constant("c")
    assert g.why_not_constant("c") == "is computed by Conv 'conv', not a constant"


def test_graph_input_is_not_constant_and_says_so(write_model):
    g = load_model(write_model(models.conv_bn_mean_from_input())).graph
    assert g.why_not_constant("bn_mean") == "comes from graph input 'bn_mean'"
    assert g.constant_value("bn_mean") is None


def test_initializer_that_is_also_an_input_can_be_overridden(write_model):
    nodes = [helper.make_node("Add", ["a", "a"], ["y"], name="add")]
    g = _single(write_model, nodes, [models.init("a", np.ones(4, np.float32))], inputs=["a"])
    assert "callers may override" in g.why_not_constant("a")


@pytest.mark.parametrize(
    ("op", "attrs", "extra", "expected"),
    [
        ("Reshape", {}, [("s", np.array([2, -1], np.int64))], np.arange(6.0).reshape(2, 3)),
        ("Reshape", {}, [("s", np.array([0, 3], np.int64))], np.arange(6.0).reshape(2, 3)),
        ("Transpose", {"perm": [1, 0]}, [], np.arange(6.0).reshape(3, 2).T),
        ("Flatten", {"axis": 0}, [], np.arange(6.0).reshape(1, 6)),
        ("Unsqueeze", {}, [("ax", np.array([0, -1], np.int64))], np.arange(6.0).reshape(1, 3, 2, 1)),
        ("Squeeze", {}, [], np.arange(6.0).reshape(3, 2)),
        ("Cast", {"to": TensorProto.FLOAT16}, [], np.arange(6.0).reshape(3, 2).astype(np.float16)),
    ],
)
def test_shape_only_ops_of_constants_are_computed(write_model, op, attrs, extra, expected):
    base = np.arange(6.0).reshape(3, 2) if op != "Reshape" else np.arange(6.0).reshape(6)
    if op == "Squeeze":
        base = base.reshape(3, 1, 2)
        extra = [("ax", np.array([1], np.int64))]
    if op == "Reshape" and extra[0][1].tolist() == [0, 3]:
        base = np.arange(6.0).reshape(2, 3)
    inits = [models.init("base", base)] + [models.init(n, v) for n, v in extra]
    nodes = [helper.make_node(op, ["base"] + [n for n, _ in extra], ["y"], name="op", **attrs)]
    g = _single(write_model, nodes, inits)
    value = g.constant_value("y")
    assert value is not None and value.dtype == expected.dtype
    np.testing.assert_array_equal(value, expected)


def test_chain_breaks_at_the_first_non_constant_link(write_model):
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["i"], name="id"),
        helper.make_node("Reshape", ["i", "s"], ["y"], name="reshape"),
    ]
    g = _single(write_model, nodes, [models.init("s", np.array([4], np.int64))], inputs=["x"])
    assert g.why_not_constant("y") == (
        "is produced by Reshape 'reshape', whose input 'i' is produced by Identity 'id', "
        "whose input 'r' is computed by Relu 'relu', not a constant"
    )


def test_constantofshape_with_runtime_shape_is_not_constant(write_model):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("ConstantOfShape", ["s"], ["y"], name="fill"),
    ]
    g = _single(write_model, nodes, inputs=["x"])
    assert g.why_not_constant("y").startswith("is produced by ConstantOfShape 'fill', whose shape input 's'")
    assert g.constant_value("y") is None


def test_constant_scalar_attribute_forms(write_model):
    nodes = [
        helper.make_node("Constant", [], ["f"], name="f", value_float=0.5),
        helper.make_node("Constant", [], ["ints"], name="ints", value_ints=[1, 2]),
        helper.make_node("Add", ["f", "f"], ["y"], name="add"),
    ]
    g = _single(write_model, nodes)
    assert g.constant_value("f") == pytest.approx(0.5)
    assert g.constant_value("ints").tolist() == [1, 2]
