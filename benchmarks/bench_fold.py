"""``graphlens fold`` against onnxruntime's basic optimizations, onnxslim and onnxoptimizer.

Each tool folds each model as a whole process; reported per tool and model: wall time, peak memory
of that process, BatchNormalization nodes left, and the largest numeric error of its output
against the original (onnxruntime, optimizations off, one seeded random input). A peer that runs
past ``--limit`` seconds on a model is stopped and skipped on the larger models.

    pip install -e '.[bench]'
    python benchmarks/bench_fold.py [--sizes 10000,100000] [--limit 300] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx

ORT_BASIC = (
    "import sys, onnxruntime as ort\n"
    "so = ort.SessionOptions()\n"
    "so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC\n"
    "so.optimized_model_filepath = sys.argv[2]\n"
    "ort.InferenceSession(sys.argv[1], so, providers=['CPUExecutionProvider'])\n"
)
ONNXSLIM = "import sys, onnx, onnxslim\nonnx.save(onnxslim.slim(sys.argv[1]), sys.argv[2])\n"
ONNXOPTIMIZER = (
    "import sys, onnx, onnxoptimizer\n"
    "onnx.save(onnxoptimizer.optimize(onnx.load(sys.argv[1]), ['fuse_bn_into_conv']), sys.argv[2])\n"
)
TOOLS = {
    "graphlens": lambda i, o: [sys.executable, "-m", "graphlens", "fold", i, "-o", o],
    "onnxruntime basic": lambda i, o: [sys.executable, "-c", ORT_BASIC, i, o],
    "onnxslim": lambda i, o: [sys.executable, "-c", ONNXSLIM, i, o],
    "onnxoptimizer": lambda i, o: [sys.executable, "-c", ONNXOPTIMIZER, i, o],
}


@dataclass
class Outcome:
    seconds: float | None = None
    peak_mb: float | None = None
    bn_left: int | None = None
    nodes: int | None = None
    max_abs: float | None = None
    passed: bool | None = None
    note: str = ""


def run_tool(cmd: list[str], limit: float, env: dict[str, str] | None = None,
             cwd: Path | None = None) -> tuple[float | None, float | None, str]:
    """Wall time and peak RSS of one process, or why there are none."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=cwd)
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.perf_counter() - start > limit:
            proc.send_signal(signal.SIGKILL)
            os.wait4(proc.pid, 0)
            return None, None, f"stopped after {limit:.0f} s"
        time.sleep(0.02)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        err = proc.stderr.read().decode(errors="replace").strip().splitlines() if proc.stderr else []
        return None, None, f"failed: {err[-1][:120] if err else 'no message'}"
    return elapsed, usage.ru_maxrss / 1024, ""


