"""The fold report by layer: per kind, the layers of a decoder where sites were fused and where one was left."""

from __future__ import annotations

import onnx
from onnx import helper

from graphlens.core.model import Model
from graphlens.rewrites.layers import LayerCounts, layer_of
from tests.models import make_model, tensor
from tests.rewrites import transformer_attention_models as am
from tests.rewrites.test_transformer_attention import fold


def test_the_layer_is_read_from_the_name_scope_or_the_dynamo_metadata():
    node = helper.make_node("Relu", ["x"], ["y"], name="node_Relu_12")
    entry = node.metadata_props.add()
    entry.key = "pkg.torch.onnx.name_scopes"
    entry.value = "['', 'core', 'core.model.layers.11', 'core.model.layers.11.mlp']"
    named = helper.make_node("Relu", ["y"], ["z"], name="/model/layers.3/self_attn/Softmax")
    graph = Model(make_model([node, named], [tensor("x", shape=[1])], [tensor("z", shape=[1])])).graph
    assert layer_of(graph, ["node_Relu_12"]) == 11
    assert layer_of(graph, ["/model/layers.3/self_attn/Softmax"]) == 3
    assert layer_of(graph, ["/encoder/layer.7/attention/Add", "x"]) == 7
    assert layer_of(graph, ["/transformer/h.2/attn/Softmax"]) == 2 and layer_of(graph, ["/model/norm/Mul"]) is None


def test_lines_say_on_how_many_layers_each_kind_fused_and_where_it_was_left():
    counts = LayerCounts()
    for layer in range(32):
        counts.add("attention", layer, fused=layer != 7)
        counts.add("rotary-embedding", layer, fused=True)
    counts.add("attention", 7, fused=False)
    counts.add("rms-norm", 0, fused=True)
    assert counts.lines() == ["attention by layer: fused on 31 of 32 layers; left on layer 7",
                              "rms-norm by layer: fused on layer 0",
                              "rotary-embedding by layer: fused on all 32 layers"]


def test_the_fold_report_counts_a_two_layer_model_by_layer():
    proto = am.build(am.variant(layers=2))
    for node in proto.graph.node:  # the exporter's scopes: l0/… → /model/layers.0/…
        node.name = node.name.replace("l0/", "/model/layers.0/").replace("l1/", "/model/layers.1/")
    _, _, _, report = fold(onnx.ModelProto.FromString(proto.SerializeToString()))
    assert "attention by layer: fused on all 2 layers" in report.lines()
    assert report.to_json()["by_layer"] == {"attention": {"fused": [0, 1], "left": []}}
