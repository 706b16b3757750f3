"""Time to a drawn graph: ``graphlens MODEL`` from process start to the graph first painted on screen,
side by side with ``graphlens render MODEL -o x.png`` of the same model, in the same run.

    Xvfb :95 -screen 0 1366x768x24 &
    python benchmarks/bench_window.py --display :95 [--repeat 5] [--tree DIR] [--baseline DIR] [--only demo,rxnmap]

Each figure is a whole process. The window runs with ``GRAPHLENS_REPORT_DRAWN=1`` (see
``graphlens/gui/app.py``): once the canvas has painted a graph, it prints ``drawn <seconds since the
process started>`` on stderr and quits. "window" is the wall-clock time from starting the process to
reading that line; "render" is the whole ``graphlens render`` process (load, lay out, paint, write the
PNG). Python keeps the package's compiled modules in a cache folder, as it does for an installed
command after its first run (``--compile``: every process compiles them, as with
``PYTHONDONTWRITEBYTECODE=1``, which this machine sets). Runs are interleaved, so drifting load on
the machine hits both alike; each window gets a fresh ``XDG_CONFIG_HOME``, so no saved layout is
read. Peak RSS is each process's maximum resident set (``wait4``), median over the runs.

Models: the bundled demo (``graphlens`` with no argument), rxnmap (BERT-like, 1,411 nodes), PP-OCRv4's
recognizer, NudeNet's 320n detector (all from ``--models``, skipped when absent), and the synthetic
residual model at 10,000 nodes (``benchmarks/synthetic.py``). ``--tree`` runs the ``graphlens``
package found in DIR (e.g. an exported commit: ``git archive``, with ``resources/`` copied to
``DIR/graphlens/resources``) instead of the installed one; ``--baseline DIR`` runs a second package
interleaved with the first, run by run, so before and after meet the same machine noise.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.processes import BYTECODE_CACHE, bytecode_environment

MODELS = Path("/work/models/extracted")
REAL = {
    "rxnmap": "chython_rxnmap/rxnmap.onnx",
    "PP-OCRv4 rec": "rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx",
    "nudenet 320n": "nudenet/320n.onnx",
}
TIMEOUT = 300.0


@dataclass
class Row:
    """The runs of one model."""

    window: list[float] = field(default_factory=list)
    reported: list[float] = field(default_factory=list)
    render: list[float] = field(default_factory=list)
    window_mb: list[float] = field(default_factory=list)
    render_mb: list[float] = field(default_factory=list)


def _finish(proc: subprocess.Popen[bytes], watchdog: threading.Timer) -> tuple[int, float]:
    """Wait for ``proc``; its exit code and peak resident memory in MB."""
    _, status, usage = os.wait4(proc.pid, 0)
    watchdog.cancel()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024  # Linux reports kilobytes


def _watch(proc: subprocess.Popen[bytes]) -> threading.Timer:
    """Kill ``proc`` if it runs past :data:`TIMEOUT` (a window that never draws would wait forever)."""
    watchdog = threading.Timer(TIMEOUT, proc.kill)
    watchdog.start()
    return watchdog


def window_run(cmd: list[str], env: dict[str, str]) -> tuple[float, float, float]:
    """(seconds to the ``drawn`` line, seconds the process reported, peak MB) of one window."""
    with tempfile.TemporaryDirectory() as config:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                env={**env, "XDG_CONFIG_HOME": config}, cwd=config)
        watchdog = _watch(proc)
        assert proc.stderr is not None
        seen, reported, said = 0.0, 0.0, []
        for raw in proc.stderr:
            line = raw.decode(errors="replace").strip()
            if line.startswith("drawn "):
                seen, reported = time.perf_counter() - t0, float(line.split()[1])
            else:
                said.append(line)
        code, peak = _finish(proc, watchdog)
    if code != 0 or not seen:
        raise RuntimeError(f"{' '.join(cmd)}: exit {code} without drawing: {' | '.join(said)[-500:]}")
    return seen, reported, peak


def render_run(cmd: list[str], env: dict[str, str], out: Path) -> tuple[float, float]:
    """(seconds, peak MB) of one whole ``graphlens render`` process writing ``out`` (run in its folder: ``python -c``
    puts the working folder first on ``sys.path``, where a source tree would shadow ``--tree``)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env, cwd=out.parent)
    watchdog = _watch(proc)
    assert proc.stderr is not None
    said = proc.stderr.read().decode(errors="replace")
    code, peak = _finish(proc, watchdog)
    if code != 0:
        raise RuntimeError(f"{' '.join(cmd)}: exit {code}: {said[-500:]}")
    return time.perf_counter() - t0, peak


def model_paths(folder: Path, models: Path, only: set[str] | None) -> dict[str, Path | None]:
    """Name -> model file (``None``: the demo, opened by ``graphlens`` with no argument)."""
    found: dict[str, Path | None] = {"demo": None}
    for name, relative in REAL.items():
        if (models / relative).exists():
            found[name] = models / relative
        else:
            print(f"skipped {name}: {models / relative} not found")
    synthetic = folder / "synthetic-10000.onnx"
    subprocess.run([sys.executable, str(ROOT / "benchmarks" / "synthetic.py"), "--nodes", "10000",
                    "-o", str(synthetic)], check=True, capture_output=True)
    found["synthetic 10,000"] = synthetic
    return {k: v for k, v in found.items() if only is None or k.split()[0] in only or k in only}


