"""What every command shares: exit codes and JSON output."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OVERLAY_METRICS = ("flops", "params", "bytes")
"""The numbers per node computed from shapes (``graphlens.overlays.flops.METRICS``), named without importing it."""

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
"""Success; a ``--check`` (or ``diff``) that found a difference; bad input, named in one line; a bug in GraphLens."""


def print_json(data: object, *, large: bool = False) -> None:
    """Indented for people; compact when large, since only compact output uses CPython's fast C encoder."""
    print(json.dumps(data) if large else json.dumps(data, indent=2))


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def refuse_overwriting_model(args: argparse.Namespace) -> None:
    """``-o`` naming the input model itself is refused unless ``--in-place`` says so."""
    if args.output.exists() and args.model.exists() and args.output.resolve() == args.model.resolve() \
            and not args.in_place:
        from graphlens.core.errors import GraphLensError

        raise GraphLensError(f"{args.output}: is the input model; pass --in-place to overwrite it")


def add_numeric_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", type=Path, help="an .npz with one array per graph input (default: random)")
    p.add_argument(
        "--dim", action="append", metavar="NAME=VALUE",
        help="size of a dynamic dimension for random inputs (an unnamed one as INPUT[AXIS]=VALUE); "
        "dims not given are chosen until onnxruntime runs",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")


def write_report(path: Path | None, data: dict) -> None:
    """``--report``: the command's JSON, or one line saying why it could not be written."""
    if path is None:
        return
    try:
        path.write_text(json.dumps(data, indent=2))
    except OSError as exc:
        from graphlens.core.errors import GraphLensError

        raise GraphLensError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc
