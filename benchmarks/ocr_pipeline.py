"""RapidOCR as a real pipeline to judge quantized models by: text pages rendered with Pillow, read end to end.

RapidOCR (``rapidocr-onnxruntime``: PP-OCRv4 detector and recognizer, PP-OCR mobile v2 direction
classifier) reads each page with its own pre- and post-processing; only the three model files are
swapped. What a quantized model costs is the **character error rate against the float pipeline**::

    CER = Σ_pages edit_distance(float text, quantized text) / Σ_pages len(float text)

where a page's text is its recognized lines joined by newlines in RapidOCR's reading order, so a
line the detector loses costs every character of it.

Pages are drawn from the DejaVu fonts the system has (``fc-list``), 14–40 px text, 3–10 lines, a
fifth of the lines turned 180° (the classifier's job), some pages with noise or blur. Calibration
pages use other words (the other half of the vocabulary) and other seeds than the test pages, and
one fixed size, so the detector sees one input shape: the ``.npz`` layout ``(samples, *input
shape)``. The calibration inputs are what RapidOCR itself feeds each model while the float
pipeline reads the calibration pages (its sessions are wrapped to record them).
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graphlens.core.linear import LINEAR_OP_TYPES
from graphlens.quantize.sensitivity import node_macs

MODELS = ("det", "cls", "rec")
"""RapidOCR's three models, by its own config keys."""

_WORD_TEXT = (
    "the of and to in is for on that with as by this are from at be or an it not which have was all can has "
    "more one new other data model time first two some these may when use used will such into than only most "
    "also about after system over where should between would each both three number under high same value "
    "field page line text image small large order point before every through light water early paper market "
    "report summer winter north south river garden window station letter reader bridge engine silver number "
    "question answer morning evening planet forest yellow orange purple circle square signal network device "
    "invoice receipt total amount balance account customer address street avenue London Paris Berlin Tokyo "
    "January February March April Monday Friday Quantum Vector Matrix Python Kernel Layer Tensor Binary "
    "Hello World Open Close Start Stop Price Offer Sale Free Entry Exit Level Floor Room Table Chair Music"
)
WORDS = _WORD_TEXT.split()
"""Words of the pages: the test pages take the even-numbered ones, calibration pages the odd-numbered ones."""


def system_fonts() -> list[Path]:
    """TrueType fonts the system has (``fc-list``), math fonts left out; DejaVu's folder when fc-list is missing."""
    try:
        listed = subprocess.run(["fc-list", ":", "file"], capture_output=True, text=True, check=True).stdout
        paths = [Path(line.split(":")[0].strip()) for line in listed.splitlines() if line.strip()]
    except (OSError, subprocess.CalledProcessError):
        paths = list(Path("/usr/share/fonts").rglob("*.ttf"))
    fonts = sorted(p for p in paths if p.suffix.lower() in (".ttf", ".otf") and "math" not in p.name.lower())
    if not fonts:
        raise RuntimeError("no TrueType fonts found (fc-list); install fonts-dejavu")
    return fonts


@dataclass
class Page:
    """A rendered page: BGR pixels (as RapidOCR takes an array) and the text drawn, line by line."""

    image: np.ndarray = field(repr=False)
    lines: list[str]
    name: str


def _sentence(rng: np.random.Generator, words: list[str]) -> str:
    text = " ".join(rng.choice(words, int(rng.integers(2, 7))))
    if rng.random() < 0.4:
        text += f" {int(rng.integers(0, 100000))}"
    if rng.random() < 0.3:
        text += rng.choice([".", ",", ":", "!", "?", " -", " %"])
    return text


