"""GraphLens, onnxscript's ``optimize_for_ort`` and onnxruntime's transformers optimizer on every model of a
corpus that ``exporter_models.py`` wrote: the same architectures as TorchScript, dynamo, optimum and the
onnxruntime-genai model builder write them.

Each tool rewrites each model as a process of its own, one after another, and is measured as
``bench_transformers.py`` measures it (its runner, fused-kind counts and numeric checks): wall time (median
of ``--repeat`` runs after an untimed one, from compiled bytecode), peak memory of that process, nodes in
the saved model, fused operators of each kind, and the verdict on the same seeded random inputs
(``graphlens.numerics``; GraphLens's own ``fold --check`` exit code, the others' outputs against the
original in onnxruntime with graph optimizations off). onnxruntime's optimizer is given the model type,
heads and hidden size of the model's config (``gpt2`` for the Llama-like decoders, as onnxruntime's own
scripts give it), at each of ``--ort-levels`` (0: its Python fusions alone; 1: onnxruntime's basic
optimizations first).

Dynamic dims are sized by name: batch 2 (1 beside a KV cache), sequence 8, a KV cache's past 4 and the
attention mask's total 12, the builder's ``kv_cache_dim`` the head size; others are searched until the
original runs.

Run it with an interpreter that has onnxscript, onnxruntime and torch (onnxruntime's optimizer imports
torch at level 1); GraphLens runs from ``--graphlens`` (default: the repository's ``.venv``).

    python benchmarks/bench_exporters.py --corpus DIR [--models llama,bert] [--exporters dynamo,optimum]
        [--tools graphlens,optimize_for_ort,ort-O0,ort-O1] [--markdown] [--repeat 1] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_transformers import (
    COLUMNS,
    GRAPHLENS,
    KINDS,
    ONNXSCRIPT,
    ORT_TRANSFORMERS,
    REFERENCE,
    Prepared,
    Row,
    _num,
    child,
    measure,
    original_row,
)

ORT = "ort-O{level}"
BATCH, SEQUENCE, PAST = 2, 8, 4
"""Sizes of the dims named batch, sequence and past (the attention mask's total is their sum)."""
GRAPHLENS_VENV = ROOT / ".venv" / "bin" / "graphlens"


def tool_commands(facts: dict[str, Any], graphlens: list[str], levels: list[int]) -> dict[str, Callable]:
    """Each tool's command for one model (input, output, 'external' or 'inline'), as ``measure`` takes them."""
    ort = [facts["ort_model_type"], str(facts["num_heads"]), str(facts["hidden_size"])]
    tools: dict[str, Callable] = {
        GRAPHLENS: lambda i, o, ext: [*graphlens, "fold", i, "-o", o, "--rules", "transformers"],
        REFERENCE: lambda i, o, ext: [sys.executable, "-c", ONNXSCRIPT, i, o, ext],
    }
    for level in levels:
        tools[ORT.format(level=level)] = lambda i, o, ext, level=level: [
            sys.executable,
            "-c",
            ORT_TRANSFORMERS,
            i,
            o,
            ext,
            *ort,
            str(level),
        ]
    return tools


def given_dims(dims: dict[str, list], facts: dict[str, Any]) -> dict[str, int]:
    """Sizes for the named dynamic dims of an entry's inputs (see the module docstring)."""
    named = {dim for shape in dims.values() for dim in shape if isinstance(dim, str) and dim}
    cached = any("past" in dim.lower() for dim in named)
    sizes = {dim: _size(dim.lower(), facts, cached) for dim in sorted(named)}
    return {dim: size for dim, size in sizes.items() if size is not None}


def _size(dim: str, facts: dict[str, Any], cached: bool) -> int | None:
    if "total" in dim or ("past" in dim and "+" in dim):
        return PAST + SEQUENCE
    if "past" in dim:
        return PAST
    if "batch" in dim:
        return 1 if cached else BATCH  # GroupQueryAttention takes a prompt after a cache for one sequence alone
    if "sequence" in dim:
        return SEQUENCE
    if dim == "kv_cache_dim":
        return facts["hidden_size"] // facts["num_heads"]
    return None


def prepare(corpus: Path, entry: dict, facts: dict[str, Any], folder: Path, limit: float) -> Prepared:
    """The entry's model and the inputs (and original outputs) every tool is checked on."""
    path = corpus / entry["path"]
    external = any(p.name != path.name and p.name.startswith(path.name) for p in path.parent.iterdir())
    prepared = Prepared(path, external=external)
    dims = given_dims(entry["dims"], facts)
    result, error = child(
        "reference_outputs",
        str(path),
        json.dumps(dims),
        json.dumps({}),
        str(folder / "inputs.npz"),
        str(folder / "outputs.npz"),
        limit=limit,
        logs=folder / "logs" / "reference",
    )
    if result is None or result.get("error"):
        prepared.why_unchecked = f"original does not run: {error or result['error']}"
    else:
        prepared.inputs, prepared.outputs, prepared.dims = folder / "inputs.npz", folder / "outputs.npz", result["dims"]
    return prepared


def bench_entry(corpus: Path, entry: dict, facts: dict[str, Any], work: Path, args: argparse.Namespace) -> dict:
    """Every tool on one model × exporter: the original's row and one per tool."""
    folder = work / entry["model"] / entry["exporter"]
    folder.mkdir(parents=True, exist_ok=True)
    model = prepare(corpus, entry, facts, folder, args.limit)
    rows = {"original": original_row(model, folder, args.limit)}
    tools = tool_commands(facts, args.graphlens, args.ort_levels)
    outputs = args.keep / entry["model"] / entry["exporter"] if args.keep is not None else folder / "out"
    for tool in args.tools:
        rows[tool] = measure(tool, model, outputs / tool, args, tools)
        row = rows[tool]
        print(
            f"{entry['model']:16} {entry['exporter']:12} {tool:17} time {_num(row.seconds, 2)} s  "
            f"peak {_num(row.peak_mb)} MB  nodes {_num(row.nodes)}  {row.verdict}",
            flush=True,
        )
    return {"dims": model.dims, "rows": rows}


HEADER = ["model", "exporter", "tool", "time s", "peak MB", "nodes", *COLUMNS.values(), "max abs Δ", "verdict"]
NUMERIC = {"time s", "peak MB", "nodes", *COLUMNS.values(), "max abs Δ"}


def cells(model: str, exporter: str, tool: str, row: Row) -> list[str]:
    """One table row: fused kinds, nodes, verdict, time and peak memory of one tool on one entry."""
    kinds = [_num(row.kinds.get(kind)) if row.kinds else "–" for kind in KINDS]
    return [
        model,
        exporter,
        tool,
        _num(row.seconds, 2),
        _num(row.peak_mb, 0),
        _num(row.nodes),
        *kinds,
        _num(row.max_abs, 1, sci=True),
        row.verdict,
    ]


def render(header: list[str], table: list[list[str]], markdown: bool) -> list[str]:
    """The rows as a Markdown table (numbers right-aligned), or as plain columns padded to their widest cell."""
    if markdown:
        align = ["---:" if cell in NUMERIC else "---" for cell in header]
        return ["| " + " | ".join(row) + " |" for row in [header, align, *table]]
    widths = [max(len(row[i]) for row in [header, *table]) for i in range(len(header) - 1)]
    return [
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1] for row in [header, *table]
    ]


