"""``graphlens quantize`` against onnxruntime's ``quantize_static``, same settings, same samples.

For each model: 12 seeded random samples (dims chosen as ``graphlens`` chooses them), the first
8 written to one calibration ``.npz`` that both tools read, the other 4 held out. Both quantize
to QDQ with per-channel symmetric int8 weights, asymmetric uint8 activations and MinMax; for
onnxruntime, once with GraphLens's op types (Conv, ConvTranspose, Gemm, MatMul) and once with its
own default op list. Reported: output SQNR on the held-out samples (quantized model run with
onnxruntime's optimizations on, against the float model), wall time, Q/DQ node count, and
whether the written model passes the full ONNX checker and runs with optimizations on and off.

    python benchmarks/bench_quantize.py [MODEL.onnx ...] [--markdown] [--ocr | --no-ocr] [--pages N]

Without arguments: the demo model, a grouped ConvTranspose model, and the PaddleOCR detector,
recognizer and classifier from the rapidocr-onnxruntime wheel when it is unpacked under
``/tmp/pkgs/real`` (``pip download --no-deps rapidocr-onnxruntime``; unzip it there).

The real-pipeline row (when ``rapidocr_onnxruntime`` is installed, ``pip install .[bench]``;
``--ocr`` runs only it): RapidOCR reads pages rendered with Pillow, with the float models and
with the detector, recognizer, classifier and all three quantized by each tool on the same
calibration ``.npz`` files (what RapidOCR feeds each model on other rendered pages); reported:
the character error rate against the float pipeline's text, quantization time and the share of
multiply-accumulates run in int8 (:mod:`benchmarks.ocr_pipeline` says how). "graphlens, GPTQ" rounds
every model's weights by GPTQ (``--weight-rounding gptq``); "graphlens, per model" gives each model a target that
leaves layers float, on its own calibration samples: the detector ``--target-sqnr 19`` at nearest rounding (GPTQ
lowers its output SQNR on its calibration pages), the recognizer GPTQ and ``--target-sqnr 19``, the classifier GPTQ
and 30 dB on its log-probabilities through the ``evaluate`` hook (:mod:`benchmarks.ocr_target`).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import onnxruntime as ort  # noqa: E402

from graphlens.core.model import load_model  # noqa: E402
from graphlens.numerics.metrics import ErrorStats  # noqa: E402
from graphlens.quantize import QuantConfig, load_calibration, random_calibration  # noqa: E402
from graphlens.workspace import Workspace  # noqa: E402

OCR = Path("/tmp/pkgs/real/rapidocr_onnxruntime-1.4.4-py3-none-any/rapidocr_onnxruntime/models")
CALIBRATION, HELD_OUT = 8, 4
OP_TYPES = ["Conv", "ConvTranspose", "Gemm", "MatMul"]


@dataclass
class Row:
    model: str
    tool: str
    sqnr_db: float | None
    seconds: float
    qdq: int
    valid: str


def default_models(work: Path) -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    found = [root / "resources" / "demo.onnx"]
    sys.path.insert(0, str(root))
    from tests.quantize.quant_models import layer

    grouped = work / "grouped_convtranspose.onnx"
    onnx.save(layer("ConvTranspose", group=2), grouped)
    found.append(grouped)
    found += sorted(OCR.glob("*.onnx")) if OCR.is_dir() else []
    return found


def _session(path: Path | bytes, optimize: bool) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if not optimize:
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    return ort.InferenceSession(str(path) if isinstance(path, Path) else path, options,
                                providers=["CPUExecutionProvider"])


def output_sqnr(float_model: Path, quantized: Path, held: dict[str, np.ndarray]) -> float:
    ref, test = _session(float_model, True), _session(quantized, True)
    total = ErrorStats()
    for i in range(len(next(iter(held.values())))):
        feed = {k: v[i] for k, v in held.items()}
        for a, b in zip(ref.run(None, feed), test.run(None, feed)):
            if np.asarray(a).dtype.kind == "f":
                total.add(a, b)
    return total.sqnr_db


def validity(path: Path, held: dict[str, np.ndarray], names: tuple[list[str], list[str]]) -> str:
    model = onnx.load(path)
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as exc:  # the checker raises several kinds
        return f"checker: {str(exc).splitlines()[0][:60]}"
    if ([v.name for v in model.graph.input], [v.name for v in model.graph.output]) != names:
        return "input/output names changed"
    feed = {k: v[0] for k, v in held.items()}
    for optimize in (True, False):
        try:
            _session(path, optimize).run(None, feed)
        except Exception as exc:  # onnxruntime's own exception classes
            return f"ort ({'opt' if optimize else 'no opt'}): {str(exc).splitlines()[0][:60]}"
    return "ok"


def qdq_count(path: Path) -> int:
    return sum(n.op_type in ("QuantizeLinear", "DequantizeLinear") for n in onnx.load(path).graph.node)


class _Reader:
    """onnxruntime's CalibrationDataReader over the shared .npz."""

    def __init__(self, npz: Path) -> None:
        with np.load(npz) as data:
            self.arrays = {k: data[k] for k in data.files}
        self.index = 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self.index >= len(next(iter(self.arrays.values()))):
            return None
        feed = {k: v[self.index] for k, v in self.arrays.items()}
        self.index += 1
        return feed

    def rewind(self) -> None:
        self.index = 0


