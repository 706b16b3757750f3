"""Model-zoo CNNs as old exporters wrote them: ``graphlens render`` and ``fold`` against onnxslim.

The classic zoo CNNs (onnx-caffe2, IR 3) list every initializer among the graph inputs; onnx's own
test data ships light copies of them whose weights are ``ConstantOfShape`` nodes, each shape an
initializer listed as an input. Models used:

* ``light``: those files as onnx ships them (weights filled with 0.02, so every output is the
  same value: a numeric check on them cannot fail, only a crash can);
* ``random``: the same graphs with every ``ConstantOfShape`` weight replaced by a seeded random
  initializer, listed as an input as IR 3 requires (the form of the full zoo downloads), so the
  numeric check has something to compare.

Render rows time whole ``graphlens render`` processes on DenseNet-121 (1,746 nodes): the IR 3 file,
the same graph declared IR 8 (its initializer inputs are then overridable defaults, drawn inside
their consumers' boxes, not constants), and with ``--before REF`` the same command from an older
commit of this repository, checked out beside it (``git worktree``), on the IR 3 file.

    pip install -e '.[bench]'
    python benchmarks/bench_zoo.py [--repeat 3] [--before REF]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_fold import Outcome, _fmt, _num, counts, numeric, run_tool

ZOO = ("resnet50", "inception_v2", "shufflenet", "densenet121")
"""The light zoo models with BatchNormalization nodes."""

TOOLS = {
    "graphlens": lambda i, o: [sys.executable, "-m", "graphlens", "fold", i, "-o", o],
    "onnxslim": lambda i, o: [sys.executable, "-c", "import sys, onnx, onnxslim\n"
                              "onnx.save(onnxslim.slim(sys.argv[1]), sys.argv[2])\n", i, o],
}


def light_path(name: str) -> Path:
    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"


def with_random_weights(model: onnx.ModelProto, seed: int = 0) -> onnx.ModelProto:
    """Each ConstantOfShape fed by a shape initializer becomes a random initializer (listed as an input).

    Conv/Gemm weights get He-scaled normals, BN variances positive values, other parameters
    small normals, so activations stay in range through fifty layers.
    """
    rng = np.random.default_rng(seed)
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    consumers: dict[str, list[tuple[onnx.NodeProto, int]]] = {}
    for node in graph.node:
        for slot, name in enumerate(node.input):
            consumers.setdefault(name, []).append((node, slot))
    kept, new_inits = [], []
    for node in graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in inits:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
        user, slot = (consumers.get(node.output[0]) or [(None, -1)])[0]
        op = user.op_type if user is not None else ""
        if op == "BatchNormalization":
            value = {1: rng.uniform(0.2, 0.6, shape), 2: rng.normal(0, 0.1, shape),
                     3: rng.normal(0, 0.1, shape), 4: rng.uniform(0.5, 1.5, shape)}.get(slot, rng.normal(0, 0.1, shape))
        elif op in ("Conv", "Gemm") and slot == 1:
            fan_in = int(np.prod(shape[1:])) if len(shape) > 1 else 1
            value = rng.normal(0, np.sqrt(2.0 / fan_in), shape)
        elif op == "Mul":
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.normal(0, 0.1, shape)
        new_inits.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
    graph.ClearField("node")
    graph.node.extend(kept)
    used = {t for n in kept for t in n.input}
    old = [t for t in graph.initializer if t.name in used]
    graph.ClearField("initializer")
    graph.initializer.extend(old + new_inits)
    names = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name in names or v.name not in inits]
    inputs += [onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)) for t in new_inits]
    graph.ClearField("input")
    graph.input.extend(inputs)
    return model


def declared_ir(model: onnx.ModelProto, ir_version: int) -> onnx.ModelProto:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    copy.ir_version = ir_version
    return copy


def render_rows(folder: Path, repeat: int, before: str | None) -> None:
    dense = onnx.load(str(light_path("densenet121")))
    ir3 = light_path("densenet121")
    ir8 = folder / "densenet121-ir8.onnx"
    onnx.save(declared_ir(dense, 8), str(ir8))
    out = str(folder / "out.png")
    rows: list[tuple[str, Path, Path]] = [("IR 3 file (initializer inputs are constants)", ROOT, ir3),
                                          ("same graph declared IR 8 (overridable defaults)", ROOT, ir8)]
    if before:
        tree = folder / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(tree), before],
                       check=True, capture_output=True)
        rows.append((f"IR 3 file, graphlens at {before}", tree, ir3))
    print(f"`graphlens render` on DenseNet-121 (1,746 nodes), whole processes, median of {repeat}")
    try:
        for label, source, path in rows:
            times = []
            env = {**os.environ, "PYTHONPATH": str(source)}  # `python -m` imports from its working folder first
            for _ in range(repeat):
                seconds, _, note = run_tool([sys.executable, "-m", "graphlens", "render", str(path), "-o", out],
                                            limit=300, env=env, cwd=source)
                if seconds is None:
                    raise SystemExit(f"{label}: {note}")
                times.append(seconds)
            print(f"  {label:52} {statistics.median(times):6.2f} s", flush=True)
    finally:
        if before:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(folder / "before")],
                           capture_output=True)


def fold_rows(folder: Path, repeat: int) -> None:
    models: dict[str, Path] = {}
    for name in ZOO:
        models[f"{name} light"] = light_path(name)
        path = folder / f"{name}-random.onnx"
        onnx.save(with_random_weights(onnx.load(str(light_path(name)))), str(path))
        models[f"{name} random"] = path
    print(f"\nfold: graphlens (median of {repeat}) and onnxslim (one run) as whole processes")
    table = []
    for label, path in models.items():
        bn_before, _ = counts(path)
        for tool, build in TOOLS.items():
            out = folder / f"out-{tool}-{path.name}"
            times, peaks, note = [], [], ""
            for _ in range(repeat if tool == "graphlens" else 1):
                seconds, peak, note = run_tool(build(str(path), str(out)), limit=300)
                if seconds is None:
                    break
                times.append(seconds)
                peaks.append(peak)
            outcome = Outcome(note=note)
            if times:
                outcome = Outcome(statistics.median(times), max(peaks), *counts(out))
                outcome.max_abs, outcome.passed, outcome.note = numeric(path, out)
            print(f"  {label:22} {tool:10} {_fmt(outcome)}", flush=True)
            table.append((label, bn_before, tool, outcome))
    print("\n| model (BN in it) | tool | time (s) | BN left | max abs error | verdict |")
    print("|---|---|---:|---:|---:|---|")
    for label, bn_before, tool, o in table:
        verdict = o.note or ("pass" if o.passed else "FAIL" if o.passed is False else "")
        print(f"| {label} ({bn_before}) | {tool} | {_num(o.seconds, 2)} | {_num(o.bn_left, 0)} | "
              f"{_num(o.max_abs, 1, sci=True)} | {verdict} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--before", help="a git commit to time `graphlens render` at, for comparison")
    parser.add_argument("--skip-fold", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        render_rows(Path(tmp), args.repeat, args.before)
        if not args.skip_fold:
            fold_rows(Path(tmp), args.repeat)


if __name__ == "__main__":
    main()
