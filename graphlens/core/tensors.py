"""Tensor values, read only when something needs them.

Large exports keep their weights in external data files. Loading checks those files cheaply
(each exists inside the model's folder and is long enough) and rewrites every ``location`` to
the file's absolute path, so that any copy of the protobuf still knows where its data is; no
weight is read. :func:`tensor_value` maps a tensor's bytes from its file (read-only) when
someone asks for its value. Saving always rewrites the locations (see :mod:`graphlens.core.io`),
so absolute paths never reach a file.
"""

from __future__ import annotations

import math
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.errors import GraphLensError, MalformedValueError, ModelLoadError
from graphlens.core.names import quoted
from graphlens.core.types import dims_nbytes

EXTERNAL = onnx.TensorProto.EXTERNAL

# Element types whose bytes numpy can view as they are (little-endian, one element per item).
_MAPPABLE: dict[int, type[np.generic]] = {
    onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.DOUBLE: np.float64, onnx.TensorProto.FLOAT16: np.float16,
    onnx.TensorProto.INT8: np.int8, onnx.TensorProto.UINT8: np.uint8, onnx.TensorProto.INT16: np.int16,
    onnx.TensorProto.UINT16: np.uint16, onnx.TensorProto.INT32: np.int32, onnx.TensorProto.UINT32: np.uint32,
    onnx.TensorProto.INT64: np.int64, onnx.TensorProto.UINT64: np.uint64,
    onnx.TensorProto.COMPLEX64: np.complex64, onnx.TensorProto.COMPLEX128: np.complex128,
}

_bytes_read = 0
_pinned: dict[str, BinaryIO] = {}
"""Data files replaced by an in-place save, kept open so that tensors still pointing at them read the old bytes."""
_aliases: dict[str, str] = {}
"""Locations standing for a path whose usual spelling belongs to a pinned, older version of the file."""


@dataclass(frozen=True)
class ExternalRef:
    """Where an external tensor's bytes are: a file, an offset and a length (None: up to the dims)."""

    location: str
    offset: int
    length: int | None
    needed: int | None = None
    """The bytes the tensor's dims and type call for (None: not a fixed-size type)."""

    @property
    def nbytes(self) -> int | None:
        """The bytes to read: the stated length, else what the dims call for."""
        return self.length if self.length is not None else self.needed


def is_external(tensor: onnx.TensorProto) -> bool:
    return tensor.data_location == EXTERNAL


def external_ref(tensor: onnx.TensorProto) -> ExternalRef:
    """The tensor's external_data entries; ValueError if offset or length is not a number."""
    entries = {e.key: e.value for e in tensor.external_data}
    offset = int(entries.get("offset") or 0)
    length = int(entries["length"]) if entries.get("length") else None
    if offset < 0 or (length is not None and length < 0):
        raise ValueError("negative offset or length")
    return ExternalRef(entries.get("location", ""), offset, length, dims_nbytes(tensor.dims, tensor.data_type))


