"""The three jobs end to end in the window: sketch and match, why not here, preview/apply/undo/save, learn."""

from __future__ import annotations

import onnx
import pytest

from graphlens.core.model import load_model
from graphlens.numerics import diff_models, make_inputs

STAGE2_BN = "/stage2/block1/bn"


@pytest.fixture
def demo_window(window, demo_path):
    assert window.open_model(demo_path)
    return window


def test_sketch_from_a_selection_then_find_its_matches(demo_window):
    w = demo_window
    w.canvas.select([w.panel.item_of(n) for n in ("/stem/conv", "/stem/bn", "/stem/relu")])
    w.new_pattern_from_selection()
    pattern = w.patterns_panel.pattern()
    assert pattern is not None
    found = w.workspace.matches.find(pattern).matches
    assert {"conv": "/stem/conv", "bn": "/stem/bn", "relu": "/stem/relu"}.items() <= found[0].nodes.items()
    assert w.matches_panel.list.count() == len(found)
    assert w.canvas.marks.tints  # every match tinted


def test_library_matches_are_listed_tinted_and_stepped(demo_window):
    w = demo_window
    found = w.workspace.matches.find("conv-bn").matches
    assert len(found) == 6 and w.matches_panel.list.count() == 6
    tinted = {w.panel.view.items[i].node for i in w.canvas.marks.tints}
    assert {"/stem/conv", "/stem/bn"} <= tinted and STAGE2_BN not in tinted
    w.act_next_match.trigger()
    assert w.matches_panel.list.currentRow() == 1
    outlined = {w.panel.view.items[i].node for i in w.canvas.marks.outline}
    assert outlined == set(found[1].nodes.values())


def test_why_not_panel_on_the_bn_that_must_not_fold(demo_window):
    w = demo_window
    labels = [label for label, _ in w.context_actions(w.panel.item_of(STAGE2_BN))]
    assert "Why doesn't conv-bn match here?" in labels
    dict(w.context_actions(w.panel.item_of(STAGE2_BN)))["Why doesn't conv-bn match here?"]()
    message = ("the output of Conv '/stage2/block1/conv' has 2 consumers ('/stage2/block1/bn', "
               "'/stage2/block1/tap/maxpool'), so folding would change '/stage2/block1/tap/maxpool'")
    assert message in w.why_panel.sentence.text()
    marks = w.canvas.marks
    conv, bn = w.panel.item_of("/stage2/block1/conv"), w.panel.item_of(STAGE2_BN)
    assert marks.tints.get(bn) is not None and marks.outline.get(conv) is not None  # matched green, failing red


def test_why_not_marks_the_failing_input_edge(demo_window):
    w = demo_window
    result = w.workspace.matches.explain("gemm-bn", at="/stem/bn").to_dict()
    assert not result["matched"] and "op type is Conv where Gemm was expected" in result["message"]
    assert w.canvas.marks.edges  # the edge into the BN from the conv
    near = w.workspace.matches.explain("conv-bn").to_dict()
    assert near["match_count"] == 6 and w.why_panel.misses.count() == len(near["near_misses"])


def test_preview_apply_undo_and_save(demo_window, demo_path, tmp_path):
    w = demo_window
    original = demo_path.read_bytes()
    result = w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    assert result["numeric"]["available"] and result["numeric"]["passed"]
    assert result["numeric"]["max_rel"] is not None and result["numeric"]["max_rel"] < 1e-2
    rows = result["parameters"]
    assert len(rows) == 16 and any(abs(r["scale"] - 1) > 0.05 for r in rows)
    assert all(r["weight_norm_after"] != pytest.approx(r["weight_norm_before"]) for r in rows
               if abs(r["scale"] - 1) > 0.01)
    assert w.preview_panel.parameters.rowCount() == 16 and w.preview_panel.badge.text() == "PASS"
    assert w.preview_panel.histogram.counts is not None
    assert w.model.to_proto().SerializeToString() == original  # previewing changes nothing
    w.act_apply.trigger()  # Ctrl+Enter
    assert w.isWindowModified() and w.model.node_count() == 36
    w.undo()
    assert w.model.to_proto().SerializeToString() == original and not w.isWindowModified()
    w.redo()
    saved = tmp_path / "folded.onnx"
    assert w.save_as(saved)
    onnx.checker.check_model(str(saved), full_check=True)
    before = load_model(demo_path)
    diff = diff_models(before, load_model(saved), make_inputs(before, seed=1))
    assert diff.available and diff.passed


