"""GraphLens's rows of the real pipeline beyond the defaults: GPTQ weight rounding, and settings chosen per model
with float layers chosen by the target search for each model.

:func:`quantize_graphlens_gptq` quantizes every model with ``--weight-rounding gptq``;
:func:`quantize_graphlens_per_model` gives the detector ``--target-sqnr`` (:data:`DETECTOR_TARGET_DB`) at nearest
rounding (GPTQ lowers its output SQNR over its 8 calibration pages, 17.4 → 16.8 dB), the recognizer GPTQ and
``--target-sqnr`` (:data:`RECOGNIZER_TARGET_DB`) and the classifier GPTQ and a target on its log-probabilities through
the ``evaluate`` hook (:data:`CLASSIFIER_TARGET_DB`, :func:`log_probability_sqnr`), each measured on the model's own
calibration samples; the test pages are not looked at.

Why the classifier's target is on its log-probabilities: RapidOCR turns a line when the classifier's probability of 180°
is over 0.9, and its output SQNR on probabilities (46 dB with GPTQ) does not see errors that move that
probability near the threshold, because most crops sit near 0 or 1 where the probability barely moves.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.ocr_pipeline import quantize_graphlens

RECOGNIZER_TARGET_DB = 19.0
"""The recognizer's output SQNR target on its first calibration crops (11.1 dB with every layer int8 and GPTQ): the
highest whole number of dB at which the three models keep at least 90 % of their multiply-accumulates int8 on
their calibration inputs (at 19 dB the search leaves 23 layers float, 89.5 % of the recognizer's MACs int8; at 20 dB
26 layers, 63.6 %)."""

DETECTOR_TARGET_DB = 19.0
"""The detector's output SQNR target on its first calibration page (16.7 dB with every layer int8), the recognizer's
number: the search leaves 32 small layers float (93.4 % of its MACs int8, 91.9 % for the three models together).
Every convolution int8, the detector alone read 100 test pages at 1.7 % CER and all three at 2.2 %, both carried by a
few lost lines; with the target, 1.2 % and 1.2 % (docs/benchmarks.md)."""

CLASSIFIER_TARGET_DB = 30.0
"""The classifier's target on :func:`log_probability_sqnr` over all its calibration crops (25.1 dB with every layer int8
and GPTQ)."""


SCORE_CEILING_DB = 300.0
"""The score of a candidate whose log-probabilities equal the float model's (an SQNR of +inf): ``evaluate`` must
return a finite number."""


def _centred_log_probabilities(probabilities: np.ndarray) -> np.ndarray:
    """``log p`` less its mean over the classes: a softmax's logits up to their own constant, which the
    probabilities cannot tell (for two classes, ±½ the log-odds)."""
    logs = np.log(np.clip(probabilities.astype(np.float64), 1e-12, 1.0))
    centred: np.ndarray = logs - logs.mean(axis=-1, keepdims=True)
    return centred


def log_probability_sqnr(model: Path, npz: Path) -> Callable[[str], float]:
    """An ``evaluate`` function: the SQNR (dB, :func:`graphlens.numerics.metrics.sqnr_db`) of a candidate's
    :func:`_centred_log_probabilities` against ``model``'s, over every sample of ``npz``."""
    import onnxruntime as ort

    from graphlens.numerics.metrics import sqnr_db

    with np.load(npz) as data:
        name = data.files[0]
        samples = data[name]

    def outputs(path: str | Path) -> np.ndarray:
        session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        return _centred_log_probabilities(np.concatenate([session.run(None, {name: x})[0] for x in samples]))

    reference = outputs(model)

    def evaluate(path: str) -> float:
        return min(sqnr_db(reference, outputs(path)), SCORE_CEILING_DB)

    return evaluate


def quantize_graphlens_gptq(model: Path, npz: Path, out: Path) -> float:
    """GraphLens's defaults with ``--weight-rounding gptq``; seconds."""
    from graphlens.quantize import QuantConfig

    return quantize_graphlens(model, npz, out, QuantConfig(weight_rounding="gptq"))


def quantize_graphlens_per_model(model: Path, npz: Path, out: Path) -> float:
    """The detector with ``--target-sqnr`` :data:`DETECTOR_TARGET_DB`; the recognizer with GPTQ and
    ``--target-sqnr`` :data:`RECOGNIZER_TARGET_DB`; the classifier with GPTQ and :data:`CLASSIFIER_TARGET_DB` on
    :func:`log_probability_sqnr`; seconds."""
    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    evaluate = None
    if "_rec_" in model.name:
        config = QuantConfig(weight_rounding="gptq", target_sqnr_db=RECOGNIZER_TARGET_DB)
    elif "_cls_" in model.name:
        config = QuantConfig(weight_rounding="gptq", target_score=CLASSIFIER_TARGET_DB)
        evaluate = log_probability_sqnr(model, npz)
    else:
        config = QuantConfig(target_sqnr_db=DETECTOR_TARGET_DB)
    start = time.perf_counter()
    ws = Workspace(keep_history=False)
    ws.open(model)
    result = ws.quantization.quantize(config, npz, evaluate=evaluate)
    ws.save_as(out)
    if result.target is not None:
        logging.getLogger(__name__).error("%s: %s", model.stem, result.target.line())
    return time.perf_counter() - start
