"""What to quantize and how: :class:`QuantConfig`, with defaults that give a good int8 model unasked.

Defaults, and why:

- weights int8, **per channel**, **symmetric**, **narrow range** (−127..127, TF's weight range):
  the zero point is 0, so an int8 GEMM needs no zero-point correction for the weights, and no
  weight takes −128, which x86's u8×s8 multiply-add (VPMADDUBSW) can saturate on;
- activations **uint8, asymmetric** (onnxruntime's default ``QUInt8``): a ReLU output or an
  image spends all 256 levels on its actual range instead of half of them on negatives that
  never occur; onnxruntime's x86 kernels take uint8 activations with int8 weights;
- calibration **MinMax** over the samples: the best held-out output SQNR on the classifier and
  detector, within 0.7 dB of the best on the demo (docs/benchmarks.md, "Quantization"); EMA and
  MSE did better on the recognizer (15.8, 14.4 against 12.0 dB) but far worse on the classifier
  (28.0 against 38.3 dB): clipping tails helps some activations and hurts the ones whose extremes matter;
- no bias correction (``bias_correction``), and cross-layer equalization only where a trial on the first
  calibration samples says it helps (``equalize="auto"``): judged by the OCR pipeline's character error rate
  (docs/quantize.md, "Defaults judged by a task");
- batch norms folded first (``fuse-decomposed-bn``, ``fold-bn``, ``fold-affine``), as TF's
  quantize does: a BN scale quantized on its own is what sinks onnxruntime's PaddleOCR models;
- the op types onnxruntime runs as int8 kernels with weights: Conv, ConvTranspose, Gemm, MatMul.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.rewrites.defaults import BN_FOLD_RULES

METHODS = ("minmax", "ema", "percentile", "mse", "entropy", "auto")
"""Calibration methods; see :mod:`graphlens.quantize.calibrate` and :mod:`graphlens.quantize.ranges`
for what each computes (``auto``: per tensor, the one of minmax, entropy, percentile, mse with the
least expected error)."""

OP_TYPES = ("Conv", "ConvTranspose", "Gemm", "MatMul")
"""Op types whose weights (and inputs, outputs) can be quantized."""

FOLD_RULES = BN_FOLD_RULES

EQUALIZE_MODES = ("auto", "on", "off")
"""Cross-layer equalization in quantize (:mod:`~.equalization`): where it lowers the error, always, never."""

WEIGHT_ROUNDINGS = ("nearest", "gptq")
"""How weights are rounded (:mod:`~.rounding`): to the nearest level, or by GPTQ on the calibration samples."""

WEIGHT_FORMATS = ("qdq", "matmulnbits")
"""Weight-only storage: DequantizeLinear with ``block_size`` (opset 21), or onnxruntime's MatMulNBits."""


