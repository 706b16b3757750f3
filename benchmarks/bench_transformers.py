"""``graphlens fold --rules transformers`` against onnxscript's ``optimize_for_ort`` and onnxruntime's
transformers optimizer, on real transformer models.

Models (built in a temporary folder by ``transformer_models.py``): chython-rxnmap's BERT-like encoder
and onnxscript's test decoders. Each tool rewrites each model as a whole process; reported per tool
and model: wall time (median of ``--repeat`` runs after one untimed run, each tool from its compiled bytecode
as an installed package runs), peak memory of that process, nodes in the saved
model, fused operators of each kind, and the numeric verdict:

* GraphLens: the exit code of ``fold --check`` (0 pass, 1 fail), in a run of its own after the timed
  runs, so its time is the fold alone like the others'; max |Δ| from its report.
* the references: their output and the original run in onnxruntime (CPU, graph optimizations off,
  so onnxruntime's own fusions do not blur the comparison) on the same seeded random inputs, judged
  with ``graphlens.numerics``' per-dtype tolerance (float32: |Δ| ≤ 1e-5 + 1e-4 · max|original|).

All tools get the same inputs: ``graphlens.numerics`` draws them once per model (seed 0; dynamic dims
searched until the original runs, or as ``transformer_models.DIMS`` sets them) and GraphLens reads
them with ``--inputs``. The parent process loads no model: its resident size would be inherited by
every tool it starts, and the peak-memory column would measure the parent.

The onnxscript models take ~1.4 GB each on disk, and every tool writes a copy: a model's files are
deleted once it is measured (unless ``--keep``); phi2lm needs ~6 GB free in the temporary folder
(``TMPDIR`` chooses it).

    pip install -e '.[bench]'   # onnxscript, onnxruntime
    python benchmarks/bench_transformers.py [--models rxnmap,smollm_1,phi2lm] [--repeat 3]
        [--cache DIR] [--keep DIR] [--limit 900]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.processes import BYTECODE_CACHE, bytecode_environment
from benchmarks.transformer_models import DIMS, FEEDS, MODEL_NAMES, with_feeds

KINDS: dict[str, tuple[str, ...]] = {
    "attention": ("MultiHeadAttention", "Attention", "GroupQueryAttention"),
    "rms-norm": ("SimplifiedLayerNormalization", "RMSNormalization"),
    "skip-layer-norm": ("SkipLayerNormalization",),
    "skip-rms-norm": ("SkipSimplifiedLayerNormalization",),
    "rotary": ("RotaryEmbedding",),
    "gelu": ("Gelu",),
    "fast-gelu": ("FastGelu",),
    "bias-gelu": ("BiasGelu",),
    "layer-norm": ("LayerNormalization",),
    "embed-layer-norm": ("EmbedLayerNormalization",),
    "packed-attention": ("PackedAttention", "PackedMultiHeadAttention"),
}
"""Fused-operator kind -> the op types (standard or com.microsoft) counted for it."""
COLUMNS = {"attention": "attn", "rms-norm": "rms", "skip-layer-norm": "sln", "skip-rms-norm": "srms",
           "rotary": "rope", "gelu": "gelu", "fast-gelu": "fgelu", "bias-gelu": "bgelu", "layer-norm": "ln",
           "embed-layer-norm": "eln", "packed-attention": "pattn"}

ONNXSCRIPT = (
    "import json, sys, onnx_ir as ir\n"
    "from pathlib import Path\n"
    "from onnxscript.rewriter.ort_fusions import optimize_for_ort\n"
    "source, target, external = sys.argv[1], sys.argv[2], sys.argv[3] == 'external'\n"
    "model, fused = optimize_for_ort(ir.load(source))\n"
    "ir.save(model, target, external_data=Path(target).name + '.data' if external else None,\n"
    "        size_threshold_bytes=1024)\n"
    "print(json.dumps(fused))\n"
)
ORT_TRANSFORMERS = (
    "import json, sys\n"
    "from onnxruntime.transformers.optimizer import optimize_model\n"
    "source, target, external = sys.argv[1], sys.argv[2], sys.argv[3] == 'external'\n"
    # opt_level=0: the Python fusions alone (a positive level first runs onnxruntime, which needs torch);
    # heads and hidden size 0: read from the graph. Other callers pass all four after the first three.
    "model_type, heads, hidden, level = sys.argv[4:] or ['bert', '0', '0', '0']\n"
    "optimizer = optimize_model(source, model_type=model_type, num_heads=int(heads), hidden_size=int(hidden),\n"
    "                           opt_level=int(level), use_gpu=False)\n"
    "optimizer.save_model_to_file(target, use_external_data_format=external, all_tensors_to_one_file=True)\n"
    "print(json.dumps(optimizer.get_fused_operator_statistics()))\n"
)
SKIP_VARIANTS = {"rms-norm": "skip-rms-norm", "layer-norm": "skip-layer-norm"}
"""A skip variant fuses its plain norm and the residual Add before it: one more of it may stand for one
plain norm less (a model's last norm fused with the last residual, say)."""
MAX_REFUSALS_SHOWN = 5
GRAPHLENS = "graphlens"
REFERENCE = "optimize_for_ort"
TOOLS = {
    GRAPHLENS: lambda i, o, ext: [sys.executable, "-m", "graphlens", "fold", i, "-o", o, "--rules", "transformers"],
    REFERENCE: lambda i, o, ext: [sys.executable, "-c", ONNXSCRIPT, i, o, ext],
    "ort transformers": lambda i, o, ext: [sys.executable, "-c", ORT_TRANSFORMERS, i, o, ext],
}


@dataclass
class Run:
    """One process: wall time, peak RSS and exit code, or why there are none; what it printed."""

    seconds: float | None = None
    peak_mb: float | None = None
    code: int | None = None
    stdout: str = ""
    error: str = ""


@dataclass
class Row:
    """One tool on one model, as the table shows it."""

    seconds: float | None = None
    peak_mb: float | None = None
    nodes: int | None = None
    kinds: dict[str, int] = field(default_factory=dict)
    max_abs: float | None = None
    verdict: str = ""
    passed: bool | None = None
    notes: list[str] = field(default_factory=list)


def run_measured(cmd: list[str], limit: float, logs: Path) -> Run:
    """Run ``cmd`` as its own process group (stopped whole past ``limit`` seconds); output goes to files
    in ``logs``, never to a pipe that a chatty tool could fill and stall on. It runs in ``logs``: tools
    that drop scratch files in their working folder (onnxruntime's symbolic shape inference writes
    ``sym_shape_infer_temp.onnx`` and its ``.data`` there) leave them with the logs, not in the repository."""
    logs.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    env = bytecode_environment(env, False, BYTECODE_CACHE)  # every tool from its compiled modules, as installed
    with open(logs / "stdout.txt", "wb") as out, open(logs / "stderr.txt", "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=err, cwd=logs, env=env, start_new_session=True)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - start > limit:
                os.killpg(proc.pid, signal.SIGKILL)
                os.wait4(proc.pid, 0)
                proc.returncode = -signal.SIGKILL
                return Run(error=f"stopped after {limit:.0f} s")
            time.sleep(0.02)
    elapsed = time.perf_counter() - start
    proc.returncode = code = os.waitstatus_to_exitcode(status)
    stdout = (logs / "stdout.txt").read_text(errors="replace")
    run = Run(elapsed, usage.ru_maxrss / 1024, code, stdout)
    if code < 0:
        run.error = f"killed by signal {-code} ({signal.Signals(-code).name})"
    elif code != 0:
        run.error = error_line((logs / "stderr.txt").read_text(errors="replace")) or f"exit code {code}"
    return run


def error_line(stderr: str) -> str:
    """The line that says what went wrong: a traceback's exception line, else the first line."""
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    tracebacks = [i for i, line in enumerate(lines) if line.startswith("Traceback")]
    if tracebacks:
        after = [line for line in lines[tracebacks[-1] + 1:] if not line[0].isspace()]
        if after:
            return after[0][:160]
    errors = [line for line in lines if line.lower().startswith("error")]
    return (errors or lines or [""])[0][:160]


def child(function: str, *args: str, limit: float, logs: Path) -> tuple[dict | None, str]:
    """Call ``function`` of this module in a fresh process; it prints one JSON object, returned here."""
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\n"
              f"from benchmarks.bench_transformers import {function}\n{function}(*sys.argv[1:])\n")
    run = run_measured([sys.executable, "-c", script, *args], limit, logs)
    if run.error:
        return None, run.error
    try:
        return json.loads(run.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, "printed no result"


# ---------------------------------------------------------------- in child processes


def _session(path: str):
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    return ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])


