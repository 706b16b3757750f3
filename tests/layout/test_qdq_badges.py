"""A quantized model keeps its float model's picture: Q/DQ pairs are badges on edges, not boxes."""

from __future__ import annotations

import pytest

from graphlens.core.bundled import demo_model_path
from graphlens.layout.view import ViewOptions, build_view
from graphlens.quantize import QuantConfig
from graphlens.workspace import Workspace


@pytest.fixture(scope="module")
def models():
    ws = Workspace()
    ws.open(demo_model_path())
    ws.fold()  # the quantizer folds first: compare with the folded float model
    float_view = build_view(ws.model.graph)
    float_boxes = [(item.kind, item.key) for item in float_view.items]
    float_edges = {(float_view.items[e.source].key, float_view.items[e.target].key) for e in float_view.edges}
    ws.quantization.quantize(QuantConfig(per_channel=False), samples=1)
    return ws.model.graph, float_boxes, float_edges


def test_a_quantized_model_has_as_many_boxes_as_its_float_model(models):
    graph, float_boxes, float_edges = models
    view = build_view(graph)
    assert [(item.kind, item.key) for item in view.items] == float_boxes
    assert not any(view.items[i].title in ("QuantizeLinear", "DequantizeLinear") for i in range(len(view.items)))
    assert {(view.items[e.source].key, view.items[e.target].key) for e in view.edges} == float_edges
    plain = build_view(graph, ViewOptions(qdq_badges=False))
    assert sum(item.title == "QuantizeLinear" for item in plain.items) == 15  # one per quantized activation
    assert len(plain.items) == len(float_boxes) + 2 * 15 + 18  # and a DequantizeLinear per weight and bias (9 each)


def test_badges_sit_on_the_quantized_edges_with_their_type(models):
    graph, _, _ = models
    view = build_view(graph)
    badges = {(view.items[e.source].key, view.items[e.target].key): e.badge for e in view.edges if e.badge}
    assert badges[("input:image", "/stem/conv")] == "u8"  # a graph input read through a pair
    assert badges[("/stem/relu", "/stem/maxpool")] == "u8"
    assert badges[("/head/fc", "output:logits")] == "u8"  # a graph output produced by the DequantizeLinear
    assert all(value == "u8" for value in badges.values()) and len(badges) >= 15
    unbadged = [e for e in view.edges if not e.badge]
    assert unbadged  # float edges stay plain (e.g. into the BN left unfolded)
    assert view.badged and all(graph.by_name[n].op_type in ("QuantizeLinear", "DequantizeLinear") for n in view.badged)


def test_signed_activations_read_i8_and_a_per_channel_pair_says_so():
    from onnx import TensorProto, helper

    from tests import models

    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("QuantizeLinear", ["r", "s", "z"], ["rq"], name="q", axis=1),
        helper.make_node("DequantizeLinear", ["rq", "s", "z"], ["rd"], name="dq", axis=1),
        helper.make_node("Relu", ["rd"], ["y"], name="relu2"),
    ]
    import numpy as np

    inits = [models.init("s", np.full([3], 0.1, np.float32)), models.init("z", np.zeros([3], np.int8))]
    proto = models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [1, 3])],
                              [models.tensor("y", TensorProto.FLOAT, [1, 3])], inits, opset=13)
    from graphlens.core.model import Model

    view = build_view(Model(proto).graph)
    assert [item.key for item in view.items] == ["input:x", "relu", "relu2", "output:y"]
    badge = next(e.badge for e in view.edges if view.items[e.source].key == "relu")
    assert badge == "i8/ch"
