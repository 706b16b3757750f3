"""The window as a person meets it, at laptop and desktop sizes: the canvas first, a readable first view, Fit clear
of the legend and minimap, edits that keep the view, the right questions at the right node, search one key away."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QByteArray, QPointF, QRectF, QSettings, Qt
from PySide6.QtWidgets import QApplication, QDockWidget

from tests.matching.attention_block_models import build, form

SIZES = [(1366, 768), (1280, 800), (1920, 1080)]


def first_start(window, qtbot, size: tuple[int, int]) -> None:
    """The window as it first opens on a screen of ``size`` (no saved layout)."""
    window.resize(*size)
    window.default_layout()
    qtbot.waitUntil(lambda: window.width() == size[0])
    QApplication.processEvents()


def item_of(window, name: str) -> int:
    index = window.panel.item_of(name)
    assert index is not None, name
    return index


@pytest.fixture
def attention_path(write_model):
    return write_model(build(form()), "attention.onnx")


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_graph_gets_most_of_the_window_and_opens_readable(window, qtbot, demo_path, attention_path, size):
    first_start(window, qtbot, size)
    for path in (demo_path, attention_path):
        assert window.open_model(path), window.last_error
        QApplication.processEvents()
        assert window.canvas_share() >= 0.6, (path.name, window.canvas_share())
        assert not any(d.isVisible() for d in window.findChildren(QDockWidget)
                       if window.dockWidgetArea(d) == Qt.DockWidgetArea.BottomDockWidgetArea)  # no job run yet
        canvas = window.canvas
        title_px = canvas.renderer.title_font.pointSizeF() * canvas.logicalDpiY() / 72 * canvas.scale
        assert title_px >= 9, (path.name, canvas.scale)
        first_input = canvas.renderer.rects[canvas.renderer.kinds.index("input")]
        assert canvas.visible_scene_rect().contains(first_input)


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_fit_keeps_every_box_clear_of_the_legend_and_the_minimap(window, qtbot, demo_path, attention_path, size):
    first_start(window, qtbot, size)
    for path in (demo_path, attention_path):
        window.open_model(path)
        QApplication.processEvents()
        window.act_fit.trigger()
        canvas = window.canvas
        overlays = canvas.overlay_rects()
        assert len(overlays) == 2
        for r in canvas.renderer.rects:
            box = QRectF(canvas.to_widget(r.topLeft()), canvas.to_widget(r.bottomRight()))
            assert not any(o.intersects(box) for o in overlays), (path.name, r)
        assert canvas.visible_scene_rect().contains(canvas.renderer.bounds)


def test_legend_and_minimap_can_be_hidden_and_fit_then_uses_the_room(window, qtbot, demo_path):
    first_start(window, qtbot, (1366, 768))
    window.open_model(demo_path)
    window.act_fit.trigger()
    with_overlays = window.canvas.scale
    window.act_legend.setChecked(False)
    window.act_minimap.setChecked(False)
    assert window.canvas.overlay_rects() == []
    window.act_fit.trigger()
    assert window.canvas.scale >= with_overlays


def view_of(window, name: str) -> tuple[float, QPointF]:
    """The zoom, and where the top of node ``name``'s box (which grows when a fold gives a conv a bias) is drawn."""
    canvas = window.canvas
    box = canvas.renderer.rects[item_of(window, name)]
    return canvas.scale, canvas.to_widget(QPointF(box.center().x(), box.top()))


@pytest.mark.parametrize("size", SIZES[:2], ids=lambda s: f"{s[0]}x{s[1]}")
def test_apply_and_undo_keep_the_zoom_the_place_and_the_panels(window, qtbot, demo_path, size):
    first_start(window, qtbot, size)
    window.open_model(demo_path)
    window.workspace.matches.find("conv-bn")
    count = len(window.matches)
    window.matches_panel.list.setCurrentRow(1)
    window.workspace.rewrite.preview("fold-bn", 1).to_dict()
    window.canvas.zoom(0.8)  # the user's own zoom and place
    conv = window.matches[1].nodes["conv"]
    before = view_of(window, conv)
    window.act_apply.trigger()  # Ctrl+Enter
    assert view_of(window, conv) == before
    assert "Applied" in window.preview_panel.title.text() and window.preview_panel.numeric.rowCount() > 0
    assert len(window.matches) == count - 1  # the pattern ran again on the model as it is
    assert window.matches_panel.list.count() == count - 1 and window.matches_panel.list.currentRow() == 1
    window.undo()
    assert view_of(window, conv) == before
    assert len(window.matches) == count
    assert "changed since this preview" in window.preview_panel.title.text()
    window.redo()
    assert view_of(window, conv) == before


