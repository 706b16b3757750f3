"""Explain at a node places what feeds it before what reads it: a site that fails downstream shows most of itself."""

from __future__ import annotations

from graphlens.core.model import Model
from graphlens.matching.explain import explain
from graphlens.patterns.library import get_pattern
from tests.rewrites import transformer_attention_models as am


def _probabilities_summed():
    """Attention whose probabilities are summed over the heads instead of multiplied by V (rxnmap's last layer)."""
    proto = am.build(am.variant(mask="add"))
    context = next(n for n in proto.graph.node if n.name == "context")
    context.op_type = "ReduceSum"
    del context.input[1:]
    return proto


def test_at_the_softmax_the_scores_scale_and_mask_are_placed_and_the_reader_is_the_failure():
    result = explain(get_pattern("attention"), Model(_probabilities_summed()), at="softmax")
    assert not result.matched
    assert result.failure is not None and result.failure.node == "context" and result.failure.kind == "op_type"
    placed = set(result.mapping.values())
    assert {"softmax", "scores", "mask"} <= placed and len(placed) >= 6


def test_near_misses_of_attention_are_its_softmaxes():
    result = explain(get_pattern("attention"), Model(_probabilities_summed()))
    assert [m.at for m in result.near_misses] == ["softmax"]
