"""The three lessons stay readable in a short bottom dock: at 1366×768 and 1280×800, with the dock at 45 % of the
window, their charts, maps, tables and text keep readable sizes, no label is cut, the page scrolls where it has to
rather than squeezing, and all of it comes back when the window grows again. Their axes end on a labelled top tick."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QWidget

from graphlens.gui.binarize_lesson import SqnrChart
from graphlens.gui.bn_lesson import ScaleChart
from graphlens.gui.lesson_parts import axis_font, label_height, nice_ticks

SIZES = [(1366, 768), (1280, 800)]
SHARE = 0.45
READABLE_CHART = (240, 150)
"""Below this a chart's bars, ticks and labels run into each other."""
READABLE_TEXT_HEIGHT = 150
"""Eight lines of a lesson's explanation."""


def _settle(qtbot) -> None:
    qtbot.wait(60)  # posted layout requests, the scroll area's resize of its page


def _dock_at(window, qtbot, view: QWidget, size: tuple[int, int]) -> None:
    """The window at ``size`` with the lesson's dock at 45 % of its height, as the window gives result docks."""
    window.resize(*size)
    _settle(qtbot)
    window.resizeDocks([window._dock_of(view)], [int(size[1] * SHARE)], Qt.Orientation.Vertical)
    _settle(qtbot)


def _needed_height(label: QLabel) -> int:
    """The height the label's text needs at its width (QLabel answers no less than its minimum height: drop it)."""
    kept = label.minimumHeight()
    label.setMinimumHeight(0)
    need = label.heightForWidth(label.width()) if label.wordWrap() else label.sizeHint().height()
    label.setMinimumHeight(kept)
    return need


def _cut_labels(view: QWidget) -> list[str]:
    cut = []
    for label in view.findChildren(QLabel):
        if not label.isVisibleTo(view) or not label.text():
            continue
        too_narrow = not label.wordWrap() and label.width() < label.sizeHint().width()
        if too_narrow or label.height() < _needed_height(label):
            cut.append(f"{label.text()[:50]!r} {label.width()}×{label.height()}")
    return cut


def _assert_readable(view: QWidget, plots: list[QWidget], texts: list[QWidget]) -> None:
    for plot in plots:
        assert plot.width() >= READABLE_CHART[0] and plot.height() >= READABLE_CHART[1], (type(plot).__name__,
                                                                                          plot.size())
    for text in texts:
        assert text.height() >= READABLE_TEXT_HEIGHT, text.size()
    assert _cut_labels(view) == []
    page, area = view.page_scroll.widget(), view.page_scroll
    assert page.height() >= page.minimumSizeHint().height()  # the page is never squeezed below its parts
    overflow = page.height() - area.viewport().height()
    assert area.verticalScrollBar().maximum() == max(overflow, 0)  # what does not fit is reachable by scrolling


def _bn_lesson(window, demo_path):
    window.open_model(demo_path)
    window.workspace.matches.find("conv-bn")
    assert window.show_lesson(0) is not None
    view = window.lesson_view
    return view, [view.chart], [view.text]


def _quantize_lesson(window, demo_path):
    window.open_model(demo_path)
    panel = window.quantize_panel
    panel.samples.setValue(2)
    panel.sensitivity.setChecked(False)
    preview = panel.run(background=False)
    weight = next(layer for layer in preview.result.layers if layer.kind == "weight")
    assert window.show_quantize_lesson(preview, weight, background=False) is not None
    view = window.quantize_lesson
    return view, [view.histogram, view.zoom], [view.text]


def _binarize_lesson(window, demo_path):
    window.open_model(demo_path)
    window.binarize_panel.samples.setValue(2)
    preview = window.binarize_panel.run(background=False)
    assert window.show_binarize_lesson(preview, preview.result.layers[0]) is not None
    view = window.binarize_lesson
    return view, [view.histogram, view.chart], [view.text]


