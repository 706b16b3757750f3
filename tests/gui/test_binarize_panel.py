"""The Binarize panel driven like a user: Binarize… from the Matches panel for one match or all, the
verdict and layers table, bits per row, the coloured canvas, stale previews, Apply and undo, and the
binarization lesson."""

from __future__ import annotations

from PySide6.QtCore import Qt

import graphlens.workspace.binarize_preview as binarize_preview
from graphlens.gui import workers
from graphlens.workspace import Job
from tests.gui.test_quantize_panel import held

LINEAR = {'/stem/conv', '/stage1/block1/dw/conv', '/stage1/block1/pw/conv', '/stage1/block2/conv',
          '/stage2/block1/conv',
          '/stage2/block2/conv', '/up/convtranspose', '/head/conv', '/head/fc'}


def _binarize_from_matches(window, qtbot, index: int | None):
    window.workspace.matches.find("conv-bn")
    matches = window.matches_panel
    assert matches.binarize_button.isVisible() and matches.binarize_button.isEnabled()
    window.binarize_panel.samples.setValue(2)
    if index is not None:
        matches.list.setCurrentRow(index)
    action = matches.binarize_one if index is not None else matches.binarize_all
    with qtbot.waitSignal(window.workspace.binarization.events.previewed, timeout=30_000):
        action.trigger()
    return window.binarize_panel


def _layers(window) -> dict[str, int]:
    return {layer.node: layer.bits for layer in window.workspace.binarization.previewed.result.layers}


def test_one_match_binarizes_only_its_layer_and_shows_the_verdict_without_touching_the_model(window, demo_path, qtbot):
    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    panel = _binarize_from_matches(window, qtbot, 2)
    conv = window.workspace.matches.result.matches[2].nodes["conv"]
    assert _layers(window) == {conv: 1}
    assert window.model.to_proto().SerializeToString() == before and not window.model.modified
    result = window.workspace.binarization.previewed.result
    assert panel.badge.text() in ("GOOD", "FAIR", "POOR") and f"{result.output_sqnr_db:.1f} dB" in panel.summary.text()
    assert "unchanged until Apply" in panel.summary.text() and "conv-bn match 3" in panel.scope_label.text()
    assert panel.table.rowCount() == 1 and panel.table.item(0, 0).text() == conv
    assert panel.table.item(0, 4).text() == "2"  # one bit: ±α, two values per kernel
    overlay = window.workspace.overlay.shown  # the canvas is coloured by the layer's reconstruction SQNR
    assert overlay is not None and overlay.values == result.per_node("sqnr_db") and not overlay.higher_is_worse


