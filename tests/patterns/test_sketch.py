"""Sketching a pattern from a selection finds the place it was drawn from, and others like it."""

from __future__ import annotations

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import load_model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.sketch import sketch_boundary, sketch_nodes, sketch_pattern
from graphlens.patterns.syntax import format_pattern, parse_pattern


def test_sketch_of_a_conv_bn_relu_finds_every_such_block(demo_path):
    model = load_model(demo_path)
    pattern = sketch_pattern(model.graph, ["/stem/conv", "/stem/bn", "/stem/relu"])
    text = format_pattern(pattern)
    assert "conv = Conv(" in text and "bn = BatchNormalization(conv" in text and "relu = Relu(bn)" in text
    assert "weight: const float32" in text  # constants become constant constraints with their dtype
    matches = find_matches(parse_pattern(text), model)  # the edited-and-saved path: via text
    found = {m.nodes["conv"] for m in matches}
    assert "/stem/conv" in found
    # Exact to the selection: the stem conv has a bias input, so only the other conv with a bias
    # matches (it also feeds a side branch, which a sketch allows).
    assert found == {"/stem/conv", "/stage2/block1/conv"}


def test_boundary_inputs_become_wildcards_or_constants(demo_path):
    model = load_model(demo_path)
    pattern = sketch_pattern(model.graph, ["/stage1/block1/add"], constants_as_constraints=False)
    text = format_pattern(pattern)
    assert "Add(" in text and "const" not in text


def test_disconnected_selection_is_refused(demo_path):
    model = load_model(demo_path)
    with pytest.raises(GraphLensError, match="2 separate groups"):
        sketch_pattern(model.graph, ["/stem/conv", "/head/fc"])


def test_empty_and_unknown_selections_are_refused(demo_path):
    model = load_model(demo_path)
    with pytest.raises(GraphLensError, match="at least one node"):
        sketch_pattern(model.graph, [])
    with pytest.raises(GraphLensError, match="no node named 'nope'"):
        sketch_pattern(model.graph, ["nope"])


STEM = ["/stem/conv", "/stem/bn", "/stem/relu"]


def test_op_alternatives_and_any_op(demo_path):
    model = load_model(demo_path)
    pattern = sketch_pattern(model.graph, STEM, ops={"/stem/conv": ("Conv", "ConvTranspose"), "/stem/relu": "*"})
    text = format_pattern(pattern)
    assert "conv = Conv|ConvTranspose(image," in text and "relu = *(bn)" in text
    assert "/stem/conv" in {m.nodes["conv"] for m in find_matches(parse_pattern(text), model)}
    as_text = sketch_pattern(model.graph, STEM, ops={"/stem/conv": "Conv | ConvTranspose"})  # the editor's spelling
    assert "Conv|ConvTranspose(" in format_pattern(as_text)


@pytest.mark.parametrize(
    ("ops", "message"),
    [
        ({"/stem/conv": ()}, "give an op type"),
        ({"/stem/conv": "Conv||Relu"}, "give an op type"),
        ({"/stem/conv": "Conv@x"}, "'Conv@x' is not an op type name"),
        ({"/stem/conv": "*|Conv"}, "'\\*' already means any op"),
        ({"/head/fc": "Gemm"}, "'/head/fc' is not one of the selected nodes"),
    ],
)
def test_impossible_ops_are_refused(demo_path, ops, message):
    model = load_model(demo_path)
    with pytest.raises(GraphLensError, match=message):
        sketch_pattern(model.graph, STEM, ops=ops)


def test_an_optional_middle_node_is_skippable(demo_path):
    model = load_model(demo_path)
    text = format_pattern(sketch_pattern(model.graph, STEM, optional={"/stem/bn"}))
    assert "bn? = BatchNormalization(conv," in text and "relu = Relu(bn)" in text
    matches = find_matches(parse_pattern(text), model)
    with_bn = {m.nodes["conv"] for m in matches if "bn" in m.nodes}
    without_bn = {m.nodes["conv"] for m in matches if "bn" not in m.nodes}
    assert "/stem/conv" in with_bn
    assert all(model.graph.node(m.nodes["relu"]).inputs[0] == model.graph.node(m.nodes["conv"]).outputs[0]
               for m in matches if "bn" not in m.nodes)
    assert without_bn and with_bn.isdisjoint(without_bn)  # the head has a conv feeding a relu directly


