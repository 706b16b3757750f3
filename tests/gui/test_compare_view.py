"""File › Compare with…: A beside B, synced pan, zoom, selection and subgraphs, coloured by status,
its changes stepped through."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QPointF
from PySide6.QtGui import QColor, QImage, QPainter

from graphlens.core.model import load_model
from graphlens.gui.compare_panel import STATUS_COLOURS
from graphlens.rewrites.driver import fold_model
from tests.compare.models import chain, if_model

AMBER, SAME = QColor(*STATUS_COLOURS["changed"]), QColor(*STATUS_COLOURS["same"])


@pytest.fixture
def folded(demo_path, tmp_path) -> Path:
    """The demo with its BatchNormalizations folded, as ``graphlens fold`` writes it."""
    model = load_model(demo_path)
    fold_model(model)
    path = tmp_path / "demo-folded.onnx"
    model.save(path)
    return path


def _compared(window, a, b):
    assert window.open_model(a), window.last_error
    comparison = window.comparer.compare_with(b, background=False)
    assert comparison is not None, window.last_error
    return window.comparer.view


def _colour(panel, name: str) -> QColor:
    return panel.canvas.renderer.colors[panel.item_of(name)]


def _centre_item(panel) -> int | None:
    canvas = panel.canvas
    return canvas.renderer.item_at(canvas.visible_scene_rect().center())


def test_both_canvases_show_their_model_coloured_by_status(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    assert window.centralWidget() is view and view.panel_a is window.panel
    assert view.panel_a.graph is window.model.graph and view.panel_b.graph is view.comparison.b.graph
    assert len(view.panel_a.view.items) > len(view.panel_b.view.items)  # the folded BatchNormalizations are gone in B
    assert _colour(view.panel_a, "/stem/conv") == AMBER and _colour(view.panel_a, "/stem/bn") == AMBER
    assert _colour(view.panel_b, "/stem/conv") == AMBER  # Conv+BN in A became this Conv
    assert _colour(view.panel_a, "/stem/relu") == SAME and _colour(view.panel_b, "/stem/relu") == SAME
    renderer = view.panel_b.canvas.renderer
    assert renderer.overlay_labels[view.panel_b.item_of("/stem/conv")] == "changed"  # written too, not colour alone
    for canvas in (view.panel_a.canvas, view.panel_b.canvas):
        image = QImage(400, 300, QImage.Format.Format_ARGB32)
        image.fill(QColor("white"))
        painter = QPainter(image)
        area = canvas.legend_painter(painter, QPointF(0, 300))
        painter.end()
        swatch_y = int(area.top()) + 24 + 16 + 8
        assert area.height() > 60 and image.pixelColor(13, swatch_y) == AMBER  # the "changed" swatch


def test_selecting_in_one_canvas_selects_the_pair_in_the_other(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    a, b = view.panel_a, view.panel_b
    a.select_nodes(["/stem/bn"])
    assert b.canvas.marks.selected == {b.item_of("/stem/conv")}
    assert a.canvas.marks.selected == {a.item_of("/stem/bn")}  # no echo back into A
    b.canvas.select([])
    assert not a.canvas.marks.selected
    b.select_nodes(["/stem/conv"])
    assert a.canvas.marks.selected == {a.item_of("/stem/conv"), a.item_of("/stem/bn")}
    assert view.changes.list.currentRow() == 0  # the change it belongs to is marked in the list
    b.select_nodes(["/head/flatten"])
    assert a.canvas.marks.selected == {a.item_of("/head/flatten")}
    assert "/head/flatten" in window.inspector.text.toPlainText()  # what was clicked: B's node


def test_panning_and_zooming_one_canvas_moves_the_other(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    a, b = view.panel_a, view.panel_b
    a.canvas.center_on(a.item_of("/up/add"))
    assert b.canvas.scale == a.canvas.scale
    assert _centre_item(b) == b.item_of("/up/add")
    a.canvas.zoom(1.6)
    assert b.canvas.scale == pytest.approx(a.canvas.scale)
    assert _centre_item(b) == b.item_of("/up/add")
    b.canvas.center_on(b.item_of("/head/fc"))  # B leads as well
    assert _centre_item(a) in (a.item_of("/head/fc"), a.item_of("/head/bn"))
    a.canvas.offset = a.canvas.offset + QPointF(0, 30)  # a pan keeps both moving together
    assert _centre_item(b) == b.item_of("/head/fc")


def test_the_changes_list_steps_through_the_folded_groups(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    lines = [view.changes.list.item(k).text() for k in range(view.changes.list.count())]
    assert len(lines) == 7 and all(line.startswith("changed: ") for line in lines)
    assert lines[0].startswith("changed: Conv '/stem/conv' ← Conv+BatchNormalization (folded BatchNormalization "
                               "'/stem/bn'")
    assert "SQNR" in lines[0] and "Constant×4" in lines[4]
    assert window.comparer.act_next.shortcut().toString() == "F8"
    window.comparer.act_next.trigger()
    a, b = view.panel_a, view.panel_b
    assert a.canvas.marks.selected == {a.item_of("/stem/conv"), a.item_of("/stem/bn")}
    assert b.canvas.marks.selected == {b.item_of("/stem/conv")}
    assert _centre_item(a) == a.item_of("/stem/conv") and _centre_item(b) == b.item_of("/stem/conv")
    window.comparer.act_next.trigger()
    assert b.canvas.marks.selected == {b.item_of("/stage1/block1/dw/conv")}
    window.comparer.act_prev.trigger()
    window.comparer.act_prev.trigger()  # wraps around to the last change
    assert b.canvas.marks.selected == {b.item_of("/head/fc")} and _centre_item(b) == b.item_of("/head/fc")


def test_colour_by_numeric_error_shows_the_db_scale_on_both_canvases(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    view.set_colour_mode("sqnr_db")
    overlay = window.workspace.overlay.shown
    assert overlay is view.overlays["a"] and overlay.unit == "dB" and not overlay.higher_is_worse
    assert window.overlay_panel.table_model.rowCount() > 20  # the Overlay panel lists A's nodes by SQNR
    assert "dB" in view.panel_b.canvas.renderer.overlay_labels[view.panel_b.item_of("/stem/conv")]
    assert _colour(view.panel_a, "/stem/conv") != AMBER and _colour(view.panel_b, "/stem/conv") != AMBER
    assert overlay.title.endswith("(dB)") and view.overlays["b"].title.endswith("(dB)")
    for canvas in (view.panel_a.canvas, view.panel_b.canvas):  # the legend is the colour scale, not the statuses
        image = QImage(400, 300, QImage.Format.Format_ARGB32)
        painter = QPainter(image)
        area = canvas.legend_painter(painter, QPointF(0, 300))
        painter.end()
        assert area.width() > 200 and area.height() == 84
    view.set_colour_mode("status")
    assert window.workspace.overlay.shown is None
    assert _colour(view.panel_a, "/stem/conv") == AMBER and _colour(view.panel_b, "/stem/conv") == AMBER


def test_removed_and_added_nodes_take_their_colours_and_groups_their_worst_member(window, write_model):
    longer, shorter = write_model(chain(extra_branch=True), "a.onnx"), write_model(chain(), "b.onnx")
    view = _compared(window, longer, shorter)
    removed = [n for p in view.comparison.pairs if p.status == "removed" for n in p.a]
    assert removed and all(_colour(view.panel_a, n) == QColor(*STATUS_COLOURS["removed"]) for n in removed)
    assert any(view.changes.list.item(k).text().startswith("removed: ") for k in range(view.changes.list.count()))
    view = _compared(window, shorter, longer)  # the other way round
    added = [n for p in view.comparison.pairs if p.status == "added" for n in p.b]
    assert added and all(_colour(view.panel_b, n) == QColor(*STATUS_COLOURS["added"]) for n in added)


def test_a_collapsed_group_shows_its_worst_member_and_expands_on_both_sides(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    a, b = view.panel_a, view.panel_b
    a.grouping = True  # what a model above the collapse threshold gets
    a.relayout()
    assert a.view.grouped and b.view.grouped  # B follows
    for panel in (a, b):
        stem = panel.view.index["group:/stem"]
        assert panel.canvas.renderer.colors[stem] == AMBER  # /stem/relu and /stem/maxpool are same, the conv changed
        assert panel.canvas.renderer.overlay_labels[stem] == "worst: changed"
    a.select_nodes(["/stem/bn"])
    assert b.canvas.marks.selected == {b.view.index["group:/stem"]}
    a.toggle_group("/stem")  # double-click: expand it, on both sides
    assert _colour(a, "/stem/relu") == SAME and _colour(b, "/stem/conv") == AMBER
    assert b.view.items[b.item_of("/stem/conv")].kind == "node"


def test_entering_a_subgraph_enters_the_paired_one(window, write_model):
    view = _compared(window, write_model(if_model(1), "a.onnx"), write_model(if_model(2), "b.onnx"))
    node = window.model.graph.by_name["branch"]
    view.panel_a.enter(node, "then_branch")
    assert view.panel_b.graph.path == "main/branch:then_branch"
    assert view.panel_b.graph is view.comparison.b.graph.by_name["branch"].subgraphs["then_branch"][0]
    conv = next(n.name for n in view.panel_b.graph.nodes if n.op_type == "Conv")
    assert _colour(view.panel_b, conv) == AMBER  # its pads changed
    view.panel_b.leave()
    assert view.panel_a.graph is window.model.graph


def test_opening_a_model_or_an_edit_closes_the_comparison(window, demo_path, folded):
    _compared(window, demo_path, folded)
    assert window.open_model(folded)
    assert window.comparer.view is None and window.centralWidget() is window.panel
    assert not window.canvas.renderer.overlay_on and window.canvas.legend_painter is None
    assert not window.comparer.act_next.isEnabled()
    _compared(window, demo_path, folded)
    window.workspace.apply_all("fold-bn")  # an edit: the comparison described the model as it was
    assert window.workspace.comparison.result is None and window.comparer.view is None
    assert window.centralWidget() is window.panel


def test_escape_clears_the_selection_then_closes(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    view.panel_a.select_nodes(["/stem/conv"])
    window.comparer.act_close.trigger()
    assert window.comparer.view is view and not view.panel_b.canvas.marks.selected
    window.comparer.act_close.trigger()
    assert window.comparer.view is None and window.centralWidget() is window.panel
    assert window.panel.isVisible() and not window.canvas.renderer.overlay_on
    window.select_nodes(["/stem/conv"])  # the single view works as before
    assert window.canvas.marks.selected == {window.panel.item_of("/stem/conv")}


def test_stacked_puts_b_below_a(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    view.set_stacked(True)
    top_a = view.panel_a.mapTo(view, view.panel_a.rect().topLeft()).y()
    top_b = view.panel_b.mapTo(view, view.panel_b.rect().topLeft()).y()
    assert top_b > top_a and view.stacked.isChecked()


def test_a_bad_file_is_one_line_and_the_comparison_shown_stays(window, demo_path, folded, tmp_path, qtbot):
    view = _compared(window, demo_path, folded)
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    assert window.comparer.compare_with(bad, background=False) is None
    assert "bad.onnx" in window.last_error and "\n" not in window.last_error
    assert window.comparer.view is view and window.centralWidget() is view
    window.last_error = None
    window.comparer.compare_with(bad)  # the menu's way: in a worker
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=20000)
    assert "bad.onnx" in window.last_error and window.comparer.view is view


def test_compare_in_a_worker_shows_progress_then_the_view(window, demo_path, folded, qtbot):
    assert window.open_model(demo_path)
    window.comparer.compare_with(folded)
    assert window.cancel_button.isVisible()
    qtbot.waitUntil(lambda: window.comparer.view is not None, timeout=30000)
    assert not window.cancel_button.isVisible()
    view = window.comparer.view
    assert view.comparison.a is window.model and window.workspace.comparison.result is view.comparison
    assert _colour(view.panel_b, "/stem/conv") == AMBER
    window.comparer.compare_with(folded)
    window.cancel_button.click()  # cancelled: nothing changes
    assert not window.comparer.jobs.busy and window.comparer.view is view


def test_closing_the_window_while_comparing_stops_the_work(window, demo_path, folded, qtbot):
    from graphlens.gui import workers

    assert window.open_model(demo_path)
    job = window.comparer.compare_with(folded)
    window.close()
    assert job.wait(20) and not workers.running()
    qtbot.wait(50)
    assert window.comparer.view is None and window.workspace.comparison.result is None  # nothing arrived late


def test_without_numbers_colour_by_stays_on_status(window, demo_path, folded):
    view = _compared(window, demo_path, folded)
    view.comparison.numeric_reason = "onnxruntime cannot run B"
    view.set_colour_mode("sqnr_db")
    assert "onnxruntime cannot run B" in window.last_error
    assert view.mode == "status" and window.workspace.overlay.shown is None
    assert _colour(view.panel_a, "/stem/conv") == AMBER


def test_closing_the_comparison_puts_the_docks_and_the_window_size_back(window, demo_path, folded):
    """The comparison shrinks the bottom panels to make room; they used to stay squeezed (the Matches list 15 px
    tall) after it closed."""
    window.resize(1280, 820)
    window.layout().activate()
    bottom = window._dock_of(window.matches_panel)
    before = (window.size(), bottom.height())
    _compared(window, demo_path, folded)
    window.comparer.close()
    window.layout().activate()
    assert (window.size(), bottom.height()) == before