def side_by_side(results: list[tuple[dict, dict | None]], tools: list[str], markdown: bool) -> list[str]:
    """One row per model × exporter, a cell per tool: nodes, fused kinds, verdict, time and peak memory."""
    header = ["model", "exporter", "original", *tools]
    table = []
    for entry, result in results:
        if result is None:
            table.append(
                [entry["model"], entry["exporter"], _clip(f"not exported: {entry['reason']}"), *[""] * len(tools)]
            )
        else:
            cells = [_cell(result["rows"][tool], tool == "original") for tool in ["original", *tools]]
            table.append([entry["model"], entry["exporter"], *cells])
    return render(header, table, markdown)


def _cell(row: Row, original: bool) -> str:
    if row.nodes is None:
        return _clip(row.verdict)
    kinds = " ".join(f"{COLUMNS[kind]} {count}" for kind, count in row.kinds.items() if count)
    verdict = {True: "pass", False: "FAIL"}.get(row.passed, _clip(row.verdict)) if not original or row.verdict else ""
    measured = "" if original else f"{_num(row.seconds, 2)} s {_num(row.peak_mb)} MB"
    return "; ".join(part for part in (f"{row.nodes} nodes", kinds or "nothing fused", verdict, measured) if part)


def _clip(text: str, limit: int = 70) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def entries_of(manifest: dict, args: argparse.Namespace) -> list[dict]:
    """The manifest's entries the arguments choose, in its order."""
    return [
        e
        for e in manifest["entries"]
        if (args.models is None or e["model"] in args.models)
        and (args.exporters is None or e["exporter"] in args.exporters)
    ]


