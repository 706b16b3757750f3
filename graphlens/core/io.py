"""Writing models so that a failure leaves nothing half-written.

Everything is written into a private folder beside the target first; the ONNX checker reads
it there; only then are the files renamed into place (a rename on one file system is atomic).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import onnx
from onnx import external_data_helper

from graphlens.core.errors import SaveError

_PROTOBUF_LIMIT = 2**31 - 1
_EXTERNAL_THRESHOLD = 1024
"""Tensors at least this many bytes go to the external data file; small ones stay inline."""


def write_model_atomically(proto: onnx.ModelProto, target: Path, *, external_data: bool = False) -> None:
    """Check ``proto`` and write it to ``target``; with ``external_data``, weights go to ``<target>.data``.

    Models over protobuf's 2 GiB limit are always written with external data.
    """
    if not external_data and proto.ByteSize() > _PROTOBUF_LIMIT:
        external_data = True
    data_name = target.name + ".data"
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as folder:
            staged = Path(folder) / target.name
            if external_data:
                proto = _externalize(proto, Path(folder) / data_name, data_name)
            staged.write_bytes(proto.SerializeToString())
            try:
                onnx.checker.check_model(str(staged))
            except onnx.checker.ValidationError as exc:
                raise SaveError(
                    f"{target}: not written, the model fails the ONNX checker: {_first_line(exc)}"
                ) from exc
            if external_data:
                os.replace(Path(folder) / data_name, target.with_name(data_name))
            os.replace(staged, target)
    except OSError as exc:
        raise SaveError(f"{target}: could not be written ({exc.strerror or exc})") from exc


def _externalize(proto: onnx.ModelProto, data_file: Path, location: str) -> onnx.ModelProto:
    """A copy of ``proto`` whose large tensors point into ``data_file`` (written here) as ``location``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    offset = 0
    with open(data_file, "wb") as f:
        for tensor in external_data_helper._get_all_tensors(copy):
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < _EXTERNAL_THRESHOLD:
                continue
            data = tensor.raw_data
            f.write(data)
            del tensor.external_data[:]
            for key, value in (("location", location), ("offset", str(offset)), ("length", str(len(data)))):
                entry = tensor.external_data.add()
                entry.key, entry.value = key, value
            tensor.data_location = onnx.TensorProto.EXTERNAL
            tensor.ClearField("raw_data")
            offset += len(data)
    return copy


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
