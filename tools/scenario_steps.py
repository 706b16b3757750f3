"""The scenario of tools/window_scenario.py as data: which model each app start opens and what a person does on it.

A :class:`Session` is one start of the app; its model is a path under the ``--models`` folder (None: the bundled
demo), and a session whose model is missing is skipped with one line. ``prepare`` runs graphlens commands before
the app starts (a folded copy to compare with), or the venv's Python when the first word is ``python``. Actions and
commands may name ``{models}`` (the ``--models`` folder) and ``{work}`` (the size's output folder, where prepared
files go).

The steps that make the pictures of the README and docs/*.md are named after them (``quantize`` gives
docs/screenshots/quantize.png); look at each screenshot before copying it there.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CLS = "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx"
DET = "rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx"
RXNMAP = "chython_rxnmap/rxnmap.onnx"


@dataclass(frozen=True)
class Step:
    """One thing a person does, what shows it is done, and how long that may take."""

    name: str
    actions: tuple[str, ...] = ()
    wait: str = "settle"
    timeout: float = 30.0
    settle: float = 0.6
    """Seconds the screen must stay still before the step counts as done."""
    expect: str = ""
    """Text that must be on screen (in the window's plain font) for the step to count as done."""


@dataclass(frozen=True)
class Session:
    """One start of the app: its model (a path under ``--models``; None: the bundled demo) and the steps on it."""

    model: str | None
    title: str
    """What the window title holds once the model is open."""
    steps: tuple[Step, ...]
    prepare: tuple[tuple[str, ...], ...] = ()
    """graphlens commands (arguments after the executable; ``python …``: the venv's Python) run before the app
    starts."""


DEMO_STEPS = (
    Step("first-view", wait="title:demo.onnx", timeout=60),
    Step("fit", ("key f",)),
    Step("inspect", ("key ctrl+f", "type /stage2/block1/bn", "key Return", "key Escape"), expect="epsilon"),
    Step("context-menu", ("context Menu",), wait="popup"),
    Step("why-not", ("key Down Return",), expect="pattern nodes placed"),  # Home, Return: nothing (Qt)
    Step("run-pattern", ("key ctrl+m",), timeout=20, settle=1.0, expect="Preview"),
    Step("preview", ("click Preview @right",), timeout=90, settle=1.5, expect="Ctrl+Enter"),
    Step("apply", ("key ctrl+Return",), timeout=60, settle=1.0),
    Step("undo", ("key ctrl+z",), timeout=60, settle=1.0),
    Step("explain-menu", ("key alt+x",), wait="popup"),
    Step("lesson", ("key b",), timeout=90, settle=1.5, expect="Channel"),
)
SKETCH_STEPS = (  # a fresh start: the stem's Conv, BatchNormalization and Relu one under the other at 100 %
    Step("sketch-first-view", wait="title:demo.onnx", timeout=60),
    Step("sketch-select", ("key ctrl+f", "type /stem/conv", "key Return", "key Escape", "shift-below 105 189")),
    Step("sketch", ("key ctrl+shift+n",), settle=1.0, expect="Relu"),
)
CLS_STEPS = (
    Step("cls-first-view", wait="title:ch_ppocr_mobile_v2.0_cls_infer.onnx", timeout=60),
    Step("patterns-menu", ("key alt+p",), wait="popup"),
    Step("quantize-panel", ("key q",), expect="GPTQ rounding"),
    Step("quantize-gptq", ("click 'GPTQ rounding'",)),
    Step("quantize-run", ("click Run @left",), timeout=600, settle=2.0, expect="nearest rounding"),
    Step("quantize-sorted", ("click 'SQNR dB' @bottom", "click 'Show the graph after'",
                             "drag Overlay @right dy=-11 by=-110"), timeout=60, settle=1.5),  # room for its summary
    Step("quantize", ("click 'SQNR dB' @bottom dy=18",), timeout=60, settle=1.5),  # the worst row, centred
    Step("quantize-lesson", ("click 'Learn fake quantization'",), timeout=90, settle=1.5, expect="zero point"),
)
BIN_STEPS = (  # a fresh start: the quantized preview's graph would stay on the canvas (see the report)
    Step("bin-first-view", wait="title:ch_ppocr_mobile_v2.0_cls_infer.onnx", timeout=60),
    Step("binarize-menu", ("key alt+p",), wait="popup"),
    Step("binarize-panel", ("key b",), expect="fold BNs first"),
    Step("binarize-one-bit", ("click Run @left",), timeout=300, settle=2.0, expect="weakest reconstruction"),
    Step("binarize", ("drag Overlay @right dy=-11 by=-110", "click 'Bits K' dy=24", "key Up"), timeout=300,
         settle=2.0, expect="except"),
    Step("binarize-row", ("click 'SQNR dB' @bottom dy=20",), timeout=30, settle=1.0),
    Step("binarize-lesson-one", ("click 'Learn binarization'",), timeout=90, settle=1.5, expect="Kernel"),
    Step("binarize-lesson", ("click 'K = 1' @right", "key Up Up"), timeout=90, settle=1.5),
)
COMPARE_STEPS = (
    Step("compare-first-view", wait="title:ch_ppocr_mobile_v2.0_cls_infer.onnx", timeout=60),
    Step("compare-dialog", ("key ctrl+shift+d",), wait="popup"),
    Step("compare-both", ("focus-new", "type {work}/cls-folded.onnx", "key Return"), timeout=120, settle=1.5),
    Step("compare", ("key F8",), timeout=30, settle=1.0),
)
DET_STEPS = (
    Step("det-first-view", wait="title:ch_PP-OCRv4_det_infer.onnx", timeout=60),
    Step("view-menu", ("key alt+v",), wait="popup"),
    Step("overlay-menu", ("key v",), wait="popup"),
    Step("profile", ("key p",), timeout=300, settle=2.0, expect="Latency"),
    Step("overlay", ("drag Overlay @right dy=-11 by=-320", "click Value @right dy=18"), timeout=30, settle=1.0),
)
RXNMAP_STEPS = (
    Step("rxnmap-first-view", wait="title:rxnmap.onnx", timeout=180, settle=1.0),
    Step("rxnmap-fuse", ("key ctrl+shift+t",), timeout=300, settle=2.0, expect="undoes the run"),
    Step("rxnmap-undo", ("focus-new", "key ctrl+z"), timeout=120, settle=1.5, expect="Undone"),
    Step("rxnmap-softmax", ("key ctrl+f", "type /rxn_layer_last/self_attn/Softmax", "key Return", "key Escape"),
         timeout=60, settle=1.0),
    Step("rxnmap-softmax-menu", ("context Menu",), wait="popup"),
    Step("why-not-attention", ("key Down Return",), timeout=120, settle=1.5, expect="ReduceSum"),
)
WEIGHT_ONLY_STEPS = (  # int4 weight-only blocks of 32 (the weights picker's third entry) on 8 random samples
    Step("wo-first-view", wait="title:rxnmap.onnx", timeout=180, settle=1.0),
    Step("wo-patterns-menu", ("key alt+p",), wait="popup"),
    Step("wo-quantize-panel", ("key q",), expect="GPTQ rounding"),
    Step("wo-weights-menu", ("click 'int8 weights'",), wait="popup"),
    Step("wo-weights", ("key Down Down Return",), expect="blocks of 32"),
    Step("wo-run", ("click Run @left",), timeout=900, settle=2.0, expect="int4"),
    Step("wo-sorted", ("click 'SQNR dB' @bottom", "drag Overlay @right dy=-11 by=-110"), timeout=60, settle=1.5),
    Step("quantize-weight-only", ("click 'SQNR dB' @bottom dy=18",), timeout=60, settle=1.5),  # the worst row
)
IR8_COPY = ("python", "-c", "import os, sys, onnx; m = onnx.load(os.path.join(os.path.dirname(onnx.__file__), "
            "'backend/test/data/light/light_resnet50.onnx')); m.ir_version = 8; onnx.save(m, sys.argv[1])",
            "{work}/resnet50-ir8.onnx")  # the onnx package's ResNet-50 (IR 3, initializers as inputs) declared IR 8
FREEZE_STEPS = (  # initializers listed as inputs are overridable defaults from IR 4 on: Why not offers freeze-inputs
    Step("fz-first-view", wait="title:demo.onnx", timeout=60),
    Step("fz-open", ("key ctrl+o",), wait="popup"),
    Step("fz-resnet", ("focus-new", "type {work}/resnet50-ir8.onnx", "key Return"), wait="title:resnet50-ir8.onnx",
         timeout=120, settle=1.5),
    Step("fz-bn", ("key ctrl+f", "type BatchNormalization", "key Return", "key Escape"), timeout=60, settle=1.0),
    Step("fz-menu", ("context Menu",), wait="popup"),
    Step("why-not-freeze-inputs", ("key Down Return",), timeout=120, settle=1.5, expect="freeze-inputs"),
)
PAGES = ("python", "-c", "import os, sys; from PIL import Image; from benchmarks.ocr_pipeline import pages; "
         "os.makedirs(sys.argv[1], exist_ok=True); [Image.fromarray(p.image[:, :, ::-1]).save("
         "os.path.join(sys.argv[1], p.name + '.png')) for p in pages('calibration', 6, 0)]",
         "{work}/pages")  # six calibration pages of benchmarks/ocr_pipeline.py (960×720, RGB PNG)
TARGET_STEPS = (  # a 20 dB target calibrated on the six rendered pages through Images… and its preprocessing
    Step("tg-first-view", wait="title:ch_PP-OCRv4_det_infer.onnx", timeout=60),
    Step("tg-patterns-menu", ("key alt+p",), wait="popup"),
    Step("tg-quantize-panel", ("key q",), expect="GPTQ rounding"),
    Step("tg-images", ("click Images",), wait="popup"),
    Step("tg-folder", ("focus-new", "type {work}/pages", "key Return"), wait="popup", timeout=60),
    Step("tg-preprocess", ("focus-new", "key ctrl+a", "type size=320x320,mean=0.5,std=0.5,order=bgr", "key Return"),
         timeout=120, settle=1.5),
    Step("tg-target", ("click 'target SQNR: none'", "key" + " Up" * 20, "key Tab")),
    Step("tg-run", ("click Run @left",), timeout=1200, settle=2.0, expect="Preview: the model"),
    Step("quantize-target", ("click Value @right dy=18",), timeout=60, settle=1.5),  # the overlay's worst layer
)
SESSIONS = (
    Session(None, "demo.onnx", DEMO_STEPS),
    Session(None, "demo.onnx", SKETCH_STEPS),
    Session(CLS, "ch_ppocr_mobile_v2.0_cls_infer.onnx", CLS_STEPS),
    Session(CLS, "ch_ppocr_mobile_v2.0_cls_infer.onnx", BIN_STEPS),
    Session(CLS, "ch_ppocr_mobile_v2.0_cls_infer.onnx", COMPARE_STEPS,
            prepare=(("fold", f"{{models}}/{CLS}", "-o", "{work}/cls-folded.onnx"),)),
    Session(DET, "ch_PP-OCRv4_det_infer.onnx", DET_STEPS),
    Session(RXNMAP, "rxnmap.onnx", RXNMAP_STEPS),
    Session(RXNMAP, "rxnmap.onnx", WEIGHT_ONLY_STEPS),
    Session(None, "resnet50-ir8.onnx", FREEZE_STEPS, prepare=(IR8_COPY,)),
    Session(DET, "ch_PP-OCRv4_det_infer.onnx", TARGET_STEPS, prepare=(PAGES,)),
)


def prepare(session: Session, graphlens: str, values: dict[str, str], cwd: Path) -> str:
    """Run ``session.prepare``'s graphlens (or ``python``) commands, one line each; '' when all worked, else why one
    failed."""
    for args in session.prepare:
        program = sys.executable if args[0] == "python" else graphlens
        command = [program, *(a.format(**values) for a in args[args[0] == "python":])]
        done = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=600)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
            return f"{Path(program).name} {args[0]} exited {done.returncode}: {last[0]}"
        print(f"    prepared: {Path(program).name} {' '.join(command[1:])[:120]}")
    return ""