def render_page(rng: np.random.Generator, size: tuple[int, int], words: list[str], fonts: list[Path],
                name: str) -> Page:
    """One page of ``size`` (width, height): 3–10 lines in random fonts, sizes, colours; some lines upside down."""
    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    width, height = size
    shade = int(rng.integers(200, 256))
    page = Image.new("RGB", size, (shade, int(rng.integers(200, 256)), shade))
    lines: list[str] = []
    y = int(rng.integers(10, 40))
    for _ in range(int(rng.integers(3, 11))):
        font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]), int(rng.integers(14, 41)))
        text = _sentence(rng, words)
        left, top, right, bottom = font.getbbox(text)
        while right - left > width - 40 and " " in text:
            text = text.rsplit(" ", 1)[0]
            left, top, right, bottom = font.getbbox(text)
        if y + bottom - top + 8 > height:
            break
        ink = tuple(int(v) for v in rng.integers(0, 90, 3))
        strip = Image.new("RGBA", (right - left + 8, bottom - top + 8), (0, 0, 0, 0))
        ImageDraw.Draw(strip).text((4 - left, 4 - top), text, font=font, fill=(*ink, 255))
        if rng.random() < 0.2:
            strip = strip.rotate(180)
        x = int(rng.integers(10, max(11, width - strip.width - 10)))
        page.paste(strip, (x, y), strip)
        lines.append(text)
        y += strip.height + int(rng.integers(8, 70))
    if rng.random() < 0.3:
        page = page.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.5, 1.2))))
    pixels = np.asarray(page, np.float32)
    if rng.random() < 0.4:
        pixels = pixels + rng.normal(0, float(rng.uniform(4, 12)), pixels.shape)
    bgr = np.clip(pixels, 0, 255).astype(np.uint8)[:, :, ::-1].copy()
    return Page(bgr, lines, name)


def render_scan(rng: np.random.Generator, words: list[str], fonts: list[Path], name: str) -> Page:
    """A page like a scan of a printed sheet: A4 at 150 dpi, one serif or sans font, 18–30 px lines of running
    text, paper tinted and unevenly lit, a dark edge, skewed under 1.5°, blurred and JPEG-compressed."""
    from io import BytesIO

    from PIL import Image, ImageDraw, ImageFilter, ImageFont

    width, height = 1240, 1754
    page = Image.new("L", (width, height), 255)
    draw = ImageDraw.Draw(page)
    font = ImageFont.truetype(str(fonts[int(rng.integers(len(fonts)))]), int(rng.integers(18, 31)))
    lines, y = [], int(rng.integers(120, 260))
    for _ in range(int(rng.integers(4, 16))):
        text = _sentence(rng, words) + " " + _sentence(rng, words)
        while font.getlength(text) > width - 260 and " " in text:
            text = text.rsplit(" ", 1)[0]
        if y > height - 200:
            break
        draw.text((130, y), text, font=font, fill=int(rng.integers(10, 60)))
        lines.append(text)
        y += int(font.size * rng.uniform(1.6, 3.5))
    page = page.rotate(float(rng.uniform(-1.5, 1.5)), resample=Image.BICUBIC, fillcolor=255)
    ink = np.asarray(page, np.float32) / 255.0
    yy, xx = np.mgrid[0:height, 0:width] / max(width, height)
    light = 0.78 + 0.15 * np.cos(2.0 * xx + float(rng.uniform(0, 3))) * np.cos(1.5 * yy)  # uneven lighting
    paper = np.stack([light * t for t in (0.97, 0.93, 0.84)], axis=-1) * 255.0  # yellowish paper
    rgb = paper * ink[..., None] + (1.0 - ink[..., None]) * 30.0
    edge = int(rng.integers(0, 40))
    rgb[:, width - edge:] *= 0.25  # the scanner lid's shadow at one edge
    rgb += rng.normal(0, 6.0, rgb.shape)
    image = Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8)).filter(ImageFilter.GaussianBlur(0.8))
    buffer = BytesIO()
    image.save(buffer, "JPEG", quality=int(rng.integers(40, 80)))
    bgr = np.asarray(Image.open(buffer).convert("RGB"))[:, :, ::-1].copy()
    return Page(bgr, lines, name)


def pages(kind: str, count: int, seed: int) -> list[Page]:
    """``count`` pages, seeded: ``test`` (varied sizes), ``scan`` (:func:`render_scan`, test words) or
    ``calibration`` (one size, the other words)."""
    fonts = system_fonts()
    words = WORDS[1::2] if kind == "calibration" else WORDS[0::2]
    rng = np.random.default_rng(seed + {"test": 0, "scan": 20_000}.get(kind, 10_000))
    found = []
    for i in range(count):
        if kind == "scan":
            found.append(render_scan(rng, words, fonts, f"{kind}-{i}"))
            continue
        size = (int(rng.integers(700, 1100)), int(rng.integers(500, 900))) if kind == "test" else (960, 720)
        found.append(render_page(rng, size, words, fonts, f"{kind}-{i}"))
    return found


