"""A Cast or CastLike to the type its input already has is seen through: the weight stays, uncopied."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from tests.models import init, make_model, tensor
from tests.rewrites.checks import assert_rewrite_is_sound


def _dynamo_weight_cast() -> onnx.ModelProto:
    """MatMul(x, CastLike(W, x)) as the dynamo exporter writes every weight, and a Cast of x to float."""
    nodes = [
        helper.make_node("CastLike", ["W", "x"], ["W_cast"], name="castlike"),
        helper.make_node("Cast", ["x"], ["x_float"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("MatMul", ["x_float", "W_cast"], ["y"], name="matmul"),
    ]
    weight = init("W", np.arange(32, dtype=np.float32).reshape(4, 8) / 10)
    return make_model(nodes, [tensor("x", shape=[2, 4])], [tensor("y", shape=[2, 8])], [weight])


def test_the_matmul_reads_the_weight_itself_and_nothing_is_copied():
    proto = _dynamo_weight_cast()
    original = proto.SerializeToString()
    model = Model(proto)
    session = EditHistory(model)
    report = fold_model(model, resolve_rules(["fold-constants"]), session)
    assert [(n.op_type, n.inputs) for n in model.graph.nodes] == [("MatMul", ["x", "W"])]
    assert list(model.graph.initializers) == ["W"]
    assert "read through 2 Identity or same-type Casts" in report.edits[0].description
    assert_rewrite_is_sound(original, model, session)


def test_a_cast_that_changes_the_type_stays():
    proto = _dynamo_weight_cast()
    proto.graph.node[1].attribute[0].i = TensorProto.DOUBLE
    proto.graph.node[2].op_type = "Add"  # float64 + float32 would not run; only the graph is checked here
    model = Model(proto)
    fold_model(model, resolve_rules(["fold-constants"]), EditHistory(model))
    assert "Cast" in [n.op_type for n in model.graph.nodes]