class PathRunner:
    """An onnxruntime session opened from the file (its external data read beside it), with the
    ``error``/``run`` interface ``graphlens.numerics.dims.search_dims`` drives."""

    def __init__(self, path: str, feeds: dict[str, str] | None = None) -> None:
        from graphlens.numerics.run import one_line

        self.feeds = feeds or {}
        self.error: str | None = None
        self.session = None
        try:
            self.session = _session(path)
        except Exception as exc:  # onnxruntime raises its own pybind classes
            self.error = one_line(exc)

    def run(self, inputs: dict):
        from graphlens.numerics.run import RunResult, one_line

        if self.session is None:
            return RunResult(None, self.error)
        inputs = with_feeds(inputs, self.feeds)
        names = [o.name for o in self.session.get_outputs()]
        missing = [i.name for i in self.session.get_inputs() if i.name not in inputs]
        if missing:
            return RunResult(None, f"it has an input the original does not have: '{missing[0]}'")
        feed = {i.name: inputs[i.name] for i in self.session.get_inputs()}
        try:
            values = self.session.run(names, feed)
        except Exception as exc:
            return RunResult(None, one_line(exc))
        return RunResult(dict(zip(names, values)), None)


def reference_outputs(model: str, dims_json: str, feeds_json: str, inputs_npz: str, outputs_npz: str) -> None:
    """Draw the inputs (dims searched until the original runs) and save them with its outputs."""
    import numpy as np
    import onnx

    from graphlens.numerics.dims import failure_reason, search_dims

    declared = onnx.load(model, load_external_data=False)
    feeds = json.loads(feeds_json)
    search = search_dims(declared, PathRunner(model, feeds), given=json.loads(dims_json), seed=0)
    if not search.ran or search.inputs is None:
        print(json.dumps({"error": failure_reason(search)}))
        return
    np.savez(inputs_npz, **with_feeds(search.inputs, feeds))
    np.savez(outputs_npz, *search.result.outputs.values())
    described = [search.choice.text()] if search.choice.values else []
    described += [f"{name} {kind}" for name, kind in feeds.items()]
    print(json.dumps({"error": None, "dims": ", ".join(described)}))


