"""What every command shares: exit codes and JSON output."""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.workspace import Workspace

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


READ_ARGUMENTS = (("model", "the input model"), ("a", "model A"), ("b", "model B"), ("inputs", "the --inputs file"),
                  ("calibration", "the --calibration samples"), ("evaluate", "the --evaluate script"),
                  ("source", "the --from file"), ("overlay", "the --overlay file"))
"""The files a command may read, by argument name: an output naming one of them would destroy it."""


def check_output_paths(args: argparse.Namespace) -> None:
    """The files a command will write, checked before any work: ``-o`` naming the input model itself is refused
    unless ``--in-place`` says so; ``--report`` may name neither the model nor ``-o``; then as
    :func:`check_writes`."""
    from graphlens.core.errors import GraphLensError

    if args.output.exists() and args.model.exists() and same_file(args.output, args.model) and not args.in_place:
        raise GraphLensError(f"{args.output}: is the input model; pass --in-place to overwrite it")
    from graphlens.core.io import not_a_file

    refusal = not_a_file(args.output)  # as the save would say it, but before the work
    if refusal is not None:
        raise GraphLensError(refusal)
    report: Path | None = getattr(args, "report", None)
    if report is not None:
        for other, what in ((args.model, "the input model"), (args.output, "the output model (-o)")):
            if same_file(report, other):
                raise GraphLensError(f"--report {report}: is {what}; name a .json file of its own")
    check_writes(args, [(args.output, "-o"), (report, "--report")], may_replace_model=args.in_place)


def check_writes(args: argparse.Namespace, targets: Sequence[tuple[Path | None, str]], *,
                 model: Model | None = None, may_replace_model: bool = False) -> None:
    """Before any work: each file a command writes (``targets``: path and option, None for one not asked for)
    names no file it reads (:data:`READ_ARGUMENTS`; with ``model``, also its external data files), nor an existing
    file inside a folder it reads (a calibration image); its folder exists and can be written. Otherwise a long
    job ends in an error, or a model, its weights or its samples are replaced by a report."""
    from graphlens.core.errors import GraphLensError

    named = [(getattr(args, name, None), what) for name, what in READ_ARGUMENTS]
    reads = [(Path(given), what) for given, what in named
             if isinstance(given, (str, Path)) and str(given) and Path(given).exists()]
    if model is not None:
        reads += [(Path(f), "the model's external data") for f in data_files(model)]
    for target, option in targets:
        if target is None:
            continue
        for given, what in reads:
            if option == "-o" and may_replace_model and what in ("the input model", "the model's external data"):
                continue  # --in-place: the save writes the model and its data anew, atomically
            inside = given.is_dir() and target.exists() and target.resolve().is_relative_to(given.resolve())
            if inside or same_file(target, given):
                raise GraphLensError(f"{option} {target}: is {'in ' if inside else ''}{what} '{given}'; writing "
                                     "it would destroy it")
        folder = target.resolve().parent
        if not folder.is_dir():
            raise GraphLensError(f"{target}: folder '{target.parent}' does not exist")
        if not os.access(folder, os.W_OK) or (target.exists() and not os.access(target, os.W_OK)):
            raise GraphLensError(f"{target}: cannot be written here (the folder or the file is read-only)")


def data_files(model: Model) -> list[str]:
    """The files holding ``model``'s external weights (their locations are absolute once loaded)."""
    from graphlens.core.tensors import all_tensors, external_ref, is_external

    if not model.external_data:
        return []
    return sorted({external_ref(t).location for t in all_tensors(model.proto) if is_external(t)})


def same_file(a: Path, b: Path) -> bool:
    """The same file, however named: a relative path, a symlink or a hard link; or, while one of them does not
    exist yet, the same path (``--report`` and ``-o`` both naming a file about to be written)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def add_numeric_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", type=Path, help="an .npz with one array per graph input (default: random)")
    p.add_argument(
        "--dim", action="append", metavar="NAME=VALUE",
        help="size of a dynamic dimension for random inputs (an unnamed one as INPUT[AXIS]=VALUE); "
        "dims not given are chosen until onnxruntime runs",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")


@dataclass(frozen=True, kw_only=True)
class NumericInputs:
    """What ``--inputs``, ``--dim`` and ``--seed`` asked for, parsed once for every command that runs models."""

    file: Path | None = None
    """An .npz with one array per graph input; None: random inputs."""
    dims: dict[str, int] = field(default_factory=dict)
    seed: int = 0


def numeric_inputs(args: argparse.Namespace) -> NumericInputs:
    """The command's ``--inputs``/``--dim``/``--seed`` (a command without one of them gets its default);
    a malformed ``--dim`` is one line naming it."""
    from graphlens.numerics import parse_dims

    return NumericInputs(file=getattr(args, "inputs", None), dims=parse_dims(getattr(args, "dim", None) or []),
                         seed=getattr(args, "seed", 0))


def open_workspace(args: argparse.Namespace, path: Path) -> Workspace:
    """A one-shot workspace (no undo history) on the model at ``path``, whose jobs run on the command's
    ``--inputs``/``--dim``; a dim the model does not have, or an .npz that does not fit it, is one line."""
    from graphlens.workspace import Workspace

    given = numeric_inputs(args)  # before the model is read: a typo costs nothing
    workspace = Workspace(keep_history=False)
    workspace.open(path)
    workspace.set_preview_inputs(given.dims, given.file)
    return workspace


def write_report(path: Path | None, data: dict[str, Any]) -> None:
    """``--report``: the command's JSON, or one line saying why it could not be written."""
    if path is None:
        return
    try:
        path.write_text(json.dumps(data, indent=2))
    except OSError as exc:
        from graphlens.core.errors import GraphLensError

        raise GraphLensError(f"{path}: cannot write the report ({exc.strerror or exc})") from exc


def count_argument(least: int) -> Callable[[str], int]:
    """An argparse type: a whole number of at least ``least`` (``--top -1`` listed everything, ``--runs 0`` timed
    nothing); argparse turns its error into one line and exit 2."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"'{text}' is not a whole number") from None
        if value < least:
            raise argparse.ArgumentTypeError(f"{value} is less than {least}")
        return value

    return parse
