"""Models whose weights live in external data files: read lazily, saved with their data beside them,
and every external-data path that points somewhere it should not refused in one line."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens import cli
from graphlens.core import tensors
from graphlens.core.errors import ModelLoadError, SaveError
from graphlens.core.model import load_model
from graphlens.numerics.run import run_model
from graphlens.rewrites.driver import fold_model
from graphlens.rewrites.edit import EditHistory
from tests import models


def conv_bn_conv(channels: int = 16) -> onnx.ModelProto:
    """x -> Conv 'conv' -> BN 'bn' -> Relu -> Conv 'conv2' -> y: the first pair folds, 'w2' stays as it is."""
    params = models.bn_params(channels)
    w = models.rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np.float32)
    w2 = models.rng.normal(0, 0.5, (channels, channels, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", *params], ["b"], name="bn", epsilon=1e-5),
        helper.make_node("Relu", ["b"], ["r"], name="relu"),
        helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2", pads=[1, 1, 1, 1]),
    ]
    inits = [models.init("w", w), models.init("w2", w2)] + [models.init(k, v) for k, v in params.items()]
    return models.make_model(
        nodes, [models.tensor("x", shape=[1, 3, 8, 8])], [models.tensor("y", shape=[1, channels, 8, 8])], inits
    )


def save_external(proto: onnx.ModelProto, folder: Path, name: str = "m.onnx", location: str = "m.bin") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    proto = onnx.ModelProto.FromString(proto.SerializeToString())  # onnx.save moves the data out of its argument
    onnx.save(proto, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
              size_threshold=0)
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def x_input() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).normal(size=(1, 3, 8, 8)).astype(np.float32)}


def test_loading_reads_no_weight(tmp_path, monkeypatch):
    proto = conv_bn_conv()
    path = save_external(proto, tmp_path)

    def refuse(*args, **kwargs):
        raise AssertionError("an external data file was opened")

    monkeypatch.setattr(tensors, "open_data_file", refuse)
    model = load_model(path)
    summary = model.summary()
    assert summary["external_data"] is True
    assert summary["initializers"]["bytes"] == sum(onnx.numpy_helper.to_array(t).nbytes
                                                   for t in proto.graph.initializer)
    assert str(model.graph.tensor_type("w2")) == "float32 [16, 16, 3, 3]"
    assert not any(t.HasField("raw_data") for t in model.proto.graph.initializer)


def test_values_are_read_on_demand_and_equal_the_original(tmp_path):
    proto = conv_bn_conv()
    extra = {
        "half": np.arange(600, dtype=np.float16).reshape(20, 30),
        "ids": np.arange(300, dtype=np.int64),
        "mask": np.arange(2000) % 3 == 0,
    }
    proto.graph.initializer.extend(models.init(k, v) for k, v in extra.items())
    model = load_model(save_external(proto, tmp_path))
    expected = {t.name: onnx.numpy_helper.to_array(t) for t in proto.graph.initializer}
    before = tensors.bytes_read()
    w2 = model.graph.constant_value("w2")
    assert tensors.bytes_read() - before == w2.nbytes  # only the tensor asked for
    for name, value in expected.items():
        got = model.graph.constant_value(name)
        assert got.dtype == value.dtype and got.shape == value.shape
        np.testing.assert_array_equal(got, value)


def test_fold_saves_weights_beside_the_model_and_keeps_the_source(tmp_path):
    proto = conv_bn_conv()
    src = save_external(proto, tmp_path / "src")
    before = {p.name: digest(p) for p in src.parent.iterdir()}
    model = load_model(src)
    expected = run_model(model, x_input()).outputs["y"]

    start = tensors.bytes_read()
    fold_model(model, None, EditHistory(model, keep_history=False))
    read = tensors.bytes_read() - start
    assert "BatchNormalization" not in model.op_counts()
    assert read < tensors.tensor_value(model.graph.initializers["w2"]).nbytes  # w2 is never read by the fold
    (tmp_path / "out").mkdir()
    out = model.save(tmp_path / "out" / "folded.onnx")

    assert {p.name for p in out.parent.iterdir()} == {"folded.onnx", "folded.onnx.data"}
    assert out.stat().st_size < 4096  # the weights are in the data file, not the protobuf
    assert {p.name: digest(p) for p in src.parent.iterdir()} == before
    saved = onnx.load(out, load_external_data=False)
    w2 = next(t for t in saved.graph.initializer if t.name == "w2")
    ref = tensors.external_ref(w2)
    with open(out.parent / "folded.onnx.data", "rb") as f:
        f.seek(ref.offset)
        assert f.read(ref.length) == onnx.numpy_helper.to_array(proto.graph.initializer[1]).tobytes()

    reloaded = load_model(out)
    np.testing.assert_allclose(run_model(reloaded, x_input()).outputs["y"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run_model(model, x_input()).outputs["y"], expected, rtol=1e-4, atol=1e-4)


def test_saving_in_place_keeps_the_open_model_and_its_undo_readable(tmp_path):
    proto = conv_bn_conv()
    src = save_external(proto, tmp_path, location="m.onnx.data")  # the name a save writes to
    model = load_model(src)
    expected = run_model(model, x_input()).outputs["y"]
    w = model.graph.constant_value("w").copy()
    session = EditHistory(model)
    fold_model(model, None, session)
    model.save(src, overwrite_source=True)
    assert {p.name for p in tmp_path.iterdir()} == {"m.onnx", "m.onnx.data"}
    np.testing.assert_allclose(run_model(load_model(src), x_input()).outputs["y"], expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(run_model(model, x_input()).outputs["y"], expected, rtol=1e-4, atol=1e-4)
    while session.undo() is not None:
        pass
    np.testing.assert_array_equal(model.graph.constant_value("w"), w)  # the old bytes, from the replaced file
    np.testing.assert_allclose(run_model(model, x_input()).outputs["y"], expected, rtol=1e-5, atol=1e-5)


def test_a_save_that_would_replace_the_models_own_data_file_is_refused(tmp_path):
    src = save_external(conv_bn_conv(), tmp_path, location="other.onnx.data")
    before = {p.name: digest(p) for p in tmp_path.iterdir()}
    model = load_model(src)
    with pytest.raises(SaveError, match="other.onnx.data.*holds the weights of the open model"):
        model.save(tmp_path / "other.onnx")
    assert {p.name: digest(p) for p in tmp_path.iterdir()} == before


def make_hostile(folder: Path, kind: str) -> tuple[Path, str]:
    """A model whose external data is ``kind`` of wrong; returns it and a regex its error matches."""
    path = save_external(models.conv_bn(channels=16), folder / "model", location="w.bin")
    proto = onnx.load(path, load_external_data=False)
    target = proto.graph.initializer[0]
    entries = {e.key: e for e in target.external_data}
    outside = folder / "secret.bin"
    outside.write_bytes(b"\0" * 100_000)
    if kind == "parent":
        entries["location"].value = "../../../etc/passwd"
        expected = "outside the model's folder"
    elif kind == "absolute":
        entries["location"].value = str(outside)
        expected = "is an absolute path"
    elif kind == "symlink":
        os.symlink(outside, path.parent / "link.bin")
        entries["location"].value = "link.bin"
        expected = "symbolic link leading outside the model's folder"
    elif kind == "missing":
        entries["location"].value = "gone.bin"
        expected = "external data file 'gone.bin' of tensor 'w' is missing"
    elif kind == "past-end":
        entries["offset"].value = str((path.parent / "w.bin").stat().st_size - 8)
        expected = "lies past the end of 'w.bin'"
    else:
        entries["length"].value = "12"
        expected = "is 12 bytes long, but its shape needs"
    path.write_bytes(proto.SerializeToString())
    return path, expected


HOSTILE = ["parent", "absolute", "symlink", "missing", "past-end", "length"]


@pytest.mark.parametrize("kind", HOSTILE)
def test_hostile_external_data_is_refused_at_load(tmp_path, kind):
    path, expected = make_hostile(tmp_path, kind)
    with pytest.raises(ModelLoadError, match=expected) as caught:
        load_model(path)
    assert str(caught.value).startswith(f"{path}: ") and "\n" not in str(caught.value)


@pytest.mark.parametrize("kind", HOSTILE)
@pytest.mark.parametrize("command", ["info", "fold"])
def test_hostile_external_data_exits_2_with_one_line(tmp_path, capsys, kind, command):
    path, expected = make_hostile(tmp_path, kind)
    args = [command, str(path)] + (["-o", str(tmp_path / "out.onnx")] if command == "fold" else [])
    assert cli.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(path) in err
    assert "internal error" not in err and "Traceback" not in err
    assert not (tmp_path / "out.onnx").exists()


def test_fold_check_and_diff_run_external_data_models_with_onnxruntime(tmp_path, capsys):
    src = save_external(conv_bn_conv(), tmp_path / "src")
    out = tmp_path / "folded.onnx"
    assert cli.main(["fold", str(src), "-o", str(out), "--check"]) == 0, capsys.readouterr().err
    assert (tmp_path / "folded.onnx.data").exists()
    assert cli.main(["diff", str(src), str(out)]) == 0, capsys.readouterr().err


def test_a_model_naming_no_data_file_is_loaded_without_walking_its_tensors(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(conv_bn_conv(channels=2), path)  # small weights: searching the bytes is the cheaper check

    def walked(*_args):
        raise AssertionError("every tensor was walked though the file names no data file")

    monkeypatch.setattr("graphlens.core.model.locate_external_data", walked)
    model = load_model(path)
    assert not model.external_data and len(model.graph.nodes) == 4


def test_an_external_tensor_naming_no_file_is_refused_when_its_value_is_needed(tmp_path, capsys):
    """With no ``location`` anywhere the load skips the data-file check; reading the weight still says why."""
    path = save_external(models.conv_bn(channels=16), tmp_path / "model", location="w.bin")
    proto = onnx.load(path, load_external_data=False)
    for tensor in proto.graph.initializer:
        kept = [(e.key, e.value) for e in tensor.external_data if e.key != "location"]
        del tensor.external_data[:]
        for key, value in kept:
            entry = tensor.external_data.add()
            entry.key, entry.value = key, value
    path.write_bytes(proto.SerializeToString())
    assert cli.main(["match", str(path), "-p", "conv-bn"]) == 0  # matching reads no weight
    capsys.readouterr()
    assert cli.main(["fold", str(path), "-o", str(tmp_path / "out.onnx")]) == 2
    err = capsys.readouterr().err.strip()
    named = ("is stored in an external data file but names none", "( tensor name: w) is stored externally but doesn't "
             "have a location")  # said by the read of its value, or by the input's full check before any work
    assert len(err.splitlines()) == 1 and any(reason in err for reason in named), err
    assert not (tmp_path / "out.onnx").exists()


def test_saving_and_running_a_model_naming_no_data_file_walks_no_tensor(tmp_path, monkeypatch):
    """The bytes in hand already say there is no data file: neither a save nor a session looks for one."""
    path = tmp_path / "m.onnx"
    onnx.save(conv_bn_conv(channels=2), path)
    model = load_model(path)

    def walked(*_args):
        raise AssertionError("every tensor was walked though the bytes name no data file")

    monkeypatch.setattr("graphlens.core.io.external_files", walked)
    monkeypatch.setattr("graphlens.core.tensors.external_files", walked)
    fold_model(model, None, EditHistory(model))
    model.save(tmp_path / "folded.onnx")
    assert run_model(model, x_input()).outputs is not None
    assert load_model(tmp_path / "folded.onnx").op_counts().get("BatchNormalization") is None


def test_the_bytes_are_searched_only_when_that_is_cheaper_than_walking_the_tensors():
    small, large = conv_bn_conv(channels=2), conv_bn_conv(channels=64)
    assert not tensors.may_name_data_files(small.SerializeToString(), small)
    assert tensors.may_name_data_files(large.SerializeToString(), large)  # large weights: the walk decides
    named = onnx.ModelProto.FromString(small.SerializeToString())
    named.graph.node[0].name = "location"  # a name may hold the key's bytes: then the walk decides too
    assert tensors.may_name_data_files(named.SerializeToString(), named)