def _environment(display: str, tree: Path | None, compile_every_run: bool) -> tuple[dict[str, str], dict[str, str]]:
    """The window's environment (the display, nothing that picks another platform) and render's."""
    env = {k: v for k, v in os.environ.items() if k not in ("WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    env = bytecode_environment(env, compile_every_run, BYTECODE_CACHE)
    env["DISPLAY"] = display
    if tree is not None:
        env["PYTHONPATH"] = str(tree.resolve())
    return {**env, "GRAPHLENS_REPORT_DRAWN": "1"}, env


def _check_tree(tree: Path | None, env: dict[str, str], folder: Path) -> None:
    """Refuse to measure a ``--tree`` that the package installed in this interpreter would shadow."""
    if tree is None:
        return
    found = subprocess.run([sys.executable, "-c", "import graphlens; print(graphlens.__file__)"], env=env, cwd=folder,
                           capture_output=True, text=True, check=True).stdout.strip()
    if not Path(found).resolve().is_relative_to(tree.resolve()):
        raise SystemExit(f"--tree {tree}: python imports graphlens from {found} instead")


def measure(paths: dict[str, Path | None], repeat: int, display: str, trees: dict[str, Path | None], out: Path,
            compile_every_run: bool = False) -> dict[tuple[str, str], Row]:
    """(tree label, model name) -> its runs; every model and tree in turn within each repeat."""
    graphlens = [sys.executable, "-c", "from graphlens.cli import entry; entry()"]  # what the console script runs
    from graphlens.core.bundled import demo_model_path

    envs = {label: _environment(display, tree, compile_every_run) for label, tree in trees.items()}
    for label, tree in trees.items():
        _check_tree(tree, envs[label][1], out.parent)
    rows = {(label, name): Row() for name in paths for label in trees}
    for label in trees:
        for path in paths.values():  # warm the page cache (and the compiled modules) once
            window_run([*graphlens, *([str(path)] if path else [])], envs[label][0])
    for _ in range(repeat):
        for name, path in paths.items():
            for label in trees:
                window_env, render_env = envs[label]
                row = rows[label, name]
                seen, reported, peak = window_run([*graphlens, *([str(path)] if path else [])], window_env)
                row.window.append(seen)
                row.reported.append(reported)
                row.window_mb.append(peak)
                seconds, peak = render_run([*graphlens, "render", str(path or demo_model_path()), "-o", str(out)],
                                           render_env, out)
                row.render.append(seconds)
                row.render_mb.append(peak)
    return rows


def report(rows: dict[tuple[str, str], Row], repeat: int) -> None:
    med = statistics.median
    print(f"\nmedians of {repeat} whole processes; window on DISPLAY, 1366x768 as started by the caller")
    print(f"{'model':20}{'tree':>10}{'window (s)':>12}{'reported':>10}{'render (s)':>12}{'window/render':>15}"
          f"{'window MB':>11}{'render MB':>11}{'window range':>16}{'render range':>16}")
    for (label, name), row in rows.items():
        spread = f"{min(row.window):.2f}-{max(row.window):.2f}"
        render_spread = f"{min(row.render):.2f}-{max(row.render):.2f}"
        print(f"{name:20}{label:>10}{med(row.window):>12.3f}{med(row.reported):>10.3f}{med(row.render):>12.3f}"
              f"{med(row.window) / med(row.render):>14.2f}x{med(row.window_mb):>11.0f}{med(row.render_mb):>11.0f}"
              f"{spread:>16}{render_spread:>16}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--display", default=os.environ.get("DISPLAY", ""),
                        help="X display to open the windows on (e.g. :95, an Xvfb at 1366x768)")
    parser.add_argument("--tree", type=Path, help="run the graphlens package in this folder")
    parser.add_argument("--baseline", type=Path, help="also run the graphlens package in this folder, interleaved")
    parser.add_argument("--models", type=Path, default=MODELS, help="folder holding the extracted real models")
    parser.add_argument("--compile", action="store_true",
                        help="compile the package's modules in every process (PYTHONDONTWRITEBYTECODE=1) instead of "
                             "keeping them compiled in a cache, as after a first run")
    parser.add_argument("--only", help="comma-separated model names (demo, rxnmap, PP-OCRv4, nudenet, synthetic)")
    args = parser.parse_args()
    if not args.display:
        parser.error("no display: start Xvfb (Xvfb :95 -screen 0 1366x768x24 &) and pass --display :95")
    only = set(args.only.split(",")) if args.only else None
    trees: dict[str, Path | None] = {"now": args.tree}
    if args.baseline is not None:
        trees["baseline"] = args.baseline
    print(f"load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; {os.cpu_count()} cores")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        paths = model_paths(folder, args.models, only)
        rows = measure(paths, args.repeat, args.display, trees, folder / "out.png", args.compile)
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          + "; ".join(f"{label}: graphlens from {tree or 'the installed package'}" for label, tree in trees.items())
          + f"; modules {'compiled in every process' if args.compile else 'compiled once, cached'}")
    report(rows, args.repeat)


if __name__ == "__main__":
    main()