def set_external_ref(tensor: onnx.TensorProto, location: str, offset: int, length: int) -> None:
    """Point ``tensor`` at ``length`` bytes of ``location`` from ``offset``; drop any inline data."""
    del tensor.external_data[:]
    for key, value in (("location", location), ("offset", str(offset)), ("length", str(length))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    tensor.data_location = EXTERNAL
    tensor.ClearField("raw_data")


def all_tensors(proto: onnx.ModelProto) -> Iterator[onnx.TensorProto]:
    """Every initializer and tensor attribute of the model, subgraphs included.

    The same tensors as onnx's ``external_data_helper._get_all_tensors``, found by reading each
    attribute's type instead of asking every attribute for every field: three times faster on a
    100,000-node model, where this walk ran longer than parsing the file.
    """
    return _graph_tensors(proto.graph)


_TENSOR, _TENSORS = onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS
_GRAPH, _GRAPHS = onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS


def _graph_tensors(graph: onnx.GraphProto) -> Iterator[onnx.TensorProto]:
    yield from graph.initializer
    for node in graph.node:
        for attr in node.attribute:
            kind = attr.type
            if kind == _TENSOR:
                yield attr.t
            elif kind == _TENSORS:
                yield from attr.tensors
            elif kind == _GRAPH:
                yield from _graph_tensors(attr.g)
            elif kind == _GRAPHS:
                for sub in attr.graphs:
                    yield from _graph_tensors(sub)


def bytes_read() -> int:
    """External-data bytes handed out by :func:`tensor_value` so far in this process."""
    return _bytes_read


# ------------------------------------------------------------------------------ loading
SCAN_BYTES_PER_ELEMENT = 700
"""Searching a model's bytes (about 1.7 GB/s) beats walking its tensors (about 0.4 µs per node or
initializer) while the file holds less than this per node and initializer; measured here."""


def may_name_data_files(serialized: bytes, proto: onnx.ModelProto) -> bool:
    """False when ``serialized`` (``proto``'s bytes) cannot reference any external data file.

    Every external tensor names its file in an entry keyed ``location``, and protobuf stores that
    key as plain bytes, so a file without them holds none. The search is made only when it is
    cheaper than the walk over every tensor it spares, as for a 100,000-node model of small weights;
    for a file of large weights the answer is True and the walk decides.
    """
    elements = len(proto.graph.node) + len(proto.graph.initializer) + 1
    if len(serialized) > SCAN_BYTES_PER_ELEMENT * elements:
        return True
    return b"location" in serialized


def locate_external_data(proto: onnx.ModelProto, file: Path) -> int:
    """Check every external tensor of ``proto`` (loaded from ``file``) and make its location absolute.

    Nothing is read: each data file is resolved once and stat'ed once. Refused, as a
    :class:`ModelLoadError` naming ``file``: absolute locations, locations leaving the model's
    folder (``..`` or a symbolic link), missing files, and ranges past a file's end.
    Returns how many tensors are external.
    """
    base = file.resolve().parent
    resolved: dict[str, tuple[Path, int]] = {}
    count = 0
    for tensor in all_tensors(proto):
        if tensor.data_location != EXTERNAL:
            continue
        count += 1
        name = tensor.name or "(unnamed)"
        try:
            ref = external_ref(tensor)
        except ValueError:
            raise ModelLoadError(
                f"{file}: external data of tensor '{name}' has an offset or length that is not a size") from None
        if ref.location not in resolved:
            resolved[ref.location] = _resolve(ref.location, base, file, name)
        path, size = resolved[ref.location]
        needed, length = ref.needed, ref.nbytes
        if ref.length is not None and needed is not None and ref.length != needed:
            raise ModelLoadError(
                f"{file}: external data of tensor '{name}' is {ref.length} bytes long, "
                f"but its shape needs {needed} bytes"
            )
        if length is not None and ref.offset + length > size:
            raise ModelLoadError(
                f"{file}: external data of tensor '{name}' lies past the end of '{ref.location}' "
                f"(bytes {ref.offset} to {ref.offset + length}, the file has {size}); the file may be truncated"
            )
        for entry in tensor.external_data:
            if entry.key == "location":
                entry.value = _fresh_location(path)
    return count


def _fresh_location(path: Path) -> str:
    """How this load names ``path``: its spelling, unless tensors of an earlier load own that spelling."""
    key = str(path)
    n = 0
    while key in _pinned:
        n += 1
        key = f"{path}~{n}"
    if key != str(path):
        _aliases[key] = str(path)
    return key


def data_path(location: str) -> str:
    """The file a location (as held in memory) reads from."""
    return _aliases.get(location, location)


def readable_path(location: str) -> str:
    """A path another reader (onnxruntime) can open for what ``location`` reads now, even once its
    file was replaced on disk (then the file kept open, see :func:`pin_data_file`)."""
    pinned = _pinned.get(location)
    return f"/proc/self/fd/{pinned.fileno()}" if pinned is not None and os.path.isdir("/proc/self/fd") \
        else data_path(location)


def _resolve(location: str, base: Path, file: Path, name: str) -> tuple[Path, int]:
    """The data file's absolute path and size, refusing anything outside ``base``."""
    what = f"external data file '{location}' of tensor '{name}'"
    if not location:
        raise ModelLoadError(f"{file}: tensor '{name}' is stored in an external data file but names none")
    if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
        raise ModelLoadError(f"{file}: {what} is an absolute path; only files in the model's folder are read")
    if ".." in Path(location.replace("\\", "/")).parts:
        raise ModelLoadError(f"{file}: {what} is outside the model's folder; only files in its folder are read")
    path = (base / location).resolve()
    if not path.is_relative_to(base):
        raise ModelLoadError(
            f"{file}: {what} is a symbolic link leading outside the model's folder; only files in its folder are read"
        )
    if not path.exists():
        raise ModelLoadError(f"{file}: {what} is missing")
    if not path.is_file():
        raise ModelLoadError(f"{file}: {what} is not a regular file")
    try:
        size = path.stat().st_size
    except OSError as exc:
        raise ModelLoadError(f"{file}: {what} cannot be read ({exc.strerror or exc})") from exc
    return path, size


# ------------------------------------------------------------------------------ reading
def open_data_file(location: str, tensor: str = "") -> BinaryIO:
    """An open handle on a data file: the pinned old one if an in-place save replaced it."""
    if not location:  # only when loading skipped the check (see may_name_data_files)
        raise GraphLensError(f"tensor '{tensor or '(unnamed)'}' is stored in an external data file but names none")
    pinned = _pinned.get(location)
    if pinned is not None:
        return os.fdopen(os.dup(pinned.fileno()), "rb")
    path = data_path(location)
    if not os.path.isabs(path):
        raise GraphLensError(f"external data file '{location}' cannot be found: the model was not loaded from a file")
    try:
        return open(path, "rb")
    except OSError as exc:
        raise GraphLensError(f"{location}: external data cannot be read ({exc.strerror or exc})") from exc


def pin_data_file(location: str) -> None:
    """Keep what ``location`` reads now readable through it after the file is replaced on disk."""
    if location not in _pinned:
        # Kept open for the life of the process on purpose: this handle is what keeps the old bytes readable.
        _pinned[location] = open(data_path(location), "rb")  # noqa: SIM115


def tensor_value(tensor: onnx.TensorProto) -> np.ndarray:
    """The tensor's value; external data is mapped read-only, never copied into the protobuf. A tensor of an
    element type ONNX does not define, or whose data does not fit its dims, is a :class:`GraphLensError`
    naming it."""
    global _bytes_read
    if tensor.data_location != EXTERNAL:
        try:
            return numpy_helper.to_array(tensor)
        except (KeyError, ValueError, TypeError) as exc:
            raise MalformedValueError(_unreadable(tensor, exc)) from exc
    ref = external_ref(tensor)
    dims = tuple(int(d) for d in tensor.dims)
    length = ref.nbytes
    _bytes_read += length or 0
    dtype = _MAPPABLE.get(tensor.data_type)
    with open_data_file(ref.location, tensor.name) as f:
        if dtype is not None and length:
            start = ref.offset - ref.offset % mmap.ALLOCATIONGRANULARITY
            region = mmap.mmap(f.fileno(), ref.offset - start + length, access=mmap.ACCESS_READ, offset=start)
            count = length // np.dtype(dtype).itemsize
            array = np.frombuffer(region, dtype=np.dtype(dtype).newbyteorder("<"), count=count,
                                  offset=ref.offset - start)
            return array.reshape(dims)
        f.seek(ref.offset)
        data = f.read(length) if length is not None else f.read()
    inline = onnx.TensorProto()
    inline.CopyFrom(tensor)
    del inline.external_data[:]
    inline.data_location = onnx.TensorProto.DEFAULT
    inline.raw_data = data
    return numpy_helper.to_array(inline)


def _unreadable(tensor: onnx.TensorProto, exc: Exception) -> str:
    """Why an inline tensor's value cannot be read, in words."""
    what = f"tensor {quoted(tensor.name or '(unnamed)')}"
    if tensor.data_type not in onnx.TensorProto.DataType.values() or tensor.data_type == onnx.TensorProto.UNDEFINED:
        return f"{what} has element type {tensor.data_type}, which ONNX does not define"
    dims = "[" + ", ".join(str(d) for d in tensor.dims) + "]"
    found = re.search(r"array of size (\d+)", str(exc))
    if found is not None:
        count = math.prod(int(d) for d in tensor.dims)
        return f"{what} holds {int(found.group(1)):,} values, where its dims {dims} call for {count:,}"
    return f"{what} holds data that does not fit its dims {dims} and element type ({exc})"


def external_files(proto: onnx.ModelProto) -> list[str]:
    """The data files the model's external tensors live in, in first-use order."""
    found: dict[str, None] = {}
    for tensor in all_tensors(proto):
        if tensor.data_location == EXTERNAL:
            location = external_ref(tensor).location
            if not location:
                open_data_file(location, tensor.name)  # refuses it, naming the tensor
            found.setdefault(location, None)
    return list(found)


def add_external_data_to_session(options: Any, proto: onnx.ModelProto, serialized: bytes | None = None) -> list[Any]:
    """Hand onnxruntime the model's data files as read-only maps (it cannot resolve absolute locations).

    ``serialized``: ``proto``'s bytes, if the caller has them; when they name no data file
    (:func:`may_name_data_files`) the tensors are not walked. Returns the maps, which must stay
    alive as long as the session.
    """
    names: list[str] = []
    buffers: list[np.ndarray] = []
    if not hasattr(options, "add_external_initializers_from_files_in_memory"):
        return buffers  # onnxruntime before 1.17: it reports the missing files itself
    if serialized is not None and not may_name_data_files(serialized, proto):
        return buffers
    for location in external_files(proto):
        with open_data_file(location) as f:
            if os.fstat(f.fileno()).st_size == 0:
                continue
            region = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        names.append(location)
        buffers.append(np.frombuffer(region, dtype=np.uint8))
    if names:
        options.add_external_initializers_from_files_in_memory(names, buffers, [b.size for b in buffers])
    return buffers


# ------------------------------------------------------------------------------ statistics
@dataclass(frozen=True)
class TensorStats:
    """Summary of a numeric tensor, computed a slice at a time so a mapped weight is never copied whole."""

    count: int
    finite: int
    minimum: float
    maximum: float
    mean: float
    std: float
    histogram: np.ndarray | None
    edges: np.ndarray | None


_CHUNK = 1 << 20


def _chunks(flat: np.ndarray) -> Iterable[np.ndarray]:
    for start in range(0, flat.size, _CHUNK):
        part = flat[start:start + _CHUNK].astype(np.float64)
        yield part[np.isfinite(part)]


def tensor_stats(value: np.ndarray, bins: int = 40) -> TensorStats | None:
    """Min, max, mean, std and a histogram over the finite values; None for non-numeric tensors."""
    if not np.issubdtype(value.dtype, np.number) or np.issubdtype(value.dtype, np.complexfloating) or value.size == 0:
        return None
    flat = value.reshape(-1)
    n, total, lo, hi = 0, 0.0, np.inf, -np.inf
    for part in _chunks(flat):
        if part.size:
            n, total = n + part.size, total + float(part.sum())
            lo, hi = min(lo, float(part.min())), max(hi, float(part.max()))
    if n == 0:
        return TensorStats(value.size, 0, float("nan"), float("nan"), float("nan"), float("nan"), None, None)
    mean = total / n
    squares = 0.0
    counts = np.zeros(bins, dtype=np.int64)
    edges = np.histogram_bin_edges(np.array([lo, hi]), bins=bins)
    for part in _chunks(flat):
        squares += float(np.square(part - mean).sum())
        counts += np.histogram(part, bins=edges)[0]
    return TensorStats(value.size, n, lo, hi, mean, (squares / n) ** 0.5, counts, edges)
