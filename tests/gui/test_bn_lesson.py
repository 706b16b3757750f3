"""The "Learn BN folding" view: shows the workspace's lesson, asks it for the channel the user picks, draws its maps."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from PySide6.QtCore import Qt

import graphlens.rewrites.bn_lesson as lesson_module
from graphlens.core.model import Model, load_model
from graphlens.gui.bn_lesson import BnLessonView
from graphlens.rewrites.lesson_text import number
from graphlens.workspace import Workspace
from tests.rewrites.linear_models import Config, linear_bn
from tests.rewrites.test_bn_lesson import matmul_on_3d_input


class Lessons:
    """A workspace with the view following it, as the window wires them."""

    def __init__(self, view: BnLessonView) -> None:
        self.view = view
        self.workspace = Workspace()
        self.workspace.bn_lesson.events.result.connect(view.show_result)
        view.channel_requested.connect(
            lambda channel: self.workspace.bn_lesson.run(self.workspace.bn_lesson.result.match_index, channel))

    def open(self, model: Model, pattern: str, bn: str) -> None:
        if self.workspace.model is not model:
            self.workspace.set_model(model)
        found = self.workspace.matches.find(pattern).matches
        self.workspace.bn_lesson.run(next(i for i, m in enumerate(found) if m.nodes["bn"] == bn))


@pytest.fixture
def view(qtbot) -> BnLessonView:
    widget = BnLessonView()
    qtbot.addWidget(widget)
    widget.resize(1180, 700)
    widget.show()
    qtbot.waitExposed(widget)
    return widget


@pytest.fixture
def lessons(view) -> Lessons:
    return Lessons(view)


@pytest.fixture
def demo(demo_path) -> Model:
    return load_model(demo_path)


def distinct_colors(widget) -> int:
    image = widget.grab().toImage()
    return len({image.pixel(x, y) for x in range(0, image.width(), 3) for y in range(0, image.height(), 3)})


def test_opens_on_the_lessons_channel(view, lessons, demo):
    lessons.open(demo, "conv-bn", "/stem/bn")
    lesson = view.lesson
    assert lesson is not None
    assert view.channel_box.value() == lesson.channel == int(np.argmax(np.abs(lesson.scale_factors - 1)))
    assert view.channel_box.maximum() == 15
    text = view.text.toPlainText()
    assert "Conv '/stem/conv'" in text and f"s = {number(lesson.scale_factors[lesson.channel])}" in text
    assert view.chart.selected == lesson.channel


def test_changing_the_channel_shows_its_numbers(view, lessons, demo):
    lessons.open(demo, "conv-bn", "/stem/bn")
    target = 3 if view.lesson.channel != 3 else 4
    view.channel_box.setValue(target)
    assert view.lesson.channel == target and view.chart.selected == target
    p = view.lesson.details.params
    text = view.text.toPlainText()
    assert f"scale s = γ / σ = {number(p.gamma[target])} / {number(p.std[target])} = {number(p.scale[target])}" in text
    assert f"w[{target},0,0,0]" in text
    np.testing.assert_array_equal(view.before_map.values, view.lesson.sample_before)


def test_clicking_a_bar_selects_its_channel(view, lessons, demo, qtbot):
    lessons.open(demo, "conv-bn", "/stem/bn")
    target = 0 if view.lesson.channel != 0 else 1
    qtbot.mouseClick(view.chart, Qt.MouseButton.LeftButton, pos=view.chart.bar_center(target).toPoint())
    assert view.lesson.channel == target and view.channel_box.value() == target
    assert f"channel {target}:" in view.text.toPlainText()


def test_heat_maps_are_drawn_on_one_scale(view, lessons, demo):
    lessons.open(demo, "conv-bn", "/stem/bn")
    for heat_map in (view.before_map, view.after_map):
        assert heat_map.values.shape == (32, 32)
        assert distinct_colors(heat_map) > 20
    assert view.samples_stack.currentWidget() is not view.reason
    assert view.legend.lo <= view.lesson.sample_before.min() and view.legend.hi >= view.lesson.sample_before.max()
    assert "max |before − after| = " in view.difference.text() and "(float32 rounding)" in view.difference.text()


def test_the_models_run_once_per_match(view, lessons, demo, monkeypatch):
    calls = []
    real = lesson_module.run_samples
    monkeypatch.setattr(lesson_module, "run_samples", lambda *args, **kw: calls.append(1) or real(*args, **kw))
    lessons.open(demo, "conv-bn", "/stem/bn")
    for channel in (1, 2, 3):
        view.channel_box.setValue(channel)
    assert view.lesson.channel == 3
    assert len(calls) == 1
    lessons.open(demo, "gemm-bn", "/head/bn")
    assert len(calls) == 2 and view.lesson.details.kind == "Gemm"


def test_gemm_lesson_draws_its_batch_vector(view, lessons, demo):
    lessons.open(demo, "gemm-bn", "/head/bn")
    assert view.before_map.values.shape == (1, 1)
    assert distinct_colors(view.before_map) > 2


def test_without_samples_the_reason_replaces_the_maps(view, lessons):
    model = Model(linear_bn(Config(dtype=TensorProto.DOUBLE)))
    lessons.open(model, "conv-bn", "bn")
    assert view.lesson is not None and view.lesson.sample_before is None
    assert view.samples_stack.currentWidget() is view.reason
    assert view.lesson.unavailable_reason in view.reason.text()


def test_a_match_that_cannot_fold_says_why(view, lessons):
    model = Model(matmul_on_3d_input())
    lessons.open(model, "matmul-bn", "bn")
    assert view.lesson is None and not view.channel_box.isEnabled()
    assert "rank 3" in view.text.toPlainText()


def _learn(window, qtbot, index: int = 0):
    window.workspace.matches.find("conv-bn")
    window.matches_panel.list.setCurrentRow(index)
    qtbot.mouseClick(window.matches_panel.lesson_button, Qt.MouseButton.LeftButton)


def test_learn_works_the_lesson_out_in_a_worker_and_shows_its_numbers(window, demo_path, qtbot):
    from graphlens.workspace import Job

    window.open_model(demo_path)
    view = window.lesson_view
    with qtbot.waitSignal(window.workspace.bn_lesson.events.result, timeout=30_000):
        _learn(window, qtbot, 1)
        assert isinstance(window.lesson_jobs.job.work.__self__, Job) and "Working out" in view.title.text()
    lesson = view.lesson
    assert lesson is not None and window.workspace.bn_lesson.result.match_index == 1
    assert view.channel_box.value() == lesson.channel and view.before_map.values is not None
    assert f"s = {number(lesson.scale_factors[lesson.channel])}" in view.text.toPlainText()
    view.channel_box.setValue((lesson.channel + 1) % lesson.details.channels)  # the same run, here and now
    assert view.lesson.channel == (lesson.channel + 1) % lesson.details.channels


def test_a_lesson_the_model_changed_under_is_dropped_and_the_status_bar_says_so(window, demo_path, qtbot):
    window.open_model(demo_path)
    _learn(window, qtbot)
    window.workspace.apply_all("fold-bn")  # while the worker runs the model as it was
    qtbot.waitUntil(lambda: not window.lesson_jobs.busy, timeout=30_000)
    assert window.workspace.bn_lesson.result is None and window.lesson_view.lesson is None
    assert "Working out" not in window.lesson_view.title.text()
    assert window.statusBar().currentMessage() == "The model changed while the lesson was computed; run it again"


def test_an_activations_quantization_lesson_is_worked_out_in_a_worker(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.quantize_panel
    panel.samples.setValue(2)
    panel.sensitivity.setChecked(False)
    preview = panel.run(background=False)
    activation = next(layer for layer in preview.result.layers if layer.kind == "activation")
    view = window.quantize_lesson
    with qtbot.waitSignal(window.workspace.quantization.events.lesson, timeout=30_000):
        assert window.show_quantize_lesson(preview, activation) is None
        assert window.quantize_lesson_jobs.busy and "Working out" in view.title.text()
    lesson = view.lesson
    assert lesson.layer is activation and lesson.zero_point == activation.zero_point[0]
    assert activation.tensor in view.title.text() and f"{lesson.error.sqnr_db:.2f} dB" in view.error.text()
    assert "calibration" in view.caption.text() and view.examples.rowCount() >= 3


def test_each_empty_lesson_names_the_button_that_fills_it(window):
    buttons = {window.lesson_view: window.matches_panel.lesson_button,
               window.quantize_lesson: window.quantize_panel.learn_button,
               window.binarize_lesson: window.binarize_panel.learn_button}
    for view, button in buttons.items():
        view.clear()
        assert f"“{button.text()}”" in view.title.text()
