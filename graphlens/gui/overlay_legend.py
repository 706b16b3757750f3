"""The overlay's colour scale as the canvas legend: name and unit, a bar from lowest to highest value
with its marks (decades on a log scale), and the grey of nodes without a value; and a canvas coloured
by an overlay with that legend (:func:`colour_by_overlay`, for the Overlay panel and the compare view)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QLinearGradient, QPainter, QPen

from graphlens.overlays import Overlay, item_values
from graphlens.overlays.overlay import NO_VALUE, scale_colours


def legend_fonts() -> tuple[QFont, QFont]:
    """The canvas legends' text font (8 pt) and its bold, for the title."""
    font = QFont()
    font.setPointSizeF(8)
    bold = QFont(font)
    bold.setBold(True)
    return font, bold


def paint_legend_box(painter: QPainter, area: QRectF, title: str, bold: QFont) -> None:
    """A canvas legend's white rounded box over ``area`` and its bold title at the top (antialiased;
    the caller saves and restores the painter around the whole legend)."""
    painter.setRenderHint(QPainter.RenderHint.Antialiasing, True)
    painter.setPen(QPen(QColor("#cfd8dc")))
    painter.setBrush(QBrush(QColor(255, 255, 255, 235)))
    painter.drawRoundedRect(area, 4, 4)
    painter.setFont(bold)
    painter.setPen(QColor("#263238"))
    painter.drawText(QPointF(area.left() + 8, area.top() + 16), title)


def paint_scale_legend(painter: QPainter, bottom_left: QPointF, overlay: Overlay) -> QRectF:
    """The colour scale in widget pixels, its bottom-left corner at ``bottom_left``: the overlay's name
    and unit, a bar from the lowest to the highest value with its marks, and the no-value grey."""
    font, bold = legend_fonts()
    metrics = QFontMetricsF(font)
    title = overlay.title + ("  ·  log scale" if overlay.log_scale else "")
    bar_width = 220.0
    width = max(bar_width, QFontMetricsF(bold).horizontalAdvance(title)) + 16
    height = 84.0
    area = QRectF(bottom_left.x(), bottom_left.y() - height, width, height)
    painter.save()
    paint_legend_box(painter, area, title, bold)
    bar = QRectF(area.left() + 8, area.top() + 24, bar_width, 11)
    gradient = QLinearGradient(bar.topLeft(), bar.topRight())
    steps = 16
    for k in range(steps + 1):
        t = k / steps
        r, g, b = (int(c) for c in scale_colours(np.array([t if overlay.higher_is_worse else 1 - t]))[0])
        gradient.setColorAt(t, QColor(r, g, b))
    painter.setPen(QPen(QColor("#90a4ae")))
    painter.setBrush(QBrush(gradient))
    painter.drawRect(bar)
    painter.setFont(font)
    painter.setPen(QColor("#37474f"))
    ticks = overlay.ticks()
    placed: list[tuple[float, float, str, float]] = []  # (left, right, label, x): the ends first, then what fits
    for t, label in [ticks[0], ticks[-1], *ticks[1:-1]]:
        x = bar.left() + t * bar.width()
        text_width = metrics.horizontalAdvance(label)
        left = min(max(x - text_width / 2, bar.left()), bar.right() - text_width)
        if all(left > right + 6 or left + text_width < start - 6 for start, right, _, _ in placed):
            placed.append((left, left + text_width, label, x))
    for left, _, label, x in placed:
        painter.drawLine(QPointF(x, bar.bottom()), QPointF(x, bar.bottom() + 3))
        painter.drawText(QPointF(left, bar.bottom() + 15), label)
    swatch_y = bar.bottom() + 24
    painter.setPen(Qt.PenStyle.NoPen)
    painter.setBrush(QColor(*NO_VALUE))
    painter.drawRoundedRect(QRectF(area.left() + 8, swatch_y, 11, 11), 2, 2)
    painter.setPen(QColor("#607d8b"))
    painter.drawText(QPointF(area.left() + 24, swatch_y + 10),
                     "no value"
                     + ("  ·  darker is worse" if overlay.higher_is_worse else "  ·  darker is worse (lower)"))
    painter.restore()
    return area


def colour_by_overlay(canvas: Any, overlay: Overlay) -> None:
    """Colour a canvas's boxes by ``overlay`` (a collapsed group by its worst member), with its scale as legend."""
    canvas.legend_painter = colour_renderer(canvas.renderer, overlay)


def colour_renderer(renderer: Any, overlay: Overlay) -> Callable[[QPainter, QPointF], QRectF]:
    """Colour a scene renderer's boxes by ``overlay`` (a collapsed group by its worst member); returns
    the painter of its scale legend, for a canvas or a rendered image."""
    items = renderer.view.items
    values = item_values(overlay, (it.members if it.kind in ("node", "group") else () for it in items))
    indices = list(values)
    rgb = overlay.colours(np.array([values[i] for i in indices])) if indices else np.zeros((0, 3), np.uint8)
    colours = {i: tuple(int(c) for c in rgb[k]) for k, i in enumerate(indices)}
    labels = {i: ("worst " if items[i].kind == "group" else "") + overlay.label(values[i]) for i in indices}
    renderer.set_overlay(colours, labels, NO_VALUE)
    return lambda painter, corner: paint_scale_legend(painter, corner, overlay)
