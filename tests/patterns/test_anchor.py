"""``anchor OPS``: the ops a pattern's sites are known by, where explain's near misses start."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from graphlens.core.model import Model
from graphlens.matching.explain import explain
from graphlens.patterns.jsonform import dumps, loads
from graphlens.patterns.printer import format_pattern as to_text
from graphlens.patterns.syntax import PatternSyntaxError, parse_pattern
from tests.models import init, make_model, tensor

TEXT = """pattern scaled-softmax: softmax of scaled scores, then a MatMul
anchor Softmax
scores = MatMul(a, b)
scaled = Mul(scores, s: const)
probs = Softmax(scaled)
out = MatMul(probs, v)
"""


def _model():
    """Three MatMuls by weights (near misses from MatMul), and one Softmax whose output goes to a ReduceSum."""
    nodes = [
        helper.make_node("MatMul", ["x", "w1"], ["h1"], name="proj1"),
        helper.make_node("MatMul", ["h1", "w2"], ["h2"], name="proj2"),
        helper.make_node("MatMul", ["h2", "w3"], ["scores"], name="scores"),
        helper.make_node("Mul", ["scores", "s"], ["scaled"], name="scale"),
        helper.make_node("Softmax", ["scaled"], ["probs"], name="softmax", axis=-1),
        helper.make_node("ReduceSum", ["probs", "axes"], ["y"], name="sum", keepdims=1),
    ]
    inits = [init(f"w{i}", np.ones((4, 4), np.float32)) for i in (1, 2, 3)]
    inits += [init("s", np.array(0.5, np.float32)), init("axes", np.array([-1], np.int64))]
    return make_model(nodes, [tensor("x", shape=[2, 4])], [tensor("y", shape=[2, 1])], inits)


def test_anchor_parses_prints_and_survives_json():
    pattern = parse_pattern(TEXT, name="scaled-softmax")
    assert pattern.anchors == ("Softmax",)
    assert "anchor Softmax" in to_text(pattern)
    assert parse_pattern(to_text(pattern)).anchors == ("Softmax",)
    assert loads(dumps(pattern)).anchors == ("Softmax",)


def test_an_anchor_the_pattern_does_not_have_is_an_error():
    with pytest.raises(PatternSyntaxError, match="anchor 'Gelu' is not an op of the pattern"):
        parse_pattern(TEXT.replace("anchor Softmax", "anchor Gelu"))


def test_near_misses_start_only_at_the_anchor():
    anchored = explain(parse_pattern(TEXT), Model(_model()))
    assert [m.at for m in anchored.near_misses] == ["softmax"]
    assert "ReduceSum 'sum'" in anchored.near_misses[0].message
    free = explain(parse_pattern(TEXT.replace("anchor Softmax\n", "")), Model(_model()))
    assert len(free.near_misses) > 1  # without the anchor, MatMuls by weights are near misses too
