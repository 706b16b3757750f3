"""Runs of identical sibling scopes drawn as one box marked ×N that opens into the scopes."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphlens.core.model import load_model
from graphlens.layout.layered import layout_view
from graphlens.layout.repeats import repeat_key, repeat_title, signature, stem
from graphlens.layout.view import ViewOptions, build_view, collapse_target
from tests.models import init, make_model, tensor


def _block(scope: str, source: str, inits: list, *, gelu: bool = False) -> tuple[list, str]:
    """MatMul -> Add -> Relu (or Sigmoid·x) -> Add(residual), every node named under ``scope``."""
    inits += [init(f"{scope}.w", np.eye(4, dtype=np.float32)), init(f"{scope}.b", np.zeros(4, np.float32))]
    nodes = [
        helper.make_node("MatMul", [source, f"{scope}.w"], [f"{scope}.mm"], name=f"/{scope}/MatMul"),
        helper.make_node("Add", [f"{scope}.mm", f"{scope}.b"], [f"{scope}.add"], name=f"/{scope}/Add"),
    ]
    if gelu:
        nodes += [helper.make_node("Sigmoid", [f"{scope}.add"], [f"{scope}.sig"], name=f"/{scope}/Sigmoid"),
                  helper.make_node("Mul", [f"{scope}.add", f"{scope}.sig"], [f"{scope}.act"], name=f"/{scope}/Mul")]
    else:
        nodes += [helper.make_node("Relu", [f"{scope}.add"], [f"{scope}.act"], name=f"/{scope}/Relu")]
    nodes += [helper.make_node("Add", [source, f"{scope}.act"], [f"{scope}.out"], name=f"/{scope}/Add_1")]
    return nodes, f"{scope}.out"


def four_layers_and_a_head():
    """x -> layers.0 … layers.3 (identical) -> layers.4 (another activation) -> y."""
    nodes, inits, source = [], [], "x"
    for k in range(5):
        block, source = _block(f"layers.{k}", source, inits, gelu=k == 4)
        nodes += block
    return make_model(nodes, [tensor("x", shape=[1, 4])], [tensor(source, shape=[1, 4])], inits)


def _grouped(write_model, expanded=frozenset()):
    model = load_model(write_model(four_layers_and_a_head()))
    return build_view(model.graph, ViewOptions(grouping=True, expanded=frozenset(expanded)))


RUN = repeat_key("/layers.0", "/layers.3", 4)


def test_identical_blocks_are_one_box_marked_times_four(write_model):
    view = _grouped(write_model)
    assert [i.key for i in view.items] == ["input:x", RUN, "group:/layers.4", "output:layers.4.out"]
    run = view.items[view.index[RUN]]
    assert (run.kind, run.title, run.subtitle) == ("group", "layers.0 … layers.3 ×4", "4 nodes each")
    assert run.lines == ["Add ×2  MatMul ×1  Relu ×1"]
    assert len(run.members) == 16
    edges = {(view.items[e.source].key, view.items[e.target].key) for e in view.edges}
    assert edges == {("input:x", RUN), (RUN, "group:/layers.4"), ("group:/layers.4", "output:layers.4.out")}
    layout_view(view)


def test_opening_the_run_shows_the_four_scopes_still_collapsed(write_model):
    view = _grouped(write_model, {RUN})
    assert [i.key for i in view.items] == [
        "input:x", *(f"group:/layers.{k}" for k in range(5)), "output:layers.4.out"]
    assert view.items[1].title == "layers.0"


def test_siblings_wired_differently_are_not_merged(write_model):
    """layers.1 adds its activation to itself instead of to its input: same ops, other wiring."""
    proto = four_layers_and_a_head()
    residual = next(n for n in proto.graph.node if n.name == "/layers.1/Add_1")
    residual.input[0] = residual.input[1]
    graph = load_model(write_model(proto)).graph
    blocks = [[n for n in graph.nodes if n.name.startswith(f"/layers.{k}/")] for k in range(3)]
    assert signature(blocks[0]) == signature(blocks[2]) != signature(blocks[1])
    view = build_view(graph, ViewOptions(grouping=True))
    assert [i.key for i in view.items] == [
        "input:x", "group:/layers.0", "group:/layers.1", repeat_key("/layers.2", "/layers.3", 2),
        "group:/layers.4", "output:layers.4.out"]


def test_names_that_differ_beyond_an_index_are_not_one_run():
    assert stem("/model/layers.11") == stem("/model/layers") == "/model/layers"
    assert stem("/rxn_layer_3") == "/rxn_layer"
    assert stem("/mol_layer/linear1") != stem("/mol_layer/linear2")
    assert repeat_title(repeat_key("/a/rxn_layer_1", "/a/rxn_layer_6", 6)) == "rxn_layer_1 … rxn_layer_6 ×6"


def test_small_graphs_shown_node_by_node_are_untouched(write_model):
    model = load_model(write_model(four_layers_and_a_head()))
    view = build_view(model.graph)
    assert all(i.kind != "group" for i in view.items)


def test_a_block_of_an_opened_run_folds_the_run_back(write_model):
    view = _grouped(write_model, {RUN})
    assert collapse_target(view, view.index["group:/layers.2"]) == RUN
    assert collapse_target(view, view.index["group:/layers.4"]) is None
