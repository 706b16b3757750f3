"""Branches of an either that differ only in their op type are both tried."""

from __future__ import annotations

from onnx import helper

from graphlens.core.model import Model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.syntax import parse_pattern
from tests.models import make_model, tensor

TEXT = """pattern any-gelu: a standard or an onnxruntime Gelu
x: any
either
  out = Gelu(x)
or
  out = Gelu@com.microsoft(x)
end
"""


def test_the_second_branch_matches_what_only_it_names():
    node = helper.make_node("Gelu", ["x"], ["y"], name="ms_gelu", domain="com.microsoft")
    proto = make_model([node], [tensor("x", shape=[2])], [tensor("y", shape=[2])])
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    [match] = find_matches(parse_pattern(TEXT, name="any-gelu"), Model(proto))
    assert match.nodes == {"out": "ms_gelu"}
