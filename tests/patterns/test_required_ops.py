"""The ops every match of a pattern needs: a model without one of them is not searched at all."""

from __future__ import annotations

from graphlens.patterns.library import get_pattern


def test_required_ops_leave_out_optional_nodes_and_either_branches():
    required = get_pattern("conv-bn").required_ops()
    assert ("BatchNormalization",) in required and ("Conv", "ConvTranspose") in required
    assert ("Add",) not in required  # the optional bias Add
    assert get_pattern("attention").required_ops().count(("Softmax",)) == 1
    gelu = get_pattern("gelu").required_ops()
    assert ("Erf",) not in gelu and ("Tanh",) not in gelu  # one of two branches


def test_a_model_without_a_required_op_is_not_matched(monkeypatch):
    from graphlens.core.model import Model
    from graphlens.matching import matcher
    from graphlens.rewrites.driver import fold_model, resolve_rules
    from tests import models

    compiled = []
    original = matcher.Matcher.__init__

    def spy(self, pattern):
        compiled.append(pattern.name)
        original(self, pattern)

    monkeypatch.setattr(matcher.Matcher, "__init__", spy)
    fold_model(Model(models.conv_bn()), resolve_rules(["transformers", "fold-bn"]))
    assert "conv-bn" in compiled and "attention" not in compiled and "rotary-embedding" not in compiled
