"""Drawing a graph to a PNG or SVG file without a window (``graphlens render``, File > Export Image).

The picture is the canvas's own drawing at a scale chosen to fit a pixel budget: a small model is
drawn at full size with every label; a large one is scaled down and drawn with the canvas's
far-out level of detail.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from PySide6.QtCore import QPointF, QRectF, QSize
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgGenerator

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.gui.scene import BACKGROUND, Highlights, SceneRenderer, paint_legend
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view

MARGIN = 24
MAX_SIDE = 16000
MAX_PIXELS = 60_000_000


def ensure_gui_application() -> QGuiApplication:
    """A Qt application to paint with; offscreen when there is no display."""
    app = QGuiApplication.instance()
    if app is None:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QGuiApplication([])
    return app  # type: ignore[return-value]


def render_scene(renderer: SceneRenderer, path: str | os.PathLike[str], marks: Highlights | None = None) -> Path:
    """Write the whole scene to ``path`` (.png or .svg)."""
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise GraphLensError(f"{target}: can only write .png or .svg images")
    if not target.parent.exists():
        raise GraphLensError(f"{target}: folder '{target.parent}' does not exist")
    b = renderer.bounds
    if suffix == ".svg":
        scale = 1.0
    else:
        scale = min(1.0, MAX_SIDE / (b.width() + 2 * MARGIN), MAX_SIDE / (b.height() + 2 * MARGIN),
                    math.sqrt(MAX_PIXELS / ((b.width() + 2 * MARGIN) * (b.height() + 2 * MARGIN))))
    legend_width = 170  # a column on the right for the colour key, so it never covers the graph
    width = max(int((b.width() + 2 * MARGIN) * scale), 240) + legend_width
    height = max(int((b.height() + 2 * MARGIN) * scale), 200)
    if suffix == ".png":
        device = QImage(width, height, QImage.Format.Format_ARGB32_Premultiplied)
        device.fill(BACKGROUND)
    else:
        device = QSvgGenerator()
        device.setFileName(str(target))
        device.setSize(QSize(width, height))
        device.setViewBox(QRectF(0, 0, width, height))
        device.setTitle(target.stem)
    painter = QPainter(device)
    try:
        if suffix == ".svg":
            painter.fillRect(QRectF(0, 0, width, height), BACKGROUND)
        painter.save()
        painter.scale(scale, scale)
        painter.translate(MARGIN - b.left(), MARGIN - b.top())
        renderer.paint(painter, b, scale, marks)
        painter.restore()
        paint_legend(painter, QPointF(width - legend_width + 8, 12))
    finally:
        painter.end()
    if suffix == ".png" and not device.save(str(target)):
        raise GraphLensError(f"{target}: could not be written")
    return target


def render_graph(graph: Graph, path: str | os.PathLike[str], *, select: list[str] = (), expand_all: bool = False) -> Path:
    """Lay out ``graph`` and write it to ``path``, with ``select`` highlighted."""
    ensure_gui_application()
    options = ViewOptions(grouping=False) if expand_all else ViewOptions()
    view = build_view(graph, options)
    renderer = SceneRenderer(view, layout_view(view))
    marks = Highlights()
    for name in select:
        if name not in view.node_item:
            import difflib

            close = difflib.get_close_matches(name, list(graph.by_name), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise GraphLensError(f"--select: no node named '{name}' in {graph.path}{hint}")
        marks.selected.add(view.node_item[name])
    return render_scene(renderer, path, marks)
