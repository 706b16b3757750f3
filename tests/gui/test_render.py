"""``graphlens render``: colouring by a number per node with its scale as the legend, and cropping to a selection."""

from __future__ import annotations

import numpy as np
import onnx
from PySide6.QtGui import QImage

from benchmarks.synthetic import make_conv_bn_model
from graphlens.cli import main
from graphlens.core.bundled import demo_model_path
from graphlens.core.model import load_model
from graphlens.gui.render import render_graph, scene_for
from graphlens.overlays import metric_overlay


def _colours(path) -> set[int]:
    image = QImage(str(path))
    return {image.pixel(x, y) & 0xFFFFFF for y in range(0, image.height(), 2) for x in range(0, image.width(), 2)}


def test_render_colours_nodes_by_an_overlay_and_draws_its_scale(tmp_path, qapp):
    model = load_model(demo_model_path())
    overlay = metric_overlay(model, "flops")
    plain, coloured = tmp_path / "plain.png", tmp_path / "flops.png"
    render_graph(model.graph, plain)
    render_graph(model.graph, coloured, overlay=overlay)
    heaviest = max(overlay.values.values())
    r, g, b = (int(c) for c in overlay.colours(np.array([heaviest]))[0])
    darkest = (r << 16) | (g << 8) | b
    assert darkest in _colours(coloured) and darkest not in _colours(plain)  # the costliest node's box
    assert QImage(str(coloured)).width() > QImage(str(plain)).width()  # the scale needs a wider column than the key


def test_crop_draws_the_selected_node_open_with_its_surroundings_only(tmp_path, qapp):
    path = tmp_path / "long.onnx"
    onnx.save(make_conv_bn_model(2400, channels=1), path)  # grouped by default: 600 blocks in name scopes
    model = load_model(path)
    name = model.graph.nodes[1201].name
    scene = scene_for(model.graph, select=[name])
    (item,) = scene.marks.selected
    assert scene.renderer.view.items[item].kind == "node" and scene.renderer.view.items[item].node == name
    whole, cropped = tmp_path / "whole.png", tmp_path / "crop.png"
    render_graph(model.graph, whole, select=[name])
    render_graph(model.graph, cropped, select=[name], crop=True)
    assert QImage(str(cropped)).height() < 1200 < QImage(str(whole)).height()


def test_render_options_refuse_bad_input_in_one_line(tmp_path, capsys):
    out = tmp_path / "x.png"
    assert main(["render", "-o", str(out), "--crop"]) == 2
    assert main(["render", "-o", str(out), "--overlay", str(tmp_path / "none.csv")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and "--crop needs --select" in err[0] and "none.csv" in err[1]
    assert not out.exists()
    assert main(["render", "-o", str(out), "--overlay", "params", "--select", "/stem/conv", "--crop"]) == 0
    assert out.exists()
