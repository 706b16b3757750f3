"""The Overlay panel: the canvas coloured by a number per node, its legend, and the table linked both ways."""

from __future__ import annotations

from PySide6.QtCore import QPointF, Qt
from PySide6.QtGui import QColor, QImage, QPainter

from graphlens.gui.overlay_legend import paint_scale_legend
from graphlens.overlays import Overlay
from graphlens.overlays.overlay import NO_VALUE, SCALE_STOPS


def _row_of(panel, name: str) -> int:
    return panel.table_model.row_of[name]


def test_picking_flops_colours_the_boxes_and_the_legend_gives_the_unit(window, demo_path):
    window.open_model(demo_path)
    panel, renderer = window.overlay_panel, window.canvas.renderer
    overlay = panel.show_metric("flops")
    assert window.workspace.overlay.shown is overlay and overlay.unit == "FLOPs"
    worst = max(overlay.values, key=overlay.values.get)
    worst_item = window.panel.item_of(worst)
    assert renderer.colors[worst_item] == QColor(*map(int, SCALE_STOPS[-1]))  # the costliest node is the darkest
    flatten = next(n.name for n in window.model.graph.nodes if n.op_type == "Flatten")
    assert renderer.colors[window.panel.item_of(flatten)] == QColor(*NO_VALUE)  # no FLOPs: grey
    assert "1.18 MFLOPs" in renderer.overlay_labels[worst_item]
    assert window.canvas.legend_painter is not None
    assert panel.info.text().startswith("Compute (FLOPs): 31 nodes")
    image = QImage(400, 200, QImage.Format.Format_ARGB32)
    image.fill(QColor("white"))
    painter = QPainter(image)
    area = paint_scale_legend(painter, QPointF(0, 200), overlay)
    painter.end()
    assert area.width() > 200
    # the bar runs pale (lowest) to dark red (highest)
    left, right = image.pixelColor(10, int(area.top()) + 29), image.pixelColor(225, int(area.top()) + 29)
    assert left.lightness() > right.lightness()
    assert panel.table_model.rowCount() == 31 and panel.table_model.rows[0][0] == worst  # worst first


