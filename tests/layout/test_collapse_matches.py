"""Every match of a pattern drawn as one box titled with the pattern's name."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphlens.core.model import load_model
from graphlens.layout.collapse_matches import MATCH_PREFIX, match_keys, match_title
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view, collapse_target
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import resolve_pattern
from tests.models import bn_params, init, make_model, rng, tensor


def two_conv_bn_blocks():
    """x -> Conv 'conv1' -> BN 'bn1' -> Relu 'relu' -> Conv 'conv2' -> BN 'bn2' -> Sigmoid 'sig' -> y."""
    nodes, inits = [], []
    source = "x"
    for k, after in ((1, "Relu"), (2, "Sigmoid")):
        params = bn_params(4, prefix=f"bn{k}")
        inits += [init(f"w{k}", rng.normal(0, 0.5, (4, 4 if k == 2 else 3, 3, 3)).astype(np.float32))]
        inits += [init(n, v) for n, v in params.items()]
        nodes += [
            helper.make_node("Conv", [source, f"w{k}"], [f"c{k}"], name=f"conv{k}", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", [f"c{k}", *params], [f"b{k}"], name=f"bn{k}"),
            helper.make_node(after, [f"b{k}"], [f"a{k}"], name="relu" if k == 1 else "sig"),
        ]
        source = f"a{k}"
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("a2", shape=[1, 4, 8, 8])], inits)


def _graph_and_keys(write_model):
    model = load_model(write_model(two_conv_bn_blocks()))
    found = find_matches(resolve_pattern("conv-bn"), model)
    return model.graph, match_keys("conv-bn", (m.node_names for m in found))


def _edges(view):
    return {(view.items[e.source].key, view.items[e.target].key) for e in view.edges}


def test_match_keys_number_the_matches_and_titles_name_the_pattern():
    keys = match_keys("attention", [["a", "b"], ["c"], ["b", "d"]])
    assert keys == {"a": "attention#1", "b": "attention#1", "c": "attention#2", "d": "attention#3"}
    assert match_title(MATCH_PREFIX + "attention#12") == "attention"
    assert match_title(MATCH_PREFIX + "a#b") == "a#b"


def test_each_match_is_one_box_titled_with_the_pattern(write_model):
    graph, keys = _graph_and_keys(write_model)
    assert keys == {"conv1": "conv-bn#1", "bn1": "conv-bn#1", "conv2": "conv-bn#2", "bn2": "conv-bn#2"}
    plain = build_view(graph)
    view = build_view(graph, ViewOptions(collapsed_matches=keys))
    assert [i.key for i in view.items] == ["input:x", "match:conv-bn#1", "relu", "match:conv-bn#2", "sig", "output:a2"]
    first = view.items[view.index["match:conv-bn#1"]]
    assert (first.kind, first.title, first.subtitle) == ("group", "conv-bn", "match 1 · 2 nodes")
    assert first.members == ["conv1", "bn1"]
    assert first.lines == ["Conv ×1  BatchNormalization ×1"]
    assert view.item_showing("bn2") == view.index["match:conv-bn#2"]
    assert _edges(view) == {("input:x", "match:conv-bn#1"), ("match:conv-bn#1", "relu"), ("relu", "match:conv-bn#2"),
                            ("match:conv-bn#2", "sig"), ("sig", "output:a2")}
    for name in ("relu", "sig"):  # the nodes outside the matches are drawn as before
        assert view.items[view.index[name]] == plain.items[plain.index[name]]
    layout_view(view)  # and the boxes lay out


def test_an_opened_match_is_drawn_node_by_node_and_folds_back(write_model):
    graph, keys = _graph_and_keys(write_model)
    view = build_view(graph, ViewOptions(collapsed_matches=keys, expanded=frozenset({"match:conv-bn#2"})))
    assert "match:conv-bn#1" in view.index and "match:conv-bn#2" not in view.index
    assert {"conv2", "bn2"} <= set(view.index)
    assert collapse_target(view, view.index["bn2"]) == "match:conv-bn#2"
    assert collapse_target(view, view.index["relu"]) is None


def test_matches_take_their_nodes_from_collapsed_scope_groups(write_model):
    graph, keys = _graph_and_keys(write_model)
    view = build_view(graph, ViewOptions(grouping=True, collapse_threshold=0, collapsed_matches=keys))
    assert {view.items[view.item_showing(n)].key for n in keys} == {"match:conv-bn#1", "match:conv-bn#2"}
