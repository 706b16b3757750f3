"""The window on models with external data: opening reads no weight, the inspector reads one when
its tensor is shown (and a large one only when asked), and a hostile data path is a dialog."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.core import tensors
from graphlens.gui import inspector as inspector_module
from tests.core.test_external_data import HOSTILE, conv_bn_conv, make_hostile, save_external


def test_opening_reads_no_weight_and_the_inspector_reads_one_when_shown(window, tmp_path):
    proto = conv_bn_conv()
    path = save_external(proto, tmp_path)
    before = tensors.bytes_read()
    assert window.open_model(path), window.last_error
    window.export_image(tmp_path / "view.png")
    assert tensors.bytes_read() == before

    window.inspector.link_activated.emit("tensor", "w2")
    text = window.inspector.text.toPlainText()
    assert "9.0 KB in m.bin" in text
    assert "min" in window.inspector.stats.text() and window.inspector.table.rowCount() == 64
    assert tensors.bytes_read() - before == 16 * 16 * 9 * 4
    expected = next(np.frombuffer(t.raw_data, np.float32) for t in proto.graph.initializer if t.name == "w2")
    np.testing.assert_array_equal(window.inspector.tensor_value.reshape(-1), expected)


def test_a_large_weight_waits_for_a_click(window, tmp_path, monkeypatch):
    monkeypatch.setattr(inspector_module, "READ_WITHOUT_ASKING", 1024)
    assert window.open_model(save_external(conv_bn_conv(), tmp_path))
    before = tensors.bytes_read()
    window.inspector.link_activated.emit("tensor", "w2")
    panel = window.inspector
    assert panel.read_button.isVisibleTo(panel) and "9.0 KB" in panel.read_button.text()
    assert tensors.bytes_read() == before and panel.tensor_value is None
    panel.read_button.click()
    assert panel.tensor_value is not None and "min" in panel.stats.text()
    assert not panel.read_button.isVisibleTo(panel)


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_external_data_shows_a_dialog_and_keeps_the_model(window, demo_path, tmp_path, kind):
    window.open_model(demo_path)
    before = window.model
    path, expected = make_hostile(tmp_path, kind)
    assert not window.open_model(path)
    assert window.model is before and window.windowTitle().startswith("demo.onnx")
    box = window.error_box
    assert box.isVisible() and str(path) in box.text() and "internal error" not in box.text()
    assert len(box.text().splitlines()) == 1
    box.close()
