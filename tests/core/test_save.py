"""Saving: lossless round-trip, atomic, checked, and never over the source unless asked."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.errors import SaveError
from graphlens.core.model import Model, load_model
from tests import models


def _rich_model() -> onnx.ModelProto:
    """Metadata, doc strings, value_info, a local function and a subgraph: all must survive."""
    m = models.if_with_conv_bn()
    m.doc_string = "a model with everything"
    m.graph.doc_string = "graph doc"
    m.graph.node[0].doc_string = "the branch"
    helper.set_model_props(m, {"author": "tests", "license": "MIT"})
    m.graph.value_info.append(models.tensor("y", shape=[1, 4, 8, 8]))
    square = helper.make_function(
        "custom", "Square", ["a"], ["b"], [helper.make_node("Mul", ["a", "a"], ["b"])],
        [helper.make_opsetid("", models.OPSET)],
    )
    m.functions.append(square)
    m.opset_import.append(helper.make_opsetid("custom", 1))
    return m


def test_unedited_model_round_trips_exactly(write_model, tmp_path):
    original = _rich_model()
    model = load_model(write_model(original))
    out = model.save(tmp_path / "copy.onnx")
    assert out.read_bytes() == original.SerializeToString()
    assert onnx.load(out) == original


def test_external_data_round_trips_with_its_own_data_file(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    m = models.conv_bn(channels=32)
    expected = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    onnx.save(m, src / "m.onnx", save_as_external_data=True, location="m.bin", size_threshold=0)
    model = load_model(src / "m.onnx")
    out = model.save(tmp_path / "out.onnx")
    assert (tmp_path / "out.onnx.data").exists()
    reloaded = onnx.load(out)  # loads external data relative to out
    assert {t.name: onnx.numpy_helper.to_array(t) for t in reloaded.graph.initializer}.keys() == expected.keys()
    for t in reloaded.graph.initializer:
        np.testing.assert_array_equal(onnx.numpy_helper.to_array(t), expected[t.name])


def test_refuses_to_overwrite_the_source_unless_asked(write_model):
    path = write_model(models.conv_bn())
    before = path.read_bytes()
    model = load_model(path)
    with pytest.raises(SaveError, match="source file"):
        model.save(path)
    assert path.read_bytes() == before
    model.save(path, overwrite_source=True)
    assert path.read_bytes() == before


def test_invalid_model_is_refused_and_nothing_is_written(tmp_path):
    bad = models.conv_bn()
    bad.graph.node[0].op_type = "NoSuchOp"
    target = tmp_path / "out.onnx"
    target.write_bytes(b"previous contents")
    with pytest.raises(SaveError, match="fails the ONNX checker"):
        Model(bad).save(target)
    assert target.read_bytes() == b"previous contents"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]  # no temporary files left


def test_missing_folder_is_a_clear_error(write_model, tmp_path):
    model = load_model(write_model(models.conv_bn()))
    with pytest.raises(SaveError, match="does not exist"):
        model.save(tmp_path / "nope" / "x.onnx")


def test_float16_model_loads_and_saves(write_model, tmp_path):
    from onnx import TensorProto

    m = models.conv_bn(dtype=TensorProto.FLOAT16)
    model = load_model(write_model(m))
    assert model.graph.constant_value("w").dtype == np.float16
    assert str(model.graph.tensor_type("c")) == "float16 [1, 4, 8, 8]"
    model.save(tmp_path / "half.onnx")
    assert onnx.load(tmp_path / "half.onnx") == m


def test_a_link_is_written_through_and_a_path_that_is_no_file_is_refused(write_model, tmp_path):
    """A Hugging Face cache names its models by links to blobs: the save used to replace the link with a file and
    leave the blob as it was. A FIFO (or /dev/null, as root) used to be replaced by the model's file."""
    import os

    model = load_model(write_model(models.conv_bn()))
    blob = tmp_path / "blob"
    blob.write_bytes(b"old")
    link = tmp_path / "linked.onnx"
    link.symlink_to(blob)
    assert model.save(link) == link
    assert link.is_symlink() and onnx.load(link) == onnx.load(blob) and blob.read_bytes() != b"old"
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(SaveError, match="pipe: is not a regular file"):
        model.save(fifo)
    assert fifo.is_fifo()
