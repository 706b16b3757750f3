"""Drawing speed: whole ``graphlens render`` processes, and one full-view frame of 10,000 nodes.

    python benchmarks/bench_render.py [--repeat 3]

Models: DenseNet-121's layer recipe at four times the layers per block (1,645 nodes; each Concat
takes every earlier feature map, as torchvision exports it: many Concat fan-ins), the
synthetic Conv/BN/Relu/Add model at 10,000 nodes (drawn collapsed by default, and with
``--expand-all``: every node laid out) and at 100,000 nodes (scoped names, collapsed groups).
The frame figure paints the fully expanded 10,000-node graph, fitted to a 1600×1000 canvas,
into an offscreen image.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.processes import timed


def whole_process(args: list[str], repeat: int) -> float:
    return statistics.median(timed([sys.executable, "-m", "graphlens", "render", *args]) for _ in range(repeat))


def frame_ms(path: Path, repeat: int = 15) -> tuple[float, float, int]:
    """Median milliseconds to paint the whole expanded graph fitted to 1600×1000, and at 100%."""
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QRectF
    from PySide6.QtGui import QImage, QPainter

    from graphlens.core.model import load_model
    from graphlens.gui.render import ensure_gui_application
    from graphlens.gui.scene import SceneRenderer
    from graphlens.layout.layered import layout_view
    from graphlens.layout.view import ViewOptions, build_view

    ensure_gui_application()
    view = build_view(load_model(path).graph, ViewOptions(grouping=False))
    renderer = SceneRenderer(view, layout_view(view))
    image = QImage(1600, 1000, QImage.Format.Format_ARGB32_Premultiplied)
    b = renderer.bounds
    results = []
    for scale, visible in ((min(1600 / b.width(), 1000 / b.height()), b),
                           (1.0, QRectF(b.center().x() - 800, b.top(), 1600, 1000))):
        times = []
        for _ in range(repeat):
            image.fill(0xFFFFFFFF)
            t0 = time.perf_counter()
            painter = QPainter(image)
            painter.scale(scale, scale)
            painter.translate(-visible.left(), -visible.top())
            renderer.paint(painter, visible, scale)
            painter.end()
            times.append((time.perf_counter() - t0) * 1000)
        results.append(statistics.median(times))
    return results[0], results[1], len(view.items)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        densenet = folder / "densenet121.onnx"
        # DenseNet-121 itself is 427 nodes; its layer recipe with four times the layers per block is 1,645.
        subprocess.run([sys.executable, str(ROOT / "benchmarks" / "densenet.py"), "-o", str(densenet),
                        "--blocks", "24,48,96,64", "--concat", "all"],
                       check=True, capture_output=True)
        models = {}
        for size in (10_000, 100_000):
            path = folder / f"synthetic-{size}.onnx"
            subprocess.run([sys.executable, str(ROOT / "benchmarks" / "synthetic.py"), "--nodes", str(size), "-o",
                            str(path)],
                           check=True, capture_output=True)
            models[size] = path
        out = str(folder / "out.png")
        rows = [
            ("DenseNet-121 recipe, 1,645 nodes, all-feature Concats (target <= 3 s)", [str(densenet), "-o", out]),
            ("synthetic 10,000 nodes, every node (target <= 6 s)", [str(models[10_000]), "-o", out, "--expand-all"]),
            ("synthetic 10,000 nodes, default view", [str(models[10_000]), "-o", out]),
            ("synthetic 100,000 nodes, collapsed groups (target <= 20 s)", [str(models[100_000]), "-o", out]),
        ]
        print(f"whole `graphlens render` processes, median of {args.repeat}")
        for label, cmd in rows:
            print(f"  {label:60} {whole_process(cmd, args.repeat):7.2f} s", flush=True)
        fitted, full_size, items = frame_ms(models[10_000])
        print(f"\none frame of the expanded 10,000-node graph ({items} items), median of 15")
        print(f"  {'fitted to 1600x1000 (target <= 50 ms)':60} {fitted:7.1f} ms")
        print(f"  {'at 100%, 1600x1000 window':60} {full_size:7.1f} ms")


if __name__ == "__main__":
    main()
