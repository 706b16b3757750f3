"""A Constant node whose data does not fit its shape has no value, and says why, like a malformed initializer."""

from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from graphlens.core import constants
from graphlens.core.model import Model


def test_a_constant_node_with_too_few_bytes_has_no_value_and_says_why():
    tensor = numpy_helper.from_array(np.zeros([2, 3], np.float32), "alpha")
    tensor.raw_data = tensor.raw_data[:10]
    nodes = [helper.make_node("Constant", [], ["alpha"], name="alpha_const", value=tensor),
             helper.make_node("Mul", ["x", "alpha"], ["y"], name="scale")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [2, 3])],
                              [helper.make_tensor_value_info("y", 1, [2, 3])])
    model = Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    assert model.graph.constant_value("alpha") is None
    reason = constants.input_refusal(model.graph, model.graph.node("scale"), 1)
    assert reason is not None and "alpha_const" in reason and "malformed" in reason
