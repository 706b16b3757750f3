"""Reading a model file, bounded before it is parsed.

Only a regular file is read, and only one that fits in the memory available: ``/dev/zero`` or a pipe
would be read until memory runs out, and a file of more bytes than the machine has free would be
read in full before parsing could fail. Protobuf refuses messages nested beyond its limit (100 levels,
about 33 Ifs inside each other); that is said as such, not as a corrupt file.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from graphlens.core.errors import ModelLoadError
from graphlens.core.tensors import may_name_data_files

ALWAYS_READ = 1 << 30
"""Files up to this size are read however little memory the system reports free at the moment (other processes
come and go; the kernel reclaims caches): only a larger file is compared with what is available."""


def read_model_file(file: Path) -> tuple[onnx.ModelProto, bool]:
    """``file``'s model, and whether its bytes may name external data files (see :func:`may_name_data_files`);
    every way the file cannot be read or parsed is a :class:`ModelLoadError` naming it."""
    size = _regular_file_size(file)
    available = available_memory()
    if available is not None and size > max(available, ALWAYS_READ):
        raise ModelLoadError(f"{file}: is {_gigabytes(size)}, more than the {_gigabytes(available)} of memory "
                             "available; not read")
    try:
        with open(file, "rb") as f:
            data = f.read(size)
    except OSError as exc:
        raise ModelLoadError(f"{file}: cannot be read ({exc.strerror or exc})") from exc
    if not data:
        raise ModelLoadError(f"{file}: is empty, not an ONNX model")
    proto = onnx.ModelProto()
    try:
        proto.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as exc:
        if _too_deep(exc):
            raise ModelLoadError(
                f"{file}: nests graphs too deeply to be read (subgraphs inside subgraphs beyond protobuf's limit "
                "of 100 levels)") from exc
        raise ModelLoadError(
            f"{file}: is not an ONNX model (the file is truncated, corrupt or in another format)"
        ) from exc
    return proto, may_name_data_files(data, proto)


def _regular_file_size(file: Path) -> int:
    """The size of ``file`` (links followed), refusing anything but a regular file before opening it: opening a
    FIFO waits for a writer, and a device has no end."""
    try:
        info = os.stat(file)
    except FileNotFoundError:
        raise ModelLoadError(f"{file}: no such file") from None
    except (OSError, ValueError) as exc:  # ValueError: a path holding a NUL byte
        raise ModelLoadError(f"{file}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from exc
    if stat.S_ISDIR(info.st_mode):
        raise ModelLoadError(f"{file}: is a directory, not an ONNX model file")
    if not stat.S_ISREG(info.st_mode):
        raise ModelLoadError(f"{file}: is not a regular file (a device, a pipe or a socket), not an ONNX model file")
    return info.st_size


def available_memory() -> int | None:
    """Bytes of memory available now (Linux's MemAvailable, else free pages), or None where neither is known."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (AttributeError, ValueError, OSError):
        return None


def _too_deep(exc: BaseException) -> bool:
    """Whether protobuf's error is its nesting limit (upb: ``Exceeded upb_DecodeOptions_MaxDepth``; the C++
    backend logs its recursion limit and fails the parse)."""
    text = str(exc).lower()
    return "depth" in text or "recursion" in text


def _gigabytes(size: int) -> str:
    if size >= 1e8:
        return f"{size / 1e9:,.1f} GB"
    return f"{size / 1e6:.1f} MB" if size >= 1e5 else f"{size:,} bytes"
