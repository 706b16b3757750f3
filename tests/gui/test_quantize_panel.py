"""The Quantize panel driven like a user: Run, the table and verdict, the coloured canvas, exclusions,
stale previews, Apply and undo, and the fake-quantization lesson."""

from __future__ import annotations

import threading

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

import graphlens.workspace.quantize_preview as quantize_preview
from graphlens.gui import workers
from graphlens.overlays.overlay import SCALE_STOPS
from graphlens.workspace import Job


def _run(window, qtbot, samples: int = 2):
    panel = window.quantize_panel
    panel.samples.setValue(samples)
    panel.sensitivity.setChecked(False)
    with qtbot.waitSignal(window.workspace.quantization.events.previewed, timeout=30_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    return panel


def _row_of(panel, node: str, kind: str = "weight") -> int:
    return next(r for r in range(panel.table.rowCount())
                if panel.table.item(r, 1).text() == node and panel.table.item(r, 3).text() == kind)


def test_run_fills_the_table_shows_the_verdict_and_colours_the_canvas_without_touching_the_model(window, demo_path,
                                                                                                 qtbot):
    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    panel = _run(window, qtbot)
    result = window.workspace.quantization.previewed.result
    assert window.model.to_proto().SerializeToString() == before and not window.model.modified
    assert panel.table.rowCount() == len(result.layers) == 24
    assert panel.badge.text() == "GOOD" and f"{result.output_sqnr_db:.1f} dB" in panel.summary.text()
    assert "unchanged until Apply" in panel.summary.text()
    overlay = window.workspace.overlay.shown
    assert overlay is not None and overlay.unit == "dB" and set(overlay.values) == set(result.quantized_nodes)
    worst = min(overlay.values, key=overlay.values.get)
    assert window.canvas.renderer.colors[window.panel.item_of(worst)] == QColor(*map(int, SCALE_STOPS[-1]))
    # sortable by SQNR; a row selects and centres its node
    panel.table.sortItems(4)
    assert float(panel.table.item(0, 4).text()) <= float(panel.table.item(1, 4).text())
    panel.table.selectRow(_row_of(panel, "/head/fc"))
    item = window.panel.item_of("/head/fc")
    assert window.canvas.marks.selected == {item}
    assert window.canvas.renderer.rects[item].contains(window.canvas.visible_scene_rect().center())
    panel.colour_by("max_abs")
    shown = window.workspace.overlay.shown
    assert shown.values == result.per_node("max_abs") and shown.higher_is_worse


def test_unticking_a_layer_leaves_it_float_and_runs_again(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _run(window, qtbot)
    assert panel.is_quantized("/head/fc") is True
    check = panel.table.item(_row_of(panel, "/head/fc"), 0)
    with qtbot.waitSignal(window.workspace.quantization.events.previewed, timeout=30_000):
        check.setCheckState(Qt.CheckState.Unchecked)
    result = window.workspace.quantization.previewed.result
    assert "/head/fc" not in result.quantized_nodes and panel.exclusions() == ["/head/fc"]
    assert panel.is_quantized("/head/fc") is False
    left = _row_of(panel, "/head/fc", kind="")
    assert panel.table.item(left, 2).text() == "left float"
    # the right-click menu offers to quantize it again
    labels = dict(window.context_actions(window.panel.item_of("/head/fc")))
    again = labels["Quantize '/head/fc' again"]
    with qtbot.waitSignal(window.workspace.quantization.events.previewed, timeout=30_000):
        again()
    assert "/head/fc" in window.workspace.quantization.previewed.result.quantized_nodes and panel.exclusions() == []
    assert "Leave '/head/fc' float and quantize again" in dict(window.context_actions(window.panel.item_of("/head/fc")))


def test_a_preview_is_dropped_when_the_model_changes(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _run(window, qtbot)
    window.workspace.apply_all("fold-bn")
    assert window.workspace.quantization.previewed is None
    assert panel.table.rowCount() == 0 and "press Run again" in panel.summary.text()
    assert not panel.apply_button.isEnabled() and window.workspace.overlay.shown is None
    assert panel.apply() is False and "no previewed quantization" in window.last_error


def test_a_run_finished_after_an_edit_is_not_kept(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.quantize_panel
    panel.samples.setValue(2)
    panel.run()
    window.workspace.apply_all("fold-bn")  # while the worker quantizes the copy of the model as it was
    qtbot.waitUntil(lambda: not panel.busy, timeout=30_000)
    assert window.workspace.quantization.previewed is None and panel.table.rowCount() == 0
    assert "changed while it was quantized" in panel.summary.text()
    assert window.statusBar().currentMessage() == ("The model changed while the quantization was computed; "
                                                   "run it again")


def held(module, name: str):
    """Make ``module.name`` (a preview's computation) report half way, then wait for ``release`` (or a cancel)
    before computing for real: the test acts while the job is surely running."""
    real = getattr(module, name)
    running, release = threading.Event(), threading.Event()

    def compute(request, task):
        task.report(0.5)
        running.set()
        while not release.wait(0.01) and not task.stopped:
            pass
        return real(request, task)

    return compute, running, release


def test_run_goes_through_the_job_slot_with_progress_and_cancel(window, demo_path, qtbot, monkeypatch):
    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    panel = window.quantize_panel
    panel.samples.setValue(2)
    compute, running, release = held(quantize_preview, "compute_quantize_preview")
    monkeypatch.setattr(quantize_preview, "compute_quantize_preview", compute)
    shown = []
    window.workspace.quantization.events.previewed.connect(shown.append)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert isinstance(panel.jobs.job.work.__self__, Job)  # the workspace's job, computed by the slot's worker
    assert running.wait(30)
    qtbot.waitUntil(lambda: panel.progress.value() == 50, timeout=30_000)
    assert panel.busy and panel.cancel_button.isVisible() and not panel.run_button.isEnabled()
    qtbot.mouseClick(panel.cancel_button, Qt.MouseButton.LeftButton)
    assert not panel.busy and panel.run_button.isEnabled() and not panel.cancel_button.isVisible()
    assert panel.summary.text() == panel.START_TEXT  # what was shown before the run
    qtbot.waitUntil(lambda: not workers.running(), timeout=30_000)  # the worker stopped, its result unsent
    qtbot.wait(50)
    assert shown == [] and window.workspace.quantization.previewed is None
    assert window.model.to_proto().SerializeToString() == before
    release.set()
    fractions = []
    panel.progress.valueChanged.connect(fractions.append)
    with qtbot.waitSignal(window.workspace.quantization.events.previewed, timeout=30_000):
        panel.run()  # run again, to the end: progress up to 100, then the preview
    assert 50 in fractions and 100 in fractions
    assert shown and shown[-1] is window.workspace.quantization.previewed and panel.table.rowCount() == 24
    assert not panel.busy and not panel.progress.isVisible()


def test_apply_is_one_undo_step_and_undo_restores_the_model(window, demo_path, qtbot):
    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    panel = _run(window, qtbot)
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    ops = window.model.op_counts()
    assert ops["QuantizeLinear"] == 15 and window.model.modified and len(window.session.undo_stack) == 1
    assert "Applied" in panel.summary.text() and panel.save_button.isEnabled() and not panel.apply_button.isEnabled()
    view = window.panel.view  # the canvas draws the pairs as badges, not boxes
    assert not any(item.title in ("QuantizeLinear", "DequantizeLinear") for item in view.items)
    assert sum(1 for edge in view.edges if edge.badge == "u8") >= 15
    window.undo()
    assert window.model.to_proto().SerializeToString() == before and not window.model.modified
    assert panel.table.rowCount() == 0
    window.redo()  # the quantization is back: the panel must not say it was undone
    assert window.model.op_counts()["QuantizeLinear"] == 15
    assert "undone" not in panel.summary.text() and "The model changed since" in panel.summary.text()


def test_show_the_graph_after_draws_the_quantized_copy_with_badges(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _run(window, qtbot)
    panel.show_after.setChecked(True)
    assert window.panel.graph is not window.model.graph
    assert "BatchNormalization" not in {item.title for item in window.panel.view.items
                                        if item.node != "/stage2/block1/bn"}
    assert any(edge.badge for edge in window.panel.view.edges)
    panel.show_after.setChecked(False)
    assert window.panel.graph is window.model.graph


def test_the_lesson_opens_on_the_selected_row_with_its_numbers(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = _run(window, qtbot)
    result = window.workspace.quantization.previewed.result
    row = _row_of(panel, "/head/fc", kind="weight")
    panel.table.selectRow(row)
    layer = panel.selected_layer()
    assert layer.kind == "weight" and layer.node == "/head/fc"
    with qtbot.waitSignal(panel.lesson_requested):
        qtbot.mouseClick(panel.learn_button, Qt.MouseButton.LeftButton)
    view = window.quantize_lesson
    qtbot.waitUntil(lambda: view.lesson is not None, timeout=30_000)
    lesson = view.lesson
    assert lesson.layer is layer and lesson.scale == layer.scale[lesson.channel]
    assert "/head/fc" in view.title.text() and view.channel_box.isVisible()
    assert f"{lesson.scale:.5g}" in view.text.toPlainText()
    assert f"{lesson.error.sqnr_db:.2f} dB" in view.error.text()
    assert view.examples.rowCount() >= 3 and len(view.histogram.counts) > 0
    view.channel_box.setValue((lesson.channel + 1) % lesson.channels)  # another channel, its own scale
    assert view.lesson.channel == (lesson.channel + 1) % lesson.channels
    assert view.lesson.scale == layer.scale[view.lesson.channel]
    activation = next(k for k, layer in enumerate(result.layers) if layer.kind == "activation")
    lesson = window.show_quantize_lesson(panel.shown, result.layers[activation], background=False)
    assert lesson.zero_point == result.layers[activation].zero_point[0] and not view.channel_box.isVisible()
    assert "calibration" in view.caption.text()


def test_calibration_samples_that_do_not_fit_are_refused_in_one_line(window, demo_path, tmp_path):
    import numpy as np

    window.open_model(demo_path)
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros((2, 3), np.float32))
    assert window.quantize_panel.set_calibration_file(bad) is False
    assert "has no array for input" in window.last_error and window.quantize_panel.npz is None


def test_gptq_rounding_runs_from_the_panel_and_says_so(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.quantize_panel
    assert panel.config().weight_rounding == "nearest"
    panel.gptq.setChecked(True)
    assert panel.config().weight_rounding == "gptq"
    _run(window, qtbot)
    result = window.workspace.quantization.previewed.result
    assert result.rounding is not None and result.rounding.integers
    assert f"Weights rounded by GPTQ: their layers' output error {result.rounding.ratio:.2f}×" in panel.summary.text()


def test_equalize_bias_correction_and_target_are_settings_of_the_panel(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.quantize_panel
    config = panel.config()
    assert (config.equalize, config.bias_correction, config.target_sqnr_db) == ("auto", False, None)
    panel.equalize.setCurrentText("off")
    panel.bias.setChecked(True)
    panel.target.setValue(55.0)
    config = panel.config()
    assert (config.equalize, config.bias_correction, config.target_sqnr_db) == ("off", True, 55.0)
    _run(window, qtbot)
    result = window.workspace.quantization.previewed.result
    assert result.target is not None and result.target.met and result.excluded_for_target
    lines = panel.summary.text().splitlines()
    assert lines[1].startswith("Target output SQNR 55 dB reached") and "left float" in lines[1]
    assert lines[1] == "T" + result.target.line(names=3)[1:] + "."
    assert all(n in lines[1] for n in result.excluded_for_target[:3])
    assert lines[1].endswith(", ….") == (len(result.excluded_for_target) > 3)  # the table lists them all
    assert any(line.startswith("Bias correction") for line in lines)
    assert not any(line.startswith("Equalize") for line in lines)  # off: nothing decided
    # the layers the search left float are listed, and only a lower target brings them back
    rows = [r for r in range(panel.table.rowCount()) if panel.table.item(r, 2).text() == "left float for the target"]
    assert sorted(panel.table.item(r, 1).text() for r in rows) == sorted(result.excluded_for_target)
    assert all(not panel.table.item(r, 0).flags() & Qt.ItemFlag.ItemIsUserCheckable for r in rows)
    panel.table.selectRow(rows[0])  # a float layer's row selects that node, and has no tensor to learn
    assert panel.selected_layer() is None and not panel.learn_button.isEnabled()
    item = window.panel.item_of(panel.table.item(rows[0], 1).text())
    assert window.canvas.marks.selected == {item}


def test_a_target_out_of_reach_is_the_badge_and_the_best_model_found_is_shown(window, demo_path, qtbot):
    """The command line exits 1 for it; the window must not call the result GOOD beside a missed target."""
    window.open_model(demo_path)
    panel = window.quantize_panel
    panel.target.setValue(200.0)
    assert panel.badge.text() != "TARGET MISSED"
    _run(window, qtbot)
    result = window.workspace.quantization.previewed.result
    assert result.target is not None and not result.target.met and result.target.floor is not None
    assert panel.badge.text() == "TARGET MISSED"
    assert result.output_sqnr_db == max(v for _, v in result.target.runs)  # the best model measured is shown
    assert "out of reach" in panel.summary.text() and "kept the best model found" in panel.summary.text()
    panel.target.setValue(0.0)  # no target: the output SQNR's own verdict again
    _run(window, qtbot)
    assert panel.badge.text() in ("GOOD", "FAIR", "POOR")


def test_a_folder_of_images_calibrates_by_the_stated_preprocessing(window, demo_path, qtbot, tmp_path):
    import numpy as np
    from PIL import Image

    window.open_model(demo_path)
    panel = window.quantize_panel
    folder = tmp_path / "images"
    folder.mkdir()
    rng = np.random.default_rng(0)
    for k in range(3):
        Image.fromarray(rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)).save(folder / f"{k}.png")
    assert panel.set_calibration_file(folder, "scale=1/255,mean=0.5,std=0.5")
    assert panel.npz_label.text() == "images: 3 samples" and not panel.samples.isEnabled()
    dock = window._dock_of(panel)
    dock.raise_()  # the tab on screen, at the first run's height
    _run(window, qtbot)
    qtbot.waitUntil(lambda: dock.height() >= int(window.height() * 0.45) - 40, timeout=5000)  # room for the result
    result = window.workspace.quantization.previewed.result
    assert result.samples == 3 and result.calibration.startswith("from 3 images in ")
    assert "preprocess scale=1/255,mean=0.5,std=0.5" in panel.summary.text()
    # a preprocessing that does not fit is one line, and the folder chosen before stays
    assert not panel.set_calibration_file(folder, "size=0x0")
    assert "size" in window.last_error
    assert (panel.npz, panel.preprocess) == (str(folder), "scale=1/255,mean=0.5,std=0.5")


def test_calibration_images_are_read_once_when_chosen_not_on_every_run(window, demo_path, qtbot, tmp_path,
                                                                        monkeypatch):
    import numpy as np
    from PIL import Image

    import graphlens.numerics.image_samples as image_samples

    window.open_model(demo_path)
    panel = window.quantize_panel
    folder = tmp_path / "images"
    folder.mkdir()
    for k in range(2):
        Image.fromarray(np.full((40, 50, 3), 60 * k, np.uint8)).save(folder / f"{k}.png")
    read: list[str] = []
    pixels = image_samples._pixels
    monkeypatch.setattr(image_samples, "_pixels", lambda path, *a: read.append(path.name) or pixels(path, *a))
    assert panel.set_calibration_file(folder, "scale=1/255")
    assert sorted(read) == ["0.png", "1.png"]
    _run(window, qtbot)
    _run(window, qtbot)
    assert sorted(read) == ["0.png", "1.png"] and window.workspace.quantization.previewed.result.samples == 2
    window.open_model(demo_path)  # a new model: the samples read for the old one are forgotten
    assert panel.calibration is None and panel.npz is None


def test_the_quantize_action_raises_the_panel_with_room_for_its_results(window, demo_path, qtbot):
    window.open_model(demo_path)
    window.act_quantize.trigger()
    dock = window._dock_of(window.quantize_panel)
    qtbot.waitUntil(lambda: dock.isVisible() and dock.height() >= int(window.height() * 0.45) - 40, timeout=5000)


@pytest.mark.parametrize("choice, op_type", [(2, "DequantizeLinear"), (3, "MatMulNBits")])
def test_weight_only_int4_blocks_from_the_panel_apply_and_undo(window, qtbot, tmp_path, choice, op_type):
    """A transformer's MatMul weights in int4 blocks, activations float: the settings that do not apply are greyed
    out, the summary gives the storage, Apply writes the blocks and undo restores the model."""
    import onnx

    from tests.quantize.test_weight_only import decoder_like

    path, _, _ = decoder_like(tmp_path)
    window.open_model(path)
    before = window.model.to_proto().SerializeToString()
    panel = window.quantize_panel
    panel.bits.setCurrentIndex(choice)
    panel.block.setCurrentIndex(1)
    assert panel.block.isEnabled() and not panel.target.isEnabled() and not panel.gptq.isEnabled()
    config = panel.config()
    assert (config.weight_only, config.weight_bits, config.block_size) == (True, 4, 64)
    with qtbot.waitSignal(window.workspace.quantization.events.previewed, timeout=30_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    result = window.workspace.quantization.previewed.result
    assert {layer.node for layer in result.layers} == {"up", "down"}
    assert f"2 MatMul weights as int4 blocks of 64 (symmetric, {config.weight_format})" in panel.summary.text()
    panel.table.selectRow(0)
    assert not panel.learn_button.isEnabled()  # the lesson explains per-tensor and per-channel scales, not blocks
    qtbot.mouseClick(panel.apply_button, Qt.MouseButton.LeftButton)
    assert sum(n.op_type == op_type for n in window.model.to_proto().graph.node) >= 2
    window.workspace.undo()
    assert onnx.ModelProto.FromString(window.model.to_proto().SerializeToString()) == onnx.ModelProto.FromString(before)
    panel.bits.setCurrentIndex(0)
    assert panel.target.isEnabled() and not panel.block.isEnabled()


def test_the_summary_says_how_a_softmax_outputs_top_classes_moved(window, qtbot, tmp_path):
    import onnx

    from tests.quantize.quant_models import two_convs

    path = tmp_path / "softmax.onnx"
    onnx.save(two_convs(), path)
    window.open_model(path)
    panel = _run(window, qtbot)
    stats = window.workspace.quantization.previewed.result.probabilities["y"]
    changed = stats.positions - stats.same_top1
    assert f"Probabilities 'y': top class changed at {changed} of {stats.positions} positions" in panel.summary.text()


def test_a_quantization_that_would_not_fit_is_refused_in_one_line_and_keeps_the_model(window, demo_path, qtbot,
                                                                                     monkeypatch):
    from graphlens.numerics.memory import MEMORY_LIMIT_VARIABLE

    window.open_model(demo_path)
    before = window.model.to_proto().SerializeToString()
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "20000")  # random samples' 12 KB fit; quantizing them does not
    panel = window.quantize_panel
    panel.samples.setValue(2)
    panel.sensitivity.setChecked(False)
    qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=30_000)
    assert window.last_error.startswith("calibration samples not run: quantizing with them would need")
    assert "GRAPHLENS_MEMORY_LIMIT" in window.last_error and "\n" not in window.last_error
    assert window.model.to_proto().SerializeToString() == before and not window.model.modified
    assert window.workspace.quantization.previewed is None or window.workspace.quantization.previewed.result is None
