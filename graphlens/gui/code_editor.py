"""The pattern editor's text box: monospace, line numbers in a gutter, the error's line and token marked."""

from __future__ import annotations

import re

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontDatabase,
    QPainter,
    QPaintEvent,
    QResizeEvent,
    QTextCharFormat,
    QTextCursor,
    QTextFormat,
)
from PySide6.QtWidgets import QPlainTextEdit, QTextEdit, QWidget

ERROR_COLOR = "#c62828"
_TOKEN_AT = re.compile(r"[A-Za-z0-9_.]+|\S")


def fixed_font(size_change: int = 0) -> QFont:
    font = QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont)
    font.setStyleHint(QFont.StyleHint.Monospace)
    if size_change:
        font.setPointSizeF(max(font.pointSizeF() + size_change, 7))
    return font


class CodeEditor(QPlainTextEdit):
    """Monospace text with line numbers, so wrapped statements and "line N" errors are easy to place."""

    def __init__(self) -> None:
        super().__init__()
        self.setFont(fixed_font())
        self.setTabStopDistance(4 * self.fontMetrics().horizontalAdvance(" "))
        self.error_line = 0
        self.gutter = _Gutter(self)
        self.blockCountChanged.connect(lambda _count: self.setViewportMargins(self.gutter_width(), 0, 0, 0))
        self.updateRequest.connect(self._update_gutter)
        self.setViewportMargins(self.gutter_width(), 0, 0, 0)

    def gutter_width(self) -> int:
        return 12 + self.fontMetrics().horizontalAdvance("9") * max(2, len(str(self.blockCount())))

    def _update_gutter(self, rect: QRect, dy: int) -> None:
        if dy:
            self.gutter.scroll(0, dy)
        else:
            self.gutter.update(0, rect.y(), self.gutter.width(), rect.height())

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        area = self.contentsRect()
        self.gutter.setGeometry(area.left(), area.top(), self.gutter_width(), area.height())

    def mark_error(self, line: int, column: int) -> None:
        """Tint line ``line`` (1-based; 0 clears) and put a red wavy underline under the token at ``column``."""
        self.error_line = line
        self.gutter.update()
        block = self.document().findBlockByNumber(line - 1)
        if line < 1 or not block.isValid():
            self.setExtraSelections([])
            return
        text, base = block.text(), block.position()
        start = min(max(column - 1, 0), max(len(text) - 1, 0))
        found = _TOKEN_AT.match(text, start)
        marks = []
        spans = ((0, len(text), "#fdecea", False), (start, found.end() if found else start, "#f8c4bd", True))
        for begin, end, background, wavy in spans:
            cursor = QTextCursor(block)
            cursor.setPosition(base + begin)
            cursor.setPosition(base + end, QTextCursor.MoveMode.KeepAnchor)
            mark = QTextEdit.ExtraSelection()
            mark.cursor = cursor
            mark.format.setBackground(QColor(background))
            if wavy:
                mark.format.setUnderlineStyle(QTextCharFormat.UnderlineStyle.WaveUnderline)
                mark.format.setUnderlineColor(QColor(ERROR_COLOR))
            else:
                mark.format.setProperty(QTextFormat.Property.FullWidthSelection, True)
            marks.append(mark)
        self.setExtraSelections(marks)

    def paint_gutter(self, event: QPaintEvent) -> None:
        painter = QPainter(self.gutter)
        painter.fillRect(event.rect(), QColor("#f1f3f5"))
        block = self.firstVisibleBlock()
        top = self.blockBoundingGeometry(block).translated(self.contentOffset()).top()
        height = self.fontMetrics().height()
        while block.isValid() and top <= event.rect().bottom():
            number = block.blockNumber() + 1
            painter.setPen(QColor(ERROR_COLOR if number == self.error_line else "#90a4ae"))
            painter.drawText(0, int(top), self.gutter.width() - 6, height, Qt.AlignmentFlag.AlignRight, str(number))
            top += self.blockBoundingRect(block).height()
            block = block.next()


class _Gutter(QWidget):
    def __init__(self, editor: CodeEditor) -> None:
        super().__init__(editor)
        self.editor = editor

    def paintEvent(self, event: QPaintEvent) -> None:
        self.editor.paint_gutter(event)