def run_graphlens(model: Path, npz: Path, out: Path) -> float:
    start = time.perf_counter()
    ws = Workspace(keep_history=False)
    ws.open(model)
    ws.quantization.quantize(QuantConfig(), load_calibration(npz, ws.model))
    ws.save_as(out)
    return time.perf_counter() - start


def run_ort(model: Path, npz: Path, out: Path, op_types: list[str] | None) -> float:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    start = time.perf_counter()
    quantize_static(str(model), str(out), _Reader(npz), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, op_types_to_quantize=op_types)
    return time.perf_counter() - start


def median_seconds(runner, out: Path, repeat: int) -> float:
    """The median of ``repeat`` runs; the first run of a process (imports, page cache) is not one of them."""
    runner(out)
    return statistics.median(runner(out) for _ in range(repeat))


def bench(model: Path, work: Path, repeat: int = 3) -> list[Row]:
    proto = onnx.load(model)
    names = ([v.name for v in proto.graph.input if v.name not in {t.name for t in proto.graph.initializer}],
             [v.name for v in proto.graph.output])
    data = random_calibration(load_model(model).to_proto(), CALIBRATION + HELD_OUT, seed=0)
    npz = work / f"{model.stem}.calibration.npz"
    np.savez(npz, **{k: v[:CALIBRATION] for k, v in data.arrays.items()})
    held = {k: v[CALIBRATION:] for k, v in data.arrays.items()}
    rows = []
    for tool, runner in (("graphlens", lambda o: run_graphlens(model, npz, o)),
                         ("onnxruntime (same op types)", lambda o: run_ort(model, npz, o, OP_TYPES)),
                         ("onnxruntime (its default ops)", lambda o: run_ort(model, npz, o, None))):
        out = work / f"{model.stem}.{tool.split()[0]}.{len(rows)}.onnx"
        try:
            seconds = median_seconds(runner, out, repeat)
        except Exception as exc:  # a tool's failure is a result
            rows.append(Row(model.name, tool, None, float("nan"), 0, f"failed: {str(exc).splitlines()[0][:70]}"))
            continue
        valid = validity(out, held, names)
        sqnr = output_sqnr(model, out, held) if valid == "ok" or valid.startswith("ort (no") else None
        rows.append(Row(model.name, tool, sqnr, seconds, qdq_count(out), valid))
    return rows


def ocr_available() -> bool:
    import importlib.util

    return all(importlib.util.find_spec(m) is not None for m in ("rapidocr_onnxruntime", "cv2", "pyclipper", "shapely"))


def ocr_table(pages: int, repeat: int = 3) -> list[str]:
    """The real-pipeline row: RapidOCR's character error rate with quantized models (benchmarks/ocr_pipeline.py)."""
    import logging

    from benchmarks import ocr_pipeline as ocr
    from benchmarks.ocr_target import quantize_graphlens_gptq, quantize_graphlens_per_model

    logging.getLogger().setLevel(logging.ERROR)  # quantize_static's advice on pre-processing, once per model
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup = ocr.prepare(work, test_pages=pages)
        rows = ocr.tool_rows(setup, "graphlens", ocr.quantize_graphlens, work)
        rows += ocr.tool_rows(setup, "graphlens, GPTQ", quantize_graphlens_gptq, work)
        rows += ocr.tool_rows(setup, "graphlens, per model", quantize_graphlens_per_model, work)
        rows += ocr.tool_rows(setup, "onnxruntime", ocr.quantize_onnxruntime, work)
        times = ocr.median_times(setup, work, repeat)
    return [*ocr.markdown(rows, setup), "", "Quantization time, medians of alternate runs:", "", *times]


def ocr_times(repeat: int) -> list[str]:
    """The real pipeline's quantization times alone: its calibration files made, no test pages read."""
    import logging

    from benchmarks import ocr_pipeline as ocr

    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup = ocr.prepare(work, test_pages=1)
        return ocr.median_times(setup, work, repeat)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--repeat", type=int, default=3,
                        help="timed runs per tool and model, after one warm-up (median)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--ocr", action="store_true", help="only the real-pipeline (RapidOCR) row")
    which.add_argument("--no-ocr", action="store_true", help="leave the real-pipeline row out")
    which.add_argument("--ocr-times", action="store_true",
                       help="only the real pipeline's quantization times (its models and calibration files)")
    parser.add_argument("--pages", type=int, default=10, help="test pages RapidOCR reads in the real-pipeline row")
    args = parser.parse_args()
    if args.ocr_times:
        print("\n".join(ocr_times(args.repeat)))
        return
    if not args.ocr:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp)
            rows = [row for model in (args.models or default_models(work)) for row in bench(model, work, args.repeat)]
        print("| model | tool | output SQNR (dB) | time (s) | Q/DQ nodes | valid |")
        print("|---|---|---:|---:|---:|---|")
        for r in rows:
            sqnr = "—" if r.sqnr_db is None else f"{r.sqnr_db:.1f}"
            print(f"| {r.model} | {r.tool} | {sqnr} | {r.seconds:.3f} | {r.qdq} | {r.valid} |")
    if args.no_ocr:
        return
    if not ocr_available():
        print("\nreal pipeline: skipped (pip install .[bench] for rapidocr-onnxruntime and its dependencies)")
        return
    print("\nReal pipeline: RapidOCR, character error rate against the float pipeline\n")
    print("\n".join(ocr_table(args.pages, args.repeat)))


if __name__ == "__main__":
    main()
