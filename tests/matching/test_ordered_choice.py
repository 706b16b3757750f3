"""Either/or is an ordered choice: at one site a pattern yields one match, its first alternative that matches."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.model import Model
from graphlens.matching.explain import explain
from graphlens.matching.matcher import Matcher, find_matches
from graphlens.patterns.library import get_pattern
from graphlens.patterns.syntax import parse_pattern
from tests import models
from tests.matching import pattern_models as pm

CONV_MUL_FIRST = parse_pattern(
    """pattern mul-first
conv = Conv(x, w: const)
either
  out = Mul(conv, s: const)
or
  mul = Mul(conv, s: const)
  out = Add(mul, b: const)
end
"""
)


def nodes_of(matches) -> list[dict[str, str]]:
    return [m.nodes for m in matches]


def conv_feeding(*consumers: onnx.NodeProto, outputs=("y",)) -> Model:
    """x -> Conv 'conv' -> c, read by ``consumers``; constants s and b are per-channel."""
    inits = [
        models.init("w", np.ones((4, 3, 1, 1), np.float32)),
        models.init("s", np.full((4, 1, 1), 2.0, np.float32)),
        models.init("b", np.full((4, 1, 1), 0.5, np.float32)),
    ]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"), *consumers]
    return Model(models.make_model(nodes, [models.tensor("x", shape=[1, 3, 4, 4])],
                                   [models.tensor(o, shape=[1, 4, 4, 4]) for o in outputs], inits))


@pytest.mark.parametrize("anchored", [True, False])
def test_the_first_alternative_that_matches_is_the_match_not_the_largest(anchored):
    model = Model(pm.conv_mul_add())
    assert nodes_of(find_matches(get_pattern("conv-mul-add"), model, anchored=anchored)) == [
        {"conv": "conv", "mul": "mul", "out": "add"}
    ]
    # Written the other way round, Conv -> Mul comes first and wins at the same conv.
    assert nodes_of(find_matches(CONV_MUL_FIRST, model, anchored=anchored)) == [{"conv": "conv", "out": "mul"}]


def test_an_optional_node_present_wins_over_skipped():
    pattern = parse_pattern("conv = Conv(x, w: const)\nact? = Relu(conv)\n")
    model = conv_feeding(helper.make_node("Relu", ["c"], ["y"], name="relu"))
    assert nodes_of(find_matches(pattern, model)) == [{"conv": "conv", "act": "relu"}]


def test_alternatives_at_different_sites_are_all_kept():
    # Choice-only patterns are placed by their output node: two GELUs are two sites.
    assert Matcher(get_pattern("gelu")).site_labels == ("out",)
    assert Matcher(get_pattern("conv-mul-add")).site_labels == ("conv",)
    assert Matcher(get_pattern("conv-bn")).site_labels == ("bn", "conv")
    proto = pm.gelu_erf()
    extra = [
        helper.make_node("Div", ["y", "sqrt2"], ["d2"], name="div_b"),
        helper.make_node("Erf", ["d2"], ["e2"], name="erf_b"),
        helper.make_node("Add", ["e2", "one"], ["p2"], name="add1_b"),
        helper.make_node("Mul", ["y", "p2"], ["m2"], name="mul_x_b"),
        helper.make_node("Mul", ["m2", "half"], ["y2"], name="mul_half_b"),
    ]
    proto.graph.node.extend(extra)
    proto.graph.output[0].name = "y2"
    assert [m.nodes["out"] for m in find_matches(get_pattern("gelu"), Model(proto))] == ["mul_half", "mul_half_b"]


def shared_conv_model() -> tuple[Model, object]:
    """One conv read by a Mul and by an Add: two alternatives at one site, allowed to share the conv."""
    pattern = parse_pattern(
        """pattern shared-affine
allow shared
conv = Conv(x, w: const)
either
  out = Mul(conv, s: const)
or
  out = Add(conv, b: const)
end
"""
    )
    model = conv_feeding(
        helper.make_node("Mul", ["c", "s"], ["y"], name="mul"),
        helper.make_node("Add", ["c", "b"], ["z"], name="add"),
        outputs=("y", "z"),
    )
    return model, pattern


def test_explain_agrees_with_the_matcher_on_a_shadowed_alternative():
    model, pattern = shared_conv_model()
    assert nodes_of(find_matches(pattern, model)) == [{"conv": "conv", "out": "mul"}]
    at_mul = explain(pattern, model, at="mul")
    assert at_mul.matched and at_mul.mapping == {"conv": "conv", "out": "mul"}
    at_add = explain(pattern, model, at="add")
    assert not at_add.matched
    assert at_add.failure.kind == "ordered_choice" and at_add.failure.extra["winner"] == {"conv": "conv", "out": "mul"}
    assert at_add.message == (
        "at Conv 'conv' an earlier alternative of shared-affine matches (conv = Conv 'conv', out = Mul 'mul'), "
        "and the first one that matches at a site is the match"
    )


def test_explain_at_any_node_of_the_chain_reports_the_one_match():
    model = Model(pm.conv_mul_add())
    for node in ("conv", "mul", "add"):
        result = explain(get_pattern("conv-mul-add"), model, at=node)
        assert result.matched and result.mapping == {"conv": "conv", "mul": "mul", "out": "add"}


def test_non_overlapping_keeps_the_larger_of_two_matches_starting_at_the_same_node():
    pattern = parse_pattern(
        """pattern relu-pair
either
  a = Relu(x)
  out = Relu(a)
or
  out = Relu(x)
end
"""
    )
    nodes = [helper.make_node("Relu", ["x"], ["r1"], name="r1"), helper.make_node("Relu", ["r1"], ["y"], name="r2")]
    model = Model(models.make_model(nodes, [models.tensor("x", shape=[2])], [models.tensor("y", shape=[2])]))
    # r2 alone is shadowed by the pair ending at r2; r1 alone is its own site.
    assert nodes_of(find_matches(pattern, model)) == [{"out": "r1"}, {"a": "r1", "out": "r2"}]
    assert nodes_of(find_matches(pattern, model, non_overlapping=True)) == [{"a": "r1", "out": "r2"}]
