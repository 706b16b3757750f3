"""What the three jobs draw on the canvas: matches tinted, the current one outlined, the partial
match of an explanation green with its failing node and edge red, a preview's removed nodes red.

Functions of the graph panel (which maps node names to canvas items) and of plain results, so
the workflow code only decides *when* to draw.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor

if TYPE_CHECKING:
    from graphlens.gui.graph_panel import GraphPanel
    from graphlens.matching.match import Match

MATCH_TINT = QColor("#ff9800")
CURRENT_MATCH = QColor("#e65100")
MATCHED_GREEN = QColor("#43a047")
FAILED_RED = QColor("#e53935")


def clear(panel: GraphPanel) -> None:
    marks = panel.canvas.marks
    marks.tints.clear()
    marks.outline.clear()
    marks.edges.clear()
    panel.canvas.update()


def items_of(panel: GraphPanel, names: Iterable[str]) -> list[int]:
    """Canvas items of the nodes shown in the current view (nodes inside collapsed groups map to the group)."""
    return [i for i in (panel.item_of(n) for n in names) if i is not None]


def tint(panel: GraphPanel, names: Iterable[str], colour: QColor) -> list[int]:
    items = items_of(panel, names)
    for index in items:
        panel.canvas.marks.tints[index] = colour
    panel.canvas.update()
    return items


def tint_matches(panel: GraphPanel, matches: list[Match]) -> None:
    """Every match in the graph on screen, tinted."""
    tint(panel, (n for m in matches if m.graph is panel.graph for n in m.nodes.values()), MATCH_TINT)


def outline_match(panel: GraphPanel, match: Match) -> None:
    """One match outlined and centred."""
    items = items_of(panel, match.nodes.values())
    panel.canvas.marks.outline = {i: CURRENT_MATCH for i in items}
    frame(panel, items)
    panel.canvas.update()


def draw_explanation(panel: GraphPanel, result: dict[str, Any]) -> None:
    """The partial match green; on a failure, the failing node outlined red and the edge that did not fit red.

    For a node whose output is used outside the match (``sole_use``) the edges leaving the match
    are the problem; otherwise the input that did not fit.
    """
    clear(panel)
    marks = panel.canvas.marks
    tint(panel, result.get("mapping", {}).values(), MATCHED_GREEN)
    failing = panel.item_of(result["node"]) if result.get("node") else None
    view = panel.view
    if failing is not None and view is not None and not result["matched"]:
        marks.outline[failing] = FAILED_RED
        marks.tints.pop(failing, None)
        tensor = result.get("tensor")
        if result.get("kind") == "sole_use":
            outside = set(items_of(panel, result.get("outside_consumers", [])))
            wanted = [k for k, e in enumerate(view.edges) if e.source == failing and e.target in outside]
        else:
            wanted = [k for k, e in enumerate(view.edges) if e.target == failing
                      and (tensor is None or tensor in e.tensors)]
            wanted = wanted[:1] if tensor is not None else wanted
        for k in wanted:
            marks.edges[k] = FAILED_RED
        placed = [i for i in items_of(panel, result.get("mapping", {}).values()) if i != failing]
        frame(panel, [*placed, failing])  # the whole partial match in view, with the failure
    panel.canvas.update()


def mark_removed(panel: GraphPanel, names: list[str]) -> None:
    """A preview: the nodes the rewrite would remove, red, in view together."""
    clear(panel)
    frame(panel, tint(panel, names, FAILED_RED))


def frame(panel: GraphPanel, items: list[int]) -> None:
    """Zoom and pan so these boxes show together, once the panels around the canvas have taken their room."""
    if not items:
        return
    canvas, drawn = panel.canvas, panel.canvas.renderer

    def show() -> None:
        if canvas.renderer is drawn:  # not once another graph is shown
            canvas.frame(items)

    QTimer.singleShot(0, canvas, show)  # dropped if the canvas goes first
