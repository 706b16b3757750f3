"""Writing models so that a failure leaves nothing half-written.

Everything is written into a private folder beside the target first; the ONNX checker reads
it there; only then are the files renamed into place (a rename on one file system is atomic).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

import onnx
from google.protobuf.message import Message

from graphlens.core.errors import SaveError
from graphlens.core.full_check import full_check_problem, plain_check_problem
from graphlens.core.tensors import (
    all_tensors,
    data_path,
    external_files,
    external_ref,
    is_external,
    may_name_data_files,
    open_data_file,
    pin_data_file,
    readable_path,
    set_external_ref,
)
from graphlens.core.types import dims_nbytes, tensor_nbytes

_M = TypeVar("_M", bound=Message)

_EXTERNAL_THRESHOLD = 1024
"""Tensors at least this many bytes go to the external data file; small ones stay inline."""


@dataclass(frozen=True)
class GraphParts:
    """A main graph given as its other fields and its live node and initializer lists, for a save that
    builds the written copy tensor by tensor instead of first writing them into the graph's protobuf."""

    shell: onnx.GraphProto
    nodes: list[onnx.NodeProto]
    initializers: list[onnx.TensorProto]


def not_a_file(target: Path) -> str | None:
    """Why ``target`` (links followed) cannot be written as a model: it is something other than a regular file,
    which the atomic rename would replace (``/dev/null``); None when it is a file or nothing yet."""
    if target.exists() and not target.resolve().is_file() and not target.is_dir():
        return f"{target}: is not a regular file (a device, a pipe or a socket); not writing over it"
    return None


BeforeCommit = Callable[[Path], None]
"""Called with the staged model file, complete and checked, before it is renamed into place: raising stops the
save with nothing written (a numeric check on the file onnxruntime reads, a report written beside it)."""


def write_model_atomically(
    proto: onnx.ModelProto, target: Path, *, external_data: bool = False, payload: bytes | None = None,
    replaces_source: bool = False, parts: GraphParts | None = None, full_check: bool = True,
    before_commit: BeforeCommit | None = None,
) -> None:
    """Check ``proto`` and write it to ``target``; with ``external_data``, weights go to ``<target>.data``.

    ``payload`` is ``proto`` already serialized, if the caller has it; ``parts``, its main graph as it is
    now, when ``proto.graph`` is stale (only with ``external_data``). Models over protobuf's 2 GiB
    limit are always written with external data. Tensors already in external files are copied
    from them a slice at a time. A data file the model reads from is only replaced when
    ``replaces_source`` (an in-place save); it is then kept open so the model can still read it.
    The check is the checker's full one, with shape inference (:mod:`graphlens.core.full_check`); without
    ``full_check``, the structural one alone. ``before_commit`` sees the staged file (see :data:`BeforeCommit`).
    """
    data_name = target.name + ".data"
    if not external_data and payload is None:
        try:
            payload = proto.SerializeToString()  # asking ByteSize() first would cost as much again
        except ValueError:  # over protobuf's 2 GiB limit
            external_data = True
    # Bytes that name no data file hold no external tensor: no walk over the tensors to find them.
    sources = set(external_files(proto)) if payload is None or may_name_data_files(payload, proto) else set()
    source_paths = {data_path(location) for location in sources}
    if external_data or sources:
        _refuse_to_clobber(source_paths, target, data_name, replaces_source)
    if payload is not None and len(payload) >= 2**31:
        external_data, payload = True, None
    if sources:
        external_data, payload = True, None  # absolute in-memory locations must never reach a file
    try:
        staging = tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{target.name}.")
    except OSError as exc:
        raise SaveError(f"{target}: could not be written ({exc.strerror or exc})") from exc
    with staging as folder:
        staged = Path(folder) / target.name
        with _as_save_error(target):
            if external_data:
                payload = _externalize(proto, Path(folder) / data_name, data_name, parts).SerializeToString()
            assert payload is not None
            staged.write_bytes(payload)
        # From the bytes in hand when the weights are inline; from the file when they are not.
        _check_staged(str(staged) if external_data else payload, target, full_check)
        if before_commit is not None:
            before_commit(staged)
        with _as_save_error(target):
            if external_data:
                data_target = target.with_name(data_name)
                for location in sources:
                    if data_path(location) == str(data_target.resolve()):
                        pin_data_file(location)
                os.replace(Path(folder) / data_name, data_target)
            os.replace(staged, target)


