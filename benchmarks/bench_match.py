"""Matching ``conv-bn`` on a ~100,000-node model with 25,000 Conv->BN sites.

Reports, each as the median over fresh processes: the matching time of the anchored matcher
(model already loaded), the same search with plain unanchored ``DiGraphMatcher`` (the speed-up),
``explain`` without ``--at`` (near misses), and whole ``graphlens match`` processes against whole
``python -c "import onnx; onnx.load(...)"`` processes.

    python benchmarks/bench_match.py [--nodes 100000] [--repeat 3] [--skip-plain]
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
from graphlens.core.bulk import collector_deferred
from graphlens.core.model import load_model
from graphlens.matching.matcher import Matcher
from graphlens.matching.explain import explain
from graphlens.patterns.library import get_pattern
mode, path = sys.argv[1], sys.argv[2]
deferred = collector_deferred()  # as the graphlens command runs; kept, or the block ends at once
deferred.__enter__()
model = load_model(path)
model.graph.to_networkx()  # part of loading (see bench_load.py), not of matching
pattern = get_pattern('conv-bn')
t0 = time.perf_counter()
if mode == 'anchored':
    n = len(Matcher(pattern).find(model))
elif mode == 'plain':
    n = len(Matcher(pattern).find(model, anchored=False))
else:
    n = explain(pattern, model).match_count
print(json.dumps({'seconds': time.perf_counter() - t0, 'matches': n}))
"""




def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-plain", action="store_true", help="skip the slow unanchored baseline")
    args = parser.parse_args()
    import onnx

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "synthetic.onnx"
        model = make_conv_bn_model(args.nodes)
        onnx.save(model, path)
        print(f"model: {len(model.graph.node)} nodes, "
              f"{sum(n.op_type == 'BatchNormalization' for n in model.graph.node)} Conv->BN sites")
        del model

        rows: dict[str, list[float]] = {"anchored": [], "explain": []}
        counts = {}
        for mode in rows:
            for _ in range(args.repeat):
                r = probe(_PROBE, mode, str(path))
                rows[mode].append(r["seconds"])
                counts[mode] = r["matches"]
        if not args.skip_plain:
            r = probe(_PROBE, "plain", str(path))  # once: it is the slow baseline
            rows["plain"] = [r["seconds"]]
            counts["plain"] = r["matches"]
        procs: dict[str, list[float]] = {"onnx.load process": [], "graphlens match process": []}
        for _ in range(args.repeat):
            procs["onnx.load process"].append(timed([sys.executable, "-c", "import onnx, sys; onnx.load(sys.argv[1])",
                                                     str(path)]))
            procs["graphlens match process"].append(
                timed([sys.executable, "-m", "graphlens", "match", str(path), "-p", "conv-bn", "--json"])
            )

    med = {k: statistics.median(v) for k, v in rows.items()}
    print(f"\nmatching time, median of {args.repeat} fresh processes (plain VF2: one run)")
    print(f"{'anchored VF2 (GraphLens)':34}{med['anchored']:>9.3f} s   {counts['anchored']} matches   (target < 1 s)")
    if "plain" in med:
        print(f"{'plain DiGraphMatcher, whole graph':34}{med['plain']:>9.3f} s   {counts['plain']} matches")
        print(f"{'speed-up':34}{med['plain'] / med['anchored']:>9.1f}x")
    print(f"{'explain, no --at (near misses)':34}{med['explain']:>9.3f} s   (target < 3 s)")
    pm = {k: statistics.median(v) for k, v in procs.items()}
    print()
    for k, v in pm.items():
        print(f"{k:34}{v:>9.3f} s")
    print(f"{'ratio (target <= 4x)':34}{pm['graphlens match process'] / pm['onnx.load process']:>9.2f}x")


if __name__ == "__main__":
    main()
