"""The window, driven as a user drives it (offscreen)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from PySide6.QtCore import QEvent, QMimeData, QPoint, QPointF, QSettings, Qt, QUrl
from PySide6.QtGui import QColor, QDropEvent, QImage, QMouseEvent
from PySide6.QtWidgets import QApplication

from graphlens.core.model import load_model
from tests import models
from tests.bad_files import KINDS, make_bad_file


def item_index(window, node_name: str) -> int:
    index = window.panel.item_of(node_name)
    assert index is not None, node_name
    return index


def distinct_colours(image: QImage, step: int = 7) -> int:
    return len({image.pixel(x, y) for x in range(0, image.width(), step) for y in range(0, image.height(), step)})


def test_opens_the_demo_and_shows_every_node(window, demo_path):
    assert window.open_model(demo_path)
    model = load_model(demo_path)
    assert window.windowTitle() == "demo.onnx[*] — GraphLens" and not window.isWindowModified()
    shown = {item.node for item in window.panel.view.items if item.kind == "node"}
    hidden_constants = {n.name for n in model.graph.nodes if n.op_type == "Constant"}
    assert shown == {n.name for n in model.graph.nodes} - hidden_constants
    assert window.status_nodes.text() == f"{model.node_count()} nodes"
    assert window.status_graph.text() == "main graph"


def test_selecting_a_node_shows_its_attributes_and_links(window, demo_path):
    window.open_model(demo_path)
    window.canvas.select([item_index(window, "/stem/conv")])
    text = window.inspector.text.toPlainText()
    assert "Conv" in text and "/stem/conv" in text
    assert "kernel_shape" in text and "[3, 3]" in text
    assert "stem.conv.weight" in text and "float32 [16, 3, 3, 3]" in text
    window.inspector.link_activated.emit("node", "/stem/bn")  # a consumer link jumps there
    assert window.canvas.marks.selected == {item_index(window, "/stem/bn")}


def test_a_constant_tensor_shows_statistics_and_saves_as_npy(window, demo_path, tmp_path):
    import numpy as np

    window.open_model(demo_path)
    window.inspector.link_activated.emit("tensor", "stem.conv.weight")
    assert window.inspector.tensor_panel.isVisibleTo(window.inspector)
    assert "min" in window.inspector.stats.text() and window.inspector.table.rowCount() == 64
    saved = window.inspector.save_tensor(tmp_path / "w.npy")
    expected = load_model(demo_path).graph.constant_value("stem.conv.weight")
    np.testing.assert_array_equal(np.load(saved), expected)


def test_search_finds_and_highlights_and_steps(window, demo_path):
    window.open_model(demo_path)
    window.outline.field.setText("BatchNormalization")
    assert len(window.outline.hits) == 8 and len(window.canvas.marks.hits) == 8
    window.outline.next()
    assert window.canvas.marks.current_hit == item_index(window, window.outline.hits[0])
    window.outline.previous()
    assert window.canvas.marks.current_hit == item_index(window, window.outline.hits[-1])
    window.outline.regex.setChecked(True)
    window.outline.field.setText(r"^/stage1/.*/conv$")
    assert window.outline.hits == ["/stage1/block1/dw/conv", "/stage1/block1/pw/conv", "/stage1/block2/conv"]


def test_drag_and_drop_opens_a_file(window, demo_path, write_model, qtbot):
    window.open_model(demo_path)
    other = write_model(models.conv_bn(), "dropped.onnx")
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(other))])
    event = QDropEvent(QPointF(50, 50), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton,
                       Qt.KeyboardModifier.NoModifier)
    window.dropEvent(event)  # opens in a worker thread; the window stays responsive meanwhile
    qtbot.waitUntil(lambda: window.model.name == "dropped.onnx", timeout=10000)
    assert not window.progress.isVisible()
    assert QSettings().value("recent")[0].endswith("dropped.onnx")


def test_enter_and_leave_a_subgraph(window, write_model):
    window.open_model(write_model(models.if_with_conv_bn(), "branchy.onnx"))
    branch = window.panel.view.items[item_index(window, "branch")]
    assert branch.has_subgraph
    window.panel.enter(window.model.graph.node("branch"), "then_branch")
    assert window.current_graph().path == "main/branch:then_branch"
    assert {i.node for i in window.panel.view.items if i.kind == "node"} == {"then_conv", "then_bn"}
    assert window.status_graph.text() == "main/branch:then_branch"
    window.act_back.trigger()
    assert window.current_graph() is window.model.graph


def test_collapse_and_expand_a_group(window, demo_path):
    window.open_model(demo_path)
    window.panel.grouping = True
    window.panel.relayout()
    groups = [i for i in window.panel.view.items if i.kind == "group"]
    assert groups, "a scoped model shows groups when grouping is on"
    stage1 = next(i for i in groups if i.key == "group:/stage1")
    assert "/stage1/block2/conv" in stage1.members
    window.panel.activate(window.panel.view.index[stage1.key])  # double-click
    assert "group:/stage1" not in window.panel.view.index
    assert window.panel.item_of("/stage1/block2/conv") != window.panel.view.index.get("group:/stage1")
    window.panel.toggle_group("/stage1")
    assert "group:/stage1" in window.panel.view.index


def test_a_deep_model_opens_readable_at_its_input_and_f_fits_it_whole(window, write_model):
    """A 300-node chain fitted whole is a sliver a few pixels wide: it opens at 100 %, its input at the top;
    Fit to Window still shows the whole of it."""
    from onnx import TensorProto, helper

    from tests.models import make_model, tensor

    nodes = [helper.make_node("Relu", [f"t{i}"], [f"t{i + 1}"], name=f"relu{i}") for i in range(300)]
    proto = make_model(nodes, [tensor("t0", TensorProto.FLOAT, [1, 8])], [tensor("t300", TensorProto.FLOAT, [1, 8])])
    window.resize(1280, 820)
    assert window.open_model(write_model(proto, "deep.onnx")), window.last_error
    canvas = window.canvas
    assert canvas.scale == 1.0
    kinds = canvas.renderer.kinds
    first_input = canvas.renderer.rects[kinds.index("input")]
    assert canvas.visible_scene_rect().contains(first_input)
    window.act_fit.trigger()
    assert canvas.scale < canvas.readable_scale() and canvas.visible_scene_rect().contains(canvas.renderer.bounds)


def test_zoom_to_fit_and_zoom_steps(window, demo_path):
    window.open_model(demo_path)
    window.canvas.zoom(4.0)
    window.act_fit.trigger()
    visible = window.canvas.visible_scene_rect()
    assert visible.contains(window.canvas.renderer.bounds)
    before = window.canvas.scale
    window.act_zoom_in.trigger()
    assert window.canvas.scale > before
    assert window.status_zoom.text().endswith("%")


def test_export_png_and_svg_are_not_blank(window, demo_path, tmp_path):
    window.open_model(demo_path)
    png = window.export_image(tmp_path / "graph.png")
    image = QImage(str(png))
    assert image.width() > 300 and image.height() > 300
    assert distinct_colours(image) > 20
    svg = window.export_image(tmp_path / "graph.svg")
    assert "<svg" in svg.read_text()[:2000] and "Conv" in svg.read_text()


def test_export_of_the_visible_area_is_what_the_canvas_shows_at_full_size(window, demo_path, tmp_path):
    window.open_model(demo_path)
    whole = QImage(str(window.export_image(tmp_path / "whole.png")))
    window.canvas.center_on(0)  # zoomed in on the first box: a small part of the graph
    visible = window.canvas.visible_scene_rect()
    part = QImage(str(window.export_image(tmp_path / "part.png", visible_only=True)))
    assert part.height() < whole.height()
    shown = visible.intersected(window.canvas.renderer.bounds).height()
    assert part.height() == max(200, int(shown + 48)) or abs(part.height() - (shown + 48)) <= 2  # at scale 1
    assert distinct_colours(part) > 10
    shortcuts = [a.shortcut().toString() for a in window.actions() if not a.shortcut().isEmpty()]
    assert len(shortcuts) == len(set(shortcuts))  # no two actions share a key


@pytest.mark.parametrize("kind", KINDS)
def test_bad_file_shows_a_dialog_and_keeps_the_model(window, demo_path, tmp_path, kind):
    window.open_model(demo_path)
    before = window.model
    path, _ = make_bad_file(tmp_path, kind)
    assert not window.open_model(path)
    assert window.model is before and window.windowTitle().startswith("demo.onnx")
    box = window.error_box
    assert box.isVisible() and str(path) in box.text()
    box.close()


def test_opening_a_bad_file_in_the_background_reports_it(window, demo_path, tmp_path, qtbot):
    window.open_model(demo_path)
    path, _ = make_bad_file(tmp_path, "truncated")
    window.open_model_async(path)
    qtbot.waitUntil(lambda: window.last_error is not None, timeout=10000)
    assert str(path) in window.last_error and window.model.name == "demo.onnx"


def test_recent_files_and_window_layout_persist(qtbot, demo_path):
    from graphlens.gui import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.resize(700, 520)  # within the offscreen screen, which clamps restored geometry
    first.open_model(demo_path)
    first.close()
    second = MainWindow()
    qtbot.addWidget(second)
    assert (second.size().width(), second.size().height()) == (700, 520)
    assert [a.text() for a in second.recent_menu.actions()] == [str(demo_path.resolve())]


def test_hover_highlights_and_click_selects(window, demo_path, qtbot):
    window.open_model(demo_path)
    index = item_index(window, "/stem/conv")
    window.canvas.center_on(index)
    point = window.canvas.to_widget(window.canvas.renderer.rects[index].center()).toPoint()
    # Sent to the canvas itself: offscreen, a moved cursor reaches whichever window lies on top.
    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(point), window.canvas.mapToGlobal(QPointF(point)),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(window.canvas, move)
    assert window.canvas.marks.hovered == index
    qtbot.mouseClick(window.canvas, Qt.MouseButton.LeftButton, pos=point)
    assert window.canvas.marks.selected == {index}
    other = item_index(window, "/stem/bn")
    qtbot.mouseClick(window.canvas, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier,
                     pos=window.canvas.to_widget(window.canvas.renderer.rects[other].center()).toPoint())
    assert window.canvas.marks.selected == {index, other}
    qtbot.mouseClick(window.canvas, Qt.MouseButton.LeftButton, pos=QPoint(3, window.canvas.height() // 2))
    assert window.canvas.marks.selected == set()


def test_render_command_writes_pictures_without_a_window(tmp_path, demo_path):
    png = tmp_path / "demo.png"
    result = subprocess.run([sys.executable, "-m", "graphlens", "render", "-o", str(png), "--select", "/stem/conv"],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    image = QImage(str(png))
    assert distinct_colours(image) > 20
    selected_blue = QColor("#1e88e5").rgb()
    assert any(image.pixel(x, y) == selected_blue for x in range(image.width()) for y in range(0, image.height(), 2))
    bad = subprocess.run([sys.executable, "-m", "graphlens", "render", str(demo_path), "-o", str(tmp_path / "x.png"),
                          "--select", "/stem/cnv"],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "did you mean '/stem/conv'" in bad.stderr


def test_tensor_shapes_on_edges_and_context_menu_collapse(window, demo_path, tmp_path):
    window.open_model(demo_path)
    window.act_shapes.trigger()
    window.canvas.center_on(item_index(window, "/stem/conv"))
    assert window.canvas.renderer.show_edge_labels
    image = window.canvas.grab().toImage()
    assert image.width() > 0
    assert "1×16×32×32" in {window.panel.view.edge_label(k) for k in range(len(window.panel.view.edges))}
    window.panel.grouping = True
    window.panel.relayout()
    window.panel.toggle_group("/stage1")
    labels = [label for label, _ in window.context_actions(item_index(window, "/stage1/block2/conv"))]
    assert "Collapse '/stage1'" in labels
    dict(window.context_actions(item_index(window, "/stage1/block2/conv")))["Collapse '/stage1'"]()
    assert "group:/stage1" in window.panel.view.index


@pytest.mark.parametrize("case", ["external-data", "float16", "no-shapes", "custom-op", "subgraph"])
def test_every_kind_of_model_opens(window, tmp_path, case):
    import onnx
    from onnx import TensorProto, helper

    proto = {"float16": lambda: models.conv_bn(dtype=TensorProto.FLOAT16),
             "subgraph": models.if_with_conv_bn}.get(case, models.conv_bn)()
    path = tmp_path / f"{case}.onnx"
    if case == "no-shapes":
        for value in (*proto.graph.input, *proto.graph.output):
            value.type.tensor_type.ClearField("shape")
    if case == "custom-op":
        proto.graph.node.append(helper.make_node("Mystery", ["y"], ["z"], name="mystery", domain="com.example"))
        proto.graph.output[0].name = "z"
        proto.opset_import.append(helper.make_opsetid("com.example", 1))
    if case == "external-data":
        onnx.save(proto, path, save_as_external_data=True, location="weights.bin", size_threshold=0)
    else:
        onnx.save(proto, path)
    assert window.open_model(path), window.last_error
    assert window.panel.view is not None and len(window.panel.view.items) >= 3
    if case == "custom-op":
        mystery = window.panel.view.items[item_index(window, "mystery")]
        assert mystery.category == "other"  # unknown ops get the neutral colour
    assert window.export_image(tmp_path / f"{case}.png") is not None


def test_a_stale_dock_tab_bar_is_hidden_and_the_live_ones_stay(window, qtbot):
    """Qt 6.11 can leave a copy of a dock group's first two tabs over the left panels; the window hides it."""
    from PySide6.QtWidgets import QDockWidget, QTabBar

    qtbot.waitExposed(window)
    for dock in window.findChildren(QDockWidget):  # result panels open as jobs fill them; here all at once
        if dock.windowTitle() in ("Outline / Search", "Patterns", "Matches", "Why not here?", "Rewrite preview"):
            dock.show()
    qtbot.wait(10)
    stale = QTabBar(window)  # what Qt leaves behind: the first tabs of the bottom group, no longer laid out
    for text in ("Matches", "Why not here?"):
        stale.addTab(text)
    stale.show()
    window.hide_stale_tab_bars()
    assert not stale.isVisible()
    live = [[b.tabText(i) for i in range(b.count())] for b in window.findChildren(QTabBar) if b.isVisible()]
    assert ["Outline / Search", "Patterns"] in live and any(t[:2] == ["Matches", "Why not here?"] for t in live)
