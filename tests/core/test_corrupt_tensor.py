"""A tensor whose data does not fit its shape is named in one line, wherever its value is read."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.tensors import tensor_value


def _short(name: str) -> onnx.TensorProto:
    tensor = numpy_helper.from_array(np.zeros([2, 3], np.float32), name)
    tensor.raw_data = tensor.raw_data[:10]
    return tensor


def test_an_initializer_with_too_few_bytes_is_named():
    with pytest.raises(GraphLensError, match=r"tensor 'w' is corrupt: its data does not fit its shape 2×3"):
        tensor_value(_short("w"))


def test_a_constant_node_with_too_few_bytes_is_named_when_its_value_is_read():
    node = helper.make_node("Constant", [], ["alpha"], name="alpha_const", value=_short("alpha"))
    graph = helper.make_graph([node], "g", [], [helper.make_tensor_value_info("alpha", 1, [2, 3])])
    model = Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(GraphLensError, match="tensor 'alpha' is corrupt"):
        model.graph.constant_value("alpha")
