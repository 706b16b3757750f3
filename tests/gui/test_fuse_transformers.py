"""Patterns › Fuse Transformer Ops: the whole rule set in one undo step, and the Fusion report panel that says what
it did, whose rows select and explain on the canvas."""

from __future__ import annotations

import onnx

from graphlens.gui.workflows import Workflows
from tests.rewrites import transformer_attention_models as am
from tests.rewrites.test_fold_report import cnn


def _two_layers_one_broken():
    """Two attention layers; the second's probabilities are summed, not multiplied by V."""
    proto = am.build(am.variant(mask="add", layers=2))
    for node in proto.graph.node:  # scoped as exporters scope layers: l0/… is layer 0
        node.name = node.name.replace("l0/", "/layers.0/").replace("l1/", "/layers.1/")
    contexts = [n for n in proto.graph.node if n.op_type == "MatMul" and n.name.endswith("context")]
    broken = contexts[-1]
    broken.op_type = "ReduceSum"
    del broken.input[1:]
    return proto


def add_dock(window: Workflows):
    return window._dock_of(window.fusion_report)


def test_fuse_transformer_ops_fills_the_report_panel_and_keeps_it_after_undo(window, write_model):
    path = write_model(am.build(am.variant(mask="add")))
    assert window.open_model(str(path))
    assert not add_dock(window).isVisible()
    before = window.model.node_count()
    window.act_transformers.trigger()
    ops = [n.op_type for n in window.model.graph.nodes]
    assert ops.count("Attention") == 1 and "Softmax" not in ops  # Q, K, V packed
    report = window.fusion_report
    assert add_dock(window).isVisible()
    headline = report.headline.text()
    assert headline.startswith(f"Transformer fusions: {before} → {window.model.node_count()} nodes")
    assert headline.endswith("1 site fused, none left")
    kinds = [report.tree.topLevelItem(k).text(0) for k in range(report.tree.topLevelItemCount())]
    assert kinds == ["attention"] and report.site_rows() == []
    assert len(window.session.undo_stack) == 1
    window.undo()
    original = onnx.ModelProto.FromString(path.read_bytes()).SerializeToString()
    assert window.model.to_proto().SerializeToString() == original
    assert report.headline.text() == headline and "Undone" in report.state.text()
    window.redo()
    assert "Undone" not in report.state.text()


def test_selecting_a_site_left_selects_its_node_and_why_not_here_draws_it(window, write_model):
    assert window.open_model(str(write_model(_two_layers_one_broken())))
    window.act_transformers.trigger()
    report = window.fusion_report
    assert report.headline.text().endswith("1 site fused, 1 left")
    [row] = report.site_rows()
    assert row.text(0) == "attention" and row.text(1) == "/layers.1/softmax" and "ReduceSum" in row.text(2)
    kind = report.tree.topLevelItem(0)
    assert kind.text(2) == "1 fused, 1 left · fused on 1 of 2 layers; left on layer 1"
    assert not report.why_button.isEnabled()
    report.tree.setCurrentItem(row)
    assert window.panel._selected_names() == ["/layers.1/softmax"]
    assert report.why_button.isEnabled()
    report.why_button.click()
    explained = window.workspace.matches.explanation
    assert explained is not None and explained.at == "/layers.1/softmax" and explained.pattern.name == "attention"
    assert "ReduceSum" in window.why_panel.sentence.text()


def test_a_cnn_gets_one_line_for_what_it_does_not_have_and_no_sites(window, write_model):
    assert window.open_model(str(write_model(cnn())))
    window.act_transformers.trigger()
    report = window.fusion_report
    details = report.details.text().splitlines()
    [absent] = [line for line in details if line.startswith("No ")]
    assert all(absent.count(kind) == 1 for kind in ("attention", "GELU", "SiLU-gated MLP", "rotary embedding"))
    assert report.tree.topLevelItemCount() == 0 and report.site_rows() == []
    assert "BatchNormalization" not in report.details.text()


def test_another_model_clears_the_report(window, write_model):
    assert window.open_model(str(write_model(_two_layers_one_broken(), "a.onnx")))
    window.act_transformers.trigger()
    assert window.fusion_report.site_rows()
    window.model.modified = False  # opening another must not stop at "save changes?"
    assert window.open_model(str(write_model(cnn(), "b.onnx")))
    assert window.fusion_report.site_rows() == [] and window.fusion_report.tree.topLevelItemCount() == 0
    assert "No fusion run" in window.fusion_report.headline.text()


def test_double_clicking_a_site_explains_it(window, write_model):
    assert window.open_model(str(write_model(_two_layers_one_broken())))
    window.act_transformers.trigger()
    [row] = window.fusion_report.site_rows()
    window.fusion_report.tree.itemDoubleClicked.emit(row, 0)
    assert window.workspace.matches.explanation.at == "/layers.1/softmax"
    assert window._dock_of(window.why_panel).isVisible()
