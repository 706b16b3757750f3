"""Start-up cost of ``graphlens`` commands, beside the bare imports and loads they cannot avoid.

Every figure is a whole process run here, in the same run as its baseline:

- ``graphlens render`` of a 3-node model (best of N and median) against ``import PySide6.QtGui``
  and ``import onnx`` alone;
- ``graphlens info`` and ``graphlens match -p conv-bn`` on the same 3 nodes;
- ``graphlens match -p conv-bn`` on a 100,000-node synthetic model with 1-channel (small) weights
  against ``python -c "import onnx; onnx.load(MODEL)"`` (medians, and their ratio).

    python benchmarks/bench_startup.py [--repeat 5] [--nodes 100000] [--tree DIR] [--compile]

``--tree`` runs the ``graphlens`` package found in DIR (e.g. an exported earlier commit) instead of
the installed one, so before and after can be measured in one session. The package's compiled modules
are kept in a cache folder, as after an installed command's first run; ``--compile`` compiles them in
every process instead (``PYTHONDONTWRITEBYTECODE=1``, which the project machine sets: the earlier figures in
docs/benchmarks.md were measured that way).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.processes import bytecode_environment
from benchmarks.synthetic import make_conv_bn_model


def tiny_model(path: Path) -> None:
    """Conv -> BatchNormalization -> Relu: three nodes, the smallest model every command accepts."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    c = 2
    inits = [
        numpy_helper.from_array(np.ones((c, c, 1, 1), np.float32), "w"),
        *(numpy_helper.from_array(np.full(c, v, np.float32), n) for n, v in (("s", 1), ("b", 0), ("m", 0), ("v", 1))),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
        helper.make_node("BatchNormalization", ["c", "s", "b", "m", "v"], ["n"], name="bn"),
        helper.make_node("Relu", ["n"], ["y"], name="relu"),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, c, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, 4, 4])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)


def run_times(cmd: list[str], repeat: int, env: dict[str, str]) -> list[float]:
    """Wall-clock seconds of ``repeat`` whole processes (each must succeed), run in the temporary folder: ``python -c``
    puts the working folder first on ``sys.path``, where a source tree would shadow ``--tree``."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run(cmd, capture_output=True, check=True, env=env, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - t0)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--tree", type=Path, help="run the graphlens package in this folder")
    parser.add_argument("--compile", action="store_true", help="compile the package's modules in every process")
    args = parser.parse_args()
    env = bytecode_environment(dict(os.environ, QT_QPA_PLATFORM="offscreen"), args.compile,
                               Path(tempfile.gettempdir()) / "graphlens-bench-pycache")
    if args.tree is not None:
        env["PYTHONPATH"] = str(args.tree.resolve())
    py = sys.executable
    graphlens = [py, "-c", "from graphlens.cli import entry; entry()"]  # what the console script runs

    with tempfile.TemporaryDirectory() as folder:
        tmp = Path(folder)
        tiny, big = tmp / "tiny.onnx", tmp / "big.onnx"
        tiny_model(tiny)
        import onnx

        onnx.save(make_conv_bn_model(args.nodes, channels=1), big)
        size_mb = big.stat().st_size / 2**20
        rows = {
            "python -c 'import onnx'": [py, "-c", "import onnx"],
            "python -c 'import PySide6.QtGui'": [py, "-c", "import PySide6.QtGui"],
            "graphlens render (3 nodes)": [*graphlens, "render", str(tiny), "-o", str(tmp / "out.png")],
            "graphlens info (3 nodes)": [*graphlens, "info", str(tiny)],
            "graphlens match -p conv-bn (3 nodes)": [*graphlens, "match", str(tiny), "-p", "conv-bn"],
        }
        big_rows = {
            "onnx.load process": [py, "-c", "import onnx, sys; onnx.load(sys.argv[1])", str(big)],
            "graphlens match -p conv-bn process": [*graphlens, "match", str(big), "-p", "conv-bn"],
        }
        results: dict[str, list[float]] = {k: [] for k in (*rows, *big_rows)}
        for cmd in (*rows.values(), *big_rows.values()):
            subprocess.run(cmd, capture_output=True, check=True, env=env, cwd=tmp)  # warm the page cache once
        for _ in range(args.repeat):  # interleaved, so drifting load on the machine hits every row alike
            for name, cmd in (*rows.items(), *big_rows.items()):
                results[name] += run_times(cmd, 1, env)

    where = f" (graphlens from {args.tree})" if args.tree else ""
    where += "; modules compiled in every process" if args.compile else "; modules compiled once, cached"
    print(f"load: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"whole processes, {args.repeat} runs each{where}")
    print(f"{'':40}{'best':>9}{'median':>9}")
    for name in rows:
        print(f"{name:40}{min(results[name]):>9.3f}{statistics.median(results[name]):>9.3f}")
    print(f"\n{args.nodes:,}-node synthetic model, 1-channel weights ({size_mb:.1f} MB)")
    med = {k: statistics.median(results[k]) for k in big_rows}
    for name in big_rows:
        print(f"{name:40}{min(results[name]):>9.3f}{med[name]:>9.3f}")
    ratio = med["graphlens match -p conv-bn process"] / med["onnx.load process"]
    print(f"{'ratio of medians (target <= 4x)':40}{ratio:>18.2f}x")
    render = results["graphlens render (3 nodes)"]
    print(f"render best of {args.repeat}: {min(render):.3f} s (target <= 0.45 s)")


if __name__ == "__main__":
    main()
