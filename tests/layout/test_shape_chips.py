"""Shape arithmetic drawn as a line in the box that uses the shape, and drawn out when asked."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphlens.core.model import load_model
from graphlens.layout.shape_ops import computed_text, shape_arithmetic
from graphlens.layout.view import ViewOptions, build_view, hidden_nodes, scopes
from tests.models import init, make_model, tensor

CHAIN = ("shape", "gather", "unsqueeze", "concat")


def reshape_by_computed_shape(*, shape_also_added: bool = False):
    """``x → Relu → Reshape(shape = Concat(Unsqueeze(Gather(Shape(x), 0)), [-1]))``, as PyTorch writes
    ``x.view(x.size(0), -1)``; ``shape_also_added``: the Shape's value is also added to an activation."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "zero"], ["batch"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes0"], ["batch1"], name="unsqueeze"),
        helper.make_node("Concat", ["batch1", "minus_one"], ["target"], name="concat", axis=0),
        helper.make_node("Reshape", ["r", "target"], ["y"], name="reshape"),
    ]
    outputs = [tensor("y", shape=None)]
    if shape_also_added:
        nodes += [
            helper.make_node("Cast", ["s"], ["s_float"], name="cast", to=1),
            helper.make_node("Add", ["pooled", "s_float"], ["z"], name="add_shape"),
            helper.make_node("ReduceMean", ["x"], ["pooled"], name="pool", axes=[0, 1, 2], keepdims=0),
        ]
        nodes = nodes[:6] + [nodes[8], nodes[6], nodes[7]]
        outputs.append(tensor("z", shape=None))
    inits = [
        init("zero", np.array(0, np.int64)),
        init("axes0", np.array([0], np.int64)),
        init("minus_one", np.array([-1], np.int64)),
    ]
    return make_model(nodes, [tensor("x", shape=[2, 3, 4, 4])], outputs, inits)


def _graph(write_model, **kwargs):
    return load_model(write_model(reshape_by_computed_shape(**kwargs))).graph


def test_the_chain_is_hidden_and_the_reshape_says_its_shape_is_computed(write_model):
    view = build_view(_graph(write_model))
    assert view.shape_ops == set(CHAIN)
    assert not set(CHAIN) & set(view.node_item)
    assert [i.key for i in view.items] == ["input:x", "relu", "reshape", "output:y"]
    reshape = view.items[view.index["reshape"]]
    assert reshape.lines == ["shape ⟨computed: Shape·Gather·…·Concat⟩"]
    assert {(view.items[e.source].key, view.items[e.target].key) for e in view.edges} == {
        ("input:x", "relu"), ("relu", "reshape"), ("reshape", "output:y")}


def test_a_hidden_shape_node_is_found_in_the_box_that_shows_it(write_model):
    graph = _graph(write_model)
    chips = build_view(graph)
    assert {name: chips.item_showing(name) for name in CHAIN} == dict.fromkeys(CHAIN, chips.index["reshape"])
    assert chips.item_showing("relu") == chips.index["relu"] and chips.item_showing("nowhere") is None
    drawn = build_view(graph, ViewOptions(show_shape_ops=True))
    assert drawn.item_showing("concat") == drawn.index["concat"] and drawn.chip_item == {}


def test_show_shape_ops_draws_the_chain_with_its_edges(write_model):
    view = build_view(_graph(write_model), ViewOptions(show_shape_ops=True))
    assert view.shape_ops == frozenset()
    assert set(CHAIN) <= set(view.node_item)
    reshape = view.index["reshape"]
    assert view.items[reshape].lines == []
    assert any(e.source == view.index["concat"] and e.target == reshape for e in view.edges)
    assert view.items[view.index["concat"]].lines == ["axis 0", "inputs = [-1]"]


def test_a_shape_added_to_an_activation_is_drawn(write_model):
    graph = _graph(write_model, shape_also_added=True)
    found = shape_arithmetic(graph, hidden_nodes(graph))
    assert "shape" not in found and "cast" not in found
    assert found == {"gather", "unsqueeze", "concat"}
    view = build_view(graph)
    assert {"shape", "cast", "add_shape"} <= set(view.node_item)
    gather_only = view.items[view.index["reshape"]].lines
    assert gather_only == ["shape ⟨computed: Gather·Unsqueeze·Concat⟩"]
    assert any(view.items[e.source].key == "shape" and view.items[e.target].key == "cast" for e in view.edges)


def test_a_shape_that_is_a_graph_output_is_drawn(write_model):
    model = reshape_by_computed_shape()
    model.graph.output.append(tensor("target", TensorProto.INT64, shape=None))
    graph = load_model(write_model(model)).graph
    assert shape_arithmetic(graph, hidden_nodes(graph)) == frozenset()


def test_a_computed_slice_bound_merges_with_its_neighbour(write_model):
    nodes = [
        helper.make_node("Shape", ["x"], ["s"], name="shape"),
        helper.make_node("Gather", ["s", "last"], ["n"], name="gather", axis=0),
        helper.make_node("Unsqueeze", ["n", "axes0"], ["n1"], name="unsqueeze"),
        helper.make_node("Div", ["n1", "two"], ["half"], name="div"),
        helper.make_node("Slice", ["x", "half", "n1", "axes_last"], ["y"], name="slice"),
    ]
    inits = [init("last", np.array(-1, np.int64)), init("axes0", np.array([0], np.int64)),
             init("two", np.array([2], np.int64)), init("axes_last", np.array([-1], np.int64))]
    graph = load_model(write_model(make_model(nodes, [tensor("x", shape=[2, 8])], [tensor("y", shape=None)],
                                              inits))).graph
    view = build_view(graph)
    assert [i.key for i in view.items] == ["input:x", "slice", "output:y"]
    assert view.items[view.index["slice"]].lines == [
        "starts ⟨computed: Shape·Gather·…·Div⟩", "ends ⟨computed: Shape·Gather·Unsqueeze⟩", "axes = [-1]"]


def test_scopes_leave_out_hidden_shape_arithmetic(write_model):
    graph = _graph(write_model)
    assert not set(CHAIN) & set(_names(scopes(graph)))
    assert set(CHAIN) <= set(_names(scopes(graph, show_shape_ops=True)))


def _names(scope):
    yield from scope.nodes
    for child in scope.children.values():
        yield from _names(child)


def test_computed_text_keeps_the_first_ops_and_the_last():
    assert computed_text(["Shape"]) == "⟨computed: Shape⟩"
    assert computed_text(["Shape", "Gather", "Concat"]) == "⟨computed: Shape·Gather·Concat⟩"
    assert computed_text(["Shape", "Gather", "Unsqueeze", "Concat"]) == "⟨computed: Shape·Gather·…·Concat⟩"


def test_dims_shape_inference_made_up_read_as_unknown():
    from graphlens.layout.labels import dims_text

    assert dims_text([1, "seq_len", "unk__3", None, 16]) == "1×seq_len×?×?×16"