LESSONS = {"bn-folding": _bn_lesson, "fake-quantization": _quantize_lesson, "binarization": _binarize_lesson}


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_in_a_short_dock_keeps_its_parts_readable(window, demo_path, qtbot, lesson, size):
    view, plots, texts = LESSONS[lesson](window, demo_path)
    _dock_at(window, qtbot, view, size)
    assert view.height() <= int(size[1] * SHARE)
    _assert_readable(view, plots, texts)
    if lesson == "bn-folding":
        for heat_map in (view.before_map, view.after_map):
            assert heat_map.width() >= 130 and heat_map.height() >= 140


@pytest.mark.parametrize("lesson", LESSONS)
def test_a_lesson_scrolls_in_a_small_window_and_recovers_when_it_grows(window, demo_path, qtbot, lesson):
    view, plots, texts = LESSONS[lesson](window, demo_path)
    _dock_at(window, qtbot, view, (800, 500))
    assert view.page_scroll.verticalScrollBar().maximum() > 0  # scrolls rather than squeezing its parts
    _assert_readable(view, plots, texts)
    _dock_at(window, qtbot, view, (1366, 768))
    _assert_readable(view, plots, texts)
    for label in view.findChildren(QLabel):  # wrapped lines the narrow window needed are given back
        if label.isVisibleTo(view) and label.text() and label.wordWrap():
            assert label.minimumHeight() <= _needed_height(label)
    assert view.page_scroll.verticalScrollBar().maximum() == 0  # room again: the whole lesson shows at once


@pytest.mark.parametrize(("lo", "hi", "most"), [(0.0, 1.1, 6), (0.0, 1.0, 4), (-0.37, 2.2, 5), (0.0, 47.3, 4),
                                                (0.0, 1e-4, 8), (3.0, 3.0, 5), (0.0, 1000.0, 2)])
def test_nice_ticks_cover_the_range_on_round_steps_within_the_count(lo, hi, most):
    ticks = nice_ticks(lo, hi, most)
    step = ticks[1] - ticks[0]
    assert ticks[0] <= lo and ticks[-1] >= hi
    assert 2 <= len(ticks) <= max(most, 3)
    np.testing.assert_allclose(np.diff(ticks), step, rtol=1e-9)
    mantissa = step / 10 ** np.floor(np.log10(step))
    assert any(np.isclose(mantissa, m) for m in (1.0, 2.0, 2.5, 5.0)), step
    if lo <= 0 <= hi:
        assert np.isclose(ticks, 0.0).any()  # the bars' base is a labelled tick


def _assert_axis(ticks: np.ndarray, ys: list[float], top: float, values: list[float], font) -> None:
    assert ticks[-1] >= max(values) and ys[-1] == pytest.approx(top)  # a labelled tick at the top of the axis
    gaps = -np.diff(ys)
    assert len(ticks) >= 3 and gaps.min() >= label_height(font)  # labels one label apart at least: none overlap


@pytest.mark.parametrize("height", [170, 240, 400])
def test_the_scale_charts_axis_has_a_top_tick_and_labels_apart(qtbot, height):
    chart = ScaleChart()
    qtbot.addWidget(chart)
    chart.resize(400, height)
    values = np.array([0.58, 0.43, 0.93, 1.09, 0.41, 0.97, 1.76])
    chart.set_values(values, 4)
    ticks = chart.ticks()
    ys = [chart._y(float(t), ticks) for t in ticks]
    _assert_axis(ticks, ys, chart._plot().top(), [*values, 1.0], axis_font(chart))


@pytest.mark.parametrize("height", [160, 300])
def test_the_sqnr_charts_axis_has_a_top_tick_and_labels_apart(qtbot, height):
    chart = SqnrChart()
    qtbot.addWidget(chart)
    chart.resize(320, height)
    values = [3.09, 8.2, 11.9, 16.0, 18.4, 20.1, 21.7, 23.3]
    chart.set_data(list(enumerate(values, start=1)), 3)
    ticks = chart.ticks()
    ys = [chart.at(1, float(t), ticks).y() for t in ticks]
    _assert_axis(ticks, ys, chart._plot().top(), values, axis_font(chart))
