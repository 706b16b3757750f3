"""Models with external data: what opening, inspecting and folding cost when weights stay on disk.

Builds, in a temporary folder, a chain of 24 MatMul layers with [4096, 4096] float32 weights in one
external data file (1.6 GB), and the same chain ending in Gemm -> BatchNormalization (1.7 GB), then
measures whole processes, each run ``--repeat`` times (medians): wall time and peak resident
memory (the child's ``ru_maxrss``, which counts mapped file pages it touched). Baselines in the
same run: ``onnx.load`` with and without its external data. Folding also reports how many weight
bytes GraphLens read (:func:`graphlens.core.tensors.bytes_read`) next to the total.

    python benchmarks/bench_external.py [--layers 24] [--size 4096] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GRAPHLENS = str(Path(sys.executable).with_name("graphlens"))

_WINDOW = r"""
import json, sys, time
from PySide6.QtWidgets import QApplication
from graphlens.gui import MainWindow
from graphlens.core import tensors
app = QApplication([])
w = MainWindow(); w.show()
app.processEvents()
t0 = time.perf_counter()
assert w.open_model(sys.argv[1]), w.last_error
deadline = time.time() + 60
while (w.panel.view is None or not w.panel.view.items) and time.time() < deadline:
    app.processEvents()
app.processEvents()
image = w.canvas.grab().toImage()
seconds = time.perf_counter() - t0
print(json.dumps({"open_seconds": seconds, "boxes": len(w.panel.view.items), "bytes_read": tensors.bytes_read()}))
w.model.modified = False
"""

_WRAP = r"""
import os, sys, time
t0 = time.perf_counter()
pid = os.posix_spawn(sys.argv[1], sys.argv[1:], os.environ)
_, status, usage = os.wait4(pid, 0)
print(time.perf_counter() - t0, usage.ru_maxrss, os.waitstatus_to_exitcode(status), file=sys.stderr)
"""
"""Runs one measured process from a small parent, whose memory at spawn is the floor Linux reports
as the child's peak (``ru_maxrss`` starts from the spawning process's own)."""

_FOLD = r"""
import json, sys
from graphlens.core import tensors
from graphlens.core.model import load_model
from graphlens.rewrites.driver import fold_model
from graphlens.rewrites.edit import EditHistory
model = load_model(sys.argv[1])
report = fold_model(model, None, EditHistory(model, keep_history=False))
model.save(sys.argv[2])
print(json.dumps({"bytes_read": tensors.bytes_read(), "applied": report.to_json().get("applied")}))
"""


def write_chain(path: Path, layers: int, size: int, gemm_bn: bool) -> int:
    """A MatMul chain (optionally ending in Gemm -> BN) whose weights are written straight to
    ``<path>.data``, one tensor at a time; returns the weight bytes."""
    rng = np.random.default_rng(0)
    data_name = path.name + ".data"
    inits, nodes, offset = [], [], 0
    with open(path.with_name(data_name), "wb") as data:

        def external(name: str, array: np.ndarray) -> None:
            nonlocal offset
            data.write(array.tobytes())
            t = onnx.TensorProto(name=name, data_type=TensorProto.FLOAT, dims=array.shape)
            for key, value in (("location", data_name), ("offset", str(offset)), ("length", str(array.nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = key, value
            t.data_location = TensorProto.EXTERNAL
            inits.append(t)
            offset += array.nbytes

        x = "x"
        for k in range(layers):
            external(f"w{k}", rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size)))
            nodes.append(helper.make_node("MatMul", [x, f"w{k}"], [f"h{k}"], name=f"/layer{k}/matmul"))
            x = f"h{k}"
        if gemm_bn:
            external("gemm_w", rng.standard_normal((size, size), dtype=np.float32) / np.float32(np.sqrt(size)))
            external("gemm_b", rng.standard_normal(size, dtype=np.float32))
            for name, values in (
                ("bn_scale", rng.uniform(0.5, 1.5, size)), ("bn_bias", rng.normal(0, 0.2, size)),
                ("bn_mean", rng.normal(0, 0.5, size)), ("bn_var", rng.uniform(0.5, 2.0, size)),
            ):
                external(name, values.astype(np.float32))
            nodes.append(helper.make_node("Gemm", [x, "gemm_w", "gemm_b"], ["g"], name="/head/gemm", transB=1))
            nodes.append(helper.make_node("BatchNormalization", ["g", "bn_scale", "bn_bias", "bn_mean", "bn_var"],
                                          ["bn"], name="/head/bn"))
            x = "bn"
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, size])],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, size])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="bench_external")
    model.ir_version = 8
    path.write_bytes(model.SerializeToString())
    return offset


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Wall seconds, peak resident MB and stdout of one whole process (which must succeed)."""
    done = subprocess.run([sys.executable, "-S", "-c", _WRAP, *cmd], capture_output=True, text=True, env=env)
    seconds, peak_kb, code = done.stderr.strip().splitlines()[-1].split()
    if int(code) != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed: {done.stderr[-2000:]}")
    return float(seconds), int(peak_kb) / 1024, done.stdout


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=24)
    parser.add_argument("--size", type=int, default=4096)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--folder", type=Path, default=None, help="where to build the models (default: a temp dir)")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.folder) as folder:
        f = Path(folder)
        chain, tiny, headed = f / "chain.onnx", f / "tiny.onnx", f / "chain-bn.onnx"
        weights = write_chain(chain, args.layers, args.size, gemm_bn=False)
        tiny_weights = write_chain(tiny, args.layers, 64, gemm_bn=False)
        headed_weights = write_chain(headed, args.layers, args.size, gemm_bn=True)
        print(f"models: {args.layers} MatMul [{args.size}, {args.size}] float32, {weights / 1e9:.2f} GB external "
              f"({chain.stat().st_size} bytes of protobuf); the same graph with [64, 64] weights "
              f"({tiny_weights / 1e3:.0f} KB); with a Gemm -> BN head: {headed_weights / 1e9:.2f} GB")
        env = {**os.environ, "QT_QPA_PLATFORM": "offscreen", "XDG_CONFIG_HOME": str(f / "config")}
        py = sys.executable
        load = "import onnx, sys; onnx.load(sys.argv[1], load_external_data=sys.argv[2] == 'all')"
        cases = {
            "onnx.load, all data": [py, "-c", load, str(chain), "all"],
            "onnx.load, load_external_data=False": [py, "-c", load, str(chain), "none"],
            "graphlens info": [GRAPHLENS, "info", str(chain)],
            "graphlens info, [64, 64] weights": [GRAPHLENS, "info", str(tiny)],
            "graphlens render": [GRAPHLENS, "render", str(chain), "-o", str(f / "x.png")],
            "graphlens render, [64, 64] weights": [GRAPHLENS, "render", str(tiny), "-o", str(f / "y.png")],
            "window": [py, "-c", _WINDOW, str(chain)],
            "window, [64, 64] weights": [py, "-c", _WINDOW, str(tiny)],
            "graphlens fold (Gemm -> BN head)": [GRAPHLENS, "fold", str(headed), "-o", str(f / "folded.onnx")],
            "cp of its data file (baseline)": ["/bin/cp", str(headed) + ".data", str(f / "copy.data")],
        }
        runs: dict[str, list[tuple[float, float, str]]] = {name: [] for name in cases}
        for _ in range(args.repeat):  # interleaved, so machine noise hits every case alike
            for name, cmd in cases.items():
                runs[name].append(measure(cmd, env))
            (f / "copy.data").unlink()

        print(f"\nmedians of {args.repeat} whole processes (window: also the time from open_model to the first frame)")
        print(f"{'':40}{'time (s)':>10}{'peak MB':>10}{'open (s)':>10}")
        for name, rs in runs.items():
            opened = [json.loads(r[2])["open_seconds"] for r in rs] if name.startswith("window") else []
            print(f"{name:40}{statistics.median(r[0] for r in rs):>10.3f}{statistics.median(r[1] for r in rs):>10.0f}"
                  + (f"{statistics.median(opened):>10.3f}" if opened else ""))
        window = json.loads(runs["window"][-1][2])
        print(f"\nwindow: {window['boxes']} boxes drawn, {window['bytes_read']} weight bytes read")
        _, _, out = measure([py, "-c", _FOLD, str(headed), str(f / "again.onnx")], env)
        fold = json.loads(out)
        print(f"fold: applied {fold['applied']}, read {fold['bytes_read'] / 1e6:.1f} MB "
              f"of {headed_weights / 1e6:.0f} MB of weights")
        saved = f / "folded.onnx"
        print(f"folded model: {saved.stat().st_size} bytes of protobuf + "
              f"{saved.with_name('folded.onnx.data').stat().st_size / 1e9:.2f} GB in folded.onnx.data")


if __name__ == "__main__":
    main()
