"""What the view shows: hidden constants, their summaries, scope groups, inputs and outputs."""

from __future__ import annotations

from collections import Counter

import numpy as np
from onnx import helper

from graphlens.core.model import Model, load_model
from graphlens.layout.layered import layout_view
from graphlens.layout.scopes import grouping_depth, scope_of, scope_prefixes
from graphlens.layout.view import ViewOptions, build_view, collapse_target, edge_label, scopes
from tests import models
from tests.layout.layout_models import scoped_model


def _item(view, key):
    return view.items[view.index[key]]


# ------------------------------------------------------------------ constants
def test_constant_feeding_bn_is_hidden_and_summarised_in_the_bn(demo_path):
    view = build_view(load_model(demo_path).graph)
    constants = {f"/stage2/block2/bn/Constant{s}" for s in ("", "_1", "_2", "_3")}
    assert view.hidden == constants
    assert not constants & set(view.index)
    assert not constants & set(view.node_item)
    bn = _item(view, "/stage2/block2/bn")
    assert bn.lines == ["ε 1e-05", "scale, B, mean, var ⟨32⟩"]
    assert all(view.items[e.source].key not in constants for e in view.edges)


def test_constant_chains_are_hidden_whatever_builds_them(write_model):
    graph = load_model(write_model(models.conv_bn_params_behind_constants(channels=4))).graph
    view = build_view(graph)
    assert view.hidden == {"scale_const", "shape_const", "bias_fill", "mean_id", "var_cast"}
    assert [i.key for i in view.items] == ["input:x", "conv", "bn", "output:y"]
    assert _item(view, "bn").lines == ["scale, B, mean, var ⟨4⟩"]
    assert _item(view, "conv").lines == ["p 1", "W ⟨4×3×3×3⟩"]


def test_show_constants_draws_them_with_edges(demo_path):
    view = build_view(load_model(demo_path).graph, ViewOptions(show_constants=True))
    assert view.hidden == frozenset()
    bn = view.index["/stage2/block2/bn"]
    constant = view.index["/stage2/block2/bn/Constant"]
    assert view.items[constant].category == "other"
    assert any(e.source == constant and e.target == bn for e in view.edges)
    assert view.items[bn].lines == ["ε 1e-05"]


def test_node_boxes_show_key_attributes_and_weights(demo_path):
    view = build_view(load_model(demo_path).graph)
    conv = _item(view, "/stem/conv")
    assert (conv.kind, conv.title, conv.subtitle, conv.category) == ("node", "Conv", "conv", "conv")
    assert conv.lines == ["k 3×3  s 1  p 1  g 1", "W ⟨16×3×3×3⟩", "B ⟨16⟩"]
    assert conv.members == ["/stem/conv"] and conv.node == "/stem/conv"
    assert _item(view, "/head/fc").lines[0] == "α 1  β 1  transB"
    assert _item(view, "/stage1/block1/dw/conv").lines[0] == "k 3×3  s 1  p 1  g 16"
    assert all(len(item.lines) <= 4 for item in view.items)


def test_small_integer_constants_show_their_values(write_model):
    nodes = [
        helper.make_node("Constant", [], ["shape"], name="shape_const", value_ints=[1, -1]),
        helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape"),
    ]
    model = models.make_model(nodes, [models.tensor("x", shape=[2, 3])], [models.tensor("y", shape=[1, 6])])
    view = build_view(load_model(write_model(model)).graph)
    assert _item(view, "reshape").lines == ["shape = [1, -1]"]


# ---------------------------------------------------------- inputs, outputs
def test_inputs_and_outputs_are_items_with_edges(demo_path):
    view = build_view(load_model(demo_path).graph)
    first, last = view.items[0], view.items[-1]
    assert (first.kind, first.title, first.key) == ("input", "image", "input:image")
    assert first.subtitle == "float32 1×3×32×32"
    assert (last.kind, last.title, last.subtitle) == ("output", "logits", "float32 1×10")
    assert view.inputs == [0] and view.outputs == [len(view.items) - 1]
    edges = {(e.source, e.target): e.tensors for e in view.edges}
    assert edges[(0, view.index["/stem/conv"])] == ["image"]
    assert edges[(view.index["/head/bn"], len(view.items) - 1)] == ["logits"]