def counts(path: Path) -> tuple[int, int]:
    """(BatchNormalization nodes, all nodes), subgraphs included."""
    model = onnx.load(str(path), load_external_data=False)

    def walk(graph: onnx.GraphProto) -> tuple[int, int]:
        bn = total = 0
        for node in graph.node:
            bn += node.op_type == "BatchNormalization"
            total += 1
            subs = [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
            subs += [g for a in node.attribute if a.type == onnx.AttributeProto.GRAPHS for g in a.graphs]
            for sub in subs:
                b, t = walk(sub)
                bn, total = bn + b, total + t
        return bn, total

    return walk(model.graph)


def numeric(original: Path, folded: Path) -> tuple[float | None, bool | None, str]:
    from graphlens.core.model import load_model
    from graphlens.numerics import diff_models, make_inputs

    a = load_model(original)
    diff = diff_models(a, load_model(folded), make_inputs(a, seed=0))
    if not diff.available:
        return None, None, diff.reason or "unavailable"
    return diff.max_abs, diff.passed, ""


def project_models(folder: Path) -> dict[str, Path]:
    """The test suite's own models: every BN situation the tools disagree on."""
    from onnx import TensorProto

    from tests import models
    from tests.matching import pattern_models as pm
    from tests.rewrites.linear_models import Config, linear_bn

    cases = {
        "demo": onnx.load(str(Path(__file__).resolve().parents[1] / "resources" / "demo.onnx")),
        "conv-bn": linear_bn(Config()),
        "depthwise-conv-bn": linear_bn(Config(c_in=6, c_out=6, group=6)),
        "conv-biasadd-bn": linear_bn(Config(bias=False, bias_add=True)),
        "convtranspose-bn": linear_bn(Config(kind="ConvTranspose")),
        "grouped-convtranspose-bn": linear_bn(Config(kind="ConvTranspose", group=2, stride=2)),
        "gemm-bn": linear_bn(Config(kind="Gemm", trans_b=1, alpha=0.5, beta=2.0)),
        "matmul-bn": linear_bn(Config(kind="MatMul", bias_add=True)),
        "float16-gemm-bn": linear_bn(Config(kind="Gemm", dtype=TensorProto.FLOAT16)),
        "bn-params-behind-constants": models.conv_bn_params_behind_constants(),
        "bn-output-is-graph-output": pm.conv_bn_output_also_graph_output(),
        "two-convs-sharing-weight": pm.two_convs_sharing_weight(),
        "bn-in-if-branch": models.if_with_conv_bn(),
        "conv-output-shared (must not fold)": pm.conv_feeds_bn_and_relu(),
        "decomposed-bn": pm.decomposed_bn_div(),
    }
    paths = {}
    for name, proto in cases.items():
        path = folder / f"{name.split()[0]}.onnx"
        onnx.save(proto, str(path))
        paths[name] = path
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--limit", type=float, default=300.0, help="seconds before a peer is stopped")
    parser.add_argument("--repeat", type=int, default=3, help="runs of graphlens per model (median); peers run once")
    parser.add_argument("--numeric-max-nodes", type=int, default=20_000,
                        help="skip numeric checks above this size (onnxruntime needs minutes for a session)")
    parser.add_argument("--skip-project-models", action="store_true")
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s]

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        inputs: dict[str, tuple[Path, int]] = {}
        original_bn: dict[str, int] = {}
        if not args.skip_project_models:
            for name, path in project_models(folder).items():
                original_bn[name], nodes = counts(path)
                inputs[name] = (path, nodes)
        for size in sizes:
            path = folder / f"synthetic-{size}.onnx"
            # In a child process: a parent that grew to hold the model would pass its resident size on
            # to every tool it forks, and the peak-memory column would measure the parent.
            subprocess.run([sys.executable, str(Path(__file__).with_name("synthetic.py")), "--nodes", str(size), "-o",
                            str(path)],
                           check=True, stdout=subprocess.DEVNULL)
            inputs[f"synthetic {size:,} nodes"] = (path, size)
            original_bn[f"synthetic {size:,} nodes"] = size // 4

        skipped: dict[str, str] = {}
        results: dict[str, dict[str, Outcome]] = {}
        for name, (path, nodes) in inputs.items():
            results[name] = {}
            for tool, build in TOOLS.items():
                if tool in skipped:
                    results[name][tool] = Outcome(note=skipped[tool])
                    continue
                out = folder / f"out-{tool.replace(' ', '_')}-{path.name}"
                runs = args.repeat if tool == "graphlens" else 1
                times, peaks, note = [], [], ""
                for _ in range(runs):
                    seconds, peak, note = run_tool(build(str(path), str(out)), args.limit)
                    if seconds is None:
                        break
                    times.append(seconds)
                    peaks.append(peak)
                if not times:
                    results[name][tool] = Outcome(note=note)
                    if note.startswith("stopped") and nodes >= 1000:
                        skipped[tool] = f"skipped (stopped after {args.limit:.0f} s on {name})"
                    continue
                outcome = Outcome(statistics.median(times), max(peaks), *counts(out))
                if nodes <= args.numeric_max_nodes:
                    outcome.max_abs, outcome.passed, outcome.note = numeric(path, out)
                else:
                    outcome.note = "numeric check skipped (size)"
                results[name][tool] = outcome
                print(f"{name:38} {tool:18} {_fmt(outcome)}", flush=True)

    print("\n| model | tool | time (s) | peak MB | BN left | nodes | max abs error | verdict |")
    print("|---|---|---:|---:|---:|---:|---:|---|")
    for name, row in results.items():
        for tool, o in row.items():
            verdict = o.note or ("pass" if o.passed else "FAIL" if o.passed is False else "")
            print(f"| {name} (BN: {original_bn[name]}) | {tool} | {_num(o.seconds, 2)} | {_num(o.peak_mb, 0)} | "
                  f"{_num(o.bn_left, 0)} | {_num(o.nodes, 0)} | {_num(o.max_abs, 1, sci=True)} | {verdict} |")
    print("\nGraphLens leaves no more BN than the best peer whose output is correct (models that have BNs):")
    for name, row in results.items():
        if not original_bn[name]:
            continue
        ours = row["graphlens"].bn_left
        peers = [o.bn_left for t, o in row.items() if t != "graphlens" and o.bn_left is not None
                 and o.passed is not False]
        best = min(peers) if peers else None
        ok = ours is not None and (best is None or ours <= best)
        print(f"  {name}: graphlens {ours}, best correct peer {best} -> {'yes' if ok else 'NO'}")
    times = {n: r["graphlens"].seconds for n, r in results.items() if n.startswith("synthetic")}
    if len(times) == 2:
        (small, t_small), (large, t_large) = sorted(times.items(), key=lambda kv: inputs[kv[0]][1])
        print(f"\ngraphlens scaling: {large} / {small} = {t_large / t_small:.1f}x (target <= 12x)")


def _num(v, digits, sci=False) -> str:
    if v is None:
        return "–"
    return f"{v:.{digits}e}" if sci else f"{v:.{digits}f}"


def _fmt(o: Outcome) -> str:
    return (f"time {_num(o.seconds, 2)} s  peak {_num(o.peak_mb, 0)} MB  BN left {_num(o.bn_left, 0)}  "
            f"max abs {_num(o.max_abs, 1, sci=True)}  "
            f"{o.note or ('pass' if o.passed else 'FAIL' if o.passed is False else '')}")


if __name__ == "__main__":
    main()
