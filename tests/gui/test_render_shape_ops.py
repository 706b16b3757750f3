"""Shape arithmetic and edge shapes in pictures: ``graphlens render --shape-ops / --shapes`` and the View menu."""

from __future__ import annotations

import onnx
from PySide6.QtGui import QImage

from graphlens.cli import main
from graphlens.core.model import load_model
from graphlens.gui import render
from graphlens.gui.render import render_graph, scene_for
from tests.layout.test_shape_chips import CHAIN, reshape_by_computed_shape


def _model(tmp_path):
    path = tmp_path / "reshape.onnx"
    onnx.save(reshape_by_computed_shape(), path)
    return path


def test_scene_hides_shape_arithmetic_unless_asked(tmp_path, qapp):
    graph = load_model(_model(tmp_path)).graph
    assert not set(CHAIN) & set(scene_for(graph).renderer.view.node_item)
    assert set(CHAIN) <= set(scene_for(graph, shape_ops=True).renderer.view.node_item)
    selected = scene_for(graph, select=["gather"])  # drawn as the Reshape's "shape ⟨computed: …⟩" line
    assert selected.marks.selected == {selected.renderer.view.index["reshape"]}


def test_render_shape_ops_draws_the_chain_and_shapes_label_the_edges(tmp_path, qapp):
    model = _model(tmp_path)
    chips, drawn, shapes = tmp_path / "chips.png", tmp_path / "drawn.png", tmp_path / "shapes.png"
    assert main(["render", str(model), "-o", str(chips)]) == 0
    assert main(["render", str(model), "-o", str(drawn), "--shape-ops"]) == 0
    assert main(["render", str(model), "-o", str(shapes), "--shapes"]) == 0
    assert QImage(str(drawn)).height() > QImage(str(chips)).height()  # four more layers of boxes
    plain, labelled = QImage(str(chips)), QImage(str(shapes))
    assert labelled.size() == plain.size() and labelled != plain  # the same boxes, with "2×3×4×4" on the edges


def test_view_menu_toggles_shape_arithmetic(window, tmp_path, qtbot):
    window.open_model(_model(tmp_path))
    qtbot.waitUntil(lambda: window.panel.view is not None and "reshape" in window.panel.view.node_item)
    assert not set(CHAIN) & set(window.panel.view.node_item)
    assert window.act_shape_ops.isCheckable() and not window.act_shape_ops.isChecked()
    window.act_shape_ops.setChecked(True)
    qtbot.waitUntil(lambda: set(CHAIN) <= set(window.panel.view.node_item))
    assert window.panel.options().show_shape_ops
    window.act_shape_ops.setChecked(False)
    qtbot.waitUntil(lambda: not set(CHAIN) & set(window.panel.view.node_item))


def test_shapes_note_says_when_the_picture_is_too_small_to_hold_them(tmp_path, qapp, monkeypatch):
    graph = load_model(_model(tmp_path)).graph
    notes: list[str] = []
    render_graph(graph, tmp_path / "full.png", edge_shapes=True, note=notes.append)
    assert notes == []
    monkeypatch.setattr(render, "MAX_SIDE", 120)  # as a long model is shrunk to fit
    render_graph(graph, tmp_path / "small.png", edge_shapes=True, note=notes.append)
    render_graph(graph, tmp_path / "small.svg", edge_shapes=True, note=notes.append)  # an SVG is drawn at full size
    assert len(notes) == 1 and "--select NODE --crop" in notes[0] and ".svg" in notes[0]