@contextmanager
def _as_save_error(target: Path) -> Iterator[None]:
    try:
        yield
    except OSError as exc:
        raise SaveError(f"{target}: could not be written ({exc.strerror or exc})") from exc


def _check_staged(model: bytes | str, target: Path, full_check: bool) -> None:
    problem = full_check_problem(model) if full_check else plain_check_problem(model)
    if problem is not None:
        raise SaveError(f"{target}: not written, the model fails the ONNX checker: {problem}")


def _refuse_to_clobber(sources: set[str], target: Path, data_name: str, replaces_source: bool) -> None:
    """Refuse a save whose files would replace a data file this model, and its source on disk, still need."""
    if str(target.resolve()) in sources:
        raise SaveError(f"{target}: holds the weights of the open model; choose another name")
    data_target = target.with_name(data_name).resolve()
    if str(data_target) in sources and not replaces_source:
        raise SaveError(
            f"{target}: not written, its data file '{data_name}' holds the weights of the open model; "
            "choose another name"
        )


_ALIGN = 4096
"""Offsets of large tensors in a written data file are multiples of this, so they can be mapped in place."""

_COPY_CHUNK = 16 << 20


def _externalize(proto: onnx.ModelProto, data_file: Path, location: str,
                 parts: GraphParts | None = None) -> onnx.ModelProto:
    """A copy of ``proto`` whose large tensors point into ``data_file`` (written here) as ``location``.

    The copy is built tensor by tensor (copying the whole model first would hold every weight
    twice); tensors already external are copied from their file in slices (never whole in memory),
    the same source range written once even if several tensors share it.
    """
    written: dict[tuple[str, int, int], int] = {}
    with open(data_file, "wb") as out:

        def move(tensor: onnx.TensorProto) -> onnx.TensorProto:
            if is_external(tensor):
                ref = external_ref(tensor)
                length = ref.nbytes or 0
                key = (ref.location, ref.offset, length)
                if key not in written:
                    written[key] = _pad(out, length)
                    _copy_range(ref.location, ref.offset, length, out)
                shell = shell_without(tensor, {"external_data"})
                set_external_ref(shell, location, written[key], length)
                return shell
            return _write_inline(tensor, out, location)

        if parts is None:
            parts = GraphParts(proto.graph, list(proto.graph.node), list(proto.graph.initializer))
        graph = rebuilt_graph(parts.shell, parts.nodes, parts.initializers, move)
    return weightless_model(proto, graph)


def _write_inline(tensor: onnx.TensorProto, out: BinaryIO, location: str) -> onnx.TensorProto:
    """``tensor`` with its raw data, if large, appended to ``out`` and referred to as ``location``."""
    if not tensor.HasField("raw_data") or tensor_nbytes(tensor) < _EXTERNAL_THRESHOLD:
        return tensor
    data = tensor.raw_data
    if len(data) < _EXTERNAL_THRESHOLD:
        return tensor
    offset = _pad(out, len(data))
    out.write(data)
    shell = _without_data(tensor)
    set_external_ref(shell, location, offset, len(data))
    return shell


@dataclass
class StagedModel:
    """A model written for onnxruntime to read itself; :meth:`remove` deletes what was written."""

    file: Path
    written: list[Path]

    def remove(self) -> None:
        _remove_staged(self)


