"""Comparing a 10,000-node model with its folded version, every node and initializer renamed.

A is the synthetic residual Conv→BN→Relu→Add model (``benchmarks/synthetic.py``); B is A after
``fold_model`` with every node, initializer and intermediate tensor renamed, so pairing by name
finds nothing and everything rests on structure. Reported, median of ``--repeat`` runs in this
process (inside ``collector_deferred``, as the ``graphlens`` command runs): the baselines, loading
both files with ``onnx.load`` and pairing by name alone; then ``compare_models`` structure only,
and with numerics (both models run by onnxruntime with every paired tensor exposed); and how many
of A's nodes ended in each kind of pair.

    python benchmarks/bench_compare.py [--nodes 10000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import onnx

from benchmarks.synthetic import make_conv_bn_model
from graphlens.compare import compare_models
from graphlens.core.bulk import collector_deferred
from graphlens.core.model import Model, load_model
from graphlens.rewrites.driver import fold_model
from tests.compare.models import rename_everything


def median_time(fn: Callable[[], object], repeat: int) -> tuple[float, object]:
    times, result = [], None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


def name_only(a: Model, b: Model) -> int:
    """The baseline a name-keyed viewer gets: nodes of A whose name B also has."""
    names = b.graph.by_name
    return sum(1 for n in a.graph.nodes if n.name in names and names[n.name].op_type == n.op_type)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, collector_deferred():
        path_a, path_b = Path(tmp) / "a.onnx", Path(tmp) / "b.onnx"
        proto = make_conv_bn_model(args.nodes)
        onnx.save(proto, path_a)
        folded = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
        fold_model(folded)
        onnx.save(rename_everything(folded.to_proto()), path_b)
        a, b = load_model(path_a), load_model(path_b)
        n_a, n_b = a.node_count(), b.node_count()
        print(f"A {n_a} nodes, B (folded, renamed) {n_b} nodes; median of {args.repeat}")
        rows = []
        t, _ = median_time(lambda: (onnx.load(path_a), onnx.load(path_b)), args.repeat)
        rows.append(("baseline: `onnx.load` of both files", t, ""))
        t, named = median_time(lambda: name_only(a, b), args.repeat)
        rows.append(("baseline: pairing by name only", t, f"{named} of {n_a} A nodes paired"))
        for label, numeric in (("`compare_models`, structure only", False), ("`compare_models` with numerics", True)):
            t, result = median_time(lambda numeric=numeric: compare_models(a, b, numeric=numeric), args.repeat)
            how = {h: sum(len(p.a) for p in result.pairs if p.how == h and p.b) for h in ("name", "structure", "group")}
            paired = sum(how.values())
            detail = (f"{paired} of {n_a} A nodes paired ({how['structure']} by structure, {how['group']} in "
                      f"{result.counts['changed']} groups); {result.counts}")
            if numeric:
                worst = min((p.error.sqnr_db for p in result.pairs if p.error is not None), default=float("nan"))
                detail += f"; {sum(p.error is not None for p in result.pairs)} tensors, worst SQNR {worst:.1f} dB"
            rows.append((label, t, detail))
        print("| what | median (s) | result |")
        print("|---|---:|---|")
        for label, seconds, detail in rows:
            print(f"| {label} | {seconds:.3f} | {detail} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
