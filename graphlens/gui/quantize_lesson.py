"""The "Learn fake quantization" view: one tensor's histogram under its quantization grid, with the
scale and zero point worked out from its own numbers and the error they cause.

The numbers come from the workspace's quantization lesson (its ``quantize_lesson_job``, over
:func:`graphlens.quantize.lesson.tensor_lesson`; the window computes an activation's in a worker,
since its values need an onnxruntime run over the calibration samples); this module only draws them
and asks for another channel of a per-channel weight.
"""

from __future__ import annotations

import html
import math
import re
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSignalBlocker, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QSpinBox,
    QTableWidgetItem,
    QWidget,
)

from graphlens.gui.lesson_parts import (
    axis_font,
    caption_label,
    column,
    draw_title,
    header,
    lesson_page,
    number_table,
    stack_page,
)
from graphlens.rewrites.lesson_text import number

if TYPE_CHECKING:
    from graphlens.quantize.lesson import QuantLesson
    from graphlens.workspace.quantization import QuantizeLessonResult

INK, MUTED, BAR = QColor("#37474f"), QColor("#78909c"), QColor("#8fa9cf")
LEVEL, END, RANGE = QColor(194, 24, 91, 120), QColor("#c2185b"), QColor("#e67e22")


class GridHistogram(QWidget):
    """Counts of the values, the representable values ``(q − z)·s`` as thin lines over them, the
    ends of the integer range (clipping) dashed, and the calibrated range orange."""

    LEFT, RIGHT, TOP, BOTTOM = 44.0, 10.0, 20.0, 20.0

    def __init__(self, title: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.title = title
        self.counts = np.zeros(0)
        self.edges = np.zeros(0)
        self.levels = np.zeros(0)
        self.calibrated: tuple[float, float] | None = None
        self.snapped: np.ndarray | None = None
        """Counts of the dequantized values at each level (drawn as pink bars on the levels), or None."""
        self.stride = 1
        self.font_small = axis_font(self)
        self.setMinimumSize(260, 150)  # a plot 110 px tall under its title, above its axis

    def set_data(self, counts: np.ndarray, edges: np.ndarray, levels: np.ndarray,
                 calibrated: tuple[float, float] | None, snapped: np.ndarray | None = None) -> None:
        self.counts, self.edges, self.levels, self.calibrated, self.snapped = counts, edges, levels, calibrated, snapped
        self.update()

    def _plot(self) -> QRectF:
        return QRectF(self.LEFT, self.TOP, max(self.width() - self.LEFT - self.RIGHT, 1.0),
                      max(self.height() - self.TOP - self.BOTTOM, 1.0))

    def x_of(self, value: float) -> float:
        plot = self._plot()
        lo, hi = float(self.edges[0]), float(self.edges[-1])
        return plot.left() + (value - lo) / (hi - lo if hi > lo else 1.0) * plot.width()

    def visible_levels(self) -> np.ndarray:
        """The levels inside the plot, every ``stride``-th when closer than 4 px (the caption says so)."""
        if not len(self.edges):
            return np.zeros(0)
        inside = self.levels[(self.levels >= self.edges[0]) & (self.levels <= self.edges[-1])]
        if len(inside) < 2:
            self.stride = 1
            return np.asarray(inside)
        gap = abs(self.x_of(float(inside[1])) - self.x_of(float(inside[0])))
        self.stride = max(1, math.ceil(4.0 / max(gap, 1e-9)))
        return np.asarray(inside[:: self.stride])

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        painter.setFont(self.font_small)
        painter.setPen(INK)
        if not len(self.counts):
            return
        plot = self._plot()
        top = max(float(self.counts.max()), 1.0)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(BAR)
        for k, count in enumerate(self.counts):
            if count:
                x0, x1 = self.x_of(float(self.edges[k])), self.x_of(float(self.edges[k + 1]))
                h = max(count / top * plot.height(), 1.0)
                painter.drawRect(QRectF(x0, plot.bottom() - h, max(x1 - x0 - 0.5, 0.8), h))
        painter.setPen(QPen(LEVEL, 1.0))
        for level in self.visible_levels():
            x = self.x_of(float(level))
            painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
        if self.snapped is not None and self.snapped.max(initial=0) > 0:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(END)
            most = float(self.snapped.max())
            for level, count in zip(self.levels, self.snapped):
                if count and self.edges[0] <= level <= self.edges[-1]:
                    h = count / most * plot.height() * 0.92
                    painter.drawRect(QRectF(self.x_of(float(level)) - 2, plot.bottom() - h, 4, h))
        if self.calibrated is not None:
            painter.setPen(QPen(RANGE, 1.6))
            for value in self.calibrated:
                if self.edges[0] <= value <= self.edges[-1]:
                    x = self.x_of(value)
                    painter.drawLine(QPointF(x, plot.top() - 4), QPointF(x, plot.bottom()))
        painter.setPen(QPen(END, 1.6, Qt.PenStyle.DashLine))
        for value in (self.levels[0], self.levels[-1]):
            if self.edges[0] <= value <= self.edges[-1]:
                x = self.x_of(float(value))
                painter.drawLine(QPointF(x, plot.top()), QPointF(x, plot.bottom()))
        painter.setPen(QPen(MUTED, 1))
        painter.drawLine(QPointF(plot.left(), plot.bottom()), QPointF(plot.right(), plot.bottom()))
        painter.drawText(QRectF(0, plot.bottom() + 3, plot.left() + 60, 14), Qt.AlignmentFlag.AlignLeft,
                         number(float(f"{self.edges[0]:.3g}")))
        painter.drawText(QRectF(plot.right() - 80, plot.bottom() + 3, 80, 14), Qt.AlignmentFlag.AlignRight,
                         number(float(f"{self.edges[-1]:.3g}")))
        painter.drawText(QRectF(0, plot.top() - 2, self.LEFT - 4, 14), Qt.AlignmentFlag.AlignRight, f"{int(top):,}")
        painter.setPen(INK)
        draw_title(self, painter, QRectF(plot.left(), 2, plot.width(), 16), Qt.AlignmentFlag.AlignLeft, self.title)


def formula_html(lines: list[str], unit: str = "") -> str:
    """The formulas as a grey monospace block, each numeric result (after the last ' = ', optionally
    followed by ``unit``, a regex) in bold: the numbers the lesson worked out stand out."""
    out = []
    for line in lines:
        head, sep, result = line.rpartition(" = ")
        numeric = re.fullmatch(r"[−-]?[\d.]+(e[−+-]?\d+)?" + unit, result.strip()) is not None
        out.append(f"{html.escape(head)} = <b>{html.escape(result)}</b>" if sep and numeric else html.escape(line))
    return ("<p style='font-family:monospace;white-space:pre-wrap;background:#f4f6f8;padding:6px'>"
            + "\n".join(out) + "</p>")


class _RowLesson(Protocol):
    @property
    def lesson(self) -> Any: ...


RowResult = TypeVar("RowResult", bound=_RowLesson)


class RowLessonView(QWidget, Generic[RowResult]):
    """A lesson on one row of a quantize or binarize preview, shown from the workspace's event."""

    result: RowResult | None
    title: QLabel

    def show_result(self, result: RowResult | None) -> None:
        """Show the workspace's lesson (None: nothing to show)."""
        if result is None:
            self.clear()
            return
        self.result = result
        self.show_lesson(result.lesson)

    def set_working(self, what: str) -> None:
        self.title.setText(f"Working out the lesson for {what}…")

    def show_lesson(self, lesson: Any) -> None:
        raise NotImplementedError

    def clear(self) -> None:
        raise NotImplementedError


class QuantizeLessonView(RowLessonView["QuantizeLessonResult"]):
    """Fake quantization of one tensor, step by step, with its own numbers."""

    channel_requested = Signal(int)
    """The user picked another channel of a per-channel weight; the workspace works out its lesson."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: QuantizeLessonResult | None = None
        self.lesson: QuantLesson | None = None
        self.title, self.text = lesson_page()
        self.channel_box = QSpinBox()
        self.channel_box.setMinimumWidth(70)
        self.channel_box.valueChanged.connect(self._request_channel)
        self.channel_label = QLabel("Channel")
        self.channel_hint = caption_label()
        self.histogram = GridHistogram("All values, with every representable value (q − z)·s")
        self.zoom = GridHistogram("Close up: a few steps s wide")
        self.caption = caption_label()
        self.error = caption_label("font-family:monospace;color:#263238")
        self.examples = number_table(["x", "q", "x′ = (q − z)·s", "x − x′"])
        self.examples.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        # what quantizing is and its numbers; every value under the grid; the rounding close up, with examples
        head = header(self.title, self.channel_label, self.channel_box, self.channel_hint)
        self.page_scroll = stack_page(self, head, (column((self.text, 1), self.error), 5),
                                 (column((self.histogram, 1), self.caption), 4),
                                 (column((self.zoom, 1), self.examples), 4))
        self.clear()

    def clear(self) -> None:
        self.result, self.lesson = None, None
        self.title.setText("Run a quantization in the Quantize panel, select a row and press "
                           "“Learn fake quantization” to see its tensor quantized with its own numbers.")
        for widget in (self.channel_label, self.channel_box, self.channel_hint):
            widget.hide()
        self.histogram.set_data(np.zeros(0), np.zeros(0), np.zeros(1), None)
        self.zoom.set_data(np.zeros(0), np.zeros(0), np.zeros(1), None)
        self.text.setHtml("")
        self.error.setText("")
        self.caption.setText("")
        self.examples.setRowCount(0)

    def show_lesson(self, lesson: QuantLesson) -> None:
        self.lesson = lesson
        layer = lesson.layer
        where = f", output channel {lesson.channel}" if lesson.channel is not None else ""
        self.title.setText(f"Fake-quantizing {layer.kind} '{layer.tensor}' of '{layer.node}' to "
                           f"{lesson.qtype.name}{where}")
        per_channel = lesson.channel is not None
        for widget in (self.channel_label, self.channel_box, self.channel_hint):
            widget.setVisible(per_channel)
        if lesson.channel is not None:
            with QSignalBlocker(self.channel_box):
                self.channel_box.setRange(0, lesson.channels - 1)
                self.channel_box.setValue(lesson.channel)
            self.channel_hint.setText(f"of 0–{lesson.channels - 1}: one scale per output channel; "
                                      "opened on the one that quantizes worst")
        counts, edges = lesson.histogram()
        self.histogram.set_data(counts, edges, lesson.levels, lesson.calibrated)
        self._zoom(lesson)
        self._caption(lesson)
        if layer.kind == "weight":
            source = "the weight's values" + (f" in channel {lesson.channel}" if per_channel else "")
        else:
            source = f"the values of this activation on the {len(lesson.values):,} elements of the calibration samples"
        self.text.setHtml(
            "<p style='line-height:130%'>Quantizing maps each float x to one of "
            f"{lesson.qtype.qmax - lesson.qtype.qmin + 1} "
            f"integers q, and the next layer sees x′ = (q − z)·s instead of x. The scale s is the step between "
            f"neighbouring representable values; the zero point z is the integer that stands for 0.0. Here the "
            f"numbers are {html.escape(source)}.</p>"
            + formula_html(lesson.formula_lines()))
        e = lesson.error
        self.error.setText(f"error x − x′ over {e.count:,} values:\n"
                           f"  SQNR {e.sqnr_db:.2f} dB   MSE {e.mse:.3g}   max |x − x′| {e.max_abs:.3g} "
                           f"(s/2 = {lesson.scale / 2:.3g})\n  clipped: {lesson.clipped:,} values outside the range")
        rows = lesson.examples()
        self.examples.setRowCount(len(rows))
        for r, (x, q, x_hat) in enumerate(rows):
            for c, text in enumerate((f"{x:.6g}", str(q), f"{x_hat:.6g}", f"{x - x_hat:.3g}")):
                cell = QTableWidgetItem(text)
                cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.examples.setItem(r, c, cell)

    def _zoom(self, lesson: QuantLesson) -> None:
        """A window ten steps wide around the median value: the steps and the rounding are visible."""
        s = lesson.scale
        center = float(np.median(lesson.values)) if lesson.values.size else 0.0
        lo, hi = center - 5 * s, center + 5 * s
        counts, edges = np.histogram(lesson.values, bins=80, range=(lo, hi))
        inside = (lesson.values >= lo) & (lesson.values <= hi)
        snapped = np.bincount(lesson.quantized[inside] - lesson.qtype.qmin, minlength=len(lesson.levels))
        self.zoom.set_data(counts, edges, lesson.levels, None, snapped)
        self.zoom.title = f"Close up around the median ({number(center)})"  # the caption says what is drawn

    def _caption(self, lesson: QuantLesson) -> None:
        self.histogram.visible_levels()
        stride = self.histogram.stride
        nth = {2: "2nd", 3: "3rd"}.get(stride, f"{stride}th")
        thinned = f" (every {nth} drawn)" if stride > 1 else ""
        lo, hi = lesson.levels[0], lesson.levels[-1]
        parts = [f"Pink lines: representable values{thinned}; dashed: the ends q_min → {number(float(lo))} and "
                 f"q_max → {number(float(hi))}, where larger values are clipped."]
        if lesson.layer.kind == "activation":
            parts.append(f"Orange: the range {lesson.method} calibration chose, [{number(lesson.calibrated[0])}, "
                         f"{number(lesson.calibrated[1])}]; the values span [{number(lesson.observed[0])}, "
                         f"{number(lesson.observed[1])}].")
        parts += lesson.notes
        parts.append("Close up: blue, the values x; pink bars, where rounding puts them (x′, on the levels s apart).")
        self.caption.setText(" ".join(parts))

    def _request_channel(self, channel: int) -> None:
        if self.lesson is not None and channel != self.lesson.channel:
            self.channel_requested.emit(channel)
