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

_EXTERNAL_THRESHOLD = 1024
"""Tensors at least this many bytes go to the external data file; small ones stay inline."""


def write_model_atomically(
    proto: onnx.ModelProto, target: Path, *, external_data: bool = False, payload: bytes | None = None
) -> None:
    """Check ``proto`` and write it to ``target``; with ``external_data``, weights go to ``<target>.data``.

    ``payload`` is ``proto`` already serialized, if the caller has it. Models over protobuf's 2 GiB
    limit are always written with external data.
    """
    data_name = target.name + ".data"
    if payload is not None and len(payload) >= 2**31:
        external_data, payload = True, None
    if not external_data and payload is None:
        try:
            payload = proto.SerializeToString()  # asking ByteSize() first would cost as much again
        except ValueError:  # over protobuf's 2 GiB limit
            external_data = True
    try:
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.") as folder:
            staged = Path(folder) / target.name
            if external_data:
                payload = _externalize(proto, Path(folder) / data_name, data_name).SerializeToString()
            assert payload is not None
            staged.write_bytes(payload)
            try:
                # From the bytes in hand when the weights are inline; from the file when they are not.
                onnx.checker.check_model(str(staged) if external_data else payload)
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


# ------------------------------------------------------------------- serializing by parts
def field_prefix(number: int, length: int) -> bytes:
    """The tag and length that precede a length-delimited protobuf field of ``length`` bytes."""
    return _varint((number << 3) | 2) + _varint(length)


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def shell_without(message, skip: set[str]):
    """A copy of ``message`` without the fields named in ``skip`` (which may be huge)."""
    shell = type(message)()
    for field, value in message.ListFields():
        if field.name in skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if repeated:
            getattr(shell, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(shell, field.name).CopyFrom(value)
        else:
            setattr(shell, field.name, value)
    return shell


MODEL_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
GRAPH_NODE = onnx.GraphProto.DESCRIPTOR.fields_by_name["node"].number
GRAPH_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number
