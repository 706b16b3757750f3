"""What every lesson page is made of: a page that scrolls rather than squeezing its parts, labels that wrap without
being cut, a title row, read-only number tables, and chart axes on round ticks.

A lesson lives in a bottom dock that the window may make short (about half of a 1366×768 screen): its charts, maps
and text keep minimum sizes at which they can still be read, and the page scrolls where the dock is smaller.
"""

from __future__ import annotations

import math

import numpy as np
from PySide6.QtCore import QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFont, QFontMetricsF, QPainter, QPalette, QResizeEvent
from PySide6.QtWidgets import (
    QFrame,
    QHBoxLayout,
    QLabel,
    QLayout,
    QScrollArea,
    QTableWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

PAGE = QColor("#fbfbfc")
CAPTION = "color:#546e7a"
TEXT_MIN_SIZE = QSize(300, 150)
"""A lesson's text pane shows at least eight lines of its explanation; below that the page scrolls."""


def nice_ticks(lo: float, hi: float, most: int) -> np.ndarray:
    """Round values s apart (s is 1, 2, 2.5 or 5 × 10^k) from at or below ``lo`` to at or above ``hi``, as few steps
    as fit in ``most`` ticks (at least 3): an axis drawn over them ends on a labelled tick at its top and bottom."""
    most = max(int(most), 3)  # -1, 0, 1 always fits: an axis across 0 keeps its 0
    if not hi > lo:
        lo, hi = lo - 0.5, hi + 0.5
    exponent = math.floor(math.log10((hi - lo) / (most - 1)))
    while True:
        for multiple in (1.0, 2.0, 2.5, 5.0):
            step = multiple * 10.0**exponent
            first, last = math.floor(lo / step + 1e-9), math.ceil(hi / step - 1e-9)
            if last - first + 1 <= most:
                return np.round(np.arange(first, last + 1) * step, 12)
        exponent += 1


def axis_font(widget: QWidget) -> QFont:
    """The small font a chart writes its axes in."""
    font = QFont(widget.font())
    font.setPointSize(8)
    return font


def label_height(font: QFont) -> float:
    """How tall one axis label is, with the gap that keeps two of them from touching."""
    return QFontMetricsF(font).height() + 4.0


def draw_title(widget: QWidget, painter: QPainter, rect: QRectF, align: Qt.AlignmentFlag, title: str) -> None:
    """A plot's one-line title, cut with "…" where the plot is narrower than it; the whole of it in the tooltip."""
    shown = painter.fontMetrics().elidedText(title, Qt.TextElideMode.ElideRight, int(rect.width()))
    widget.setToolTip(title if shown != title else "")
    painter.drawText(rect, align, shown)


class WrapLabel(QLabel):
    """A word-wrapped label whose minimum height is what its text needs at its width: on a lesson page that
    scrolls, the page grows to hold every line rather than cutting lines off."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setWordWrap(True)

    def hasHeightForWidth(self) -> bool:
        # the minimum height says it instead: a scroll area whose layout has height-for-width sizes its page by the
        # preferred heights, and would scroll where the parts' minimum sizes fit
        return False

    def setText(self, text: str) -> None:
        super().setText(text)
        self._fit()

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self._fit()

    def _fit(self) -> None:
        self.setMinimumHeight(0)  # QLabel's height-for-width never answers less than the minimum height
        need = max(self.heightForWidth(max(self.width(), 1)), 0) if self.text() else 0
        if need:
            self.setMinimumHeight(need)

    def sizeHint(self) -> QSize:
        """As wide as QLabel would like, as tall as the text is at the width it has (no blank band around it)."""
        hint = super().sizeHint()
        return QSize(hint.width(), self.minimumHeight()) if self.text() else hint


def scroll_page(view: QWidget, content: QLayout) -> QScrollArea:
    """Put a lesson's ``content`` on a pale page that scrolls where the dock is smaller than its parts' minimum sizes
    (charts, maps and text keep a readable size rather than being squeezed), and fills the dock where it is larger."""
    page = QWidget()
    page.setObjectName("lessonPage")
    page.setAutoFillBackground(True)
    palette = page.palette()
    palette.setColor(QPalette.ColorRole.Window, PAGE)
    page.setPalette(palette)
    page.setLayout(content)
    area = QScrollArea(view)
    area.setObjectName("lessonScroll")
    area.setFrameShape(QFrame.Shape.NoFrame)
    area.setWidgetResizable(True)
    area.setWidget(page)
    outer = QVBoxLayout(view)
    outer.setContentsMargins(0, 0, 0, 0)
    outer.addWidget(area)
    return area


def header(title: QLabel, *parts: QWidget) -> QHBoxLayout:
    """The title with the lesson's choices on the same line, so a short dock keeps its height for the charts; a
    wrapping hint among them shares the width with the title."""
    row = QHBoxLayout()
    row.addWidget(title, 3)
    row.addSpacing(12)
    for part in parts:
        row.addWidget(part, 2 if isinstance(part, WrapLabel) else 0)
    return row


def lesson_page() -> tuple[QLabel, QTextBrowser]:
    """A lesson's bold title and its text pane (every lesson looks alike)."""
    title = WrapLabel()
    title.setTextFormat(Qt.TextFormat.PlainText)
    title.setStyleSheet("font-size:14px;font-weight:bold;color:#263238")
    text = QTextBrowser()
    text.setStyleSheet("QTextBrowser{background:#ffffff;border:1px solid #dfe4e8}")
    text.setMinimumSize(TEXT_MIN_SIZE)
    return title, text


def caption_label(style: str = CAPTION) -> WrapLabel:
    """A wrapped caption, grey unless told otherwise."""
    label = WrapLabel()
    label.setStyleSheet(style)
    return label


def number_table(headers: list[str], rows_shown: int = 3) -> QTableWidget:
    """A read-only table of worked-out numbers, without row numbers, never shorter than ``rows_shown`` rows."""
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().hide()
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    table.verticalHeader().setDefaultSectionSize(20)
    table.setMinimumHeight(table.horizontalHeader().sizeHint().height() + 20 * rows_shown + 2 * table.frameWidth())
    return table


def column(*items: QWidget | tuple[QWidget, int]) -> QVBoxLayout:
    """Widgets one above the other, each optionally with its stretch."""
    layout = QVBoxLayout()
    for item in items:
        widget, stretch = item if isinstance(item, tuple) else (item, 0)
        layout.addWidget(widget, stretch)
    return layout


def stack_page(view: QWidget, head: QHBoxLayout, *columns: tuple[QVBoxLayout | QWidget, int]) -> QScrollArea:
    """The title row, then the columns side by side (each with its stretch) on a page that scrolls where the dock is
    too small for them."""
    body = QHBoxLayout()
    for part, stretch in columns:
        if isinstance(part, QWidget):
            body.addWidget(part, stretch)
        else:
            body.addLayout(part, stretch)
    layout = QVBoxLayout()
    layout.setContentsMargins(10, 8, 10, 8)
    layout.addLayout(head)
    layout.addLayout(body, 1)
    return scroll_page(view, layout)