def test_apply_all_is_one_undo_step(demo_window, demo_path):
    w = demo_window
    assert w.workspace.apply_all("fold-bn").report.applied["fold-bn"] == 7
    assert len(w.session.undo_stack) == 1
    w.undo()
    assert w.model.to_proto().SerializeToString() == demo_path.read_bytes()


def test_show_after_draws_added_nodes_green(demo_window):
    w = demo_window
    w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    w.preview_panel.show_after.setChecked(True)
    names = {w.panel.view.items[i].node for i in w.canvas.marks.tints}
    assert names == {"/stem/conv"} and "/stem/bn" not in w.panel.view.node_item
    w.preview_panel.show_after.setChecked(False)
    assert "/stem/bn" in w.panel.view.node_item


def test_failed_numeric_run_still_allows_apply(window, write_model):
    from onnx import TensorProto

    from tests.rewrites.linear_models import Config, linear_bn

    window.open_model(write_model(linear_bn(Config(dtype=TensorProto.DOUBLE)), "f64.onnx"))
    result = window.workspace.rewrite.preview("fold-bn", 0).to_dict()
    assert not result["numeric"]["available"] and "Conv" in result["numeric"]["reason"]
    assert window.preview_panel.apply_button.isEnabled() and window.preview_panel.badge.text() == "no numeric check"
    window.act_apply.trigger()  # Ctrl+Enter
    assert window.model.node_count() == 1


def test_lesson_shows_the_chosen_channels_numbers(demo_window):
    w = demo_window
    w.workspace.matches.find("conv-bn")
    lesson = w.show_lesson(0)
    assert lesson is not None
    w.lesson_view.channel_box.setValue(3)
    text = w.lesson_view.text.toPlainText()
    scale = w.lesson_view.lesson.details.params.scale[3]
    assert w.lesson_view.lesson.channel == 3
    assert f"{scale:.5g}"[:5] in text


def test_the_lesson_the_list_and_the_canvas_show_the_same_match(demo_window):
    """A lesson on match 2 used to leave the canvas and the list on match 1."""
    w = demo_window
    w.workspace.matches.find("conv-bn")
    assert len(w.matches) >= 2
    w.show_lesson(1)
    taught = w.lesson_view.lesson.details.bn
    assert w.matches_panel.list.currentRow() == 1 and w.matches[1].nodes["bn"] == taught
    outlined = {w.panel.view.items[i].node for i in w.canvas.marks.outline}
    assert outlined == set(w.matches[1].nodes.values())


def test_closing_with_unsaved_changes_asks(demo_window, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    w = demo_window
    w.workspace.apply_all("fold-bn")
    asked = []
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: asked.append(a) or QMessageBox.StandardButton.Cancel)
    assert not w.close()
    assert asked and w.isVisible()
    assert "demo.onnx has unsaved changes" in asked[0][2]
    w.model.path = w.model.path.with_name("<b>x.onnx")  # a file name is shown as text, never as markup
    asked.clear()
    assert not w.close()
    assert "&lt;b&gt;x.onnx" in asked[0][2]
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Discard)
    assert w.close()


def test_large_model_matching_runs_in_a_worker(demo_window, qtbot, monkeypatch):
    import graphlens.gui.workflows as workflows

    w = demo_window
    monkeypatch.setattr(workflows, "ASYNC_MATCH_NODES", 10)
    w.patterns_panel.set_text("c = Conv(x, w: const)\n"
                              "b = BatchNormalization(c, s: const, o: const, m: const, v: const)\n")
    w.patterns_panel.run()
    # a two-input Conv(x, w): the convs with a bias (stem, stage2/block1) do not match; the shared one fails sole use
    qtbot.waitUntil(lambda: w.matches_panel.list.count() == 3, timeout=10000)
    assert "3 matches" in w.matches_panel.header.text() and not w.matches_panel.cancel_button.isVisible()


