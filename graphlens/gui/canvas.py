"""The graph canvas: pan, zoom to the cursor, hover, select, rubber band, double-click to open.

A plain QWidget that paints through :class:`SceneRenderer` with its own scene-to-widget transform,
rather than a QGraphicsScene with one item per node: with one Python ``paint()`` call per item,
a 10,000-node frame would cost a large fraction of a second; batched drawing keeps it in tens of
milliseconds. The canvas holds no model state: it shows a view and reports what the user did.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QEvent, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import (
    QColor,
    QContextMenuEvent,
    QKeyEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPen,
    QPicture,
    QResizeEvent,
    QWheelEvent,
)
from PySide6.QtWidgets import QWidget

from graphlens.gui.scene import BACKGROUND, LEGEND_HEIGHT, Highlights, SceneRenderer, paint_legend

MIN_SCALE, MAX_SCALE = 0.005, 4.0
ZOOM_STEP = 1.25
MINIMAP_MAX = 180.0
MINIMAP_SHARE = 0.25
"""The minimap's longer side is at most this part of the canvas's shorter side (a small canvas, a small map)."""
LEGEND_ROOM = 2.5
LEGEND_MIN_WIDTH = 480
"""The category legend is drawn on canvases at least LEGEND_ROOM times its height tall and this wide."""
READABLE_TITLE_PX = 9.0
"""Box titles at least this tall on screen read; a model opens at a scale that keeps them so."""
OVERLAY_GAP = 8.0
"""Widget pixels kept between a fitted graph and the legend or minimap."""


class GraphCanvas(QWidget):
    """Shows one laid-out graph; emits what the user selects and opens."""

    selection_changed = Signal(list)  # item indices
    context_requested = Signal(object, object)  # item index or None, global position
    item_activated = Signal(int)  # double-click on an item
    zoom_changed = Signal(float)
    hovered_changed = Signal(object)  # item index or None
    scene_changed = Signal()  # a new view is shown: per-item colourings are applied again
    view_changed = Signal()  # panned or zoomed (the offset moved); a compare view's other canvas follows

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.renderer: SceneRenderer | None = None
        self.marks = Highlights()
        self.scale = 1.0
        self.offset = QPointF(0, 0)  # scene point at the widget's top-left corner
        self._first_view_kept = False
        """The view is still the model's first one (no pan or zoom since): a resize places it again."""
        self.message = ""
        self.show_legend = True
        self.show_minimap = True
        self.legend_painter: Callable[[QPainter, QPointF], QRectF] | None = None
        """Draws another legend instead of the category key: ``(painter, bottom_left) -> QRectF``."""
        self._drag_start: QPointF | None = None
        self._drag_offset = QPointF()
        self._band: QRectF | None = None
        self._minimap_drag = False
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setMinimumSize(320, 240)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    # ------------------------------------------------------------------ content
    def set_scene(self, renderer: SceneRenderer | None, *, fit: bool = True) -> None:
        if renderer is not None and self.renderer is not None:
            renderer.show_edge_labels = self.renderer.show_edge_labels
        self.renderer = renderer
        self.marks = Highlights()
        self.message = ""
        if fit:
            self.first_view()
        self.scene_changed.emit()
        self.update()

    def set_message(self, text: str) -> None:
        """A line shown instead of the graph (e.g. while laying out)."""
        self.message = text
        self.update()

    # ---------------------------------------------------------------- transform
    @property
    def offset(self) -> QPointF:
        return self._offset

    @offset.setter
    def offset(self, value: QPointF) -> None:
        self._offset = QPointF(value)  # every pan and zoom sets it (a zoom sets its scale first)
        self._first_view_kept = False
        self.view_changed.emit()

    def to_scene(self, p: QPointF) -> QPointF:
        return QPointF(self.offset.x() + p.x() / self.scale, self.offset.y() + p.y() / self.scale)

    def to_widget(self, p: QPointF) -> QPointF:
        return QPointF((p.x() - self.offset.x()) * self.scale, (p.y() - self.offset.y()) * self.scale)

    def visible_scene_rect(self) -> QRectF:
        return QRectF(self.offset, QPointF(self.offset.x() + self.width() / self.scale,
                                           self.offset.y() + self.height() / self.scale))

    def overlay_rects(self) -> list[QRectF]:
        """Where the legend and the minimap sit now, in widget pixels (empty where hidden)."""
        rects = []
        if self._legend_shown():
            picture = QPicture()  # measured by drawing into a recording, never onto the screen
            painter = QPainter(picture)
            rects.append(self._paint_legend(painter))
            painter.end()
        if self.show_minimap and self.renderer is not None:
            rects.append(self.minimap_rect().adjusted(-3, -3, 3, 3))
        return rects

    def _free_area(self) -> tuple[QRectF, QRectF]:
        """Two areas a graph can take without going under the legend (bottom left) or the minimap (top right):
        the band between them across the full height, and the band between them across the full width."""
        w, h, gap = float(self.width()), float(self.height()), OVERLAY_GAP
        left = right = top = bottom = 0.0
        for r in self.overlay_rects():
            if r.center().x() < w / 2:
                left, bottom = max(left, r.right() + gap), max(bottom, h - r.top() + gap)
            else:
                right, top = max(right, w - r.left() + gap), max(top, r.bottom() + gap)
        columns = QRectF(left, 0, max(w - left - right, 1.0), h)
        rows = QRectF(0, top, w, max(h - top - bottom, 1.0))
        return columns, rows

    def _fit_scale(self, b: QRectF) -> tuple[float, QRectF]:
        """The largest scale at which ``b`` fits clear of the overlays, and the area it then takes."""
        fits = [(min(area.width() / b.width(), area.height() / b.height()), area) for area in self._free_area()]
        return max(fits, key=lambda fit: fit[0])

    def fit(self) -> None:
        """Zoom so the whole graph fits (F), clear of the legend and the minimap."""
        if self.renderer is None:
            return
        b = self.renderer.bounds.adjusted(-30, -30, 30, 30)
        scale, area = self._fit_scale(b)
        self._set_scale(min(scale, 1.5))
        self.offset = QPointF(b.center().x() - area.center().x() / self.scale,
                              b.center().y() - area.center().y() / self.scale)
        self.update()

    def readable_scale(self) -> float:
        """The least scale at which box titles are :data:`READABLE_TITLE_PX` tall on screen."""
        if self.renderer is None:
            return 1.0
        title_px = self.renderer.title_font.pointSizeF() * self.logicalDpiY() / 72
        return READABLE_TITLE_PX / title_px

    def first_view(self) -> None:
        """Where a model opens: the whole graph when its titles read at the size that fits (never above 100 %);
        else at 100 % at its top, the row of its inputs centred between the legend and the minimap (from the first
        input on where the row is wider than that). F fits it whole."""
        if self.renderer is None:
            return
        b = self.renderer.bounds.adjusted(-30, -30, 30, 30)
        scale, _ = self._fit_scale(b)
        if scale >= self.readable_scale():
            self.fit()
            if self.scale > 1.0:
                self.zoom(1.0 / self.scale)
            self._first_view_kept = True
            return
        inputs = [r for r, kind in zip(self.renderer.rects, self.renderer.kinds) if kind == "input"]
        top_row = inputs[0] if inputs else b
        for r in inputs[1:]:
            top_row = top_row.united(r)
        columns, _ = self._free_area()
        self._set_scale(1.0)
        if top_row.width() + 2 * OVERLAY_GAP <= columns.width():  # every input in view, the row centred
            x = top_row.center().x() - columns.center().x()
        else:  # the first input at the left of the free band, the rest to its right
            x = top_row.left() - columns.left() - OVERLAY_GAP
        self.offset = QPointF(x, b.top())
        self._first_view_kept = True
        self.update()

    def resizeEvent(self, event: QResizeEvent) -> None:
        """A model shown before the window took its size (or while docks open around it) gets its first view at the
        new size, until the user moves it."""
        super().resizeEvent(event)
        if self._first_view_kept:
            self.first_view()

    def zoom(self, factor: float, anchor: QPointF | None = None) -> None:
        """Zoom keeping ``anchor`` (widget pixels; default the centre) where it is."""
        anchor = anchor if anchor is not None else QPointF(self.width() / 2, self.height() / 2)
        before = self.to_scene(anchor)
        self._set_scale(self.scale * factor)
        self.offset = QPointF(before.x() - anchor.x() / self.scale, before.y() - anchor.y() / self.scale)
        self.update()

    def center_on(self, index: int, *, zoom_in: bool = True) -> None:
        if self.renderer is None:
            return
        if zoom_in and self.scale < 0.8:
            self._set_scale(1.0)
        c = self.renderer.rects[index].center()
        self.offset = QPointF(c.x() - self.width() / 2 / self.scale, c.y() - self.height() / 2 / self.scale)
        self.update()

    def frame(self, indices: list[int], *, most: float = 1.0, least: float = 0.4) -> None:
        """Zoom and pan so these boxes show together (a partial match and its failing node), at a readable
        scale: no closer than ``most``; where they do not fit at ``least``, centred on the last one."""
        if self.renderer is None or not indices:
            return
        bounds = self.renderer.rects[indices[0]]
        for index in indices[1:]:
            bounds = bounds.united(self.renderer.rects[index])
        b = bounds.adjusted(-60, -60, 60, 60)
        fit, area = self._fit_scale(b)  # the boxes clear of the legend and the minimap
        self._set_scale(max(least, min(most, fit)))
        c = b.center() if fit >= least else self.renderer.rects[indices[-1]].center()
        self.offset = QPointF(c.x() - area.center().x() / self.scale, c.y() - area.center().y() / self.scale)
        self.update()

    def _set_scale(self, value: float) -> None:
        self.scale = max(MIN_SCALE, min(MAX_SCALE, value))
        self.zoom_changed.emit(self.scale)

    # ------------------------------------------------------------------ painting
    def paintEvent(self, event: QPaintEvent) -> None:
        painter = QPainter(self)
        painter.fillRect(self.rect(), BACKGROUND)
        if self.renderer is None or self.message:
            painter.setPen(QColor("#607d8b"))
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter,
                             self.message or "Open an ONNX model (Ctrl+O) or drop one here")
            return
        painter.save()
        painter.scale(self.scale, self.scale)
        painter.translate(-self.offset)
        self.renderer.paint(painter, self.visible_scene_rect(), self.scale, self.marks)
        painter.restore()
        if self._band is not None:
            painter.setPen(QPen(QColor("#1e88e5"), 1, Qt.PenStyle.DashLine))
            painter.setBrush(QColor(30, 136, 229, 30))
            painter.drawRect(QRectF(self.to_widget(self._band.topLeft()), self.to_widget(self._band.bottomRight())))
        if self._legend_shown():
            self._paint_legend(painter)
        if self.show_minimap:
            self._paint_minimap(painter)

    def _legend_shown(self) -> bool:
        """The legend is drawn when asked for; the category key only where the canvas has room for it beside the graph
        (a canvas squeezed by panels shows the graph, the key comes back with the room). An overlay's or a
        comparison's legend carries the numbers' meaning: always drawn."""
        room = self.height() >= LEGEND_ROOM * LEGEND_HEIGHT and self.width() >= LEGEND_MIN_WIDTH
        return self.show_legend and self.renderer is not None and (self.legend_painter is not None or room)

    def _paint_legend(self, painter: QPainter) -> QRectF:
        """The category key, or the overlay's or comparison's legend, bottom left; returns its area."""
        if self.legend_painter is not None:
            return self.legend_painter(painter, QPointF(10, self.height() - 10))
        return paint_legend(painter, QPointF(10, self.height() - 10 - LEGEND_HEIGHT))

    def minimap_rect(self) -> QRectF:
        if self.renderer is None:
            return QRectF()
        b = self.renderer.bounds
        s = min(MINIMAP_MAX, MINIMAP_SHARE * min(self.width(), self.height())) / max(b.width(), b.height())
        w, h = max(b.width() * s, 30), max(b.height() * s, 30)
        return QRectF(self.width() - w - 10, 10, w, h)

    def _paint_minimap(self, painter: QPainter) -> None:
        renderer = self.renderer
        if renderer is None:
            return
        area = self.minimap_rect()
        b = renderer.bounds
        s = min(area.width() / b.width(), area.height() / b.height())
        painter.setPen(QPen(QColor("#b0bec5")))
        painter.setBrush(QColor(255, 255, 255, 220))
        painter.drawRect(area.adjusted(-3, -3, 3, 3))
        painter.save()
        painter.translate(area.topLeft())
        painter.scale(s, s)
        renderer.paint(painter, b, s)
        painter.restore()
        view = self.visible_scene_rect()
        painter.setPen(QPen(QColor("#e53935"), 1.5))
        painter.setBrush(QColor(229, 57, 53, 25))
        painter.drawRect(QRectF(area.left() + view.left() * s, area.top() + view.top() * s, view.width() * s,
                                view.height() * s).intersected(area.adjusted(-2, -2, 2, 2)))

    # ------------------------------------------------------------------- mouse
    def wheelEvent(self, event: QWheelEvent) -> None:
        delta = event.angleDelta()
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom(ZOOM_STEP ** (delta.y() / 120), event.position())
            return
        dx, dy = (delta.y(), 0) if event.modifiers() & Qt.KeyboardModifier.ShiftModifier else (delta.x(), delta.y())
        self.offset -= QPointF(dx, dy) / self.scale * 0.6
        self.update()

    def mousePressEvent(self, event: QMouseEvent) -> None:
        if self.renderer is None:
            return
        pos = event.position()
        if self.show_minimap and self.minimap_rect().adjusted(-3, -3, 3, 3).contains(pos):
            self._minimap_drag = True
            self._jump_minimap(pos)
            return
        hit = self.renderer.item_at(self.to_scene(pos))
        shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if event.button() == Qt.MouseButton.LeftButton and hit is not None:
            self.select([hit], add=shift, toggle=shift)
            return
        if event.button() in (Qt.MouseButton.LeftButton, Qt.MouseButton.MiddleButton):
            if shift:
                self._band = QRectF(self.to_scene(pos), self.to_scene(pos))
            else:
                self._drag_start, self._drag_offset = pos, QPointF(self.offset)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        if self.renderer is None:
            return
        pos = event.position()
        if self._minimap_drag:
            self._jump_minimap(pos)
        elif self._band is not None:
            self._band.setBottomRight(self.to_scene(pos))
            self.update()
        elif self._drag_start is not None:
            self.offset = self._drag_offset - (pos - self._drag_start) / self.scale
            self.update()
        else:
            hit = self.renderer.item_at(self.to_scene(pos))
            if hit != self.marks.hovered:
                self.marks.hovered = hit
                self.hovered_changed.emit(hit)
                self.setCursor(Qt.CursorShape.PointingHandCursor if hit is not None else Qt.CursorShape.ArrowCursor)
                self.update()

    def mouseReleaseEvent(self, event: QMouseEvent) -> None:
        if self._band is not None and self.renderer is not None:
            chosen = self.renderer.items_in(self._band.normalized())
            self._band = None
            self.select(chosen, add=True)
            self.update()
        elif self._drag_start is not None and (event.position() - self._drag_start).manhattanLength() < 3:
            self.select([])  # a click on empty canvas clears the selection
        self._drag_start = None
        self._minimap_drag = False

    def contextMenuEvent(self, event: QContextMenuEvent) -> None:
        if self.renderer is None:
            return
        if event.reason() == QContextMenuEvent.Reason.Keyboard:
            self.keyboard_context_menu()
            return
        hit = self.renderer.item_at(self.to_scene(QPointF(event.pos())))
        if hit is not None and hit not in self.marks.selected:
            self.select([hit])
        self.context_requested.emit(hit, event.globalPos())

    def keyboard_context_menu(self) -> None:
        """The Menu key or Shift+F10: the right-click menu of the selected item, at that item (of the canvas when
        nothing is selected)."""
        if self.renderer is None:
            return
        chosen = min(self.marks.selected, default=None)
        if chosen is None:
            where = QPointF(self.width() / 2, self.height() / 2)
        else:
            self.ensure_visible(chosen)
            where = self.to_widget(self.renderer.rects[chosen].center())
        self.context_requested.emit(chosen, self.mapToGlobal(where.toPoint()))

    def ensure_visible(self, index: int) -> None:
        """Pan (never zoom) so item ``index`` is on screen."""
        if self.renderer is not None and not self.visible_scene_rect().contains(self.renderer.rects[index].center()):
            self.center_on(index, zoom_in=False)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:
        if self.renderer is None:
            return
        hit = self.renderer.item_at(self.to_scene(event.position()))
        if hit is not None:
            self.item_activated.emit(hit)

    def leaveEvent(self, event: QEvent) -> None:
        if self.marks.hovered is not None:
            self.marks.hovered = None
            self.hovered_changed.emit(None)
            self.update()

    def _jump_minimap(self, pos: QPointF) -> None:
        if self.renderer is None:
            return
        area = self.minimap_rect()
        b = self.renderer.bounds
        s = min(area.width() / b.width(), area.height() / b.height())
        target = QPointF((pos.x() - area.left()) / s, (pos.y() - area.top()) / s)
        self.offset = QPointF(target.x() - self.width() / 2 / self.scale, target.y() - self.height() / 2 / self.scale)
        self.update()

    # ----------------------------------------------------------------- keyboard
    def keyPressEvent(self, event: QKeyEvent) -> None:
        step = 80 / self.scale
        moves: dict[int, tuple[float, float]] = {Qt.Key.Key_Left: (-step, 0), Qt.Key.Key_Right: (step, 0),
                                                 Qt.Key.Key_Up: (0, -step), Qt.Key.Key_Down: (0, step)}
        if event.key() in moves:
            dx, dy = moves[event.key()]
            self.offset += QPointF(dx, dy)
            self.update()
        elif event.key() == Qt.Key.Key_Escape:
            self.select([])
        elif event.key() == Qt.Key.Key_F10 and event.modifiers() & Qt.KeyboardModifier.ShiftModifier:
            self.keyboard_context_menu()
        else:
            super().keyPressEvent(event)

    # ---------------------------------------------------------------- selection
    def select(self, indices: list[int], *, add: bool = False, toggle: bool = False) -> None:
        chosen = set(self.marks.selected) if add else set()
        for i in indices:
            if toggle and i in chosen:
                chosen.discard(i)
            else:
                chosen.add(i)
        if chosen != self.marks.selected:
            self.marks.selected = chosen
            self.selection_changed.emit(sorted(chosen))
        self.update()
