"""``graphlens render --collapse PATTERN``: every match drawn as one box named after the pattern."""

from __future__ import annotations

import onnx
from PySide6.QtGui import QImage

from graphlens.cli import main
from graphlens.core.model import load_model
from graphlens.gui.render import scene_for
from graphlens.layout.collapse_matches import match_keys
from tests.layout.test_collapse_matches import two_conv_bn_blocks


def _model(tmp_path):
    path = tmp_path / "two_conv_bn.onnx"
    onnx.save(two_conv_bn_blocks(), path)
    return path


def test_scene_draws_each_match_as_one_box(tmp_path, qapp):
    graph = load_model(_model(tmp_path)).graph
    keys = match_keys("conv-bn", [["conv1", "bn1"], ["conv2", "bn2"]])
    view = scene_for(graph, collapsed_matches=keys).renderer.view
    boxes = [i for i in view.items if i.key.startswith("match:")]
    assert [(b.title, b.members) for b in boxes] == [("conv-bn", ["conv1", "bn1"]), ("conv-bn", ["conv2", "bn2"])]


def test_render_collapse_draws_fewer_boxes_and_says_how_many_matches(tmp_path, qapp, capsys):
    model = _model(tmp_path)
    plain, collapsed = tmp_path / "plain.png", tmp_path / "collapsed.png"
    assert main(["render", str(model), "-o", str(plain)]) == 0
    assert main(["render", str(model), "-o", str(collapsed), "--collapse", "conv-bn"]) == 0
    assert "2 matches of conv-bn" in capsys.readouterr().err
    assert QImage(str(collapsed)).height() < QImage(str(plain)).height()  # two layers of boxes fewer


def test_render_collapse_takes_pattern_text_and_refuses_a_bad_pattern(tmp_path, qapp, capsys):
    model = _model(tmp_path)
    text = "pattern conv-relu\nconv = Conv(x, w: const)\nrelu = Relu(conv)"
    assert main(["render", str(model), "-o", str(tmp_path / "t.png"), "--collapse", text]) == 0
    assert "0 matches of conv-relu" in capsys.readouterr().err  # a BatchNormalization sits between them
    assert main(["render", str(model), "-o", str(tmp_path / "bad.png"), "--collapse", "no-such-pattern"]) != 0
    assert not (tmp_path / "bad.png").exists()
