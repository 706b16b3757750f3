"""Explain names the node and the reason, and agrees with the matcher."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from graphlens.core.model import Model, load_model
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern, library
from graphlens.patterns.syntax import parse_pattern
from tests import models

CONV_BN = get_pattern("conv-bn")


def _conv_bn_with(extra_nodes=(), outputs=("y",), bn_attrs=None, channels=4):
    params = models.bn_params(channels)
    w = np.ones((channels, 3, 1, 1), np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", *params], ["y"], name="bn", **(bn_attrs or {})),
        *extra_nodes,
    ]
    inits = [models.init("w", w)] + [models.init(k, v) for k, v in params.items()]
    return Model(models.make_model(nodes, [models.tensor("x", shape=[1, 3, 4, 4])],
                                   [models.tensor(o, shape=None) for o in outputs], inits))


def test_non_constant_bn_parameter():
    model = Model(models.conv_bn_mean_from_input())
    result = explain(CONV_BN, model, at="bn")
    assert not result.matched
    assert result.message == ("input 3 (mean) of BatchNormalization 'bn' comes from graph input 'bn_mean' and is not "
                              "constant")
    data = result.to_json()
    assert (data["kind"], data["node"], data["pattern_label"], data["input"]) == ("constant", "bn", "mean", 3)
    assert data["mapping"] == {"bn": "bn", "conv": "conv"}  # the partial match is complete in shape


def test_second_consumer_of_the_conv_output():
    model = _conv_bn_with([helper.make_node("Relu", ["c"], ["s"], name="side")], outputs=("y", "s"))
    result = explain(CONV_BN, model, at="bn")
    assert result.message == "the output of Conv 'conv' has 2 consumers ('bn', 'side'), so folding would change 'side'"
    assert result.failure.kind == "sole_use" and result.failure.extra["outside_consumers"] == ["side"]


def test_training_mode():
    result = explain(CONV_BN, _conv_bn_with(bn_attrs={"training_mode": 1}), at="bn")
    assert result.message.startswith("BatchNormalization 'bn' has training_mode=1")
    assert result.failure.kind == "attribute" and result.failure.expected == "training_mode 0 or absent"


def test_wrong_op_type_feeding_the_bn():
    pattern = parse_pattern("conv = Conv|ConvTranspose(x, w: const)\n"
                            "bn = BatchNormalization(conv, s: const, b: const, m: const, v: const)\n")
    params = models.bn_params(2)
    nodes = [
        helper.make_node("Add", ["x", "x"], ["a"], name="add"),
        helper.make_node("BatchNormalization", ["a", *params], ["y"], name="bn"),
    ]
    model = Model(models.make_model(nodes, [models.tensor("x", shape=[1, 2, 4, 4])], [models.tensor("y", shape=None)],
                                    [models.init(k, v) for k, v in params.items()]))
    result = explain(pattern, model, at="bn")
    assert result.message == ("input 0 of BatchNormalization 'bn' comes from Add 'add': op type is Add where "
                              "Conv or ConvTranspose was expected")
    assert result.failure.kind == "op_type" and result.failure.actual == "Add"


def test_conv_output_that_is_a_graph_output():
    result = explain(CONV_BN, _conv_bn_with(outputs=("y", "c")), at="conv")
    assert result.message == "the output 'c' of Conv 'conv' is a graph output, so folding would remove it"


def test_node_of_a_type_the_pattern_lacks():
    result = explain(CONV_BN, _conv_bn_with([helper.make_node("Relu", ["y"], ["r"], name="relu")], outputs=("r",)),
                     at="relu")
    assert not result.matched and result.message.startswith("Relu 'relu': op type is Relu, and conv-bn has no node of "
                                                            "that type")


def test_unknown_node_suggests_close_names():
    with pytest.raises(Exception, match="no node named 'bm'.*did you mean 'bn'"):
        explain(CONV_BN, _conv_bn_with(), at="bm")


def test_match_inside_an_if_branch_is_explained_there():
    model = Model(models.if_with_conv_bn())
    result = explain(CONV_BN, model, at="then_bn")
    assert result.matched and result.graph == "main/branch:then_branch"


def test_near_misses_on_the_demo_model_rank_the_deepest_first(demo_path):
    result = explain(CONV_BN, load_model(demo_path))
    assert result.match_count == 6
    first = result.near_misses[0]
    assert first.mapping == {"conv": "/stage2/block1/conv", "bn": "/stage2/block1/bn"}
    assert "so folding would change '/stage2/block1/tap/maxpool'" in first.message
    depths = [len(n.mapping) for n in result.near_misses]
    assert depths == sorted(depths, reverse=True)
    assert result.to_json()["matched"] is True


@pytest.mark.parametrize("name", list(library()))
def test_explain_agrees_with_the_matcher_at_every_node(demo_path, name):
    model = load_model(demo_path)
    pattern = get_pattern(name)
    in_a_match = {n for m in find_matches(pattern, model) for n in m.nodes.values()}
    for node in model.graph.nodes:
        result = explain(pattern, model, at=node.name)
        assert result.matched == (node.name in in_a_match), (node.name, result.message)