def test_all_matches_binarize_every_matched_layer_and_every_linear_layer_on_request(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, None)
    convs = {m.nodes["conv"] for m in window.workspace.matches.result.matches}
    assert set(_layers(window)) == convs and len(convs) == 6
    assert panel.whole_button.isVisible()
    panel.set_scope(None)
    with qtbot.waitSignal(window.workspace.binarization.events.previewed, timeout=30_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert set(_layers(window)) == LINEAR and not panel.whole_button.isVisible()


def test_matches_without_a_linear_layer_offer_no_binarize(window, demo_path):
    window.open_model(demo_path)
    assert window.workspace.matches.find("pattern relus\nr = Relu(x)").matches
    assert not window.matches_panel.binarize_button.isVisible()
    assert window.binarize_matches(0) is None and "no Conv" in window.last_error


def test_a_rows_bits_run_it_again_with_that_k(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, None)
    box = panel.row_bits("/stem/conv")
    with qtbot.waitSignal(window.workspace.binarization.events.previewed, timeout=30_000):
        box.setValue(3)
    bits = _layers(window)
    assert bits["/stem/conv"] == 3 and all(k == 1 for node, k in bits.items() if node != "/stem/conv")
    row = next(r for r in range(panel.table.rowCount()) if panel.table.item(r, 0).text() == "/stem/conv")
    assert panel.row_bits("/stem/conv").value() == 3 and int(panel.table.item(row, 4).text()) <= 8
    assert window.workspace.binarization.previewed.config.layer_bits == {"/stem/conv": 3}


def test_a_preview_is_dropped_when_the_model_changes(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, 0)
    window.workspace.apply_all("fold-bn")
    assert window.workspace.binarization.previewed is None
    assert panel.table.rowCount() == 0 and "press Run again" in panel.summary.text()
    assert not panel.apply_button.isEnabled() and window.workspace.overlay.shown is None
    assert panel.apply() is False and "no previewed binarization" in window.last_error


def test_a_run_finished_after_an_edit_is_not_kept(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.binarize_panel
    panel.samples.setValue(2)
    panel.run()
    window.workspace.apply_all("fold-bn")  # while the worker binarizes the copy of the model as it was
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert window.workspace.binarization.previewed is None and panel.table.rowCount() == 0
    assert "changed while it was binarized" in panel.summary.text()
    assert window.statusBar().currentMessage() == ("The model changed while the binarization was computed; "
                                                   "run it again")


def test_run_goes_through_the_job_slot_with_progress_and_cancel(window, demo_path, qtbot, monkeypatch):
    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, 0)
    shown_before, summary = window.workspace.binarization.previewed, panel.summary.text()
    compute, running, release = held(binarize_preview, "compute_binarize_preview")
    monkeypatch.setattr(binarize_preview, "compute_binarize_preview", compute)
    panel.bits.setValue(2)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert isinstance(panel.jobs.job.work.__self__, Job)
    assert running.wait(30)
    qtbot.waitUntil(lambda: panel.progress.value() == 50, timeout=30_000)
    assert panel.summary.text() == panel.BUSY_TEXT and panel.cancel_button.isVisible()
    qtbot.mouseClick(panel.cancel_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: not workers.running(), timeout=30_000)
    qtbot.wait(50)
    assert not panel.busy and panel.summary.text() == summary  # the preview shown stays, with its summary
    assert window.workspace.binarization.previewed is shown_before and panel.table.rowCount() == 1
    release.set()
    with qtbot.waitSignal(window.workspace.binarization.events.previewed, timeout=30_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert _layers(window) == {window.workspace.matches.result.matches[0].nodes["conv"]: 2}


def test_apply_is_one_undo_step_and_undo_restores_the_model(window, demo_path, qtbot):
    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    panel = _binarize_from_matches(window, qtbot, 0)
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    assert window.model.modified and len(window.session.undo_stack) == 1
    assert window.workspace.binarization.applied is not None
    conv = window.model.graph.by_name["/stem/conv"]
    assert conv.inputs[1].endswith("_binarized")
    assert "Applied" in panel.summary.text() and panel.save_button.isEnabled() and not panel.apply_button.isEnabled()
    window.undo()
    assert window.model.to_proto().SerializeToString() == before and not window.model.modified
    assert panel.table.rowCount() == 0


def test_show_the_graph_after_draws_the_binarized_copy(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, 0)
    panel.show_after.setChecked(True)
    assert window.panel.graph is not window.model.graph
    assert window.panel.graph.by_name["/stem/conv"].inputs[1].endswith("_binarized")
    panel.show_after.setChecked(False)
    assert window.panel.graph is window.model.graph


def test_the_lesson_opens_on_the_selected_row_with_its_numbers(window, demo_path, qtbot):
    from graphlens.rewrites.lesson_text import number

    window.open_model(demo_path)
    panel = _binarize_from_matches(window, qtbot, 0)
    panel.row_bits("/stem/conv").setValue(2)
    qtbot.waitUntil(lambda: _layers(window) == {"/stem/conv": 2}, timeout=30_000)
    panel.select_layer("/stem/conv")
    layer = panel.selected_layer()
    assert layer.node == "/stem/conv" and window.canvas.marks.selected == {window.panel.item_of("/stem/conv")}
    with qtbot.waitSignal(panel.lesson_requested):
        qtbot.mouseClick(panel.learn_button, Qt.MouseButton.LeftButton)
    view = window.binarize_lesson
    lesson = view.lesson
    binarized = window.workspace.binarization.previewed.result.weights[layer.tensor]
    assert lesson.bits == 2 and lesson.alphas == list(binarized.alphas[:, lesson.kernel])
    assert "/stem/conv" in view.title.text() and view.kernel_box.value() == lesson.kernel
    text = view.text.toPlainText()
    assert "α₁ = mean |R₀|" in text and number(lesson.alphas[0]) in text and number(lesson.alphas[1]) in text
    assert len(view.histogram.levels) == 4 and view.steps.rowCount() == 2
    assert [k for k, _ in view.chart.points] == list(range(1, 9)) and view.chart.current == 2
    view.kernel_box.setValue((lesson.kernel + 1) % lesson.kernels)  # another kernel, its own α
    assert view.lesson.kernel == (lesson.kernel + 1) % lesson.kernels
    assert view.lesson.alphas == list(binarized.alphas[:, view.lesson.kernel])
    view.bits_box.setValue(3)  # another K: three steps, up to 8 levels, the preview unchanged
    assert view.steps.rowCount() == 3 and len(view.lesson.levels) == 8 and _layers(window) == {"/stem/conv": 2}


def test_the_settings_make_the_config_and_binarized_activations_come_with_a_warning(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.binarize_panel
    assert panel.warning.isHidden()
    panel.bits.setValue(2)
    panel.per_kernel.setChecked(False)
    panel.form.setCurrentIndex(panel.form.findData("structured"))
    panel.activations.setChecked(True)
    assert not panel.warning.isHidden() and "trained" in panel.warning.text()
    config = panel.config()
    assert (config.bits, config.per_kernel, config.form, config.binarize_activations) == (2, False, "structured", True)
    panel.samples.setValue(2)
    preview = panel.run(background=False)
    assert all(layer.bits == 2 and not layer.per_kernel for layer in preview.result.layers)
    assert any("activations" in w for w in preview.result.warnings)
    assert "activations" in panel.summary.text() and panel.table.item(0, 5).text() == "tensor"
