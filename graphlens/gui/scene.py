"""Drawing a laid-out graph with QPainter: shared by the canvas, the minimap and headless rendering.

Nothing here owns state the user changes: it turns a :class:`View` and :class:`Layout` into cached
drawing data once (rectangles per category, one path for all edges) and paints the part that is
visible at the current scale. Level of detail follows the scale: far out, plain boxes batched per
colour and edges without antialiasing (a full 10,000-node frame stays within tens of
milliseconds); closer, titles; close in, every label, rounded boxes and arrowheads.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PySide6.QtCore import QPointF, QRectF, Qt
from PySide6.QtGui import QBrush, QColor, QFont, QFontMetricsF, QPainter, QPainterPath, QPen, QPolygonF

from graphlens.layout.layered import Layout
from graphlens.layout.view import CATEGORIES, View

CATEGORY_COLORS = {
    "conv": "#3465a4",
    "attention": "#8c564b",
    "normalization": "#2a9d8f",
    "activation": "#c0504d",
    "pooling": "#4f8f3a",
    "shape": "#7f8c8d",
    "math": "#7b5ea7",
    "control": "#b5832b",
    "quantization": "#c2185b",
    "other": "#455a64",
}
CATEGORY_NAMES = {
    "conv": "convolution / linear",
    "attention": "attention",
    "normalization": "normalization",
    "activation": "activation",
    "pooling": "pooling",
    "shape": "shape / tensor",
    "math": "element-wise math",
    "control": "control flow",
    "quantization": "quantization",
    "other": "other",
}
IO_COLOR = "#263238"
GROUP_FILL = "#eef2f7"
EDGE_COLOR = QColor("#8a96a3")
BACKGROUND = QColor("#fbfbfc")
TITLE_LOD = 0.35  # scale from which titles are drawn
DETAIL_LOD = 0.7  # scale from which every label, rounded box and curved edge is drawn
HEADER = 22.0


@dataclass
class Highlights:
    """Colours laid over items and edges: selection, hover, search hits, matches."""

    selected: set[int] = field(default_factory=set)
    hovered: int | None = None
    hits: set[int] = field(default_factory=set)
    current_hit: int | None = None
    tints: dict[int, QColor] = field(default_factory=dict)
    outline: dict[int, QColor] = field(default_factory=dict)
    edges: dict[int, QColor] = field(default_factory=dict)
    """Edges to mark (e.g. the input where a pattern failed), by edge index."""


def _curve_point(path: tuple[tuple[float, float], ...], t: float) -> QPointF:
    """The point ``t`` of the way along an edge's cubic Bézier ``(start, c1, c2, end)``."""
    w = ((1 - t) ** 3, 3 * (1 - t) ** 2 * t, 3 * (1 - t) * t * t, t**3)
    return QPointF(sum(a * p[0] for a, p in zip(w, path)), sum(a * p[1] for a, p in zip(w, path)))


