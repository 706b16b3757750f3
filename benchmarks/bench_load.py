"""Loading a ~100,000-node model: GraphLens (model + networkx view) against a bare ``onnx.load``.

Each measurement runs in a fresh Python process so that memory figures are not polluted by earlier
runs: time is wall-clock around the load only; memory is the growth of the process's peak resident
set (VmHWM) over its resident set just before loading. Also times whole ``graphlens info``
processes against whole ``python -c "import onnx; onnx.load(...)"`` processes.

``graphlens load`` runs inside ``collector_deferred()``, as the ``graphlens`` command does; the
same load in a script that leaves the collector on is shown below it.

    python benchmarks/bench_load.py [--nodes 100000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.processes import probe, timed
from benchmarks.synthetic import make_conv_bn_model

_PROBE = r"""
import json, sys, time
def rss_kb(field):
    for line in open('/proc/self/status'):
        if line.startswith(field):
            return int(line.split()[1])
import onnx
mode, path = sys.argv[1], sys.argv[2]
if mode.startswith('graphlens'):
    from graphlens.core.bulk import collector_deferred
    from graphlens.core.model import load_model
    import networkx
before = rss_kb('VmRSS:')
t0 = time.perf_counter()
if mode == 'onnx':
    m = onnx.load(path)
else:
    # 'graphlens': as the graphlens command runs it; 'graphlens-script': a script that leaves the collector on
    if mode == 'graphlens':
        deferred = collector_deferred()  # kept: dropping it would end the block at once
        deferred.__enter__()
    m = load_model(path)
    g = m.graph.to_networkx()
elapsed = time.perf_counter() - t0
print(json.dumps({'seconds': elapsed, 'peak_mb': (rss_kb('VmHWM:') - before) / 1024}))
"""




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "synthetic.onnx"
        import onnx

        model = make_conv_bn_model(args.nodes)
        onnx.save(model, path)
        nodes = len(model.graph.node)
        del model
        print(f"model: {nodes} nodes, {path.stat().st_size / 2**20:.1f} MB on disk")

        runs = {mode: [probe(_PROBE, mode, str(path)) for _ in range(args.repeat)]
                for mode in ("onnx", "graphlens", "graphlens-script")}
        med = {mode: {k: statistics.median(r[k] for r in rs) for k in ("seconds", "peak_mb")}
               for mode, rs in runs.items()}
        info_cmd = [sys.executable, "-m", "graphlens", "info", str(path)]
        load_cmd = [sys.executable, "-c", "import onnx, sys; onnx.load(sys.argv[1])", str(path)]
        procs = {"onnx.load process": [], "graphlens info process": []}
        for _ in range(args.repeat):  # interleaved, so machine noise hits both alike
            procs["onnx.load process"].append(timed(load_cmd))
            procs["graphlens info process"].append(timed(info_cmd))
        proc_med = {k: statistics.median(v) for k, v in procs.items()}

    print(f"\nmedians of {args.repeat} runs, each in a fresh process")
    print(f"{'':34}{'time (s)':>10}{'peak +MB':>10}")
    print(f"{'onnx.load':34}{med['onnx']['seconds']:>10.3f}{med['onnx']['peak_mb']:>10.0f}")
    print(f"{'graphlens load + networkx view':34}{med['graphlens']['seconds']:>10.3f}"
          f"{med['graphlens']['peak_mb']:>10.0f}")
    print(f"{'  the same in a script (collector on)':34}{med['graphlens-script']['seconds']:>10.3f}"
          f"{med['graphlens-script']['peak_mb']:>10.0f}")
    print(
        f"{'ratio (target <= 3x, 3x)':34}{med['graphlens']['seconds'] / med['onnx']['seconds']:>9.2f}x"
        f"{med['graphlens']['peak_mb'] / med['onnx']['peak_mb']:>9.2f}x"
    )
    print()
    for name, value in proc_med.items():
        print(f"{name:34}{value:>10.3f}")
    ratio = proc_med["graphlens info process"] / proc_med["onnx.load process"]
    print(f"{'ratio (target <= 5x)':34}{ratio:>9.2f}x")


if __name__ == "__main__":
    main()