@dataclass(frozen=True)
class QuantConfig:
    """Every choice :func:`~graphlens.quantize.quantize.quantize_model` makes; see the module docstring."""

    weight_bits: int = 8
    """8 (int8/uint8) or 4 (int4/uint4, which needs opset 21)."""
    weight_signed: bool = True
    activation_signed: bool = False
    """False: uint8 activations (onnxruntime's default); True: int8."""
    per_channel: bool = True
    """One scale per output channel of a weight (needs opset 13); False: one per weight."""
    symmetric_weights: bool = True
    symmetric_activations: bool = False
    narrow_range: bool = True
    """Signed symmetric weights use −(2^(b−1)−1)..2^(b−1)−1 (−127..127), as TF does."""
    method: str = "minmax"
    percentile: float = 99.99
    ema_decay: float = 0.999
    op_types: tuple[str, ...] = OP_TYPES
    exclude_nodes: tuple[str, ...] = ()
    exclude_op_types: tuple[str, ...] = ()
    exclude_scopes: tuple[str, ...] = ()
    """Name scopes (``/backbone``): every node whose name starts with one is left in float (TF's ``scope``)."""
    quantize_outputs: bool = True
    """Also quantize each quantized op's output (after a ReLU/Clip it feeds alone), so onnxruntime
    can run the op as an int8 kernel; False keeps the outputs float."""
    fold_rules: tuple[str, ...] = FOLD_RULES
    """Rules applied before quantizing; ``()`` folds nothing."""
    batch_size: int = 8
    """Samples per onnxruntime run (fewer when the model's batch dim is fixed or memory is short)."""
    sensitivity: bool = False
    """Also rank the layers exactly: each quantized alone, and each left float alone (2 runs per layer)."""
    target_sqnr_db: float | None = None
    """Leave the worst layers float until the output SQNR reaches this (:mod:`~.target`: one ranking pass
    and a few verified runs); unreachable: the best model found, the result says so."""
    target_score: float | None = None
    """With an ``evaluate`` function (:mod:`~.scoring`): leave layers float until its score reaches this."""
    bias_correction: bool = False
    """Move each layer's mean output shift, measured on the calibration samples, into its bias
    (:mod:`~.bias_correction`). Off by default: it raised the output SQNR but lowered no OCR model's character
    error rate and raised the classifier's from 0.0 to 2.7 % (docs/quantize.md); and it costs three runs."""
    equalize: str = "auto"
    """Cross-layer equalization first (:mod:`~.equalization`): ``auto`` keeps it where the quantized output
    SQNR (or the ``evaluate`` score) on the calibration samples rises, ``on`` always, ``off`` never."""
    weight_rounding: str = "nearest"
    """How weights are rounded to their levels: ``nearest``, or ``gptq`` (:mod:`~.rounding`: each layer's rounding
    errors steered to cancel on the inputs it sees in the calibration samples; one more float pass)."""
    seed: int = 0
    """Seed of random calibration samples."""
    weight_only: bool = False
    """Quantize only MatMul and Gemm weights, in blocks along K; activations stay float (:mod:`~.weight_only`)."""
    block_size: int = 32
    """Weight-only: rows of K per scale (a power of two, at least 16, as MatMulNBits needs)."""
    weight_format: str = "qdq"
    """Weight-only: one of :data:`WEIGHT_FORMATS`."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.weight_bits not in (4, 8):
            raise GraphLensError(f"weight bits must be 8 or 4, not {self.weight_bits}")
        if self.method not in METHODS:
            raise GraphLensError(f"unknown calibration method '{self.method}'; methods: {', '.join(METHODS)}")
        unknown = [t for t in self.op_types if t not in OP_TYPES]
        if unknown:
            raise GraphLensError(f"cannot quantize op type '{unknown[0]}'; op types: {', '.join(OP_TYPES)}")
        if not 50.0 < self.percentile <= 100.0:
            raise GraphLensError(f"percentile must be in (50, 100], not {self.percentile}")
        if not 0.0 < self.ema_decay < 1.0:
            raise GraphLensError(f"EMA decay must be in (0, 1), not {self.ema_decay}")
        if self.batch_size < 1:
            raise GraphLensError(f"batch size must be at least 1, not {self.batch_size}")
        if self.block_size < 16 or self.block_size & (self.block_size - 1):
            raise GraphLensError(f"block size must be a power of two, at least 16, not {self.block_size}")
        if self.equalize not in EQUALIZE_MODES:
            raise GraphLensError(f"unknown equalize mode '{self.equalize}'; modes: {', '.join(EQUALIZE_MODES)}")
        if self.weight_rounding not in WEIGHT_ROUNDINGS:
            raise GraphLensError(f"unknown weight rounding '{self.weight_rounding}'; roundings: "
                                 f"{', '.join(WEIGHT_ROUNDINGS)}")
        if self.seed < 0:
            raise GraphLensError(f"seed must be 0 or more, not {self.seed}")
        if self.weight_only:
            self._check_weight_only()
        elif (self.block_size, self.weight_format) != (32, "qdq"):
            raise GraphLensError("a block size or weight format is for weight-only blocks (--weight-only); "
                                 "int8 layers take none")
        if self.weight_format not in WEIGHT_FORMATS:
            raise GraphLensError(f"unknown weight format '{self.weight_format}'; formats: {', '.join(WEIGHT_FORMATS)}")
        for option, target in (("target SQNR", self.target_sqnr_db), ("target score", self.target_score)):
            if target is not None and not math.isfinite(target):
                raise GraphLensError(f"{option} must be a finite number, not {target}")
        if self.target_sqnr_db is not None and self.target_score is not None:
            raise GraphLensError("give a target SQNR or a target score, not both: the search follows one")

    def _check_weight_only(self) -> None:
        """Weight-only blocks calibrate nothing and round to nearest: a setting that would change nothing is
        refused rather than ignored."""
        if self.weight_rounding != "nearest":
            raise GraphLensError(f"weight rounding '{self.weight_rounding}' works on layers quantized whole; "
                                 "weight-only blocks round to nearest")
        if self.sensitivity or self.target_sqnr_db is not None or self.target_score is not None:
            raise GraphLensError("weight-only quantization has no sensitivity scan or target SQNR or score; "
                                 "leave layers float with --exclude or --exclude-scope")
        unused = [what for what, given in (
            (f"calibration method '{self.method}'", self.method != "minmax"),
            ("bias correction", self.bias_correction),
            ("equalization 'on'", self.equalize == "on")) if given]
        if unused:
            raise GraphLensError(f"{unused[0]} does not apply to weight-only blocks: their activations stay float "
                                 "and nothing is calibrated")

    def with_changes(self, **changes: Any) -> QuantConfig:
        return replace(self, **changes)

    def excludes(self, name: str, op_type: str) -> bool:
        """Whether a node is left float by name, op type or scope."""
        if name in self.exclude_nodes or op_type in self.exclude_op_types:
            return True
        scopes = [s.rstrip("/") for s in self.exclude_scopes if s.rstrip("/")]
        return any(name == s or name.startswith(s + "/") for s in scopes)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("extra")
        for key in ("op_types", "exclude_nodes", "exclude_op_types", "exclude_scopes", "fold_rules"):
            data[key] = list(data[key])
        return data