def test_undoing_a_fusion_keeps_the_place_by_name_scope(window, qtbot, attention_path):
    """The fused node is gone after Undo: the view stays on the nodes of the same scope, not on empty canvas."""
    first_start(window, qtbot, (1366, 768))
    window.open_model(attention_path)
    window.act_transformers.trigger()
    canvas = window.canvas
    canvas.zoom(0.9)
    visible = canvas.visible_scene_rect()
    assert any(visible.intersects(r) for r in canvas.renderer.rects)
    scale = canvas.scale
    window.undo()
    assert canvas.scale == scale
    visible = canvas.visible_scene_rect()
    assert any(visible.intersects(r) for r, kind in zip(canvas.renderer.rects, canvas.renderer.kinds) if kind == "node")


def test_the_inspector_follows_an_edit(window, qtbot, demo_path):
    first_start(window, qtbot, (1366, 768))
    window.open_model(demo_path)
    window.select_nodes(["/stem/bn"])
    assert "/stem/bn" in window.inspector.text.toPlainText()
    window.workspace.apply_all("fold-bn")  # the BN is folded away
    assert "/stem/bn" not in window.inspector.text.toPlainText()
    qtbot.waitUntil(lambda: "Most used ops" in window.inspector.text.toPlainText())  # the model's overview instead
    window.undo()
    assert window.canvas.marks.selected == set()


def test_why_not_here_on_a_softmax_offers_attention_first(window, qtbot, attention_path):
    window.open_model(attention_path)
    softmax = next(n.name for n in window.model.graph.nodes if n.op_type == "Softmax")
    labels = [label for label, _ in window.context_actions(item_of(window, softmax))]
    why = [label for label in labels if label.startswith("Why doesn't")]
    assert why[0] == "Why doesn't attention match here?"
    assert "Why doesn't sdpa match here?" in why and "Why doesn't conv-bn match here?" not in labels
    dict(window.context_actions(item_of(window, softmax)))["Why doesn't attention match here?"]()
    assert window.workspace.matches.explanation.pattern.name == "attention"
    assert window._dock_of(window.why_panel).isVisible()


def test_the_current_pattern_comes_first_where_it_fits(window, demo_path):
    window.open_model(demo_path)
    window.workspace.matches.find("conv-mul-add")
    labels = [label for label, _ in window.context_actions(item_of(window, "/stem/conv"))]
    assert labels[:2] == ["Why doesn't conv-mul-add match here?", "Why doesn't conv-bn match here?"]


def test_the_explain_menu_asks_about_the_selected_node_and_opens_the_lessons(window, qtbot, attention_path, demo_path):
    window.open_model(attention_path)
    softmax = next(n.name for n in window.model.graph.nodes if n.op_type == "Softmax")
    window.select_nodes([softmax])
    menu = window.explain_menu
    why = menu.actions()[0].menu()
    window._fill_why_menu(why)
    assert why.actions()[0].text() == "Why doesn't attention match here?"
    window.open_model(demo_path)
    window.select_nodes(["/up/bn"])
    index = window.learn_bn_folding()
    assert index == 5 and "/up/bn" in window.matches[index].node_names
    assert window._dock_of(window.lesson_view).isVisible()
    window.learn_fake_quantization()  # no preview yet: the panel, and what to do first
    assert window._dock_of(window.quantize_panel).isVisible() and "press Run" in window.statusBar().currentMessage()


def test_the_menu_key_opens_the_selected_nodes_menu_at_the_node(window, qtbot, demo_path):
    window.open_model(demo_path)
    window.select_nodes(["/stage2/block1/bn"])
    with qtbot.waitSignal(window.canvas.context_requested) as signal:
        qtbot.keyClick(window.canvas, Qt.Key.Key_F10, Qt.KeyboardModifier.ShiftModifier)
    index, where = signal.args
    assert index == item_of(window, "/stage2/block1/bn")
    centre = window.canvas.to_widget(window.canvas.renderer.rects[index].center()).toPoint()
    assert window.canvas.mapFromGlobal(where) == centre


@pytest.mark.parametrize("hidden", ["closed", "behind Patterns"])
def test_ctrl_f_shows_and_focuses_the_search_box(window, qtbot, demo_path, hidden):
    window.open_model(demo_path)
    outline_dock, patterns_dock = window._dock_of(window.outline), window._dock_of(window.patterns_panel)
    if hidden == "closed":
        outline_dock.hide()
    else:
        outline_dock.show()
        patterns_dock.show()
        patterns_dock.raise_()
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.keyClick(window.canvas, Qt.Key.Key_F, Qt.KeyboardModifier.ControlModifier)
    qtbot.waitUntil(lambda: window.outline.field.hasFocus())
    assert window.outline.field.isVisible()
    qtbot.keyClicks(window.outline.field, "/stage2/block1/bn")
    qtbot.keyClick(window.outline.field, Qt.Key.Key_Return)
    assert window.canvas.marks.selected == {item_of(window, "/stage2/block1/bn")}
    qtbot.keyClick(window.outline.field, Qt.Key.Key_Escape)  # back to the graph, where the Menu key opens its menu
    qtbot.waitUntil(window.canvas.hasFocus)
    with qtbot.waitSignal(window.canvas.context_requested) as signal:
        qtbot.keyClick(window.canvas, Qt.Key.Key_F10, Qt.KeyboardModifier.ShiftModifier)
    assert signal.args[0] == item_of(window, "/stage2/block1/bn")


