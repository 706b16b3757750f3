"""Large models reach onnxruntime as files it maps, not as serialized bytes: same outputs, nothing left behind."""

from __future__ import annotations

import os
import tempfile

import numpy as np
import onnx
import pytest

from graphlens.core.io import stage_for_session
from graphlens.core.model import Model, load_model
from graphlens.numerics import run
from graphlens.numerics.run import ModelRunner
from tests.core.test_external_data import conv_bn_conv, save_external, x_input


@pytest.fixture
def always_staged(monkeypatch):
    """Every model counts as large; returns the files staged so far."""
    monkeypatch.setattr(run, "STAGE_BYTES", 0)
    staged: list = []

    def recording(*args, **kwargs):
        result = stage_for_session(*args, **kwargs)
        staged.append(result)
        return result

    monkeypatch.setattr(run, "stage_for_session", recording)
    return staged


def _reference(proto: onnx.ModelProto) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    session = ort.InferenceSession(proto.SerializeToString(), run.session_options(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, x_input())))


def _session_files() -> set[str]:
    return {n for n in os.listdir(tempfile.gettempdir()) if n.startswith("graphlens-session-")}


def test_inline_weights_staged_with_exposed_tensors(always_staged):
    proto = conv_bn_conv()
    before = _session_files()
    result = ModelRunner(Model(proto), ["r"]).run(x_input())
    assert result.error is None and result.outputs is not None
    np.testing.assert_array_equal(result.outputs["y"], _reference(proto)["y"])
    assert result.outputs["r"].shape == (1, 16, 8, 8) and (result.outputs["r"] >= 0).all()
    assert len(always_staged) == 1 and always_staged[0] is not None
    assert _session_files() == before  # the temporary folder went with the session's creation


def test_external_weights_staged_beside_their_file_and_removed(always_staged, tmp_path):
    proto = conv_bn_conv()
    path = save_external(proto, tmp_path / "m")
    listing = sorted(os.listdir(path.parent))
    result = ModelRunner(load_model(path), ["r"]).run(x_input())
    assert result.error is None and result.outputs is not None
    np.testing.assert_allclose(result.outputs["y"], _reference(proto)["y"], rtol=0, atol=0)
    assert always_staged[0].file.parent == path.parent  # beside the weights, which onnxruntime maps from there
    assert sorted(os.listdir(path.parent)) == listing  # the hidden model file is gone


def test_edited_model_staged_with_its_new_inline_weights(always_staged, tmp_path):
    """A fold writes new weights inline beside external ones: both reach onnxruntime."""
    from graphlens.rewrites.driver import fold_model
    from graphlens.rewrites.edit import EditHistory

    proto = conv_bn_conv()
    model = load_model(save_external(proto, tmp_path / "m"))
    fold_model(model, None, EditHistory(model, keep_history=False))
    assert "BatchNormalization" not in model.op_counts()
    result = ModelRunner(model).run(x_input())
    assert result.error is None and result.outputs is not None
    np.testing.assert_allclose(result.outputs["y"], _reference(proto)["y"], rtol=1e-4, atol=1e-4)
    assert always_staged and always_staged[0] is not None


def test_unwritable_folder_falls_back_to_bytes(always_staged, tmp_path, monkeypatch):
    from graphlens.core import io

    proto = conv_bn_conv()
    model = load_model(save_external(proto, tmp_path / "m"))

    def read_only(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(io.tempfile, "mkstemp", read_only)
    assert stage_for_session(model.to_proto()) is None
    result = ModelRunner(model, ["r"]).run(x_input())
    assert result.error is None and result.outputs is not None
    np.testing.assert_array_equal(result.outputs["y"], _reference(proto)["y"])
