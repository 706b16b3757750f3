"""The window opens models and keeps the current one when a file is bad."""

from __future__ import annotations

import pytest

from graphlens.core.model import load_model
from graphlens.gui import MainWindow
from tests.bad_files import KINDS, make_bad_file


@pytest.fixture
def window(qtbot):
    w = MainWindow()
    qtbot.addWidget(w)
    w.show()
    return w


def test_opens_the_demo_and_shows_name_and_node_count(window, demo_path):
    assert window.open_model(demo_path)
    model = load_model(demo_path)
    assert window.windowTitle().startswith("demo.onnx")
    text = window.centralWidget().text()
    assert f"{model.node_count()} nodes" in text


@pytest.mark.parametrize("kind", KINDS)
def test_bad_file_shows_a_dialog_and_keeps_the_model(window, demo_path, tmp_path, qtbot, kind):
    window.open_model(demo_path)
    before = window.model
    path, _ = make_bad_file(tmp_path, kind)
    assert not window.open_model(path)
    assert window.model is before
    assert window.windowTitle().startswith("demo.onnx")
    box = window.error_box
    assert box.isVisible() and str(path) in box.text()
    box.close()