def test_a_saved_layout_that_buries_the_canvas_is_not_restored(qtbot, demo_path):
    from graphlens.gui import MainWindow

    first = MainWindow()
    qtbot.addWidget(first)
    first.resize(1366, 768)
    first.show()
    sides = [d for d in first.findChildren(QDockWidget)
             if first.dockWidgetArea(d) != Qt.DockWidgetArea.BottomDockWidgetArea]
    for dock in sides:
        dock.show()
    first.resizeDocks(sides, [560] * len(sides), Qt.Orientation.Horizontal)
    QApplication.processEvents()
    assert first.canvas_share() < 0.5
    first.close()  # saves its geometry and docks
    assert isinstance(QSettings().value("state"), QByteArray)
    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    QApplication.processEvents()
    assert second.canvas_share() >= 0.5


def test_a_small_window_keeps_the_graph_clear(window, qtbot, demo_path):
    """At 800×560 the minimap shrinks with the canvas (the category key steps aside where it has no room); Fit still
    keeps every box clear of them."""
    window.resize(800, 560)
    window.open_model(demo_path)
    QApplication.processEvents()
    canvas = window.canvas
    overlays = canvas.overlay_rects()
    minimap = canvas.minimap_rect()
    assert max(minimap.width(), minimap.height()) <= 0.25 * min(canvas.width(), canvas.height()) + 1
    window.act_fit.trigger()
    for r in canvas.renderer.rects:
        box = QRectF(canvas.to_widget(r.topLeft()), canvas.to_widget(r.bottomRight()))
        assert not any(o.intersects(box) for o in overlays)


def test_a_lesson_gets_its_height_back_when_the_window_grows(window, qtbot, demo_path):
    first_start(window, qtbot, (1366, 768))
    window.open_model(demo_path)
    window.workspace.matches.find("conv-bn")
    window.show_lesson(0)
    dock = window._dock_of(window.lesson_view)
    window.resize(1366, 420)
    qtbot.waitUntil(lambda: dock.height() < 0.45 * 768 - 40)
    window.resize(1366, 768)
    qtbot.waitUntil(lambda: dock.height() >= 0.45 * 768 - 40)


def test_why_not_here_speaks_in_words(window, demo_path):
    window.open_model(demo_path)
    window.workspace.matches.explain("conv-bn", at="/stage2/block1/bn").to_dict()
    text = window.why_panel.details.toPlainText()
    assert "what failed" in text and "sole_use" not in text and "kind" not in text


def test_with_nothing_selected_the_inspector_shows_the_model(window, qtbot, demo_path):
    window.open_model(demo_path)
    qtbot.waitUntil(lambda: "Most used ops" in window.inspector.text.toPlainText())
    text = window.inspector.text.toPlainText()
    assert "demo.onnx" in text and "image" in text and "logits" in text and "37 nodes" in text
    window.select_nodes(["/stem/conv"])
    assert "Most used ops" not in window.inspector.text.toPlainText()


def test_ctrl_m_with_the_patterns_panel_closed_runs_a_pattern(window, qtbot, demo_path):
    window.open_model(demo_path)
    assert not window._dock_of(window.patterns_panel).isVisible()
    window.act_run.trigger()
    assert window.workspace.matches.result.pattern.name == "conv-bn" and window.matches
    assert window._dock_of(window.matches_panel).isVisible()
    window.patterns_panel.editor.setPlainText("x = Nope(")  # a text that does not parse: the panel shows where
    window.act_run.trigger()
    assert window._dock_of(window.patterns_panel).isVisible()


def test_the_overlay_opens_under_the_inspector_with_most_of_the_column(window, qtbot, demo_path):
    first_start(window, qtbot, (1366, 768))
    window.open_model(demo_path)
    dock, inspector = window._dock_of(window.overlay_panel), window._dock_of(window.inspector)
    assert not dock.isVisible()
    window.overlay_panel.show_metric("flops")
    qtbot.waitUntil(lambda: dock.isVisible() and dock.height() > 1.5 * inspector.height())


def test_learn_with_no_row_selected_opens_the_worst_layers_lesson(window, qtbot, demo_path):
    window.open_model(demo_path)
    panel = window.quantize_panel
    panel.run(background=False)
    panel.table.clearSelection()
    with qtbot.waitSignal(panel.lesson_requested) as signal:
        panel.learn()
    assert signal.args[1] is panel.selected_layer() is not None


def test_binarizing_takes_down_the_quantized_graph_shown_after(window, qtbot, demo_path):
    window.open_model(demo_path)
    window.quantize_panel.run(background=False)
    window.quantize_panel.show_after.setChecked(True)
    assert window.panel.graph is not window.model.graph  # the quantized graph is on the canvas
    window.binarize_panel.run(background=False)
    assert not window.quantize_panel.show_after.isChecked() and window.panel.graph is window.model.graph