def inspect(model: str, inputs_npz: str = "", outputs_npz: str = "") -> None:
    """Nodes and fused ops of a saved model; with the original's inputs and outputs, its numeric verdict."""
    import numpy as np
    import onnx

    proto = onnx.load(model, load_external_data=False)
    ops = _op_types(proto.graph)
    result: dict = {"nodes": len(ops), "kinds": {k: sum(op in types for op in ops) for k, types in KINDS.items()}}
    if inputs_npz:
        from graphlens.numerics import compare_tensors

        with np.load(inputs_npz) as data:
            inputs = {k: data[k] for k in data.files}
        with np.load(outputs_npz) as data:
            expected = [data[f"arr_{i}"] for i in range(len(data.files))]
        run = PathRunner(model).run(inputs)
        if run.error is not None:
            result["error"] = f"does not run in onnxruntime: {run.error}"
        elif len(run.outputs) != len(expected):
            result["error"] = f"{len(run.outputs)} outputs, the original has {len(expected)}"
        else:
            diffs = [compare_tensors(name, want, got) for (name, got), want in zip(run.outputs.items(), expected)]
            result["max_abs"] = max(d.max_abs for d in diffs)
            result["passed"] = all(d.passed for d in diffs)
            result["failed"] = [_outside(d.to_json()) for d in diffs if not d.passed]
    print(json.dumps(result))


