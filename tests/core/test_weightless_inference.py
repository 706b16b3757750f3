"""Shape inference reads a copy of the model without its weights' values, and infers the same types."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphlens.core.model import Model
from tests.models import init, make_model, tensor


def _model() -> onnx.ModelProto:
    big = numpy_helper.from_array(np.ones((64, 32), np.float32), "cw")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
        helper.make_node("Constant", [], ["c"], name="const", value=big),
        helper.make_node("MatMul", ["y", "c"], ["z"], name="mm2"),
        helper.make_node("Reshape", ["z", "shape"], ["r"], name="reshape"),
    ]
    inits = [init("w", np.ones((32, 64), np.float32)), init("shape", np.array([0, 4, 8], np.int64))]
    return make_model(nodes, [tensor("x", shape=["b", 32])], [tensor("r")], inits)


def test_the_copy_keeps_dims_and_small_values_and_drops_large_ones():
    proto = _model()
    light = Model(proto).weightless_proto()
    assert light.ByteSize() < proto.ByteSize() / 4
    assert [t.name for t in light.graph.initializer] == ["w", "shape"]
    assert list(light.graph.initializer[0].dims) == [32, 64] and not light.graph.initializer[0].raw_data
    assert numpy_helper.to_array(light.graph.initializer[1]).tolist() == [0, 4, 8]
    assert proto.graph.initializer[0].raw_data  # the model itself is untouched


def test_inferred_types_are_those_of_the_full_model():
    model = Model(_model())
    model.infer_shapes()
    assert model.shape_inference_error is None
    assert model.graph.tensor_type("z").shape == ("b", 32)
    assert model.graph.tensor_type("r").shape == ("b", 4, 8)