# ------------------------------------------------------------------------------ the pipeline
def engine(paths: dict[str, Path] | None = None) -> Any:
    """A RapidOCR engine reading ``paths`` (``{"det"|"cls"|"rec": model.onnx}``; the packaged ones elsewhere)."""
    from rapidocr_onnxruntime import RapidOCR

    logging.getLogger("RapidOCR").setLevel(logging.ERROR)
    paths = paths or {}
    return RapidOCR(**{f"{key}_model_path": str(path) for key, path in paths.items()})


def packaged_models() -> dict[str, Path]:
    """The float models inside the installed rapidocr_onnxruntime package."""
    import rapidocr_onnxruntime

    root = Path(rapidocr_onnxruntime.__file__).parent / "models"
    return {"det": root / "ch_PP-OCRv4_det_infer.onnx", "cls": root / "ch_ppocr_mobile_v2.0_cls_infer.onnx",
            "rec": root / "ch_PP-OCRv4_rec_infer.onnx"}


def read(ocr: Any, page: Page) -> str:
    """The page's text as RapidOCR reads it: its lines in reading order, joined by newlines."""
    result, _ = ocr(page.image)
    return "\n".join(str(line[1]) for line in result or [])


def read_all(ocr: Any, found: list[Page]) -> list[str]:
    return [read(ocr, page) for page in found]


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance (insert, delete, substitute: 1 each), one row at a time."""
    row = list(range(len(b) + 1))
    for i, ch in enumerate(a, 1):
        prev, row = row, [i]
        for j, other in enumerate(b, 1):
            row.append(min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (ch != other)))
    return row[-1]


def page_errors(reference: list[str], texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Each page's edit distance and reference length."""
    errors = np.array([edit_distance(r, t) for r, t in zip(reference, texts, strict=True)], float)
    return errors, np.array([len(r) for r in reference], float)


def cer(reference: list[str], texts: list[str]) -> float:
    """Σ edit distance / Σ reference length over all pages (see the module docstring), as a fraction."""
    return _rate(*page_errors(reference, texts))


def _rate(errors: np.ndarray, lengths: np.ndarray) -> float:
    return float(errors.sum() / max(lengths.sum(), 1))


def cer_interval(errors: np.ndarray, lengths: np.ndarray, resamples: int = 2000,
                 seed: int = 0) -> tuple[float, tuple[float, float]]:
    """:func:`cer` from each page's edits and reference length (:func:`page_errors`), and its 95 % bootstrap
    interval over pages (pages drawn with replacement, the ratio of sums each time). A page's errors come in
    bursts (a line lost, two boxes merged and read in another order), so on a few dozen pages one page can carry
    half of them; the interval says how far another set of pages could move it."""
    picks = np.random.default_rng(seed).integers(0, len(errors), size=(resamples, len(errors)))
    rates = errors[picks].sum(axis=1) / np.maximum(lengths[picks].sum(axis=1), 1)
    low, high = np.percentile(rates, [2.5, 97.5])
    return _rate(errors, lengths), (float(low), float(high))


def edits_read_closer(errors: np.ndarray, drawn_errors: np.ndarray, float_drawn_errors: np.ndarray) -> int:
    """Of each page's ``errors`` against the float pipeline, those on pages whose text drawn the quantized
    pipeline reads with fewer edits (``drawn_errors``) than the float one (``float_drawn_errors``): a turn the
    float classifier missed and the quantized one made, a line the float pipeline lost or split. :func:`cer`
    counts them against the quantized pipeline all the same."""
    return int(errors[drawn_errors < float_drawn_errors].sum())


# ------------------------------------------------------------------------------ calibration capture
class _Recording:
    """An onnxruntime session that keeps every input fed to it (RapidOCR calls ``run`` and the metadata)."""

    def __init__(self, session: Any, sink: list[np.ndarray]) -> None:
        self._session, self._sink = session, sink

    def run(self, names: Any, feed: dict[str, np.ndarray], *args: Any) -> Any:
        (value,) = feed.values()
        self._sink.extend(np.asarray(value)[i:i + 1].copy() for i in range(len(value)))
        return self._session.run(names, feed, *args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._session, name)