class SceneRenderer:
    """Cached drawing data for one view and layout."""

    def __init__(self, view: View, layout: Layout) -> None:
        self.view, self.layout = view, layout
        n = len(view.items)
        self.x0, self.y0 = layout.x.astype(np.float64), layout.y.astype(np.float64)
        self.x1, self.y1 = self.x0 + layout.w, self.y0 + layout.h
        self.bounds = QRectF(0, 0, max(layout.width, 1.0), max(layout.height, 1.0))
        self.rects = [QRectF(self.x0[i], self.y0[i], layout.w[i], layout.h[i]) for i in range(n)]
        self.colors = [QColor(self._color(i)) for i in range(n)]
        self.kinds = [item.kind for item in view.items]
        self.base_colors = list(self.colors)
        self.overlay_on = False
        self.overlay_fills: dict[int, QColor] = {}
        """Per-node overlay: box bodies tinted with their value's colour (headers take the colour itself)."""
        self.title_colors: dict[int, QColor] = {}
        self.overlay_labels: dict[int, str] = {}
        """The value drawn in a box's header instead of its short name, close in."""
        self._edge_curves: QPainterPath | None = None
        self._arrows: QPainterPath | None = None
        self.edges_of: dict[int, list[int]] = {}
        self.badges: list[tuple[QPointF, str]] = []
        """Each Q/DQ badge's place on its edge (0.4 along the curve, off the shape label's middle) and text."""
        for k, edge in enumerate(view.edges):
            self.edges_of.setdefault(edge.source, []).append(k)
            self.edges_of.setdefault(edge.target, []).append(k)
            if edge.badge:
                self.badges.append((_curve_point(layout.edge_paths[k], 0.4), edge.badge))
        self.title_font = QFont()
        self.title_font.setPointSizeF(8.5)
        self.title_font.setBold(True)
        self.body_font = QFont()
        self.body_font.setPointSizeF(7.5)
        self.show_edge_labels = False
        """Tensor shapes on edges, drawn close in only; computing them may run shape inference once."""

    def set_overlay(self, colours: dict[int, tuple[int, int, int]] | None, labels: dict[int, str] | None = None,
                    no_value: tuple[int, int, int] = (207, 216, 220)) -> None:
        """Colour node and group boxes by a per-node overlay (``colours`` by item index; the others
        ``no_value``), or back by category with None. Computed here once, never while painting."""
        self.overlay_on = colours is not None
        self.overlay_fills, self.title_colors, self.overlay_labels = {}, {}, dict(labels or {})
        if colours is None:
            self.colors = list(self.base_colors)
            return
        white, dark = QColor("#ffffff"), QColor("#263238")
        for i, kind in enumerate(self.kinds):
            if kind in ("input", "output"):
                continue
            rgb = colours.get(i, no_value)
            self.colors[i] = QColor(*rgb)
            self.overlay_fills[i] = QColor(*(int(255 - (255 - c) * 0.35) for c in rgb))
            self.title_colors[i] = white if 0.2126 * rgb[0] + 0.7152 * rgb[1] + 0.0722 * rgb[2] < 140 else dark

    def _color(self, i: int) -> str:
        item = self.view.items[i]
        if item.kind in ("input", "output"):
            return IO_COLOR
        return CATEGORY_COLORS.get(item.category, CATEGORY_COLORS["other"])

    # ------------------------------------------------------------------------ queries
    def item_at(self, point: QPointF) -> int | None:
        x, y = point.x(), point.y()
        hit = np.nonzero((self.x0 <= x) & (x <= self.x1) & (self.y0 <= y) & (y <= self.y1))[0]
        return int(hit[-1]) if hit.size else None

    def items_in(self, rect: QRectF) -> list[int]:
        inside = ((self.x0 >= rect.left()) & (self.x1 <= rect.right())
                  & (self.y0 >= rect.top()) & (self.y1 <= rect.bottom()))
        return [int(i) for i in np.nonzero(inside)[0]]

    def visible(self, rect: QRectF) -> np.ndarray:
        return np.nonzero((self.x1 >= rect.left()) & (self.x0 <= rect.right())
                          & (self.y1 >= rect.top()) & (self.y0 <= rect.bottom()))[0]

    # ------------------------------------------------------------------------ cached geometry
    def edge_curves(self) -> QPainterPath:
        if self._edge_curves is None:
            path = QPainterPath()
            for start, c1, c2, end in self.layout.edge_paths:
                path.moveTo(*start)
                path.cubicTo(QPointF(*c1), QPointF(*c2), QPointF(*end))
            self._edge_curves = path
        return self._edge_curves

    def arrows(self) -> QPainterPath:
        if self._arrows is None:
            path = QPainterPath()
            for _, _, _, end in self.layout.edge_paths:
                ex, ey = end
                path.addPolygon(QPolygonF([QPointF(ex - 3.5, ey - 6), QPointF(ex + 3.5, ey - 6), QPointF(ex, ey)]))
            self._arrows = path
        return self._arrows

    # ------------------------------------------------------------------------ painting
    def paint(self, painter: QPainter, visible: QRectF, scale: float, marks: Highlights | None = None) -> None:
        """Paint the items and edges inside ``visible`` (scene coordinates) at ``scale`` (pixels per unit)."""
        marks = marks or Highlights()
        detailed = scale >= DETAIL_LOD
        painter.setRenderHint(QPainter.RenderHint.Antialiasing, detailed)
        painter.setRenderHint(QPainter.RenderHint.TextAntialiasing, True)
        self._paint_edges(painter, detailed, scale, marks)
        idx = self.visible(visible)
        self._paint_boxes(painter, idx, detailed, scale, marks)
        if scale >= TITLE_LOD:
            self._paint_text(painter, idx, detailed)
            self._paint_badges(painter, visible)
        if detailed and self.show_edge_labels:
            self._paint_edge_labels(painter, visible)

    def _paint_edges(self, painter: QPainter, detailed: bool, scale: float, marks: Highlights) -> None:
        width = max(1.0 / max(scale, 1e-6), 1.0) if not detailed else 1.2
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.setPen(QPen(EDGE_COLOR, width if detailed else 0))
        # Curves at every level of detail: a straight line would run a skip connection through the
        # boxes it passes, hiding it; the layout bends long edges out to the side.
        painter.drawPath(self.edge_curves())
        if detailed:
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(EDGE_COLOR)
            painter.drawPath(self.arrows())
        for k, color in marks.edges.items():
            start, c1, c2, end = self.layout.edge_paths[k]
            marked = QPainterPath()
            marked.moveTo(*start)
            marked.cubicTo(QPointF(*c1), QPointF(*c2), QPointF(*end))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(color, 3.5 if detailed else max(3.0, 3.0 / max(scale, 1e-6)), Qt.PenStyle.DashLine))
            painter.drawPath(marked)
        focus = set(marks.selected) | ({marks.hovered} if marks.hovered is not None else set())
        if focus:
            path = QPainterPath()
            for i in focus:
                for k in self.edges_of.get(i, ()):
                    start, c1, c2, end = self.layout.edge_paths[k]
                    path.moveTo(*start)
                    path.cubicTo(QPointF(*c1), QPointF(*c2), QPointF(*end))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.setPen(QPen(QColor("#f39c12"), 2.2 if detailed else 0))
            painter.drawPath(path)

    def _paint_boxes(self, painter: QPainter, idx: np.ndarray, detailed: bool, scale: float, marks: Highlights) -> None:
        if not detailed:  # batch by colour: one drawRects call per category (groups: light fill, coloured border)
            painter.setPen(Qt.PenStyle.NoPen)
            batches: dict[tuple[int, bool], list[QRectF]] = {}
            colors: dict[int, QColor] = {}
            for i in idx:
                c = self.colors[i]
                colors[c.rgba()] = c
                batches.setdefault((c.rgba(), self.kinds[i] == "group" and not self.overlay_on),
                                   []).append(self.rects[i])
            for (key, is_group), rects in batches.items():
                if is_group:
                    painter.setPen(QPen(colors[key], max(2.0, 1.5 / max(scale, 1e-6))))
                    painter.setBrush(colors[key].lighter(185))
                else:
                    painter.setPen(Qt.PenStyle.NoPen)
                    painter.setBrush(colors[key])
                painter.drawRects(rects)
        else:
            for i in idx:
                self._paint_box(painter, int(i))
        self._paint_marks(painter, idx, detailed, scale, marks)

    def _paint_box(self, painter: QPainter, i: int) -> None:
        rect, color, kind = self.rects[i], self.colors[i], self.kinds[i]
        if kind in ("input", "output"):
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            painter.drawRoundedRect(rect, rect.height() / 2, rect.height() / 2)
            return
        painter.setPen(QPen(color.darker(115), 1.0))
        fill = self.overlay_fills.get(i)
        painter.setBrush(fill if fill is not None else QColor(GROUP_FILL) if kind == "group" else QColor("#ffffff"))
        painter.drawRoundedRect(rect, 5, 5)
        header = QPainterPath()
        # A box with nothing under its title is all title: no empty strip below it.
        tall = rect.height() if not self.view.items[i].lines else min(HEADER, rect.height())
        header.addRoundedRect(QRectF(rect.left(), rect.top(), rect.width(), tall), 5, 5)
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(color)
        painter.drawPath(header)
        if kind == "group":
            painter.setPen(QPen(color, 1.0, Qt.PenStyle.DashLine))
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRoundedRect(rect.adjusted(-3, -3, 3, 3), 7, 7)

    def _paint_marks(self, painter: QPainter, idx: np.ndarray, detailed: bool, scale: float, marks: Highlights) -> None:
        width = 2.5 if detailed else max(2.5, 2.0 / max(scale, 1e-6))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        for i, color in marks.tints.items():
            tint = QColor(color)
            tint.setAlpha(90)
            painter.fillRect(self.rects[i].adjusted(-4, -4, 4, 4), tint)
        for i in marks.hits:
            painter.setPen(QPen(QColor("#f1c40f"), width))
            painter.drawRect(self.rects[i].adjusted(-3, -3, 3, 3))
        for i, color in marks.outline.items():
            painter.setPen(QPen(color, width * 1.2))
            painter.drawRect(self.rects[i].adjusted(-5, -5, 5, 5))
        if marks.current_hit is not None:
            painter.setPen(QPen(QColor("#e67e22"), width * 1.4))
            painter.drawRect(self.rects[marks.current_hit].adjusted(-5, -5, 5, 5))
        for i in marks.selected:
            painter.setPen(QPen(QColor("#1e88e5"), width * 1.2))
            painter.drawRect(self.rects[i].adjusted(-4, -4, 4, 4))
        if marks.hovered is not None:
            painter.setPen(QPen(QColor("#f39c12"), width))
            painter.drawRect(self.rects[marks.hovered].adjusted(-2, -2, 2, 2))

    def _paint_badges(self, painter: QPainter, visible: QRectF) -> None:
        """A quantized edge's type (``u8``) as a small rounded label on it, where a Q/DQ pair sits
        (the view drew the pair as this badge instead of two boxes; see ``ViewOptions.qdq_badges``)."""
        if not self.badges:
            return
        font = QFont(self.body_font)
        font.setBold(True)
        painter.setFont(font)
        metrics = QFontMetricsF(font)
        fill = QColor(CATEGORY_COLORS["quantization"])
        for at, text in self.badges:
            if not visible.contains(at):
                continue
            box = QRectF(0, 0, metrics.horizontalAdvance(text) + 8, 13)
            box.moveCenter(at)
            painter.setPen(QPen(QColor("#ffffff"), 1.0))
            painter.setBrush(fill)
            painter.drawRoundedRect(box, 6, 6)
            painter.setPen(QColor("#ffffff"))
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)

    def _paint_edge_labels(self, painter: QPainter, visible: QRectF) -> None:
        painter.setFont(self.body_font)
        metrics = QFontMetricsF(self.body_font)
        for k, (start, c1, c2, end) in enumerate(self.layout.edge_paths):
            mid = QPointF((start[0] + 3 * c1[0] + 3 * c2[0] + end[0]) / 8,
                          (start[1] + 3 * c1[1] + 3 * c2[1] + end[1]) / 8)
            if not visible.contains(mid):
                continue
            text = self.view.edge_label(k)
            if not text:
                continue
            box = QRectF(mid.x() + 4, mid.y() - 7, metrics.horizontalAdvance(text) + 6, 14)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(QColor(251, 251, 252, 220))
            painter.drawRect(box)
            painter.setPen(QColor("#607d8b"))
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, text)

    def _paint_text(self, painter: QPainter, idx: np.ndarray, detailed: bool) -> None:
        title_metrics = QFontMetricsF(self.title_font)
        for i in idx:
            item = self.view.items[int(i)]
            rect = self.rects[int(i)]
            painter.setFont(self.title_font)
            title_color = self.title_colors.get(int(i), QColor("#ffffff"))
            painter.setPen(title_color)
            if item.kind in ("input", "output"):
                text = f"{item.title}   {item.subtitle}" if detailed and item.subtitle else item.title
                if title_metrics.horizontalAdvance(text) > rect.width() - 12:
                    text = item.title
                painter.drawText(rect, Qt.AlignmentFlag.AlignCenter,
                                 title_metrics.elidedText(text, Qt.TextElideMode.ElideMiddle, rect.width() - 12))
                continue
            head = QRectF(rect.left() + 7, rect.top(), rect.width() - 14, HEADER if item.lines else rect.height())
            if not detailed and item.kind == "group":  # far out, a group says what it holds on one line
                painter.setPen(title_color if self.overlay_on else QColor("#263238"))
                painter.drawText(rect.adjusted(7, 0, -7, 0), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft,
                                 title_metrics.elidedText(f"{item.title}  ·  {item.subtitle}",
                                                          Qt.TextElideMode.ElideRight, rect.width() - 14))
                continue
            painter.drawText(head, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, item.title)
            if not detailed:
                continue
            painter.setFont(self.body_font)
            body_metrics = QFontMetricsF(self.body_font)
            room = head.width() - title_metrics.horizontalAdvance(item.title) - 10
            subtitle = self.overlay_labels.get(int(i), item.subtitle)
            if subtitle and body_metrics.horizontalAdvance(subtitle) <= room:  # whole, or not at all
                painter.setPen(QColor(title_color.red(), title_color.green(), title_color.blue(), 210))
                painter.drawText(head, Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, subtitle)
            painter.setPen(QColor("#37474f"))
            y = rect.top() + HEADER + 2
            for line in item.lines:
                painter.drawText(QRectF(rect.left() + 7, y, rect.width() - 14, 15), Qt.AlignmentFlag.AlignVCenter,
                                 body_metrics.elidedText(line, Qt.TextElideMode.ElideRight, rect.width() - 14))
                y += 15