def _outside(diff: dict) -> str:
    """A failing tensor in a few words: ``logits |Δ| 1.6e+03 > 9.5e-02``."""
    size = f"|Δ| {diff['max_abs']:.1e}" if diff["max_abs"] is not None else "|Δ| inf"
    limit = f" > {diff['limit']:.1e}" if diff["limit"] is not None else ""
    return f"{diff['name']} {size}{limit}" + (f" ({diff['note']})" if diff.get("note") else "")


def _op_types(graph) -> list[str]:
    """Every node's op type, subgraphs included."""
    import onnx

    found = []
    for node in graph.node:
        # SkipSimplifiedLayerNormalization of x with itself is a lone RMS norm (GraphLens writes it below
        # opset 23, where onnxruntime's SimplifiedLayerNormalization fails the ONNX checker)
        lone = (node.op_type == "SkipSimplifiedLayerNormalization" and len(node.input) > 1
                and node.input[0] == node.input[1])
        found.append("SimplifiedLayerNormalization" if lone else node.op_type)
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                found += _op_types(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    found += _op_types(sub)
    return found


# ---------------------------------------------------------------- the parent


@dataclass
class Prepared:
    """A built model and the inputs every tool is checked on."""

    path: Path
    external: bool
    inputs: Path | None = None
    outputs: Path | None = None
    dims: str = ""
    why_unchecked: str = ""


def prepare(name: str, folder: Path, args: argparse.Namespace) -> tuple[Prepared | None, str]:
    """Build model ``name`` in ``folder`` and draw its reference inputs and outputs."""
    path = folder / f"{name}.onnx"
    cmd = [sys.executable, str(ROOT / "benchmarks" / "transformer_models.py"), name, "-o", str(path)]
    if args.cache is not None:
        cmd += ["--cache", str(args.cache)]
    built = run_measured(cmd, max(args.limit, 600.0), folder / "logs" / "build")
    if built.error:
        return None, f"building failed: {built.error}"
    prepared = Prepared(path, external=Path(f"{path}.data").exists())
    result, error = child("reference_outputs", str(path), json.dumps(DIMS.get(name, {})),
                          json.dumps(FEEDS.get(name, {})), str(folder / "inputs.npz"), str(folder / "outputs.npz"),
                          limit=args.limit, logs=folder / "logs" / "reference")
    if result is None or result.get("error"):
        prepared.why_unchecked = f"original does not run: {error or result['error']}"
    else:
        prepared.inputs, prepared.outputs, prepared.dims = folder / "inputs.npz", folder / "outputs.npz", result["dims"]
    return prepared, ""


def original_row(model: Prepared, folder: Path, limit: float) -> Row:
    found, error = child("inspect", str(model.path), limit=limit, logs=folder / "logs" / "original")
    if found is None:
        return Row(verdict=f"cannot be read: {error}")
    return Row(nodes=found["nodes"], kinds=found["kinds"], verdict=model.why_unchecked)


def measure(tool: str, model: Prepared, out_dir: Path, args: argparse.Namespace, tools: dict | None = None) -> Row:
    """``--repeat`` timed runs of one tool on one model, then its counts and numeric verdict; ``tools``
    (default :data:`TOOLS`) says how to run it."""
    out_dir.mkdir(parents=True, exist_ok=True)
    output = out_dir / f"{model.path.stem}.onnx"
    cmd = (tools or TOOLS)[tool](str(model.path), str(output), "external" if model.external else "inline")
    if tool == GRAPHLENS:
        cmd += ["--report", str(out_dir / "report.json")]
    times, peaks = [], []
    for attempt in range(args.repeat + 1):  # the first run untimed: bytecode written, files in the page cache
        _clear(out_dir)  # a data file left from the last run would be appended to, not replaced
        run = run_measured(cmd, args.limit, out_dir / "logs" / str(attempt))
        if run.error:
            return Row(verdict=f"failed: {run.error}")
        if attempt:
            times.append(run.seconds)
            peaks.append(run.peak_mb)
    row = Row(statistics.median(times), max(peaks))
    if tool == REFERENCE and run.stdout.strip():
        row.notes.append(f"its own count: {run.stdout.strip().splitlines()[-1]}")
    checked = model.inputs is not None and tool != GRAPHLENS
    found, error = child("inspect", str(output), *((str(model.inputs), str(model.outputs)) if checked else ()),
                         limit=args.limit, logs=out_dir / "logs" / "inspect")
    if found is None:
        row.verdict = f"output cannot be read: {error}"
        return row
    row.nodes, row.kinds = found["nodes"], found["kinds"]
    if tool == GRAPHLENS:
        _graphlens_check(row, model, cmd, out_dir, args.limit)
    elif not checked:
        row.verdict = model.why_unchecked
    elif found.get("error"):
        row.verdict = found["error"]
    else:
        row.max_abs, row.passed = found["max_abs"], found["passed"]
        row.verdict = "pass" if row.passed else "FAIL: " + "; ".join(found["failed"])
    return row


def _graphlens_check(row: Row, model: Prepared, cmd: list[str], out_dir: Path, limit: float) -> None:
    """``fold --check`` once more, on the shared inputs: its exit code is the verdict."""
    _clear(out_dir)
    check = [*cmd, "--check"] + (["--inputs", str(model.inputs)] if model.inputs is not None else [])
    run = run_measured(check, limit, out_dir / "logs" / "check")
    if run.code not in (0, 1):
        row.verdict = f"check failed to run: {run.error}"
        return
    row.passed = run.code == 0
    row.verdict = f"{'pass' if row.passed else 'FAIL'} (exit {run.code}; --check run {run.seconds:.1f} s)"
    try:
        report = json.loads((out_dir / "report.json").read_text())
    except (OSError, ValueError):
        return
    numeric = report.get("numeric") or {}
    row.max_abs = numeric.get("max_abs")
    if not numeric.get("available", True):
        row.verdict += f": {numeric.get('reason')}"
    failed = [_outside(d) for d in (*numeric.get("outputs", ()), *numeric.get("boundary", ())) if not d["passed"]]
    if failed:
        row.verdict += ": " + "; ".join(failed)
    applied = ", ".join(f"{rule} {count}" for rule, count in (report.get("applied") or {}).items())
    refused = report.get("refused") or []
    row.notes.append(f"applied: {applied or 'nothing'}; refusals: {len(refused)}")
    row.notes += [f"refused ({r.get('rule')}): {r.get('reason')}" for r in refused[:MAX_REFUSALS_SHOWN]]


def _clear(folder: Path) -> None:
    for path in folder.iterdir():
        if path.is_file():
            path.unlink()


def verdict_on_targets(rows: dict[str, Row]) -> str:
    """The issue's targets for GraphLens, against optimize_for_ort on the same model."""
    ours, theirs, original = rows.get(GRAPHLENS), rows.get(REFERENCE), rows.get("original")
    missing = [tool for tool, row in ((GRAPHLENS, ours), (REFERENCE, theirs), ("original", original))
               if row is None or row.nodes is None]
    if missing:
        return f"not comparable: no model from {missing[0]}"
    short = [kind for kind in KINDS
             if theirs.kinds[kind] > original.kinds.get(kind, 0) and ours.kinds[kind] < theirs.kinds[kind]]
    fused = any(theirs.kinds[kind] > original.kinds.get(kind, 0) for kind in KINDS)
    kinds = "yes" if fused else "yes (it fuses nothing)"
    if short:
        kinds = "NO (" + ", ".join(f"{k} {ours.kinds[k]} < {theirs.kinds[k]}" for k in short) + ")"
        covered = [k for k in short if k in SKIP_VARIANTS and _covered_by_skip_variant(k, ours, theirs)]
        if covered:
            kinds += f"; {', '.join(covered)} covered by the surplus of its skip variant"
    growth = (ours.nodes - theirs.nodes) / theirs.nodes
    nodes = f"{'yes' if growth <= 0.10 else 'NO'} ({ours.nodes:,} vs {theirs.nodes:,}, {growth:+.0%})"
    check = "yes" if ours.passed else "NO" if ours.passed is False else "unknown"
    if ours.seconds is not None and theirs.seconds is not None:
        faster = f"{'yes' if ours.seconds < theirs.seconds else 'NO'} ({ours.seconds:.1f} s vs {theirs.seconds:.1f} s)"
    else:
        faster = "unknown"
    return (f"at least what optimize_for_ort fuses of every kind: {kinds}; node count within 10 % of its: {nodes}; "
            f"check passes: {check}; less time: {faster}")


def _covered_by_skip_variant(kind: str, ours: Row, theirs: Row) -> bool:
    skip = SKIP_VARIANTS[kind]
    surplus = ours.kinds[skip] - theirs.kinds[skip]
    return surplus >= theirs.kinds[kind] - ours.kinds[kind]


def table(name: str, model: Prepared | None, rows: dict[str, Row]) -> list[str]:
    dims = f", inputs {model.dims}" if model is not None and model.dims else ""
    lines = [f"\n### {name}{dims}\n",
             "| tool | time (s) | peak MB | nodes | " + " | ".join(COLUMNS.values()) + " | max abs Δ | verdict |",
             "|---|---:|---:|---:|" + "---:|" * len(COLUMNS) + "---:|---|"]
    for tool, row in rows.items():
        kinds = " | ".join(_num(row.kinds.get(kind)) for kind in KINDS)
        lines.append(f"| {tool} | {_num(row.seconds, 2)} | {_num(row.peak_mb, 0)} | {_num(row.nodes)} | {kinds} | "
                     f"{_num(row.max_abs, 1, sci=True)} | {row.verdict} |")
    lines += [f"- {tool}: {note}" for tool, row in rows.items() for note in row.notes]
    if GRAPHLENS in rows:
        lines.append(f"- targets: {verdict_on_targets(rows)}")
    return lines


def _num(value, digits: int = 0, sci: bool = False) -> str:
    if value is None:
        return "–"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.{digits}e}" if sci else f"{value:,.{digits}f}"