def _sessions(ocr: Any) -> dict[str, tuple[Any, str]]:
    """Where RapidOCR 1.4 keeps each model's OrtInferSession (holder, attribute)."""
    return {"det": (ocr.text_det.infer, "session"), "cls": (ocr.text_cls.infer, "session"),
            "rec": (ocr.text_rec.session, "session")}


def _stack(samples: list[np.ndarray]) -> np.ndarray:
    """``(samples, 1, C, H, W)``; narrower samples padded on the right with 0, as RapidOCR pads a batch."""
    width = max(s.shape[-1] for s in samples)
    out = np.zeros((len(samples), *samples[0].shape[:-1], width), np.float32)
    for i, s in enumerate(samples):
        out[i, ..., : s.shape[-1]] = s
    return out


def capture_inputs(found: list[Page]) -> dict[str, list[np.ndarray]]:
    """Every input RapidOCR feeds each float model while reading ``found``, one ``(1, C, H, W)`` array each."""
    ocr = engine()
    captured: dict[str, list[np.ndarray]] = {key: [] for key in MODELS}
    for key, (holder, attribute) in _sessions(ocr).items():
        setattr(holder, attribute, _Recording(getattr(holder, attribute), captured[key]))
    for page in found:
        read(ocr, page)
    return captured


def capture_calibration(found: list[Page], limit: dict[str, int], seed: int = 0) -> dict[str, np.ndarray]:
    """What RapidOCR feeds each float model while reading ``found``: ``{model: (samples, 1, C, H, W)}``,
    at most ``limit[model]`` samples each (a seeded choice), crops padded to one width."""
    captured = capture_inputs(found)
    rng = np.random.default_rng(seed)
    out = {}
    for key, samples in captured.items():
        shapes = {s.shape[:-1] for s in samples}
        if len(shapes) != 1:
            raise RuntimeError(f"{key}: inputs of several shapes {sorted(shapes)}; render pages of one size")
        chosen = sorted(rng.choice(len(samples), min(limit[key], len(samples)), replace=False))
        out[key] = _stack([samples[i] for i in chosen])
    return out


def input_name(model: Path) -> str:
    import onnx

    proto = onnx.load(str(model), load_external_data=False)
    inits = {t.name for t in proto.graph.initializer}
    return next(v.name for v in proto.graph.input if v.name not in inits)


def write_calibration(arrays: dict[str, np.ndarray], models: dict[str, Path], work: Path) -> dict[str, Path]:
    """One ``.npz`` per model, its input's name as the key: the shared calibration files."""
    out = {}
    for key, array in arrays.items():
        out[key] = work / f"{key}.calibration.npz"
        np.savez(out[key], **{input_name(models[key]): array})
    return out


# ------------------------------------------------------------------------------ int8 share of the MACs
def int8_macs(model: Path, sample: np.ndarray) -> tuple[float, float]:
    """(int8, all) multiply-accumulates of the Conv/ConvTranspose/Gemm/MatMul nodes at ``sample``'s shape; int8
    are those whose input and weight both come from a DequantizeLinear (what onnxruntime runs as an int8 kernel)."""
    import onnx

    proto = onnx.load(str(model))
    name = input_name(model)
    for value in proto.graph.input:
        if value.name == name:
            for dim, size in zip(value.type.tensor_type.shape.dim, sample.shape, strict=True):
                dim.Clear()
                dim.dim_value = int(size)
    proto = onnx.shape_inference.infer_shapes(proto)
    shapes = {v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
              for v in (*proto.graph.value_info, *proto.graph.input, *proto.graph.output)}
    shapes.update({t.name: list(t.dims) for t in proto.graph.initializer})
    producer = {out: node.op_type for node in proto.graph.node for out in node.output}
    total = int8 = 0.0
    for node in proto.graph.node:
        macs = _macs(node, shapes)
        if macs is None:
            continue
        total += macs
        if all(producer.get(t) == "DequantizeLinear" for t in node.input[:2]):
            int8 += macs
    return int8, total


def _macs(node: Any, shapes: dict[str, list[int]]) -> float | None:
    """Multiply-accumulates of one compute node from its shapes (None: not a compute node or shapes unknown)."""
    if node.op_type not in LINEAR_OP_TYPES or len(node.input) < 2:
        return None
    return node_macs(node, shapes)


# ------------------------------------------------------------------------------ the quantizers
def _feeds(npz: Path) -> list[dict[str, np.ndarray]]:
    with np.load(npz) as data:
        arrays = {k: data[k] for k in data.files}
    return [{k: v[i] for k, v in arrays.items()} for i in range(len(next(iter(arrays.values()))))]


