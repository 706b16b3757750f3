"""Every command on LLM-sized models, time and peak resident memory next to ``onnx.load``'s.

Two of onnxscript's test decoders, built here in a temporary folder (never in the repository):
``phi2lm`` (1.36 GB) stored as exporters store LLMs, its weights in one external data file, and
``smollm_2`` (1 GB) with its weights inline as Constant nodes, as the dynamo exporter writes them.
Each command runs as its own process; its peak is the process's maximum resident set size.

    pip install -e '.[bench]'
    python benchmarks/bench_large.py [--models phi2lm,smollm_2] [--limit 600] [--keep DIR] [--only quantize]

``--only`` runs the named commands (comma-separated) after ``onnx.load``, the baseline; with ``--keep``, models
already built there are reused.

Targets (the issue's): for the inline model, ``render``/``info``/``match`` peak ≤ 1.5× ``onnx.load``'s
and ``render`` ≤ 3× its time + 2 s, ``fold --check``/``diff``/``compare`` peak ≤ 2× ``onnx.load``'s plus
the weights' size; for the external model, checks within 2 minutes and ≤ 2.5× the weights' size.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_transformers import Run, run_measured
from benchmarks.transformer_models import DIMS

LOAD = "import sys, onnx; onnx.load(sys.argv[1])"
WINDOW = (
    "import os, sys; os.environ['QT_QPA_PLATFORM'] = 'offscreen'\n"
    "from graphlens.gui.app import application\nfrom graphlens.gui import MainWindow\n"
    "app = application(); w = MainWindow(); w.show()\n"
    "assert w.open_model(sys.argv[1]), w.last_error\n"
    "for _ in range(50): app.processEvents()\n"
    "w.model.modified = False; w.close(); os._exit(0)\n"
)


@dataclass
class Model:
    name: str
    path: Path
    weights_mb: float
    inline: bool


def build_inline(name: str, output: Path) -> Path:
    """onnxscript's decoder exactly as made, weights inline in Constant nodes (one file under 2 GB)."""
    import importlib

    import numpy as np
    import onnx

    np.random.seed(0)
    module = importlib.import_module(f"onnxscript.rewriter.models._{name}")
    onnx.save(module.make_model_with_random_weights(), str(output))
    return output


def commands(model: Model, out: Path) -> dict[str, list[str]]:
    g = [sys.executable, "-m", "graphlens"]
    dims = [arg for name, size in DIMS.get(model.name, {}).items() for arg in ("--dim", f"{name}={size}")]
    folded = out / f"{model.name}.folded.onnx"
    return {
        "onnx.load": [sys.executable, "-c", LOAD, str(model.path)],
        "info": [*g, "info", str(model.path)],
        "render": [*g, "render", str(model.path), "-o", str(out / f"{model.name}.png")],
        "match attention": [*g, "match", str(model.path), "--pattern", "attention"],
        "open in the window": [sys.executable, "-c", WINDOW, str(model.path)],
        "fold --check": [*g, "fold", str(model.path), "-o", str(folded), "--check", *dims],
        "diff": [*g, "diff", str(model.path), str(folded), *dims],
        "compare": [*g, "compare", str(model.path), str(folded), *dims],
        # quantize takes no --dim: its dims are searched (expressions computed from their parts)
        "quantize": [*g, "quantize", str(model.path), "-o", str(out / f"{model.name}.q.onnx"), "--samples", "2"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="phi2lm,smollm_2")
    parser.add_argument("--limit", type=float, default=600.0, help="seconds a command may run")
    parser.add_argument("--keep", type=Path, help="keep models and outputs here (and reuse the models built there)")
    parser.add_argument("--only", help="comma-separated commands to run after onnx.load (default: all)")
    args = parser.parse_args()
    only = None if args.only is None else {"onnx.load", *args.only.split(",")}
    with tempfile.TemporaryDirectory(prefix="bench_large_") as scratch:
        folder = (args.keep or Path(scratch)).resolve()  # the tools run in their logs folder
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            model = _prepare(name, folder, reuse=args.keep is not None)
            print(f"\n### {name}: {'inline Constant weights' if model.inline else 'one external data file'}, "
                  f"{model.weights_mb:,.0f} MB of weights\n")
            print("| command | time (s) | peak MB | peak ÷ onnx.load's | result |")
            print("|---|---:|---:|---:|---|")
            base: Run | None = None
            for label, cmd in commands(model, folder).items():
                if only is not None and label not in only:
                    continue
                run = run_measured(cmd, args.limit, folder / "logs" / name / label.replace(" ", "_"))
                base = run if label == "onnx.load" else base
                comparable = base is not None and base.peak_mb and run.peak_mb is not None
                ratio = f"{run.peak_mb / base.peak_mb:.2f}×" if comparable else ""
                result = run.error or ("ok" if run.code == 0 else f"exit {run.code}")
                seconds = "–" if run.seconds is None else f"{run.seconds:.2f}"
                peak = "–" if run.peak_mb is None else f"{run.peak_mb:,.0f}"
                print(f"| {label} | {seconds} | {peak} | {ratio} | {result} |", flush=True)


def _prepare(name: str, folder: Path, reuse: bool = False) -> Model:
    """Build in a child process: a child forked from a parent holding the model would count its pages."""
    inline = name == "smollm_2"
    path = folder / f"{name}.onnx"
    if reuse and path.exists() and (inline or (folder / f"{name}.onnx.data").exists()):
        return _described(name, path, inline)
    for old in (path, folder / f"{name}.onnx.data"):  # onnx.save appends to a data file that is there
        old.unlink(missing_ok=True)
    builder = "build_inline" if inline else "build"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path\n"
              f"from benchmarks.bench_large import build_inline\nfrom benchmarks.transformer_models import build\n"
              f"{builder}({name!r}, Path({str(path)!r}))")
    subprocess.run([sys.executable, "-c", script], check=True)
    return _described(name, path, inline)


def _described(name: str, path: Path, inline: bool) -> Model:
    if inline:
        return Model(name, path, path.stat().st_size / 2**20, inline=True)
    data = path.parent / f"{name}.onnx.data"
    return Model(name, path, data.stat().st_size / 2**20 if data.exists() else 0.0, inline=False)


if __name__ == "__main__":
    main()
