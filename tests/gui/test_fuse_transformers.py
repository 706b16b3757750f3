"""Patterns › Fuse Transformer Ops: the whole rule set in one undo step, and a report of what fused and what did not."""

from __future__ import annotations

from tests.rewrites import transformer_attention_models as am


def _two_layers_one_broken():
    """Two attention layers; the second's probabilities are summed, not multiplied by V."""
    proto = am.build(am.variant(mask="add", layers=2))
    contexts = [n for n in proto.graph.node if n.op_type == "MatMul" and n.name.endswith("context")]
    broken = contexts[-1]
    broken.op_type = "ReduceSum"
    del broken.input[1:]
    return proto


def test_fuse_transformer_ops_fuses_reports_and_undoes(window, write_model):
    path = write_model(am.build(am.variant(mask="add")))
    assert window.open_model(str(path))
    original = path.read_bytes()
    window.act_transformers.trigger()
    ops = [n.op_type for n in window.model.graph.nodes]
    assert ops.count("MultiHeadAttention") == 1 and "Softmax" not in ops
    box = window.last_report
    assert box.text().startswith("Transformer fusions: 1 site fused, 0 left")
    assert "attention: 1 fused, 0 left" in box.informativeText()
    assert len(window.session.undo_stack) == 1
    window.undo()
    assert window.model.to_proto().SerializeToString() == onnx_bytes(original)


def test_the_report_says_why_a_site_was_left(window, write_model):
    assert window.open_model(str(write_model(_two_layers_one_broken())))
    window.act_transformers.trigger()
    box = window.last_report
    assert "1 left" in box.text()
    assert "attention left at" in box.detailedText() and "ReduceSum" in box.detailedText()


def onnx_bytes(data: bytes) -> bytes:
    import onnx

    return onnx.ModelProto.FromString(data).SerializeToString()