def test_optional_is_refused_where_nothing_could_stand_in(demo_path):
    model = load_model(demo_path)
    with pytest.raises(GraphLensError, match="node '/stem/conv' cannot be optional: no other selected node feeds it"):
        sketch_pattern(model.graph, STEM, optional={"/stem/conv"})
    with pytest.raises(GraphLensError, match="node '/stem/relu' cannot be optional: it is the only node"):
        sketch_pattern(model.graph, ["/stem/relu"], optional={"/stem/relu"})
    with pytest.raises(GraphLensError, match="'/head/fc' is not one of the selected nodes"):
        sketch_pattern(model.graph, STEM, optional={"/head/fc"})


def test_value_kinds_override_the_default_per_tensor(demo_path):
    model = load_model(demo_path)
    text = format_pattern(sketch_pattern(model.graph, STEM, value_kinds={"stem.conv.weight": "any"}))
    assert "conv = Conv(image, weight, bias: const float32)" in text
    loose = format_pattern(
        sketch_pattern(model.graph, STEM, constants_as_constraints=False, value_kinds={"stem.bn.running_var": "const"})
    )
    assert "running_var: const float32" in loose and "weight: const" not in loose
    assert "/stem/conv" in {m.nodes["conv"] for m in find_matches(parse_pattern(text), model)}


@pytest.mark.parametrize(
    ("kinds", "message"),
    [
        ({"image": "const"}, "'image' cannot be const: it is not constant here \\(comes from graph input 'image'\\)"),
        ({"stem.conv.weight": "constant"}, "must be 'any' or 'const'"),
        ({"/stem/conv_output_0": "any"}, "is not an input of the selected nodes from outside them"),
    ],
)
def test_impossible_value_kinds_are_refused(demo_path, kinds, message):
    model = load_model(demo_path)
    with pytest.raises(GraphLensError, match=message):
        sketch_pattern(model.graph, STEM, value_kinds=kinds)


def test_boundary_and_node_listings_use_the_sketch_labels(demo_path):
    model = load_model(demo_path)
    boundary = sketch_boundary(model.graph, STEM)
    assert [tuple(b) for b in boundary] == [
        ("image", "image", False),
        ("weight", "stem.conv.weight", True),
        ("bias", "stem.conv.bias", True),
        ("weight_2", "stem.bn.weight", True),
        ("bias_2", "stem.bn.bias", True),
        ("running_mean", "stem.bn.running_mean", True),
        ("running_var", "stem.bn.running_var", True),
    ]
    nodes = sketch_nodes(model.graph, STEM)
    assert [(n.label, n.name, n.op_type, n.can_be_optional) for n in nodes] == [
        ("conv", "/stem/conv", "Conv", False), ("bn", "/stem/bn", "BatchNormalization", True),
        ("relu", "/stem/relu", "Relu", True),
    ]
    pattern = sketch_pattern(model.graph, STEM)
    assert set(pattern.labels()) == {b.label for b in boundary} | {n.label for n in nodes}
    # Every label in the listing binds the tensor it names where the sketch came from.
    origin = next(m for m in find_matches(pattern, model) if m.nodes["conv"] == "/stem/conv")
    assert all(origin.values[b.label] == b.tensor for b in boundary)
    assert all(origin.nodes[n.label] == n.name for n in nodes)


def test_labels_of_a_residual_add_with_shared_inputs(demo_path):
    model = load_model(demo_path)
    selection = ["/stage1/block1/pw/conv", "/stage1/block1/pw/bn", "/stage1/block1/add"]
    boundary = sketch_boundary(model.graph, selection)
    text = format_pattern(sketch_pattern(model.graph, selection))
    for label, _tensor, _const in boundary:
        assert f"{label}" in text
    assert [b.tensor for b in boundary][0] == "/stage1/block1/dw/relu_output_0"
    assert boundary[-1].tensor == "/stem/maxpool_output_0" and not boundary[-1].is_constant
