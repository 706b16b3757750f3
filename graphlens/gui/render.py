"""Drawing a graph to a PNG or SVG file without a window (``graphlens render``, File > Export Image).

The picture is the canvas's own drawing at a scale chosen to fit a pixel budget: a small model is
drawn at full size with every label; a large one is scaled down and drawn with the canvas's
far-out level of detail.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QPointF, QRectF, QSize, QSizeF
from PySide6.QtGui import QGuiApplication, QImage, QPainter
from PySide6.QtSvg import QSvgGenerator

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.names import no_such_node
from graphlens.gui.scene import BACKGROUND, DETAIL_LOD, Highlights, SceneRenderer, paint_legend
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view, scope_of, scope_prefixes

if TYPE_CHECKING:
    from graphlens.overlays import Overlay

MARGIN = 24
MAX_SIDE = 16000
MAX_PIXELS = 60_000_000
CROP_CONTEXT = 320
"""Scene units drawn around the selected nodes with ``crop``: about two layers above and below."""


def ensure_gui_application() -> QGuiApplication:
    """A Qt application to paint with; offscreen when there is no display."""
    app = QGuiApplication.instance()
    if app is None:
        if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
            os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
        app = QGuiApplication([])
    return app  # type: ignore[return-value]


LegendPainter = Callable[[QPainter, QPointF], QRectF]
"""Paints a legend with its bottom-left corner at a point (widget pixels) and returns its area."""


def render_scene(
    renderer: SceneRenderer,
    path: str | os.PathLike[str],
    marks: Highlights | None = None,
    *,
    region: QRectF | None = None,
    legend: LegendPainter | None = None,
) -> Path:
    """Write the scene to ``path`` (.png or .svg): all of it, or ``region`` (scene coordinates).

    ``legend`` replaces the op-kind key (e.g. an overlay's colour scale); either sits in a column
    on the right, so it never covers the graph.
    """
    target = Path(path)
    suffix = target.suffix.lower()
    if suffix not in (".png", ".svg"):
        raise GraphLensError(f"{target}: can only write .png or .svg images")
    if not target.parent.exists():
        raise GraphLensError(f"{target}: folder '{target.parent}' does not exist")
    b = renderer.bounds if region is None else region.intersected(renderer.bounds)
    scale = picture_scale(b, suffix)
    legend_size = _legend_size(legend)
    legend_width = max(170, int(legend_size.width()) + 16)
    width = max(int((b.width() + 2 * MARGIN) * scale), 240) + legend_width
    height = max(int((b.height() + 2 * MARGIN) * scale), int(legend_size.height()) + 24, 200)
    device: QImage | QSvgGenerator
    if suffix == ".png":
        device = QImage(width, height, QImage.Format.Format_RGB32)  # opaque: PNG without alpha, 20 % faster to encode
        device.fill(BACKGROUND)
    else:
        device = svg = QSvgGenerator()
        svg.setFileName(str(target))
        svg.setSize(QSize(width, height))
        svg.setViewBox(QRectF(0, 0, width, height))
        svg.setTitle(target.stem)
    painter = QPainter(device)
    try:
        if suffix == ".svg":
            painter.fillRect(QRectF(0, 0, width, height), BACKGROUND)
        painter.save()
        painter.setClipRect(QRectF(0, 0, width - legend_width, height))
        painter.scale(scale, scale)
        painter.translate(MARGIN - b.left(), MARGIN - b.top())
        renderer.paint(painter, b, scale, marks)
        painter.restore()
        if legend is None:
            paint_legend(painter, QPointF(width - legend_width + 8, 12))
        else:
            legend(painter, QPointF(width - legend_width + 8, 12 + legend_size.height()))
    finally:
        painter.end()
    if isinstance(device, QImage) and not device.save(str(target)):
        raise GraphLensError(f"{target}: could not be written")
    return target


def picture_scale(area: QRectF, suffix: str) -> float:
    """Pixels per scene unit of a picture of ``area``: 1 in an SVG; a PNG shrinks to stay within
    :data:`MAX_SIDE` and :data:`MAX_PIXELS`."""
    if suffix == ".svg":
        return 1.0
    width, height = area.width() + 2 * MARGIN, area.height() + 2 * MARGIN
    return min(1.0, MAX_SIDE / width, MAX_SIDE / height, math.sqrt(MAX_PIXELS / (width * height)))


def _legend_size(legend: LegendPainter | None) -> QSizeF:
    """How much room ``legend`` takes, found by painting it once on a scratch image."""
    if legend is None:
        return QSizeF(0, 0)
    scratch = QImage(1, 1, QImage.Format.Format_ARGB32_Premultiplied)
    painter = QPainter(scratch)
    try:
        area = legend(painter, QPointF(0, 0))
    finally:
        painter.end()
    return area.size() if isinstance(area, QRectF) else QSizeF(240, 100)


def render_graph(
    graph: Graph,
    path: str | os.PathLike[str],
    *,
    select: Sequence[str] = (),
    expand_all: bool = False,
    overlay: Overlay | None = None,
    crop: bool = False,
    shape_ops: bool = False,
    edge_shapes: bool = False,
    collapsed_matches: dict[str, str] | None = None,
    collapse_groups: bool = False,
    note: Callable[[str], None] | None = None,
) -> Path:
    """Lay out ``graph`` and write it to ``path``, with ``select`` highlighted (their groups open).

    ``overlay``: colour the boxes by its numbers, with its scale as the legend. ``crop``: draw only
    the selected nodes and what lies within :data:`CROP_CONTEXT` of them, at full size. ``shape_ops``:
    draw shape arithmetic as boxes (View › Show Shape Arithmetic). ``edge_shapes``: tensor shapes on the
    edges (View › Show Tensor Shapes on Edges), where the picture is drawn large enough to read them;
    ``note`` is told when it is not. ``collapsed_matches``: node name -> match key, each match drawn as one
    box named after its pattern (see :mod:`graphlens.layout.collapse_matches`). ``collapse_groups``: name
    scopes drawn as closed groups, and runs of identical ones as one ×N box, at any size (View › Collapse
    Groups); by default only above :attr:`~graphlens.layout.view.ViewOptions.collapse_threshold` nodes.
    """
    if crop and not select:
        raise GraphLensError("--crop needs --select: the nodes to draw the region around")
    if expand_all and collapse_groups:
        raise GraphLensError("--expand-all and --collapse-groups ask for opposite things; give one")
    scene = scene_for(graph, select=select, expand_all=expand_all, shape_ops=shape_ops,
                      collapsed_matches=collapsed_matches, collapse_groups=collapse_groups)
    renderer, marks = scene.renderer, scene.marks
    renderer.show_edge_labels = edge_shapes
    legend = None
    if overlay is not None:
        from graphlens.gui.overlay_legend import colour_renderer

        legend = colour_renderer(renderer, overlay)
    region = None
    if crop:
        region = QRectF()
        for item in marks.selected:
            region = region.united(renderer.rects[item])
        region.adjust(-CROP_CONTEXT, -CROP_CONTEXT, CROP_CONTEXT, CROP_CONTEXT)
    if edge_shapes and note is not None:
        area = renderer.bounds if region is None else region.intersected(renderer.bounds)
        scale = picture_scale(area, Path(path).suffix.lower())
        if scale < DETAIL_LOD:
            note(f"tensor shapes are drawn where boxes are at {DETAIL_LOD:.0%} of full size or more, and this picture "
                 f"is at {scale:.0%}: write an .svg, or draw a part with --select NODE --crop")
    return render_scene(renderer, path, marks, region=region, legend=legend)


@dataclass
class Scene:
    """A graph laid out and ready to paint, with the selection to highlight."""

    renderer: SceneRenderer
    marks: Highlights


def scene_for(graph: Graph, *, select: Sequence[str] = (), expand_all: bool = False, shape_ops: bool = False,
              collapsed_matches: dict[str, str] | None = None, collapse_groups: bool = False) -> Scene:
    """``graph`` laid out and ready to paint, ``select`` highlighted; the groups holding those nodes are
    drawn open, as a double-click in the window opens them. An unknown name is refused with a guess."""
    ensure_gui_application()
    opened = frozenset(prefix for name in select for prefix in scope_prefixes(scope_of(name)))
    options = (ViewOptions(grouping=False) if expand_all
               else ViewOptions(expanded=opened, grouping=collapse_groups or None))
    options.show_shape_ops = shape_ops
    options.collapsed_matches = dict(collapsed_matches or {})
    view = build_view(graph, options)
    renderer = SceneRenderer(view, layout_view(view))
    marks = Highlights()
    for name in select:
        item = view.item_showing(name)
        if item is None:
            raise no_such_node(name, graph.by_name, "--select", graph.path)
        marks.selected.add(item)
    return Scene(renderer, marks)
