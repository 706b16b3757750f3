"""Raising the opset converts nodes without copying the weights through onnx's converter."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.model import Model
from graphlens.quantize.opset import raise_opset
from graphlens.rewrites.edit import EditHistory
from tests.models import make_model, tensor


def constant_weight_softmax(name: str = "weight") -> onnx.ModelProto:
    """x [1, 64] → MatMul by a Constant node's 64×64 weight (16 KB, above the weightless size) → Softmax, opset 11."""
    weight = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["w"], name=name, value=numpy_helper.from_array(weight, "w")),
        helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
        helper.make_node("Softmax", ["h"], ["y"], name="softmax", axis=1),
    ]
    return make_model(nodes, [tensor("x", TensorProto.FLOAT, [1, 64])], [tensor("y", TensorProto.FLOAT, [1, 64])],
                      opset=11)


def _run(proto: onnx.ModelProto, x: np.ndarray) -> np.ndarray:
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x})[0]


@pytest.mark.parametrize("name", ["weight", ""])  # paddle2onnx leaves its weights' Constant nodes unnamed
def test_converted_nodes_keep_the_constant_weights_and_undo_restores_the_bytes(monkeypatch, name):
    from graphlens.quantize import opset

    given: list[int] = []
    convert = opset.version_converter.convert_version

    def recording(model: onnx.ModelProto, target: int) -> onnx.ModelProto:
        given.append(model.ByteSize())
        return convert(model, target)

    monkeypatch.setattr(opset.version_converter, "convert_version", recording)
    proto = constant_weight_softmax(name)
    before = proto.SerializeToString()
    model = Model(proto)
    session = EditHistory(model)
    raised, edits = raise_opset(model, session, 13, "per-channel scales")
    assert raised.converted and edits  # Softmax changed meaning at 13
    assert given and given[0] < 4096  # the converter saw the weight's type and dims, not its 16 KB
    out = model.to_proto()
    onnx.checker.check_model(out, full_check=True)
    weight = next(n for n in out.graph.node if n.op_type == "Constant").attribute[0].t
    original = numpy_helper.to_array(onnx.ModelProto.FromString(before).graph.node[0].attribute[0].t)
    np.testing.assert_array_equal(numpy_helper.to_array(weight), original)
    x = np.random.default_rng(1).standard_normal((1, 64)).astype(np.float32)
    np.testing.assert_allclose(_run(out, x), _run(onnx.ModelProto.FromString(before), x), rtol=1e-6, atol=1e-7)
    session.undo()
    model.proto.opset_import[0].version = 11  # the quantizer's history hook does this; here the edit alone is undone
    assert model.to_proto().SerializeToString() == before


def test_an_onnxruntime_op_in_the_default_domain_is_named_instead_of_onnx_assertion_text():
    """Exported decoders put SimplifiedLayerNormalization in the default domain; onnx's converter stops on it with
    ``Op '%s' has no registered schema``."""
    from graphlens.core.errors import GraphLensError

    proto = constant_weight_softmax()
    proto.graph.node.insert(2, helper.make_node("SimplifiedLayerNormalization", ["h"], ["n"], name="norm_3"))
    proto.graph.node[-1].input[0] = "n"
    model = Model(proto)
    with pytest.raises(GraphLensError) as failed:
        raise_opset(model, EditHistory(model), 13, "per-channel scales")
    message = str(failed.value)
    assert "node 'norm_3' is a SimplifiedLayerNormalization in the default ONNX domain" in message
    assert "%s" not in message and "\n" not in message