LEGEND_HEIGHT = 8 + 16 * len(CATEGORIES)


def paint_legend(painter: QPainter, origin: QPointF, categories: list[str] | None = None) -> QRectF:
    """The colour key, drawn at ``origin`` in widget pixels; returns the area it took."""
    cats = categories or list(CATEGORIES)
    font = QFont()
    font.setPointSizeF(8)
    painter.setFont(font)
    metrics = QFontMetricsF(font)
    width = 22 + max(metrics.horizontalAdvance(CATEGORY_NAMES[c]) for c in cats) + 12
    area = QRectF(origin.x(), origin.y(), width, 8 + 16 * len(cats))
    painter.setPen(QPen(QColor("#cfd8dc")))
    painter.setBrush(QBrush(QColor(255, 255, 255, 230)))
    painter.drawRoundedRect(area, 4, 4)
    for k, cat in enumerate(cats):
        y = area.top() + 6 + 16 * k
        painter.setPen(Qt.PenStyle.NoPen)
        painter.setBrush(QColor(CATEGORY_COLORS[cat]))
        painter.drawRoundedRect(QRectF(area.left() + 7, y + 2, 11, 11), 2, 2)
        painter.setPen(QColor("#37474f"))
        painter.drawText(QPointF(area.left() + 24, y + 12), CATEGORY_NAMES[cat])
    return area