class _Reader:
    """onnxruntime's CalibrationDataReader over a calibration ``.npz``."""

    def __init__(self, npz: Path) -> None:
        self.feeds, self.index = _feeds(npz), 0

    def get_next(self) -> dict[str, np.ndarray] | None:
        self.index += 1
        return self.feeds[self.index - 1] if self.index <= len(self.feeds) else None

    def rewind(self) -> None:
        self.index = 0


def quantize_graphlens(model: Path, npz: Path, out: Path, config: Any = None) -> float:
    """``graphlens quantize --calibration npz`` in process (the Workspace call the command makes); seconds."""
    import time

    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    start = time.perf_counter()
    ws = Workspace(keep_history=False)
    ws.open(model)
    ws.quantization.quantize(config or QuantConfig(), npz)
    ws.save_as(out)
    return time.perf_counter() - start


def median_times(setup: OcrSetup, work: Path, repeat: int = 3) -> list[str]:
    """Quantization time of each model by GraphLens (defaults, and ``--equalize off``) and onnxruntime, run
    alternately ``repeat`` times after one warm-up each: the medians and the median of the per-round ratios (the
    machine's load changes between rounds, and hits the tools of a round alike)."""
    import statistics

    from graphlens.quantize import QuantConfig

    out_path, off = work / "t.graphlens.onnx", QuantConfig(equalize="off")
    out = ["| model | GraphLens (s) | `--equalize off` (s) | onnxruntime (s) | GraphLens / onnxruntime | "
           "`--equalize off` / onnxruntime |", "|---|---:|---:|---:|---:|---:|"]
    for key in MODELS:
        model, npz = setup.models[key], setup.calibration[key]
        tools = (lambda m=model, d=npz: quantize_graphlens(m, d, out_path),
                 lambda m=model, d=npz: quantize_graphlens(m, d, out_path, off),
                 lambda m=model, d=npz: quantize_onnxruntime(m, d, work / "t.onnxruntime.onnx"))
        for tool in tools:
            tool()
        rounds = [tuple(tool() for tool in tools) for _ in range(repeat)]
        medians = [statistics.median(r[k] for r in rounds) for k in range(3)]
        ratios = [statistics.median(r[k] / r[2] for r in rounds) for k in range(2)]
        out.append(f"| {model.name} | {medians[0]:.2f} | {medians[1]:.2f} | {medians[2]:.2f} | {ratios[0]:.2f} | "
                   f"{ratios[1]:.2f} |")
    return out


ORT_OP_TYPES = ["Conv", "ConvTranspose", "Gemm", "MatMul"]


def quantize_onnxruntime(model: Path, npz: Path, out: Path, op_types: list[str] | None = ORT_OP_TYPES) -> float:
    """onnxruntime's ``quantize_static`` as bench_quantize runs it: QDQ, per channel, int8 weights, uint8
    activations, MinMax; seconds."""
    import time

    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    start = time.perf_counter()
    quantize_static(str(model), str(out), _Reader(npz), quant_format=QuantFormat.QDQ, per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    calibrate_method=CalibrationMethod.MinMax, op_types_to_quantize=op_types)
    return time.perf_counter() - start


# ------------------------------------------------------------------------------ the table
SETS = {"detector": ("det",), "recognizer": ("rec",), "classifier": ("cls",), "all three": MODELS}
"""Which models each row of the table quantizes (the others stay float)."""


@dataclass
class OcrRow:
    """One pipeline with some models quantized by one tool: its CER against the float pipeline."""

    tool: str
    quantized: str
    cer: float
    interval: tuple[float, float]
    """95 % bootstrap interval of ``cer`` over the test pages (:func:`cer_interval`)."""
    drawn_cer: float
    """CER against the text drawn, beside the float pipeline's own (:attr:`OcrSetup.truth_cer`): an edit where the
    quantized pipeline reads the drawn text and the float one did not counts against it in ``cer`` only."""
    seconds: float
    """Quantization time of the models this row quantizes, summed."""
    int8_share: float
    """Int8 multiply-accumulates / all of them, over the models this row quantizes, at the calibration shapes."""
    edits: int = 0
    """Edits against the float pipeline, all pages together (``cer``'s numerator)."""
    closer: int = 0
    """Of ``edits``, those on pages it reads closer to the text drawn than the float pipeline
    (:func:`edits_read_closer`)."""


