"""Site: a rule's view of one match, and what a rule reading a label its patterns do not bind gets."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.core.model import Model
from graphlens.matching.matcher import Matcher
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.rule import Refusal, Rule, Site
from tests.matching import pattern_models as pm


class _Reader(Rule):
    name = "reader"
    pattern_names = ("conv-mul-add",)


def _site() -> Site:
    [match] = Matcher(get_pattern("conv-mul-add")).find(Model(pm.conv_mul()))
    return Site(match, _Reader())


def test_labels_every_variant_binds_read_as_nodes_and_tensors():
    site = _site()
    assert site.matched("conv").op_type == "Conv" and site.matched("out").op_type == "Mul"
    assert site.value("scale") == site.matched("out").inputs[1]
    scale = site.const_read_by("scale", site.matched("out"))
    assert not isinstance(scale, Refusal) and np.array_equal(scale, site.const("scale"))


def test_a_label_the_match_lacks_is_a_broken_rule_named_in_the_error_not_a_refusal():
    site = _site()
    assert site.node("mul") is None and site.tensor("shift") is None  # the Mul-only variant
    with pytest.raises(LookupError, match="rule reader: pattern conv-mul-add binds no node 'mul'"):
        site.matched("mul")
    with pytest.raises(LookupError, match="binds no value 'shift'"):
        site.value("shift")
