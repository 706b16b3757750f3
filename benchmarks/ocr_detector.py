"""Why a quantized PP-OCRv4 detector loses lines: settings tried, and the layers its probability map is sensitive to.

For each setting the detector alone is quantized (the recognizer and classifier stay float) and
RapidOCR reads the test pages of :mod:`benchmarks.ocr_pipeline`; reported per setting: the
character error rate against the float pipeline, the probability map's error on the test pages'
detector inputs (mean |Δp|, and the IoU of the text masks ``p > 0.3``, RapidOCR's threshold),
the share of multiply-accumulates in int8, and the quantization time. ``--layers`` also runs
GraphLens's sensitivity scan (each layer quantized alone, each left float alone; output SQNR of
the map on the calibration samples) and prints the worst layers.

    python benchmarks/ocr_detector.py [--pages N] [--layers] [--only NAME ...]
"""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402
import onnxruntime as ort  # noqa: E402

from benchmarks import ocr_pipeline as ocr  # noqa: E402

THRESHOLD = 0.3
"""RapidOCR's DB threshold on the probability map (config.yaml ``Det.thresh``)."""


@dataclass
class Outcome:
    name: str
    cer: float
    mean_abs: float
    iou: float
    int8_share: float
    seconds: float


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def map_error(float_model: Path, quantized: Path, inputs: list[np.ndarray]) -> tuple[float, float]:
    """Mean |p − p̂| over every pixel, and IoU of the masks p > 0.3 and p̂ > 0.3, over the detector inputs."""
    ref, test = _session(float_model), _session(quantized)
    name = ref.get_inputs()[0].name
    diff = count = inter = union = 0.0
    for x in inputs:
        p, q = ref.run(None, {name: x})[0], test.run(None, {name: x})[0]
        diff += float(np.abs(p - q).sum())
        count += p.size
        a, b = p > THRESHOLD, q > THRESHOLD
        inter += float((a & b).sum())
        union += float((a | b).sum())
    return diff / count, inter / union if union else 1.0


def variants(setup: ocr.OcrSetup, work: Path) -> dict[str, Callable[[Path], float]]:
    """Setting name -> a function writing the quantized detector to a path and returning seconds."""
    from graphlens.quantize import QuantConfig
    from graphlens.quantize.config import METHODS

    model, npz = setup.models["det"], setup.calibration["det"]

    def gl(**changes) -> Callable[[Path], float]:
        return lambda out: ocr.quantize_graphlens(model, npz, out, QuantConfig(**changes))

    found = {"graphlens default": gl()}
    for method in METHODS:
        if method != "minmax":
            found[f"graphlens --method {method}"] = gl(method=method)
    found["graphlens --no-per-channel"] = gl(per_channel=False)
    found["graphlens --int8-activations"] = gl(activation_signed=True)
    found["graphlens --symmetric-activations --int8-activations"] = gl(activation_signed=True,
                                                                        symmetric_activations=True)
    found["graphlens, calibration scaled 1/255 only (no mean/std)"] = \
        lambda out: ocr.quantize_graphlens(model, _misscaled(npz, work), out, QuantConfig())
    found["graphlens, 1 calibration page"] = \
        lambda out: ocr.quantize_graphlens(model, _first(npz, work), out, QuantConfig())
    found["onnxruntime quantize_static"] = lambda out: ocr.quantize_onnxruntime(model, npz, out)
    return found


def _misscaled(npz: Path, work: Path) -> Path:
    """The same pages as a user who forgot RapidOCR's normalisation would feed them: x/255 in 0..1, not −1..1."""
    out = work / "det.misscaled.npz"
    with np.load(npz) as data:
        np.savez(out, **{k: (data[k] + 1.0) / 2.0 for k in data.files})
    return out


def _first(npz: Path, work: Path) -> Path:
    out = work / "det.first.npz"
    with np.load(npz) as data:
        np.savez(out, **{k: data[k][:1] for k in data.files})
    return out


def run(setup: ocr.OcrSetup, work: Path, only: list[str]) -> list[Outcome]:
    inputs = ocr.capture_inputs(setup.test)["det"]
    outcomes = []
    for i, (name, quantize) in enumerate(variants(setup, work).items()):
        if only and not any(o in name for o in only):
            continue
        out = work / f"det.variant{i}.onnx"
        try:
            seconds = quantize(out)
        except Exception as exc:  # a setting that fails is a result
            print(f"{name}: failed: {str(exc).splitlines()[0][:100]}", flush=True)
            continue
        texts = ocr.read_all(ocr.engine({"det": out}), setup.test)
        mean_abs, iou = map_error(setup.models["det"], out, inputs)
        int8, total = ocr.int8_macs(out, setup.samples["det"])
        outcomes.append(Outcome(name, ocr.cer(setup.reference, texts), mean_abs, iou, int8 / total, seconds))
        print(f"{name}: CER {100 * outcomes[-1].cer:.1f} %, IoU {iou:.3f}", flush=True)
    return outcomes


def layers(setup: ocr.OcrSetup, count: int = 12) -> list[str]:
    """GraphLens's sensitivity scan of the detector: the layers whose quantization costs the map most."""
    import onnx

    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    ws = Workspace(keep_history=False)
    ws.open(setup.models["det"])
    result = ws.quantization.quantize(QuantConfig(sensitivity=True), setup.calibration["det"])
    ops = {n.name: n.op_type for n in onnx.load(str(setup.models["det"])).graph.node}
    rows = sorted(result.sensitivity.items(), key=lambda kv: kv[1].get("alone_quantized_db", np.inf))
    out = [f"all quantized: {result.output_sqnr_db:.1f} dB output SQNR", "",
           "| layer | op | alone quantized (dB) | alone float (dB) |", "|---|---|---:|---:|"]
    for node, values in rows[:count]:
        out.append(f"| {node} | {ops.get(node, '?')} | {values.get('alone_quantized_db', float('nan')):.1f} | "
                   f"{values.get('alone_float_db', float('nan')):.1f} |")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=10)
    parser.add_argument("--layers", action="store_true", help="also GraphLens's per-layer sensitivity scan")
    parser.add_argument("--only", nargs="*", default=[], help="only the settings whose name holds one of these")
    args = parser.parse_args()
    logging.getLogger().setLevel(logging.ERROR)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        setup = ocr.prepare(work, test_pages=args.pages)
        outcomes = run(setup, work, args.only)
        print(f"\n{len(setup.test)} test pages, detector alone quantized\n")
        print("| setting | CER | mean abs Δp | mask IoU (p > 0.3) | int8 MACs | time (s) |")
        print("|---|---:|---:|---:|---:|---:|")
        for o in outcomes:
            print(f"| {o.name} | {100 * o.cer:.1f} % | {o.mean_abs:.4f} | {o.iou:.3f} | {100 * o.int8_share:.1f} % | "
                  f"{o.seconds:.1f} |")
        if args.layers:
            print()
            print("\n".join(layers(setup)))


if __name__ == "__main__":
    main()