@dataclass
class OcrSetup:
    """The float pipeline's reading of the test pages and the shared calibration files."""

    models: dict[str, Path]
    calibration: dict[str, Path]
    samples: dict[str, np.ndarray] = field(repr=False)
    """One calibration sample per model, for its MAC count."""
    test: list[Page] = field(repr=False)
    reference: list[str] = field(repr=False)
    truth_cer: float
    """The float pipeline against the text drawn (how hard the pages are)."""


def prepare(work: Path, test_pages: int = 10, calibration_pages: int = 8,
            limit: dict[str, int] | None = None) -> OcrSetup:
    """Render, capture the calibration inputs, write the ``.npz`` files and read the test pages in float."""
    models = packaged_models()
    arrays = capture_calibration(pages("calibration", calibration_pages, seed=1),
                                 limit or {"det": 8, "cls": 32, "rec": 24})
    calibration = write_calibration(arrays, models, work)
    test = pages("test", test_pages, seed=0)
    reference = read_all(engine(models), test)
    truth = cer(drawn(test), reference)
    return OcrSetup(models, calibration, {k: v[0] for k, v in arrays.items()}, test, reference, truth)


def drawn(found: list[Page]) -> list[str]:
    """Each page's text as drawn, its lines joined by newlines as :func:`read` joins what it reads."""
    return ["\n".join(p.lines) for p in found]


def tool_rows(setup: OcrSetup, tool: str, quantize: Callable[[Path, Path, Path], float], work: Path) -> list[OcrRow]:
    """Quantize each model once with ``quantize(model, npz, out) -> seconds``, then read the test pages with
    each set of :data:`SETS` swapped in."""
    paths, seconds, macs = {}, {}, {}
    for key in MODELS:
        out = work / f"{key}.{''.join(c if c.isalnum() else '_' for c in tool)}.onnx"
        seconds[key] = quantize(setup.models[key], setup.calibration[key], out)
        paths[key] = out
        macs[key] = int8_macs(out, setup.samples[key])
    rows = []
    truth = drawn(setup.test)
    float_drawn, _ = page_errors(truth, setup.reference)
    for label, keys in SETS.items():
        texts = read_all(engine({k: paths[k] for k in keys}), setup.test)
        int8, total = (sum(macs[k][i] for k in keys) for i in (0, 1))
        errors, lengths = page_errors(setup.reference, texts)
        drawn_errors, drawn_lengths = page_errors(truth, texts)
        rows.append(OcrRow(tool, label, *cer_interval(errors, lengths),
                           _rate(drawn_errors, drawn_lengths), sum(seconds[k] for k in keys),
                           int8 / total if total else 0.0, int(errors.sum()),
                           edits_read_closer(errors, drawn_errors, float_drawn)))
    return rows


def markdown(rows: list[OcrRow], setup: OcrSetup) -> list[str]:
    """The table, GraphLens and onnxruntime side by side per quantized set."""
    tools = list(dict.fromkeys(r.tool for r in rows))
    head = "| quantized | " + " | ".join(f"{t}: CER | against the text drawn | time (s) | int8 MACs"
                                        for t in tools) + " |"
    out = [f"{len(setup.test)} test pages; the float pipeline's own CER against the text drawn: "
           f"{100 * setup.truth_cer:.1f} %; in brackets, 95 % bootstrap intervals over the pages", "", head,
           "|---|" + "---:|---:|---:|---:|" * len(tools)]
    for label in SETS:
        cells = []
        for tool in tools:
            r = next(r for r in rows if r.tool == tool and r.quantized == label)
            low, high = r.interval
            cells.append(f"{100 * r.cer:.1f} % ({100 * low:.1f}–{100 * high:.1f}) | {100 * r.drawn_cer:.1f} % | "
                         f"{r.seconds:.1f} | {100 * r.int8_share:.1f} %")
        out.append(f"| {label} | " + " | ".join(cells) + " |")
    out += ["", "All three quantized: edits on pages read closer to the text drawn than by the float pipeline", ""]
    for r in rows:
        if r.quantized == "all three":
            out.append(f"- {r.tool}: {r.closer} of {r.edits}")
    return out
