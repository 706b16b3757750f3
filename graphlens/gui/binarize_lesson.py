"""The "Learn binarization" view: one kernel's weights under the 2^K levels ±α₁ ± α₂ …, each αᵢ
worked out from its own numbers, and the SQNR for K = 1..8.

The numbers come from the workspace's binarization lesson (its ``binarize_lesson_job``, over
:func:`graphlens.binarize.lesson.layer_lesson`: numpy only, immediate); this module draws them and
asks for another kernel or another K.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import QPointF, QRectF, QSignalBlocker, QSize, Qt, Signal
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPen
from PySide6.QtWidgets import (
    QHeaderView,
    QLabel,
    QSpinBox,
    QTableWidgetItem,
    QWidget,
)

from graphlens.binarize.bits import MAX_BITS
from graphlens.binarize.lesson import BinarizeLesson, sub
from graphlens.gui.lesson_parts import (
    axis_font,
    caption_label,
    column,
    header,
    label_height,
    lesson_page,
    nice_ticks,
    number_table,
    stack_page,
)
from graphlens.gui.quantize_lesson import INK, MUTED, GridHistogram, RowLessonView, formula_html
from graphlens.rewrites.lesson_text import number

if TYPE_CHECKING:
    from graphlens.workspace.binarization import BinarizeLessonResult

CURVE, CURRENT = QColor("#1565c0"), QColor("#c2185b")


class SqnrChart(QWidget):
    """SQNR (dB) against K = 1..8 for one kernel: a line through eight points, the current K pink."""

    LEFT, RIGHT, TOP, BOTTOM = 40.0, 12.0, 22.0, 22.0
    TITLE = "SQNR of this kernel (dB) against the bits K"

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.points: list[tuple[int, float]] = []
        self.current = 1
        self.font_small = axis_font(self)
        self.setMinimumSize(240, 160)  # four labelled ticks; the eight K apart

    def sizeHint(self) -> QSize:
        return QSize(320, 200)

    def set_data(self, points: list[tuple[int, float]], current: int) -> None:
        self.points, self.current = [(k, v) for k, v in points if math.isfinite(v)], current
        self.update()

    def _plot(self) -> QRectF:
        return QRectF(self.LEFT, self.TOP, max(self.width() - self.LEFT - self.RIGHT, 1.0),
                      max(self.height() - self.TOP - self.BOTTOM, 1.0))

    def ticks(self) -> np.ndarray:
        """The dB axis's labelled values, from 0 (or below) to at or above the best SQNR, one label apart at least."""
        values = [v for _, v in self.points] or [0.0]
        most = int(self._plot().height() // (2.5 * label_height(self.font_small))) + 1
        return nice_ticks(min(0.0, min(values)), max(max(values), 1.0), most)

    def at(self, k: int, v: float, ticks: np.ndarray | None = None) -> QPointF:
        """Where the point (K = k, v dB) is drawn."""
        ticks = self.ticks() if ticks is None else ticks
        plot, low, top = self._plot(), float(ticks[0]), float(ticks[-1])
        return QPointF(plot.left() + (k - 1) / (MAX_BITS - 1) * plot.width(),
                       plot.bottom() - (v - low) / (top - low) * plot.height())

    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        painter.fillRect(self.rect(), QColor("#ffffff"))
        painter.setFont(self.font_small)
        painter.setPen(INK)
        painter.drawText(QRectF(self.LEFT, 2, self.width() - self.LEFT, 16), Qt.AlignmentFlag.AlignLeft, self.TITLE)
        if not self.points:
            return
        plot, ticks, half = self._plot(), self.ticks(), label_height(self.font_small) / 2
        for tick in ticks:
            y = self.at(1, float(tick), ticks).y()
            painter.setPen(QPen(QColor("#eceff1"), 1))
            painter.drawLine(QPointF(plot.left(), y), QPointF(plot.right(), y))
            painter.setPen(MUTED)
            painter.drawText(QRectF(0, y - half, self.LEFT - 4, 2 * half), Qt.AlignmentFlag.AlignRight |
                             Qt.AlignmentFlag.AlignVCenter, number(float(tick)))
        for k in range(1, MAX_BITS + 1):
            x = self.at(k, 0.0, ticks).x()
            painter.drawText(QRectF(x - 10, plot.bottom() + 3, 20, 16), Qt.AlignmentFlag.AlignHCenter, str(k))
        painter.setPen(QPen(CURVE, 1.6))
        for (k0, v0), (k1, v1) in zip(self.points, self.points[1:]):
            painter.drawLine(self.at(k0, v0, ticks), self.at(k1, v1, ticks))
        for k, v in self.points:
            point = self.at(k, v, ticks)
            painter.setBrush(CURRENT if k == self.current else CURVE)
            painter.setPen(Qt.PenStyle.NoPen)
            radius = 4.5 if k == self.current else 3.0
            painter.drawEllipse(point, radius, radius)
            if k == self.current:
                painter.setPen(CURRENT)
                painter.drawText(QRectF(point.x() - 40, point.y() - 20, 80, 16), Qt.AlignmentFlag.AlignHCenter,
                                 f"{v:.1f} dB")


class BinarizeLessonView(RowLessonView["BinarizeLessonResult"]):
    """Binarization of one kernel, bit by bit, with its own numbers."""

    kernel_requested = Signal(int, int)
    """The user picked another kernel or K (kernel, bits); the workspace works out that lesson."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.result: BinarizeLessonResult | None = None
        self.lesson: BinarizeLesson | None = None
        self.title, self.text = lesson_page()
        self.kernel_box = QSpinBox()
        self.kernel_box.setMinimumWidth(70)
        self.kernel_box.valueChanged.connect(lambda k: self._again(kernel=k))
        self.kernel_label = QLabel("Kernel")
        self.kernel_hint = caption_label()
        self.bits_box = QSpinBox()
        self.bits_box.setRange(1, MAX_BITS)
        self.bits_box.setPrefix("K = ")
        self.bits_box.setToolTip("Work it out with another number of bits (the preview is not changed)")
        self.bits_box.valueChanged.connect(lambda k: self._again(bits=k))
        self.histogram = GridHistogram("This kernel's weights, with the 2^K levels ±α₁ ± α₂ … they become")
        self.caption = caption_label()
        self.chart = SqnrChart()
        self.steps = number_table(["bit i", "αᵢ", "SQNR dB", "levels"])
        self.steps.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        head = header(self.title, self.kernel_label, self.kernel_box, self.kernel_hint, QLabel("Bits"), self.bits_box)
        # what binarizing is and its numbers; the weights under their levels; the SQNR bit by bit
        self.page_scroll = stack_page(self, head, (self.text, 5), (column((self.histogram, 1), self.caption), 4),
                                 (column((self.chart, 1), self.steps), 4))
        self.clear()

    def clear(self) -> None:
        self.result, self.lesson = None, None
        self.title.setText("Run a binarization in the Binarize panel, select a row and press “Learn binarization” "
                           "to see one kernel of its weight binarized bit by bit, with its own numbers.")
        for widget in (self.kernel_label, self.kernel_box, self.kernel_hint, self.bits_box):
            widget.setEnabled(False)
        self.histogram.set_data(np.zeros(0), np.zeros(0), np.zeros(1), None)
        self.chart.set_data([], 1)
        self.text.setHtml("")
        self.caption.setText("")
        self.steps.setRowCount(0)

    def show_lesson(self, lesson: BinarizeLesson) -> None:
        self.lesson = lesson
        where = f", kernel {lesson.kernel}" if lesson.axis is not None else ", one α per tensor"
        self.title.setText(f"Binarizing the weight '{lesson.tensor}' of {lesson.op_type} '{lesson.node}' with "
                           f"K = {lesson.bits} bit{'s' if lesson.bits != 1 else ''}{where}")
        with QSignalBlocker(self.kernel_box), QSignalBlocker(self.bits_box):
            self.kernel_box.setRange(0, lesson.kernels - 1)
            self.kernel_box.setValue(lesson.kernel)
            self.bits_box.setValue(lesson.bits)
        for widget in (self.kernel_label, self.kernel_box, self.kernel_hint, self.bits_box):
            widget.setEnabled(True)
        per_kernel = lesson.axis is not None
        for widget in (self.kernel_label, self.kernel_box, self.kernel_hint):
            widget.setVisible(per_kernel)
        worst = int(np.argmin(lesson.kernel_sqnr_db))
        self.kernel_hint.setText(f"of 0–{lesson.kernels - 1} (axis {lesson.axis} of {list(lesson.shape)}): "
                                 f"one set of α per output channel; kernel {worst} binarizes worst, "
                                 f"{lesson.kernel_sqnr_db[worst]:.1f} dB")
        symbols = (" ± ".join(f"α{sub(i)}" for i in range(1, min(lesson.bits, 3) + 1))
                   + (" …" if lesson.bits > 3 else ""))
        self.histogram.title = f"{lesson.values.size:,} weights → {len(lesson.levels)} levels ±{symbols}"
        counts, edges = lesson.histogram(int(min(120, max(24, lesson.values.size // 6))))
        self.histogram.set_data(counts, edges, lesson.levels, None, lesson.snapped())
        self._caption(lesson)
        self.chart.set_data([(s.bit, s.sqnr_db) for s in lesson.curve], lesson.bits)
        self.steps.setRowCount(len(lesson.steps))
        for r, step in enumerate(lesson.steps):
            cells = (str(step.bit), number(step.alpha), f"{step.sqnr_db:.2f}", str(len(np.unique(step.levels))))
            for c, text in enumerate(cells):
                cell = QTableWidgetItem(text)
                cell.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                self.steps.setItem(r, c, cell)
        self.text.setHtml(
            "<p style='line-height:130%'>Binarizing writes each weight w as a sum of K signed terms, "
            "ŵ = ±α₁ ± α₂ … ± α_K: bit i keeps only the sign Bᵢ of what is still missing (the residual Rᵢ₋₁), "
            "and αᵢ is the mean size of that residual, the best single scale for those signs. Each bit removes "
            "n·αᵢ² of the error, so more bits never make it worse. Here the numbers are this kernel's "
            f"{lesson.values.size:,} weights.</p>"
            + formula_html(lesson.formula_lines(), unit=r"( dB)?"))

    def _caption(self, lesson: BinarizeLesson) -> None:
        count = len(np.unique(lesson.levels))
        parts = [f"Blue: the {lesson.values.size:,} weights. Pink lines: the {count} level{'s' if count != 1 else ''} "
                 f"Σ ±αᵢ; pink bars: how many weights land on each; dashed: the outermost, "
                 f"{number(float(lesson.levels[0]))} and {number(float(lesson.levels[-1]))}. "
                 f"SQNR at K = {lesson.bits}: {lesson.sqnr_db:.2f} dB."]
        parts += lesson.notes
        self.caption.setText(" ".join(parts))

    def _again(self, kernel: int | None = None, bits: int | None = None) -> None:
        if self.lesson is not None:
            self.kernel_requested.emit(self.lesson.kernel if kernel is None else kernel,
                                       self.lesson.bits if bits is None else bits)
