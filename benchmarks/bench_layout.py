"""Layout speed: loading a model, building its view and laying it out, per model.

Models: DenseNet-121-shaped (``benchmarks/densenet.py``, running-feature Concats, and the
torchvision form with every earlier feature map concatenated), the same with four times as many
layers per dense block (about 1,650 nodes; the torchvision form then has 10,000 edges, most of
them long), and the synthetic residual
Conv/BN models of 10,000 and 100,000 nodes (``benchmarks/synthetic.py``). The 10,000-node model
is measured twice: with default options (it is above the collapse threshold, so it opens as
scope groups) and with every node shown. Each figure is the median of ``--repeat`` in-process
runs; the collector is released between runs so frozen objects of one load do not slow the next.
"process" is a whole fresh Python process doing the same (imports, load, view, layout), which is
what opening a model in the app or a command-line render costs.

    python benchmarks/bench_layout.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import gc
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import onnx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.densenet import make_densenet121
from benchmarks.synthetic import make_conv_bn_model
from graphlens.core.bulk import release_kept
from graphlens.core.model import load_model
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view

BIG = (24, 48, 96, 64)  # DenseNet-121's blocks four times deeper: about 1,650 nodes

CASES: list[tuple[str, str, Callable[[], onnx.ModelProto], ViewOptions]] = [
    ("densenet-121", "densenet", lambda: make_densenet121(0), ViewOptions()),
    ("densenet-121, torchvision concats", "densenet-all", lambda: make_densenet121(0, concat="all"), ViewOptions()),
    ("densenet, 4x layers per block", "densenet4", lambda: make_densenet121(0, blocks=BIG), ViewOptions()),
    (
        "densenet, 4x layers, torchvision concats",
        "densenet4-all",
        lambda: make_densenet121(0, blocks=BIG, concat="all"),
        ViewOptions(),
    ),
    ("synthetic 10k (default: collapsed)", "synthetic10k", lambda: make_conv_bn_model(10_000), ViewOptions()),
    ("synthetic 10k, every node", "synthetic10k", lambda: make_conv_bn_model(10_000), ViewOptions(grouping=False)),
    ("synthetic 100k (default: collapsed)", "synthetic100k", lambda: make_conv_bn_model(100_000), ViewOptions()),
]


_PROCESS = """
import sys
from graphlens.core.model import load_model
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view
grouping = None if sys.argv[2] == "auto" else sys.argv[2] == "on"
layout_view(build_view(load_model(sys.argv[1]).graph, ViewOptions(grouping=grouping)))
"""


def whole_process(path: Path, options: ViewOptions) -> float:
    grouping = "auto" if options.grouping is None else ("on" if options.grouping else "off")
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", _PROCESS, str(path), grouping], check=True)
    return time.perf_counter() - t0


def measure(path: Path, options: ViewOptions) -> dict[str, float]:
    release_kept()
    gc.collect()
    t0 = time.perf_counter()
    model = load_model(path)
    t1 = time.perf_counter()
    view = build_view(model.graph, options)
    t2 = time.perf_counter()
    layout_view(view)
    t3 = time.perf_counter()
    return {
        "nodes": len(model.graph.nodes),
        "items": len(view.items),
        "edges": len(view.edges),
        "load": t1 - t0,
        "view": t2 - t1,
        "layout": t3 - t2,
        "view+layout": t3 - t1,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        files: dict[str, Path] = {}
        for label, file_key, make, options in CASES:
            if file_key not in files:
                files[file_key] = Path(tmp) / f"{file_key}.onnx"
                onnx.save_model(make(), files[file_key])
            runs = [measure(files[file_key], options) for _ in range(args.repeat)]
            median = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
            median["process"] = statistics.median(whole_process(files[file_key], options) for _ in range(args.repeat))
            rows.append((label, median))

    print(f"medians of {args.repeat} runs, seconds")
    header = (
        f"{'model':42} {'nodes':>7} {'items':>6} {'edges':>6} {'load':>7} {'view':>7} {'layout':>7} "
        f"{'view+layout':>12} {'process':>8}"
    )
    print(header)
    print("-" * len(header))
    for label, m in rows:
        print(
            f"{label:42} {m['nodes']:>7.0f} {m['items']:>6.0f} {m['edges']:>6.0f} {m['load']:>7.3f} "
            f"{m['view']:>7.3f} {m['layout']:>7.3f} {m['view+layout']:>12.3f} {m['process']:>8.3f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
