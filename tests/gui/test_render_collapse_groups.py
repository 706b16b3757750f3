"""Collapse Groups (``render --collapse-groups``, View › Collapse Groups) closes scopes at any size."""

from __future__ import annotations

import onnx
from PySide6.QtGui import QImage

from graphlens.cli import main
from graphlens.core.model import load_model
from graphlens.gui.render import scene_for
from tests.layout.test_repeated_blocks import four_layers_and_a_head


def _model(tmp_path):
    path = tmp_path / "layers.onnx"
    onnx.save(four_layers_and_a_head(), path)
    return path


def test_small_model_is_drawn_out_unless_groups_are_collapsed(tmp_path, qapp):
    graph = load_model(_model(tmp_path)).graph
    drawn_out = scene_for(graph).renderer.view
    assert not [i for i in drawn_out.items if i.kind == "group"]  # 21 nodes: below the threshold
    grouped = scene_for(graph, collapse_groups=True).renderer.view
    titles = [i.title for i in grouped.items if i.kind == "group"]
    assert "layers.0 … layers.3 ×4" in titles and "layers.4" in titles


def test_render_collapse_groups_draws_the_run_as_one_box(tmp_path, qapp, capsys):
    model = _model(tmp_path)
    plain, grouped = tmp_path / "plain.png", tmp_path / "grouped.png"
    assert main(["render", str(model), "-o", str(plain)]) == 0
    assert main(["render", str(model), "-o", str(grouped), "--collapse-groups"]) == 0
    assert QImage(str(grouped)).height() < QImage(str(plain)).height() / 2
    assert main(["render", str(model), "-o", str(grouped), "--collapse-groups", "--expand-all"]) == 2
    assert "give one" in capsys.readouterr().err


def test_window_collapse_groups_closes_scopes_of_a_small_model(tmp_path, qtbot):
    from graphlens.gui import MainWindow

    window = MainWindow()
    qtbot.addWidget(window)
    assert window.open_model(_model(tmp_path))
    assert not [i for i in window.panel.view.items if i.kind == "group"]
    window.act_collapse.trigger()
    assert any(i.title == "layers.0 … layers.3 ×4" for i in window.panel.view.items if i.kind == "group")
    window.act_expand.trigger()
    assert not [i for i in window.panel.view.items if i.kind == "group"]
