"""Overlays to and from files: a CSV of ``node,value`` rows, and Model Explorer's per-node data JSON.

Model Explorer (google-ai-edge/model-explorer) reads "node data" for one graph as::

    {"results": {"<node id>": {"value": 12.5}, ...},
     "gradient": [{"stop": 0, "bgColor": "#ffffcc"}, ..., {"stop": 1, "bgColor": "#800026"}]}

with optional ``thresholds`` instead of ``gradient``, and for a whole model the same object per
graph id (``{"<graph id>": {"results": ...}}``). Its ONNX adapter uses node names as node ids; a
key may also be an output tensor name, which :func:`attach` maps to the node producing it. Both
forms are read; the one-graph form is written, with the colour scale GraphLens draws.

A bad file raises :class:`GraphLensError` with one line naming the file (and line) and the problem.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.overlays.overlay import SCALE_STOPS, Overlay

_TITLE = re.compile(r"^(?P<name>.*?)\s*\((?P<unit>[^()]*)\)\s*$")


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise GraphLensError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise GraphLensError(f"{path}: not a text file (it is not UTF-8)") from None
    except OSError as exc:
        raise GraphLensError(f"{path}: cannot read it ({exc.strerror or exc})") from None


def _number(text: Any) -> float | None:
    if isinstance(text, bool):
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


# ------------------------------------------------------------------------------------ CSV
def from_csv(path: str | os.PathLike[str], *, higher_is_worse: bool = True) -> Overlay:
    """Rows of ``node,value``; an optional header whose second column ``Name (unit)`` names the overlay."""
    path = Path(path)
    rows = list(csv.reader(_read_text(path).splitlines()))
    name, unit = path.stem, ""
    values: dict[str, float] = {}
    seen: dict[str, int] = {}
    for number, row in enumerate(rows, 1):
        if not row or all(not cell.strip() for cell in row) or row[0].lstrip().startswith("#"):
            continue
        if len(row) < 2:
            raise GraphLensError(f"{path}: line {number}: expected 'node,value', found {len(row)} column")
        node, text = row[0].strip(), row[1].strip()
        value = _number(text)
        if value is None and not values and not seen and number == _first_row(rows):
            name, unit = _title(text, path.stem)  # the header
            continue
        if value is None:
            raise GraphLensError(f"{path}: line {number}: '{text}' is not a finite number (node '{node}')")
        if not node:
            raise GraphLensError(f"{path}: line {number}: the node name is empty")
        if node in seen:
            raise GraphLensError(f"{path}: line {number}: node '{node}' is given twice (first on line {seen[node]})")
        seen[node] = number
        values[node] = value
    if not values:
        raise GraphLensError(f"{path}: no 'node,value' rows")
    return Overlay(name, unit, values, higher_is_worse=higher_is_worse, source=str(path))


def _first_row(rows: list[list[str]]) -> int:
    return next((k for k, row in enumerate(rows, 1) if row and any(c.strip() for c in row)), 0)


def _title(text: str, fallback: str) -> tuple[str, str]:
    if text.lower() in ("", "value", "values"):
        return fallback, ""
    found = _TITLE.match(text)
    return (found["name"] or fallback, found["unit"]) if found else (text, "")


def to_csv(overlay: Overlay, path: str | os.PathLike[str]) -> Path:
    """``node,Name (unit)`` then one row per node, worst first; values written exactly (repr)."""
    path = Path(path)
    lines = [["node", overlay.title]] + [[node, repr(value)] for node, value in overlay.ranked()]
    _write(path, lambda f: csv.writer(f, lineterminator="\n").writerows(lines))
    return path


# -------------------------------------------------------------------------- Model Explorer
def from_model_explorer_json(path: str | os.PathLike[str], *, higher_is_worse: bool = True) -> Overlay:
    """Model Explorer's node data for one graph (``{"results": ...}``) or per graph id (merged)."""
    path = Path(path)
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as exc:
        raise GraphLensError(f"{path}: not JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if isinstance(data, dict) and "results" in data:
        graphs = {"": data}
    elif isinstance(data, dict) and data and all(isinstance(v, dict) and "results" in v for v in data.values()):
        graphs = data
    else:
        raise GraphLensError(f"{path}: not Model Explorer node data (expected an object with \"results\")")
    values: dict[str, float] = {}
    for graph_id, graph_data in graphs.items():
        results = graph_data["results"]
        where = f" of graph '{graph_id}'" if graph_id else ""
        if not isinstance(results, dict):
            raise GraphLensError(f"{path}: \"results\"{where} is not an object of node id -> {{\"value\": ...}}")
        for key, entry in results.items():
            value = _number(entry.get("value")) if isinstance(entry, dict) else None
            if value is None:
                raise GraphLensError(f"{path}: node '{key}'{where} has no numeric "
                                     f"\"value\" (found {json.dumps(entry)[:60]})")
            values[str(key)] = value
    if not values:
        raise GraphLensError(f"{path}: \"results\" is empty")
    return Overlay(path.stem, "", values, higher_is_worse=higher_is_worse, source=str(path))


def to_model_explorer_json(overlay: Overlay, path: str | os.PathLike[str]) -> Path:
    """The one-graph form, with GraphLens's colour scale as the ``gradient`` (stop 0 is the minimum)."""
    path = Path(path)
    stops = SCALE_STOPS if overlay.higher_is_worse else SCALE_STOPS[::-1]
    last = len(stops) - 1
    data = {
        "results": {node: {"value": value} for node, value in overlay.values.items()},
        "gradient": [{"stop": round(k / last, 4), "bgColor": "#{:02x}{:02x}{:02x}".format(*(int(c) for c in rgb))}
                     for k, rgb in enumerate(stops)],
    }
    _write(path, lambda f: json.dump(data, f, indent=2, ensure_ascii=False))
    return path


# ----------------------------------------------------------------------------- any file
def load_overlay(path: str | os.PathLike[str], *, higher_is_worse: bool = True) -> Overlay:
    """A ``.json`` file as Model Explorer node data, anything else as CSV."""
    path = Path(path)
    if path.suffix.lower() == ".json":
        return from_model_explorer_json(path, higher_is_worse=higher_is_worse)
    return from_csv(path, higher_is_worse=higher_is_worse)


def save_overlay(overlay: Overlay, path: str | os.PathLike[str]) -> Path:
    """``.json`` → Model Explorer node data, anything else → CSV."""
    path = Path(path)
    return to_model_explorer_json(overlay, path) if path.suffix.lower() == ".json" else to_csv(overlay, path)


def attach(overlay: Overlay, model: Model) -> Overlay:
    """The overlay keyed by ``model``'s node names: output tensor names become their producers (the
    worst value when several land on one node); keys naming nothing are dropped and counted in notes.

    Raises when no key names a node or tensor of the model: the file belongs to another model.
    """
    graphs = model.graphs()
    nodes = {n.name for g in graphs for n in g.nodes}
    values: dict[str, float] = {}
    unknown: list[str] = []
    for key, value in overlay.values.items():
        name = key
        if key not in nodes:
            found = next((p for g in graphs if (p := g.local_producer(key)) is not None), None)
            if found is None:
                unknown.append(key)
                continue
            name = found[0].name
        if name in values:
            value = max(value, values[name]) if overlay.higher_is_worse else min(value, values[name])
        values[name] = value
    where = overlay.source or overlay.name
    if not values:
        raise GraphLensError(f"{where}: none of its {len(overlay.values)} names is a node of {model.name} "
                             f"(first: '{next(iter(overlay.values))}')")
    notes = list(overlay.notes)
    if unknown:
        notes.append(f"{len(unknown)} name{'s' if len(unknown) != 1 else ''} matched no node "
                     f"(first: '{unknown[0]}')")
    return Overlay(overlay.name, overlay.unit, values, overlay.higher_is_worse, overlay.log_scale,
                   overlay.source, notes)


def _write(path: Path, write: Callable[[TextIO], object]) -> None:
    try:
        with path.open("w", encoding="utf-8", newline="") as handle:
            write(handle)
    except OSError as exc:
        raise GraphLensError(f"{path}: cannot write it ({exc.strerror or exc})") from None
