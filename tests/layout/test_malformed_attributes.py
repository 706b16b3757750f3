"""A model whose attributes have the wrong type still draws: the label shows what the file holds."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphlens.core.model import Model
from graphlens.layout.labels import attribute_lines
from graphlens.layout.view import build_view
from tests.models import init, make_model, tensor


def test_a_kernel_shape_given_as_one_int_is_shown_not_a_crash():
    conv = helper.make_node("MaxPool", ["x"], ["y"], name="pool", kernel_shape=3, strides=[2])  # an INT, not INTS
    graph = Model(make_model([conv], [tensor("x", shape=[1, 1, 8])], [tensor("y")])).graph
    assert attribute_lines(graph.by_name["pool"])[0] == "k 3  s 2"
    assert build_view(graph).items  # the whole canvas is built too


def test_a_kernel_shape_list_is_shown_as_dims():
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="conv", kernel_shape=[3, 3])
    model = make_model([conv], [tensor("x", shape=[1, 1, 8, 8])], [tensor("y")],
                       [init("w", np.zeros((1, 1, 3, 3), np.float32))])
    assert attribute_lines(Model(model).graph.by_name["conv"])[0] == "k 3×3"