def report(results: list[tuple[dict, dict | None]], tools: list[str], markdown: bool) -> list[str]:
    """The tools side by side, the column legend, a row per tool with every count, then what each tool said."""
    table, notes = [], []
    for entry, result in results:
        if result is None:
            table.append(
                [
                    entry["model"],
                    entry["exporter"],
                    "(export)",
                    *["–"] * (len(HEADER) - 4),
                    f"not exported: {entry['reason']}",
                ]
            )
            continue
        for tool, row in result["rows"].items():
            table.append(cells(entry["model"], entry["exporter"], tool, row))
            notes += [f"- {entry['model']} {entry['exporter']} {tool}: {_short(note)}" for note in row.notes]
        if result["dims"]:
            notes.append(f"- {entry['model']} {entry['exporter']} inputs: {result['dims']}")
    legend = ", ".join(f"{column} = {kind} ({'/'.join(KINDS[kind])})" for kind, column in COLUMNS.items())
    return [
        *side_by_side(results, tools, markdown),
        "",
        f"columns: {legend}",
        "",
        *render(HEADER, table, markdown),
        "",
        *notes,
    ]


def _short(note: str) -> str:
    """A tool's own count without its zeros."""
    prefix = "its own count: "
    if not note.startswith(prefix):
        return note
    try:
        counts = json.loads(note[len(prefix) :])
    except ValueError:
        return note
    return prefix + (", ".join(f"{k} {v}" for k, v in counts.items() if v) or "nothing")


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--corpus", type=Path, required=True, help="a folder exporter_models.py wrote")
    parser.add_argument("--models", help="comma-separated model names (default: all in the manifest)")
    parser.add_argument("--exporters", help="comma-separated exporters (default: all in the manifest)")
    parser.add_argument(
        "--tools",
        default="graphlens,optimize_for_ort,ort-O0,ort-O1",
        help="comma-separated, of: graphlens, optimize_for_ort, ort-O<level>",
    )
    parser.add_argument("--ort-levels", default="0,1", help="opt_level values onnxruntime's optimizer runs at")
    parser.add_argument(
        "--graphlens",
        default=str(GRAPHLENS_VENV) if GRAPHLENS_VENV.exists() else "",
        help="the graphlens command, split as a shell splits it (default: the repository's .venv, else this Python's)",
    )
    parser.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per tool and model (median)")
    parser.add_argument("--keep", type=Path, help="write the tools' outputs (and logs) here instead of deleting them")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds before a tool's run is stopped")
    args = parser.parse_args()
    args.models, args.exporters = (None if v is None else set(v.split(",")) for v in (args.models, args.exporters))
    args.ort_levels = [int(level) for level in args.ort_levels.split(",") if level.strip()]
    args.tools = [t.strip() for t in args.tools.split(",") if t.strip()]
    known = [GRAPHLENS, REFERENCE, *(ORT.format(level=level) for level in args.ort_levels)]
    unknown = [t for t in args.tools if t not in known]
    if unknown or args.repeat < 1:
        parser.error(f"unknown tool '{unknown[0]}' (known: {', '.join(known)})" if unknown else "--repeat < 1")
    args.graphlens = shlex.split(args.graphlens) if args.graphlens else [sys.executable, "-m", "graphlens"]
    args.corpus, args.keep = (
        None if p is None else p.resolve() for p in (args.corpus, args.keep)
    )  # tools run in logs/
    return args


def main() -> None:
    args = parse()
    manifest = json.loads((args.corpus / "manifest.json").read_text())
    started = time.perf_counter()
    results: list[tuple[dict, dict | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench_exporters_") as tmp:
        for entry in entries_of(manifest, args):
            facts = manifest["models"][entry["model"]]
            result = bench_entry(args.corpus, entry, facts, Path(tmp), args) if entry["ok"] else None
            results.append((entry, result))
    print("\n".join(report(results, args.tools, args.markdown)))
    versions = ", ".join(f"{package} {version}" for package, version in manifest.get("versions", {}).items())
    print(f"\ncorpus {args.corpus} ({versions}); total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