def stage_for_session(proto: onnx.ModelProto, parts: GraphParts | None = None) -> StagedModel | None:
    """Write ``proto`` where onnxruntime can read it from a file, or None where it cannot be.

    onnxruntime maps weights from a model file's folder, lazily, but takes a serialized model with
    a copy of every weight (a 1 GB model: 2 GB more at its peak). External tensors must stay in their
    folder (it refuses paths that leave the model's), so the model is written there under a hidden
    name, pointing at the files as they are; large inline tensors go to a data file beside it.
    Without external tensors the folder is a temporary one. None: data files in several folders, a
    data file replaced on disk since it was read, or a folder that cannot be written.
    """
    locations = {external_ref(t).location for t in all_tensors(proto) if is_external(t)}
    folders = {os.path.dirname(data_path(location)) for location in locations}
    if len(folders) > 1 or any(readable_path(location) != data_path(location) for location in locations):
        return None
    try:
        folder = Path(folders.pop()) if folders else Path(tempfile.mkdtemp(prefix="graphlens-session-"))
        fd, name = tempfile.mkstemp(dir=folder, prefix=".graphlens-session-", suffix=".onnx")
        os.close(fd)
    except OSError:
        return None
    staged = StagedModel(Path(name), [Path(name), Path(name + ".data")] + ([] if locations else [folder]))
    try:
        with open(staged.written[1], "wb") as out:

            def move(tensor: onnx.TensorProto) -> onnx.TensorProto:
                if not is_external(tensor):
                    return _write_inline(tensor, out, staged.written[1].name)
                ref = external_ref(tensor)
                shell = shell_without(tensor, {"external_data"})
                set_external_ref(shell, os.path.basename(data_path(ref.location)), ref.offset, ref.nbytes or 0)
                return shell

            if parts is None:
                parts = GraphParts(proto.graph, list(proto.graph.node), list(proto.graph.initializer))
            graph = rebuilt_graph(parts.shell, parts.nodes, parts.initializers, move)
        staged.file.write_bytes(weightless_model(proto, graph).SerializeToString())
    except OSError:
        _remove_staged(staged)
        return None
    return staged


def _remove_staged(staged: StagedModel) -> None:
    for path in staged.written:
        if path.is_dir():
            path.rmdir()
        else:
            path.unlink(missing_ok=True)


def _pad(out: BinaryIO, length: int) -> int:
    """Move ``out`` to where a tensor of ``length`` bytes starts; return that offset."""
    offset = out.tell()
    if length >= _ALIGN and offset % _ALIGN:
        out.write(b"\0" * (_ALIGN - offset % _ALIGN))
        offset = out.tell()
    return offset


def _copy_range(location: str, offset: int, length: int, out: BinaryIO) -> None:
    """Copy ``length`` bytes of ``location`` from ``offset`` to ``out``, kernel-side where possible."""
    out.flush()
    with open_data_file(location) as src:
        done = 0
        if hasattr(os, "copy_file_range"):
            try:
                while done < length:
                    n = os.copy_file_range(src.fileno(), out.fileno(), length - done, offset + done)
                    if n == 0:
                        break
                    done += n
            except OSError:
                pass  # file systems without it: fall back to reading
            out.seek(0, os.SEEK_END)
        src.seek(offset + done)
        while done < length:
            chunk = src.read(min(_COPY_CHUNK, length - done))
            if not chunk:
                raise SaveError(f"{location}: ends before the external data of a tensor; the file was changed on disk")
            out.write(chunk)
            done += len(chunk)


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


def shell_without(message: _M, skip: set[str]) -> _M:
    """A copy of ``message`` without the fields named in ``skip`` (which may be huge)."""
    shell: _M = type(message)()
    for field, value in message.ListFields():
        if field.name in skip:
            continue
        repeated = field.is_repeated if hasattr(field, "is_repeated") else field.label == field.LABEL_REPEATED
        if field.type == field.TYPE_STRING and any(isinstance(v, bytes) for v in (value if repeated else [value])):
            for item in value if repeated else [value]:  # text that is not UTF-8: copied as read, never decoded
                raw = item if isinstance(item, bytes) else item.encode()
                shell.MergeFromString(field_prefix(field.number, len(raw)) + raw)
        elif repeated:
            getattr(shell, field.name).extend(value)
        elif field.type == field.TYPE_MESSAGE:
            getattr(shell, field.name).CopyFrom(value)
        else:
            setattr(shell, field.name, value)
    return shell