def test_every_node_item_edge_follows_graph_order(demo_path):
    view = build_view(load_model(demo_path).graph)
    assert all(e.source < e.target for e in view.edges)
    consumers = Counter(e.source for e in view.edges)
    assert consumers[view.index["/stage2/block1/conv"]] == 2


def test_edge_labels_are_lazy(write_model, monkeypatch):
    model = load_model(write_model(models.conv_bn(channels=4)))
    calls = []
    real = model.infer_shapes
    monkeypatch.setattr(model, "infer_shapes", lambda: (calls.append(1), real())[1])
    view = build_view(model.graph)
    layout_view(view)
    assert calls == []
    inner = next(i for i, e in enumerate(view.edges) if e.tensors == ["c"])
    assert edge_label(view, inner) == "1×4×8×8"
    assert calls
    assert view.edge_label(inner) == "1×4×8×8"


def test_control_flow_nodes_say_they_hold_subgraphs(write_model):
    graph = load_model(write_model(models.if_with_conv_bn())).graph
    view = build_view(graph)
    branch = _item(view, "branch")
    assert branch.has_subgraph and branch.category == "control"
    body = build_view(graph.node("branch").subgraphs["then_branch"][0])
    assert _item(body, "then_conv").lines == ["p 1", "W ⟨4×3×3×3⟩"]  # the weight lives in the outer graph
    assert [body.items[i].key for i in body.outputs] == ["output:then_out"]
    outer = _item(body, "input:x")
    assert (outer.kind, outer.subtitle) == ("input", "from the enclosing graph")
    assert [(e.source, e.target) for e in body.edges][0] == (body.index["input:x"], body.index["then_conv"])


# ----------------------------------------------------------------- grouping
def test_scope_helpers():
    assert scope_of("/encoder/layer.3/attention/MatMul") == "/encoder/layer.3/attention"
    assert scope_of("MatMul_12") == "" and scope_of("/MatMul") == ""
    assert scope_prefixes("/enc/layer.3/attention") == ["/enc", "/enc/layer.3", "/enc/layer.3/attention"]
    assert scope_prefixes("model/conv1") == ["model", "model/conv1"]


def test_scope_tree(write_model):
    root = scopes(load_model(write_model(scoped_model())).graph)
    assert root.prefix == "" and root.size == 37 and root.nodes == ["flatten"]
    encoder = root.children["/encoder"]
    assert (encoder.name, encoder.depth, encoder.size) == ("encoder", 1, 36)
    block = encoder.children["/encoder/stage2"].children["/encoder/stage2/block3"]
    assert block.nodes == [f"/encoder/stage2/block3/{op}" for op in ("conv", "relu", "add")]


def test_grouping_depth_aims_at_a_readable_overview():
    counts = {f"/stage{i // 100}/block{i}": 4 for i in range(25_000)}
    assert grouping_depth(counts) == 1  # 250 stages fit; 25,000 blocks do not
    wrapped = {f"/model/stage{i}/block{j}": 4 for i in range(20) for j in range(10)}
    assert grouping_depth(wrapped) == 3  # 200 blocks fit, the /model wrapper alone says nothing
    assert grouping_depth({"": 5000}) == 0


def test_small_graphs_show_every_node(write_model):
    view = build_view(load_model(write_model(scoped_model())).graph)
    assert not view.grouped
    assert all(i.kind != "group" for i in view.items)


