"""Sketching a pattern from a selection finds the place it was drawn from, and others like it."""

from __future__ import annotations

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import load_model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.sketch import sketch_pattern
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
