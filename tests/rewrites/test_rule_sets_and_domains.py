"""Named rule sets, the opset imports a contrib-op rewrite brings, and the report's sites per kind."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.rewrites.driver import resolve_rules
from graphlens.rewrites.edit import EditHistory, GraphEdit
from graphlens.rewrites.rules import RULE_SETS, RULES
from tests.models import init, make_model, tensor


def _gelu_in_pieces() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Div", ["x", "sqrt2"], ["d"], name="div"),
        helper.make_node("Erf", ["d"], ["e"], name="erf"),
        helper.make_node("Add", ["e", "one"], ["p"], name="plus1"),
        helper.make_node("Mul", ["x", "p"], ["m"], name="mul"),
        helper.make_node("Mul", ["m", "half"], ["y"], name="half"),
    ]
    inits = [init("sqrt2", np.array(1.4142135, np.float32)), init("one", np.array(1.0, np.float32)),
             init("half", np.array(0.5, np.float32))]
    return make_model(nodes, [tensor("x", shape=[2, 8])], [tensor("y", shape=[2, 8])], inits)


def test_a_set_name_stands_for_its_rules_in_order():
    names = [rule.name for rule in resolve_rules(["transformers"])]
    assert names == list(RULE_SETS["transformers"])
    assert names[0] == "fold-constants" and all(name in RULES for name in names)
    assert [rule.name for rule in resolve_rules(["fold-bn", "transformers"])][0] == "fold-bn"


def test_an_unknown_rule_lists_the_sets_too():
    with pytest.raises(GraphLensError, match="transformers"):
        resolve_rules(["transformer"])


def test_a_contrib_node_brings_its_domain_and_undo_takes_it_away():
    proto = _gelu_in_pieces()
    original = proto.SerializeToString()
    model = Model(proto)
    session = EditHistory(model)
    gelu = helper.make_node("Gelu", ["x"], ["y"], name="half", domain="com.microsoft")
    session.apply([GraphEdit("main", "test", "fuse", ["div", "erf", "plus1", "mul", "half"], [gelu])])
    saved = model.to_proto()
    assert {(o.domain, o.version) for o in saved.opset_import} == {("", 17), ("com.microsoft", 1)}
    onnx.checker.check_model(saved, full_check=True)
    import onnxruntime as ort

    session_ort = ort.InferenceSession(saved.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.linspace(-3, 3, 16, dtype=np.float32).reshape(2, 8)
    from math import erf

    expected = np.array([[v * 0.5 * (1 + erf(v / 2**0.5)) for v in row] for row in x], np.float32)
    np.testing.assert_allclose(session_ort.run(None, {"x": x})[0], expected, rtol=1e-5, atol=1e-6)
    session.undo()
    assert model.to_proto().SerializeToString() == original
