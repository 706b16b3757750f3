"""``graphlens binarize``: output SQNR and time for K = 1..4 bits, per kernel against per tensor.

For each model: 4 seeded random samples (dims chosen as ``graphlens`` chooses them), the same for
every run. Baseline in the same run: the float model after folding alone (what the binarized
models are measured against; its SQNR against the original shows that folding costs nothing).
For each K: output SQNR per kernel and per tensor (emulated form), the mean weight SQNR over the
layers (median), the time of a whole ``binarize_model`` (fold, binarize, both onnxruntime runs; median of
``--repeat`` after a warm-up) in both forms, the largest output difference between the emulated
and the structured form, and whether the written model is valid (full ONNX checker, unchanged
input/output names, runs in onnxruntime).

    python benchmarks/bench_binarize.py [MODEL.onnx ...] [--repeat N]

Without arguments: the demo model, a grouped ConvTranspose model, and the PaddleOCR classifier
and recognizer from the rapidocr-onnxruntime wheel when it is unpacked under
``/tmp/pkgs/real`` (``pip download --no-deps rapidocr-onnxruntime``; unzip it there). The
detector is left out: on random 32×32 inputs its sigmoid map is about 1e-11 everywhere, so any
SQNR of it measures float noise.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import onnx
import onnxruntime as ort

from graphlens.binarize import BinarizeConfig, binarize_model
from graphlens.core.model import load_model
from graphlens.numerics.metrics import ErrorStats
from graphlens.quantize import random_calibration
from graphlens.quantize.calibrate import CalibrationData
from graphlens.rewrites.driver import fold_model

OCR = Path("/tmp/pkgs/real/rapidocr_onnxruntime-1.4.4-py3-none-any/rapidocr_onnxruntime/models")
SAMPLES = 4


def default_models(work: Path) -> list[Path]:
    root = Path(__file__).resolve().parents[1]
    found = [root / "resources" / "demo.onnx"]
    from tests.quantize.quant_models import layer

    grouped = work / "grouped_convtranspose.onnx"
    onnx.save(layer("ConvTranspose", group=2), grouped)
    found.append(grouped)
    if OCR.is_dir():
        found += [OCR / n for n in ("ch_ppocr_mobile_v2.0_cls_infer.onnx", "ch_PP-OCRv4_rec_infer.onnx")
                  if (OCR / n).exists()]
    return found


def _session(proto: onnx.ModelProto) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(proto.SerializeToString(), options, providers=["CPUExecutionProvider"])


def outputs(proto: onnx.ModelProto, data: CalibrationData) -> list[list[np.ndarray]]:
    session = _session(proto)
    return [session.run(None, data.sample(i)) for i in range(data.samples)]


def sqnr(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> float:
    total = ErrorStats()
    for xs, ys in zip(a, b, strict=True):
        for x, y in zip(xs, ys, strict=True):
            if np.asarray(x).dtype.kind == "f":
                total.add(x, y)
    return total.sqnr_db


def max_diff(a: list[list[np.ndarray]], b: list[list[np.ndarray]]) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - y))) for xs, ys in zip(a, b, strict=True)
               for x, y in zip(xs, ys, strict=True) if np.asarray(x).dtype.kind == "f")


def binarized(path: Path, config: BinarizeConfig, data: CalibrationData):
    model = load_model(path)
    start = time.perf_counter()
    result = binarize_model(model, config, calibration=data)
    return result, model.to_proto(), time.perf_counter() - start


def timed(path: Path, config: BinarizeConfig, data: CalibrationData, repeat: int):
    first = binarized(path, config, data)  # warm-up: imports, page cache
    return first[0], first[1], statistics.median(binarized(path, config, data)[2] for _ in range(repeat))


def valid(proto: onnx.ModelProto, original: onnx.ModelProto) -> str:
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # the checker raises several kinds
        return f"checker: {str(exc).splitlines()[0][:60]}"
    names = lambda p: ([v.name for v in p.graph.input], [v.name for v in p.graph.output])  # noqa: E731
    return "ok" if names(proto) == names(original) else "input/output names changed"


def bench(path: Path, repeat: int, bits: range) -> list[str]:
    original = load_model(path).to_proto()
    data = random_calibration(original, SAMPLES, seed=0)
    reference = outputs(original, data)
    folded = load_model(path)
    fold = fold_model(folded)
    rows = [f"| {path.name} | float, folded ({sum(fold.applied.values())} folds) | "
            f"{sqnr(reference, outputs(folded.to_proto(), data)):.1f} | | | | | | |"]
    for k in bits:
        kernel, kernel_proto, kernel_s = timed(path, BinarizeConfig(bits=k), data, repeat)
        tensor = binarized(path, BinarizeConfig(bits=k, per_kernel=False), data)[0]
        structured, structured_proto, structured_s = timed(path, BinarizeConfig(bits=k, form="structured"), data,
                                                           repeat)
        diff = max_diff(outputs(kernel_proto, data), outputs(structured_proto, data))
        weight = statistics.median(layer.sqnr_db for layer in kernel.layers)
        ok = valid(kernel_proto, original)
        ok_s = valid(structured_proto, original)
        rows.append(f"| {path.name} | K = {k} | {kernel.output_sqnr_db:.1f} | {tensor.output_sqnr_db:.1f} | "
                    f"{weight:.1f} | {kernel_s:.3f} | {structured_s:.3f} | {diff:.1e} | "
                    f"{ok if ok == ok_s else f'{ok} / {ok_s}'} |")
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", type=Path)
    parser.add_argument("--repeat", type=int, default=3, help="timed runs per setting, after one warm-up (median)")
    parser.add_argument("--bits", type=int, default=4, help="K from 1 to this (default 4)")
    args = parser.parse_args()
    print("| model | setting | output SQNR per kernel (dB) | per tensor (dB) | median weight SQNR (dB) | "
          "time emulated (s) | time structured (s) | max \\|emulated − structured\\| | valid |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for model in args.models or default_models(Path(tmp)):
            for row in bench(model, args.repeat, range(1, args.bits + 1)):
                print(row, flush=True)


if __name__ == "__main__":
    main()