def bench_model(name: str, work: Path, args: argparse.Namespace) -> list[str]:
    folder = work / name
    folder.mkdir()
    model, error = prepare(name, folder, args)
    if model is None:
        return [f"\n### {name}\n", error]
    rows = {"original": original_row(model, folder, args.limit)}
    outputs = (args.keep / name) if args.keep is not None else folder / "out"
    for tool in TOOLS:
        rows[tool] = measure(tool, model, outputs / tool.replace(" ", "_"), args)
        print(f"{name:16} {tool:18} time {_num(rows[tool].seconds, 2)} s  peak {_num(rows[tool].peak_mb)} MB  "
              f"nodes {_num(rows[tool].nodes)}  {rows[tool].verdict}", flush=True)
    return table(name, model, rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="rxnmap,smollm_1,phi2lm",
                        help=f"comma-separated, of: {', '.join(MODEL_NAMES)} (or 'all')")
    parser.add_argument("--repeat", type=int, default=1, help="timed runs per tool and model (median)")
    parser.add_argument("--cache", type=Path, help="keep rxnmap's download here and reuse it")
    parser.add_argument("--keep", type=Path, help="write the tools' outputs (and logs) here instead of deleting them")
    parser.add_argument("--limit", type=float, default=900.0, help="seconds before a tool's run is stopped")
    args = parser.parse_args()
    args.keep, args.cache = (None if p is None else p.resolve() for p in (args.keep, args.cache))  # tools run in logs/
    names = list(MODEL_NAMES) if args.models == "all" else [m.strip() for m in args.models.split(",") if m.strip()]
    unknown = [m for m in names if m not in MODEL_NAMES]
    if unknown or args.repeat < 1:
        parser.error(f"unknown model '{unknown[0]}'" if unknown else "--repeat must be 1 or more")

    started = time.perf_counter()
    lines: list[str] = []
    with tempfile.TemporaryDirectory(prefix="bench_transformers_") as tmp:
        free_gb = shutil.disk_usage(tmp).free / 1e9
        print(f"temporary folder {tmp}: {free_gb:.0f} GB free (phi2lm needs ~6 GB)", flush=True)
        for name in names:
            lines += bench_model(name, Path(tmp), args)
            shutil.rmtree(Path(tmp) / name, ignore_errors=True)
    print("\n".join(lines))
    legend = ", ".join(f"{column} = {kind} ({'/'.join(KINDS[kind])})" for kind, column in COLUMNS.items())
    print(f"\ncolumns: {legend}")
    print(f"total {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
