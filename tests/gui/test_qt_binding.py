"""The installed Qt binding must not corrupt Python's reference counts.

PySide6 6.12.0 releases a reference to None on every call of a method returning void; on Python
3.11, where None is not immortal, a few thousand paints later the process aborts with
"deallocating None". pyproject.toml excludes that release; this test says so plainly if a
broken one is ever installed.
"""

from __future__ import annotations

import sys

import PySide6
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QPainterPath


def test_void_calls_keep_none_alive(qapp):
    image = QImage(32, 32, QImage.Format.Format_ARGB32)
    painter = QPainter(image)
    path = QPainterPath()
    before = sys.getrefcount(None)
    for _ in range(500):
        painter.setPen(QColor("red"))
        painter.drawRect(QRectF(0, 0, 4, 4))
        path.moveTo(1.0, 2.0)
    lost = before - sys.getrefcount(None)
    painter.end()
    assert lost < 100, f"PySide6 {PySide6.__version__} loses a reference to None per call; install another version"
