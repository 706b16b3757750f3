"""The "Learn BN folding" view: one fold explained with its own numbers, channel by channel.

All numbers come from the workspace's lesson (:meth:`graphlens.workspace.bn_lesson.BnLessonFeature.job`, over
:func:`graphlens.rewrites.bn_lesson.bn_lesson`); this module only lays them out and asks for another
channel when the user picks one.
"""

from __future__ import annotations

import html
import math

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSignalBlocker, QSize, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QFontMetricsF,
    QImage,
    QLinearGradient,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
)
from PySide6.QtWidgets import (
    QBoxLayout,
    QHBoxLayout,
    QLabel,
    QSpinBox,
    QStackedWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from graphlens.gui.lesson_parts import (
    CAPTION,
    TEXT_MIN_SIZE,
    WrapLabel,
    axis_font,
    draw_title,
    header,
    label_height,
    nice_ticks,
    scroll_page,
)
from graphlens.matching.match import Match
from graphlens.rewrites.bn_lesson import BnLesson, explain_text
from graphlens.rewrites.lesson_text import number
from graphlens.workspace.results import BnLessonResult

INK, MUTED, GRID = QColor("#37474f"), QColor("#78909c"), QColor("#cfd8dc")
BAR, CHOSEN, UNIT_LINE = QColor("#8fa9cf"), QColor("#e67e22"), QColor("#c62828")
VIRIDIS = np.array([[68, 1, 84], [59, 82, 139], [33, 145, 140], [94, 201, 98], [253, 231, 37]], dtype=np.float64)
LEFT_MIDDLE = Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter
RIGHT_MIDDLE = Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter


def color_range(values: np.ndarray) -> tuple[float, float]:
    """Min and max, widened to at least 1e-3 of the magnitude so float rounding never shows as a colour change."""
    lo, hi = float(np.min(values)), float(np.max(values))
    floor = 1e-3 * max(abs(lo), abs(hi), 1e-30)
    return ((lo + hi - floor) / 2, (lo + hi + floor) / 2) if hi - lo < floor else (lo, hi)


def colors(values: np.ndarray, lo: float, hi: float) -> np.ndarray:
    """RGB bytes for ``values`` on a viridis-like scale from ``lo`` to ``hi``."""
    t = np.clip((np.asarray(values, np.float64) - lo) / (hi - lo if hi > lo else 1.0), 0.0, 1.0)
    stops = np.linspace(0.0, 1.0, len(VIRIDIS))
    rgb: np.ndarray = np.stack([np.interp(t, stops, VIRIDIS[:, k]) for k in range(3)], axis=-1).round()
    return rgb.astype(np.uint8)


class ScaleChart(QWidget):
    """The scale factor s of every channel as bars, with the line s = 1 (no change); a click picks a channel."""

    channel_clicked = Signal(int)
    LEFT, RIGHT, TOP, BOTTOM = 44.0, 8.0, 20.0, 20.0

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.values, self.selected = np.zeros(0), -1
        self.font_small = axis_font(self)
        self.setMinimumSize(260, 170)  # room for four labelled ticks and bars whose heights can be compared
        self.setCursor(Qt.CursorShape.PointingHandCursor)
        self.setToolTip("scale factor s = γ/σ per channel; click a bar to explain that channel")

    def sizeHint(self) -> QSize:
        return QSize(420, 220)

    def set_values(self, values: np.ndarray, selected: int) -> None:
        self.values, self.selected = np.asarray(values, np.float64), selected
        self.update()

    def _plot(self) -> QRectF:
        return QRectF(self.LEFT, self.TOP, max(self.width() - self.LEFT - self.RIGHT, 1.0),
                      max(self.height() - self.TOP - self.BOTTOM, 1.0))

    def ticks(self) -> np.ndarray:
        """The y axis's labelled values: from 0 (or below, for a negative s) to at or above the largest s and 1,
        as many as fit one label apart; the axis runs from the first to the last."""
        lo, hi = min(0.0, float(self.values.min(initial=0.0))), max(1.0, float(self.values.max(initial=1.0)))
        return nice_ticks(lo, hi, int(self._plot().height() // (2.5 * label_height(self.font_small))) + 1)

    def _y(self, value: float, ticks: np.ndarray | None = None) -> float:
        ticks = self.ticks() if ticks is None else ticks
        lo, hi = float(ticks[0]), float(ticks[-1])
        plot = self._plot()
        return plot.bottom() - (value - lo) / (hi - lo) * plot.height()

    def bar_center(self, channel: int) -> QPointF:
        """Where channel's bar is drawn (the middle of its slot, halfway up the bar)."""
        plot = self._plot()
        slot = plot.width() / max(len(self.values), 1)
        return QPointF(plot.left() + (channel + 0.5) * slot, (self._y(0.0) + self._y(float(self.values[channel]))) / 2)

    def channel_at(self, x: float) -> int | None:
        plot = self._plot()
        if not len(self.values) or not plot.left() <= x < plot.right():
            return None
        return min(int((x - plot.left()) / (plot.width() / len(self.values))), len(self.values) - 1)

    def mousePressEvent(self, event: QMouseEvent) -> None:
        channel = self.channel_at(event.position().x())
        if channel is not None:
            self.channel_clicked.emit(channel)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        if not len(self.values):
            return
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.setFont(self.font_small)
        ticks = self.ticks()
        plot, n, zero, one = self._plot(), len(self.values), self._y(0.0, ticks), self._y(1.0, ticks)
        self._draw_axis(painter, ticks, one)
        slot = plot.width() / n
        gap = min(slot * 0.2, 3.0)
        painter.setPen(Qt.PenStyle.NoPen)
        for c, value in enumerate(self.values):
            top, bottom = sorted((self._y(float(value), ticks), zero))
            painter.setBrush(CHOSEN if c == self.selected else BAR)
            painter.drawRect(QRectF(plot.left() + c * slot + gap / 2, top, max(slot - gap, 1.0),
                                    max(bottom - top, 1.0)))
        painter.setPen(QPen(UNIT_LINE, 1.2, Qt.PenStyle.DashLine))
        painter.drawLine(QPointF(plot.left(), one), QPointF(plot.right(), one))
        painter.setPen(QPen(GRID, 1))
        painter.drawLine(QPointF(plot.left(), zero), QPointF(plot.right(), zero))
        painter.setPen(MUTED)
        widest = QFontMetricsF(self.font_small).horizontalAdvance(str(n - 1)) + 8.0
        step = max(1, math.ceil(widest / slot))  # channel numbers that never touch
        for c in range(0, n, step):
            painter.drawText(QRectF(plot.left() + (c + 0.5) * slot - widest, plot.bottom() + 2, 2 * widest, 16),
                             Qt.AlignmentFlag.AlignHCenter, str(c))
        if 0 <= self.selected < n:
            painter.setPen(CHOSEN.darker(130))
            painter.drawText(QRectF(plot.left(), 0, plot.width(), self.TOP), LEFT_MIDDLE,
                             f"channel {self.selected}: s = {number(float(self.values[self.selected]))}")

    def _draw_axis(self, painter: QPainter, ticks: np.ndarray, one: float) -> None:
        """The y axis with a light grid line and a label at every tick; 1 labelled too (in the s = 1 line's
        colour) where no tick label is near it."""
        plot, half = self._plot(), label_height(self.font_small) / 2
        painter.setPen(QPen(GRID, 1))
        painter.drawLine(QPointF(plot.left(), plot.top()), QPointF(plot.left(), plot.bottom()))
        labels = [(number(float(t)), self._y(float(t), ticks), MUTED) for t in ticks]
        if all(abs(y - one) >= 2 * half for _, y, _ in labels):
            labels.append(("1", one, UNIT_LINE))
        for text, y, color in labels:
            painter.setPen(QPen(QColor("#eef1f3"), 1))
            painter.drawLine(QPointF(plot.left() + 1, y), QPointF(plot.right(), y))
            painter.setPen(color)
            painter.drawText(QRectF(0, y - half, self.LEFT - 6, 2 * half), RIGHT_MIDDLE, text)


class HeatMap(QWidget):
    """One channel's output as coloured cells on a colour scale shared with its neighbour."""

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.values: np.ndarray | None = None
        self.image: QImage | None = None
        self.setMinimumSize(130, 140)  # a 32×32 map still shows its cells
        self.setMaximumHeight(340)

    def sizeHint(self) -> QSize:
        return QSize(240, 270)  # asks the column for a readable square, not the minimum

    def set_values(self, values: np.ndarray | None, lo: float, hi: float) -> None:
        """A 1-D vector is drawn as a single row."""
        self.values = None if values is None else np.atleast_2d(np.asarray(values, np.float64))
        self.image = None
        if self.values is not None and self.values.size:
            h, w = self.values.shape
            rgb = np.ascontiguousarray(colors(self.values, lo, hi))
            self.image = QImage(rgb.tobytes(), w, h, 3 * w, QImage.Format.Format_RGB888).copy()
        self.update()

    def _target(self) -> QRectF:
        """The largest rectangle with the map's aspect ratio under the title (there are values)."""
        area = QRectF(4, 20, self.width() - 8, self.height() - 24)
        assert self.values is not None
        h, w = self.values.shape
        cell = min(area.width() / w, area.height() / h)
        return QRectF(area.left() + (area.width() - cell * w) / 2, area.top(), cell * w, cell * h)

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        painter.setPen(INK)
        draw_title(self, painter, QRectF(0, 0, self.width(), 18), Qt.AlignmentFlag.AlignCenter, self.title)
        if self.image is None or self.values is None:
            return
        target = self._target()
        painter.drawImage(target, self.image)  # no smoothing: one cell per value
        painter.setPen(QPen(GRID, 1))
        painter.drawRect(target)
        if self.values.size <= 16:  # few cells are big enough to carry their values, which say more than a colour
            h, w = self.values.shape
            for (row, col), value in np.ndenumerate(self.values):
                painter.setPen(QColor("#ffffff") if QColor(self.image.pixel(col, row)).lightnessF() < 0.55 else INK)
                cell = QRectF(target.left() + col * target.width() / w, target.top() + row * target.height() / h,
                              target.width() / w, target.height() / h)
                painter.drawText(cell, Qt.AlignmentFlag.AlignCenter, f"{value:.6g}")


class ColorLegend(QWidget):
    """The colour scale both heat maps use, from its minimum (left) to its maximum (right)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.lo = self.hi = 0.0
        self.setFixedHeight(28)

    def set_range(self, lo: float, hi: float) -> None:
        self.lo, self.hi = lo, hi
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        bar = QRectF(86, 6, max(self.width() - 172, 10), 14)
        gradient = QLinearGradient(bar.topLeft(), bar.topRight())  # the same stops, interpolated as colors() does
        for t, (r, g, b) in zip(np.linspace(0.0, 1.0, len(VIRIDIS)), VIRIDIS):
            gradient.setColorAt(float(t), QColor(int(r), int(g), int(b)))
        painter.fillRect(bar, gradient)
        painter.setPen(MUTED)
        painter.drawText(QRectF(0, bar.top() - 2, bar.left() - 6, 18), RIGHT_MIDDLE,
                         f"min {number(float(f'{self.lo:.3g}'))}")
        painter.drawText(QRectF(bar.right() + 6, bar.top() - 2, 80, 18), LEFT_MIDDLE,
                         f"max {number(float(f'{self.hi:.3g}'))}")


def _emphasize_result(line: str) -> str:
    """A formula line as HTML with its result (after the last ' = ') in bold."""
    head, sep, result = line.rpartition(" = ")
    if not sep or line.startswith("channel ") or result.startswith("("):
        return html.escape(line)
    return f"{html.escape(head)} = <b>{html.escape(result)}</b>"


def _label(style: str, text: str = "") -> QLabel:
    label = WrapLabel(text)
    label.setStyleSheet(style)
    return label


def _fill(layout: QBoxLayout, *items: QWidget | tuple[QWidget, int]) -> QBoxLayout:
    """Add widgets, each optionally with its stretch, in order."""
    for item in items:
        widget, stretch = item if isinstance(item, tuple) else (item, 0)
        layout.addWidget(widget, stretch)
    return layout


class BnLessonView(QWidget):
    """Why and how one BatchNormalization folds into the layer before it, for a chosen channel."""

    channel_requested = Signal(int)
    """The user picked another channel (spin box or chart); the workspace computes its lesson."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: BnLessonResult | None = None
        self.lesson: BnLesson | None = None
        self.title = _label("font-size:14px;font-weight:bold;color:#263238")
        self.title.setTextFormat(Qt.TextFormat.PlainText)  # node names
        self.channel_box = QSpinBox()
        self.channel_box.setMinimumWidth(70)
        self.channel_box.valueChanged.connect(self._request_channel)
        self.channel_hint = _label(CAPTION)
        self.text = QTextBrowser()
        self.text.setStyleSheet("QTextBrowser{background:#ffffff;border:1px solid #dfe4e8}")
        self.text.setMinimumSize(TEXT_MIN_SIZE)
        self.chart = ScaleChart()
        self.chart.channel_clicked.connect(self._request_channel)
        self.before_map, self.after_map = HeatMap("before"), HeatMap("after")
        self.legend = ColorLegend()
        self.sample_caption = _label(CAPTION)
        self.difference = _label("font-family:monospace;color:#263238")
        self.takeaway = _label(CAPTION, "The two maps are the same picture: folding changes the layer's weights and "
                                        "bias, not what it computes. Only float rounding differs.")
        self.reason = _label("color:#78909c;padding:12px")
        self.reason.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.samples_stack = QStackedWidget()
        self._build_layout()
        self.clear()

    def _build_layout(self) -> None:
        """Three columns side by side, as a bottom dock is wide and short: the explanation with its formulas, the
        scale of every channel, the outputs before and after; the whole page scrolls where the dock is too small."""
        maps = QWidget()
        _fill(QHBoxLayout(maps), self.before_map, self.after_map).setContentsMargins(0, 0, 0, 0)
        self.samples_stack.addWidget(maps)
        self.samples_stack.addWidget(self.reason)
        chart_caption = _label(CAPTION,
                               "Scale s = γ/σ of every channel (dashed: s = 1, no change). Click a bar to explain it.")
        samples = _fill(QVBoxLayout(), self.sample_caption, (self.samples_stack, 1), self.legend, self.difference,
                        self.takeaway)
        samples.setSpacing(4)
        body = QHBoxLayout()
        body.addWidget(self.text, 5)
        body.addLayout(_fill(QVBoxLayout(), chart_caption, (self.chart, 1)), 3)
        body.addLayout(samples, 4)
        layout = QVBoxLayout()
        layout.setContentsMargins(10, 8, 10, 8)
        layout.addLayout(header(self.title, QLabel("Channel"), self.channel_box, self.channel_hint))
        layout.addLayout(body, 1)
        self.page_scroll = scroll_page(self, layout)

    def show_result(self, result: BnLessonResult | None) -> None:
        """Show the workspace's lesson (None: nothing to show); the channel box and chart follow it."""
        if result is None:
            self.clear()
            return
        self.result = result
        if result.lesson is None:
            self._show_refusal(result.match, result.refusal or "the fold refuses this match")
            return
        lesson = result.lesson
        self.channel_box.setEnabled(True)
        with QSignalBlocker(self.channel_box):
            self.channel_box.setRange(0, lesson.details.channels - 1)
            self.channel_box.setValue(lesson.channel)
        self.channel_hint.setText(f"of 0–{lesson.details.channels - 1}; "
                                  "opened on the one whose scale is farthest from 1")
        self._show(lesson)

    def set_working(self, what: str) -> None:
        self.title.setText(f"Working out the lesson for {what}: running the model before and after the fold…")

    def clear(self) -> None:
        """Nothing to teach yet: a new model, or the model changed under the lesson."""
        self.result = None
        self.lesson = None
        self.title.setText("Find conv-bn matches, pick one and press “Learn BN folding” to see its fold with its own "
                           "numbers.")
        self.text.setHtml("")
        self.channel_box.setEnabled(False)
        self.channel_hint.setText("")
        self.chart.set_values(np.zeros(0), -1)
        self._show_reason("", "")

    def _request_channel(self, channel: int) -> None:
        if self.lesson is not None and channel != self.lesson.channel:
            self.channel_requested.emit(channel)

    def _show(self, lesson: BnLesson) -> None:
        self.lesson = lesson
        d = lesson.details
        self.title.setText(f"Folding BatchNormalization '{d.bn}' into {d.kind} '{d.layer}'")
        formulas = "\n".join(_emphasize_result(line) for line in lesson.formula_lines)
        self.text.setHtml(
            f"<p style='line-height:135%'>{html.escape(explain_text(lesson))}</p>"
            f"<p style='margin-top:10px'><b>Channel {lesson.channel}, step by step</b> "
            "<span style='color:#78909c'>(the numbers the rewrite uses)</span></p>"
            f"<pre style='font-family:monospace;background:#f4f6f8;padding:6px'>{formulas}</pre>"
        )
        self.chart.set_values(lesson.scale_factors, lesson.channel)
        self.before_map.title = f"before: {d.kind} → BN"
        self.after_map.title = f"after: folded {d.kind}"
        self._show_samples(lesson)

    def _show_refusal(self, match: Match, reason: str) -> None:
        """A match the rule will not fold: say why, and show nothing that would suggest otherwise."""
        self.lesson = None
        self.title.setText(f"'{match.nodes.get('bn', match.pattern)}' cannot be folded")
        self.text.setHtml(f"<p>{html.escape(reason)}</p>")
        self.channel_box.setEnabled(False)
        self.channel_hint.setText("")
        self.chart.set_values(np.zeros(0), -1)
        self._show_reason("", "")

    def _show_reason(self, caption: str, reason: str) -> None:
        """Samples are missing (or the match does not fold): the reason takes the heat maps' place."""
        self.sample_caption.setText(caption)
        self.reason.setText(reason)
        self.samples_stack.setCurrentWidget(self.reason)
        self.difference.setText("")
        self.legend.hide()
        self.takeaway.hide()

    def _show_samples(self, lesson: BnLesson) -> None:
        samples = self.result.samples if self.result is not None else None
        tensor = samples.tensor if samples is not None else "the BN output"
        before, after = lesson.sample_before, lesson.sample_after
        if before is None or after is None:
            self._show_reason(f"Channel {lesson.channel} of '{tensor}'",
                              f"No sample outputs: {lesson.unavailable_reason or 'the models could not run'}")
            return
        self.samples_stack.setCurrentIndex(0)
        self.legend.show()
        self.takeaway.setVisible(bool(lesson.within_tolerance))
        lo, hi = color_range(np.concatenate([before.reshape(-1), after.reshape(-1)]))
        shape = "×".join(str(n) for n in before.shape) if before.ndim > 1 else f"over a batch of {before.size}"
        self.sample_caption.setText(f"Channel {lesson.channel} of '{tensor}' ({shape}) on the same random input, "
                                    "before and after the fold (same colour scale)")
        self.before_map.set_values(before, lo, hi)
        self.after_map.set_values(after, lo, hi)
        self.legend.set_range(lo, hi)
        dtype = before.dtype.name
        verdict = f"{dtype} rounding" if lesson.within_tolerance else f"more than {dtype} rounding allows"
        self.difference.setText(f"max |before − after| = {lesson.max_abs_difference:.2g} ({verdict})")