def test_a_table_row_selects_and_centres_its_node_and_a_canvas_selection_selects_its_row(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.overlay_panel
    panel.show_metric("params")
    row = _row_of(panel, "/head/fc")
    panel.table.scrollTo(panel.table_model.index(row, 0))
    rect = panel.table.visualRect(panel.table_model.index(row, 0))
    qtbot.mouseClick(panel.table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    item = window.panel.item_of("/head/fc")
    assert window.canvas.marks.selected == {item}
    assert window.canvas.renderer.rects[item].contains(window.canvas.visible_scene_rect().center())
    window.select_nodes(["/stem/conv"])
    rows = [index.row() for index in panel.table.selectionModel().selectedRows()]
    assert rows == [_row_of(panel, "/stem/conv")]


def test_sorting_by_value_keeps_the_link(window, demo_path):
    window.open_model(demo_path)
    panel = window.overlay_panel
    panel.show_metric("bytes")
    panel.table.sortByColumn(2, Qt.SortOrder.AscendingOrder)
    values = [r[2] for r in panel.table_model.rows]
    assert values == sorted(values)
    window.select_nodes(["/head/fc"])
    (index,) = panel.table.selectionModel().selectedRows()
    assert panel.table_model.rows[index.row()][0] == "/head/fc"


def test_import_a_csv_and_a_bad_file_keeps_the_overlay_shown(window, demo_path, tmp_path):
    window.open_model(demo_path)
    panel = window.overlay_panel
    good = tmp_path / "error.csv"
    good.write_text("node,Quantization error (rel)\n/stem/conv,0.02\n/head/fc,0.5\n")
    assert panel.import_file(good)
    overlay = window.workspace.overlay.shown
    assert overlay.values == {"/stem/conv": 0.02, "/head/fc": 0.5} and overlay.unit == "rel"
    assert panel.picker.currentText().startswith("Quantization error (rel)")
    bad = tmp_path / "bad.csv"
    bad.write_text("node,value\n/stem/conv,high\n")
    assert not panel.import_file(bad)
    assert window.last_error == f"{bad}: line 2: 'high' is not a finite number (node '/stem/conv')"
    assert window.workspace.overlay.shown is overlay
    assert window.canvas.renderer.overlay_on
    exported = panel.export_file(tmp_path / "out.json")
    assert exported is not None and '"/head/fc": {' in exported.read_text()


def test_any_mapping_set_on_the_workspace_shows_and_a_new_model_drops_it(window, demo_path):
    window.open_model(demo_path)
    window.workspace.overlay.show(Overlay.of("Binarization error", {"/stem/conv": 3.0}))
    assert window.overlay_panel.table_model.rowCount() == 1
    assert window.canvas.renderer.overlay_on
    window.open_model(demo_path)
    assert window.workspace.overlay.shown is None
    assert not window.canvas.renderer.overlay_on and window.canvas.legend_painter is None
    assert window.overlay_panel.picker.currentData() == "none"


def test_a_collapsed_group_shows_its_worst_member(window, demo_path):
    window.open_model(demo_path)
    window.panel.grouping = True
    window.panel.relayout()
    view = window.panel.view
    group = next(i for i, item in enumerate(view.items) if item.kind == "group")
    members = view.items[group].members
    overlay = window.workspace.overlay.show(Overlay.of("error", {members[0]: 1.0, members[-1]: 9.0, "/head/fc": 0.5}))
    renderer = window.canvas.renderer
    assert renderer.overlay_labels[group] == "worst " + overlay.label(9.0)
    assert renderer.colors[group] == QColor(*map(int, SCALE_STOPS[-1]))


def test_the_profile_button_times_every_node_in_the_background(window, demo_path, qtbot):
    window.open_model(demo_path)
    panel = window.overlay_panel
    panel.runs.setValue(2)
    with qtbot.waitSignal(panel.profile_finished, timeout=60_000) as finished:
        qtbot.mouseClick(panel.profile_button, Qt.MouseButton.LeftButton)
        assert panel.cancel_button.isVisible()
    assert finished.args[0] is not None
    overlay = window.workspace.overlay.shown
    assert overlay.unit == "µs" and "/stem/conv" in overlay.values
    assert panel.picker.currentData() == "latency" and not panel.cancel_button.isVisible()
    panel.show_metric("none")
    assert panel.show_metric("latency") is overlay  # the profile is kept for the model as it is


def test_cancel_stops_a_profile_and_keeps_what_was_shown(window, demo_path):
    window.open_model(demo_path)
    panel = window.overlay_panel
    flops = panel.show_metric("flops")
    panel.profile(50)
    assert panel.progress.isVisible() and not panel.profile_button.isEnabled()
    panel.cancel_profile()
    assert not panel.progress.isVisible() and panel.profile_button.isEnabled()
    assert window.workspace.overlay.shown is flops and panel.picker.currentData() == "flops"


def test_lower_is_worse_makes_the_lowest_values_darkest(window, demo_path, tmp_path):
    window.open_model(demo_path)
    panel = window.overlay_panel
    path = tmp_path / "sqnr.csv"
    path.write_text("node,SQNR (dB)\n/stem/conv,40\n/head/fc,12\n")
    panel.import_file(path)
    panel.lower_worse.setChecked(True)
    overlay = window.workspace.overlay.shown
    assert not overlay.higher_is_worse and overlay.values == {"/stem/conv": 40.0, "/head/fc": 12.0}
    darkest = QColor(*map(int, SCALE_STOPS[-1]))
    assert window.canvas.renderer.colors[window.panel.item_of("/head/fc")] == darkest
    assert panel.table_model.rows[0][0] == "/head/fc"  # worst first
    assert panel.picker.currentText().startswith("SQNR (dB)")


def test_a_large_models_metric_is_computed_in_the_background(window, demo_path, qtbot, monkeypatch):
    from graphlens.gui import overlay_panel

    monkeypatch.setattr(overlay_panel, "ASYNC_METRIC_NODES", 10)  # the demo counts as large
    window.open_model(demo_path)
    panel = window.overlay_panel
    assert panel.show_metric("flops") is None and panel.cancel_button.isVisible()
    qtbot.waitUntil(lambda: window.workspace.overlay.shown is not None, timeout=30_000)
    assert window.workspace.overlay.shown.unit == "FLOPs" and panel.picker.currentData() == "flops"
    assert not panel.cancel_button.isVisible()