def test_near_misses_from_the_empty_canvas_and_visiting_one(demo_window):
    w = demo_window
    actions = dict(w.context_actions(None))
    actions["Where does conv-bn almost match? (near misses)"]()
    assert w.why_panel.misses.count() >= 1
    w.why_panel.misses.setCurrentRow(0)  # visiting one draws it
    assert w.canvas.marks.outline and w.canvas.marks.edges


def test_undo_still_works_after_saving_and_the_marker_follows(demo_window, tmp_path):
    w = demo_window
    w.workspace.apply_all("fold-bn")
    assert w.save_as(tmp_path / "saved.onnx") and not w.isWindowModified()
    w.undo()
    assert w.isWindowModified() and w.model.node_count() == 37
    w.redo()
    assert not w.isWindowModified()  # back at the saved state


def test_why_not_offers_freeze_inputs_for_overridable_weights_and_undo_restores(window, write_model):
    from tests.initializer_inputs import zoo_cnn

    assert window.open_model(write_model(zoo_cnn(8), "keep_inputs.onnx"))
    result = window.workspace.matches.explain("conv-bn", at="n1").to_dict()
    assert not result["matched"] and "freeze-inputs" in result["message"]
    assert window.why_panel.freeze.isVisibleTo(window.why_panel)
    window.why_panel.freeze.click()
    assert window.model.graph.inputs == ["data_0"]
    assert window._last_explain["matched"], "asked again after freezing: now it matches"
    assert not window.why_panel.freeze.isVisibleTo(window.why_panel)
    window.session.undo()
    assert len(window.model.graph.overridable_initializers) == 10


def test_opening_another_model_resets_every_panel(demo_window, write_model):
    from tests.initializer_inputs import zoo_cnn

    w = demo_window
    w.workspace.matches.find("conv-bn")
    w.workspace.matches.explain("conv-bn", at=STAGE2_BN).to_dict()
    w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    w.show_lesson(0)
    assert w.why_panel.misses.count() == 0 and "2 consumers" in w.why_panel.sentence.text()
    assert w.open_model(write_model(zoo_cnn(3), "other.onnx"))
    assert w.matches_panel.list.count() == 0 and "Run a pattern" in w.matches_panel.header.text()
    assert "Right-click a node" in w.why_panel.sentence.text() and not w.why_panel.details.toPlainText()
    assert w.pending is None and w.preview_panel.title.text() == "Preview a rewrite from the Matches panel."
    assert w.lesson_view.lesson is None and not w.lesson_view.channel_box.isEnabled()
    assert not w.canvas.marks.tints and not w.canvas.marks.outline


def test_a_preview_computed_for_an_older_model_is_dropped(demo_window, qtbot):
    w = demo_window
    w.workspace.matches.find("conv-bn")
    w._preview_async("fold-bn", 0)  # the worker computes on a scratch copy...
    job = w.preview_jobs.job
    w.workspace.apply_all("fold-bn")  # ...while the user edits the model
    qtbot.waitUntil(lambda: job.done.is_set() and not w.preview_jobs.busy, timeout=30_000)
    assert w.pending is None, "a result for the model as it was is never shown"
    assert "changed while the preview was computed" in w.statusBar().currentMessage()
    w.act_apply.trigger()  # nothing previewed for the model as it is: nothing happens
    assert len(w.session.undo_stack) == 1


def test_closing_while_work_runs_stops_it_without_late_signals(window, demo_path, qtbot, capfd, monkeypatch):
    import graphlens.gui.graph_panel as graph_panel
    from graphlens.gui import workers

    assert window.open_model(demo_path)
    window.workspace.matches.find("conv-bn")
    monkeypatch.setattr(graph_panel, "SYNC_LIMIT", 0)  # lay out in a worker, as for a large model
    window._preview_async("fold-bn", 0)
    window.panel.relayout()
    window.panel.relayout()  # the first layout job is dropped while it runs
    assert workers.running()
    window.close()
    assert not workers.running()
    qtbot.wait(50)
    assert "Traceback" not in capfd.readouterr().err