def test_collapsed_above_threshold_and_expanding_shows_children(write_model):
    graph = load_model(write_model(scoped_model())).graph
    view = build_view(graph, ViewOptions(collapse_threshold=10))
    assert view.grouped
    assert [i.key for i in view.items] == [
        "input:x", "group:/encoder/stage1", "group:/encoder/stage2", "group:/encoder/stage3", "flatten", "output:y"
    ]
    stage1 = _item(view, "group:/encoder/stage1")
    assert (stage1.kind, stage1.title, stage1.subtitle, stage1.node) == ("group", "stage1", "12 nodes", None)
    assert stage1.members[:3] == [f"/encoder/stage1/block1/{op}" for op in ("conv", "relu", "add")]
    assert len(stage1.members) == 12 and stage1.category == "conv"
    assert view.node_item["/encoder/stage1/block2/relu"] == view.index["group:/encoder/stage1"]
    edges = {(view.items[e.source].key, view.items[e.target].key): e.tensors for e in view.edges}
    assert edges[("group:/encoder/stage1", "group:/encoder/stage2")] == ["/encoder/stage1/block4/a"]
    assert ("group:/encoder/stage1", "group:/encoder/stage3") not in edges

    opened = build_view(graph, ViewOptions(collapse_threshold=10, expanded=frozenset({"/encoder/stage2"})))
    keys = [i.key for i in opened.items]
    assert keys[2:6] == [f"group:/encoder/stage2/block{b}" for b in range(1, 5)]
    assert "group:/encoder/stage2" not in keys and "group:/encoder/stage1" in keys

    deeper = build_view(
        graph, ViewOptions(collapse_threshold=10, expanded=frozenset({"/encoder/stage2", "/encoder/stage2/block3"}))
    )
    assert "/encoder/stage2/block3/relu" in deeper.index
    assert deeper.node_item["/encoder/stage2/block3/relu"] == deeper.index["/encoder/stage2/block3/relu"]
    assert deeper.node_item["/encoder/stage2/block4/relu"] == deeper.index["group:/encoder/stage2/block4"]
    assert collapse_target(deeper, deeper.index["/encoder/stage2/block3/relu"]) == "/encoder/stage2/block3"
    assert collapse_target(deeper, deeper.index["group:/encoder/stage2/block4"]) == "/encoder/stage2"
    assert collapse_target(deeper, deeper.index["group:/encoder/stage1"]) is None
    assert collapse_target(deeper, deeper.index["flatten"]) is None
    assert collapse_target(deeper, deeper.index["input:x"]) is None


def test_grouping_option_overrides_the_threshold(write_model, demo_path):
    graph = load_model(write_model(scoped_model())).graph
    assert not build_view(graph, ViewOptions(collapse_threshold=10, grouping=False)).grouped
    demo = build_view(load_model(demo_path).graph, ViewOptions(grouping=True))
    groups = [i for i in demo.items if i.kind == "group"]
    assert [g.title for g in groups] == ["stem", "stage1", "stage2", "up", "head"]
    assert sum(len(g.members) for g in groups) == 33  # every visible node, constants still hidden
    assert all(e.source != e.target for e in demo.edges)


def test_one_node_groups_are_shown_as_the_node(write_model):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/lonely/relu"),
        helper.make_node("Relu", ["a"], ["b"], name="/pair/one"),
        helper.make_node("Relu", ["b"], ["y"], name="/pair/two"),
    ]
    model = models.make_model(nodes, [models.tensor("x", shape=[2])], [models.tensor("y", shape=[2])])
    view = build_view(Model(model).graph, ViewOptions(grouping=True))
    assert [i.key for i in view.items] == ["input:x", "/lonely/relu", "group:/pair", "output:y"]


def test_build_view_on_the_demo_is_quick_and_complete(demo_path):
    graph = load_model(demo_path).graph
    view = build_view(graph)
    shown = {n for i in view.items for n in i.members}
    assert shown | view.hidden == {n.name for n in graph.nodes}
    assert len(view.items) == 33 + 2
    assert np.all([i.category for i in view.items])