MODEL_GRAPH = onnx.ModelProto.DESCRIPTOR.fields_by_name["graph"].number
GRAPH_NODE = onnx.GraphProto.DESCRIPTOR.fields_by_name["node"].number
GRAPH_INITIALIZER = onnx.GraphProto.DESCRIPTOR.fields_by_name["initializer"].number


SMALL_TENSOR_BYTES = 4096
"""Tensors up to this size keep their values in weightless copies (shape tensors, scalars)."""


def weightless_model(model: onnx.ModelProto, graph: onnx.GraphProto) -> onnx.ModelProto:
    """``model``'s header around ``graph`` (already weightless, see :func:`weightless_graph`)."""
    copy = shell_without(model, {"graph"})
    copy.graph.CopyFrom(graph)
    return copy


def weightless_graph(shell: onnx.GraphProto, nodes: Iterable[onnx.NodeProto],
                     initializers: Iterable[onnx.TensorProto]) -> onnx.GraphProto:
    """A graph of ``shell``'s other fields, ``nodes`` and ``initializers``, every large tensor (initializer,
    Constant value, in subgraphs too) reduced to its name, type and dims: what shape inference reads of a
    weight. ONNX shape inference serializes the model it is given; 1 GB of inline weights would be
    copied twice for types that do not depend on their values.
    """
    return rebuilt_graph(shell, nodes, initializers, _tensor_shell)


def rebuilt_graph(shell: onnx.GraphProto, nodes: Iterable[onnx.NodeProto], initializers: Iterable[onnx.TensorProto],
                  tensor: Callable[[onnx.TensorProto], onnx.TensorProto]) -> onnx.GraphProto:
    """``shell``'s other fields with ``nodes`` and ``initializers``, each tensor (initializers, tensor
    attributes, in subgraphs too) replaced by ``tensor(it)``; nodes without tensors are copied as they are."""
    out = shell_without(shell, {"node", "initializer"})
    out.initializer.extend(tensor(t) for t in initializers)
    out.node.extend(_rebuilt_node(n, tensor) for n in nodes)
    return out


def _tensor_shell(tensor: onnx.TensorProto) -> onnx.TensorProto:
    if tensor.data_location == onnx.TensorProto.EXTERNAL:
        return tensor
    nbytes = dims_nbytes(tensor.dims, tensor.data_type)
    if nbytes is None or nbytes <= SMALL_TENSOR_BYTES:
        return tensor
    return _without_data(tensor)


def _without_data(tensor: onnx.TensorProto) -> onnx.TensorProto:
    """The tensor's name, type, dims and notes, without its data (listing its fields would copy the data)."""
    shell = onnx.TensorProto(name=tensor.name, dims=list(tensor.dims), data_type=tensor.data_type,
                             doc_string=tensor.doc_string)
    if hasattr(tensor, "metadata_props"):  # onnx 1.16 on
        shell.metadata_props.extend(tensor.metadata_props)
    return shell


def _rebuilt_node(node: onnx.NodeProto, tensor: Callable[[onnx.TensorProto], onnx.TensorProto]) -> onnx.NodeProto:
    heavy = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.TENSORS, onnx.AttributeProto.GRAPH,
             onnx.AttributeProto.GRAPHS)
    if not any(a.type in heavy for a in node.attribute):
        return node
    out = shell_without(node, {"attribute"})
    for attribute in node.attribute:
        if attribute.type not in heavy:
            out.attribute.append(attribute)
            continue
        light = shell_without(attribute, {"t", "tensors", "g", "graphs"})
        if attribute.type == onnx.AttributeProto.TENSOR:
            light.t.CopyFrom(tensor(attribute.t))
        elif attribute.type == onnx.AttributeProto.TENSORS:
            light.tensors.extend(tensor(t) for t in attribute.tensors)
        elif attribute.type == onnx.AttributeProto.GRAPH:
            light.g.CopyFrom(rebuilt_graph(attribute.g, attribute.g.node, attribute.g.initializer, tensor))
        else:
            light.graphs.extend(rebuilt_graph(g, g.node, g.initializer, tensor) for g in attribute.graphs)
        out.attribute.append(light)
    return out
