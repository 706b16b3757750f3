"""GraphLens's rows of the real pipeline beyond the defaults: GPTQ weight rounding, and GPTQ with the recognizer's
float layers chosen by the target search.

:func:`quantize_graphlens_gptq` quantizes every model with ``--weight-rounding gptq``;
:func:`quantize_graphlens_target` does the same and gives the recognizer ``--target-sqnr``
(:data:`RECOGNIZER_TARGET_DB`, measured on its calibration crops; the test pages are not looked at).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from benchmarks.ocr_pipeline import quantize_graphlens

RECOGNIZER_TARGET_DB = 18.0
"""The recognizer's output SQNR target on its first calibration crops (10.9 dB with every layer int8 and GPTQ)."""


def quantize_graphlens_gptq(model: Path, npz: Path, out: Path) -> float:
    """GraphLens's defaults with ``--weight-rounding gptq``; seconds."""
    from graphlens.quantize import QuantConfig

    return quantize_graphlens(model, npz, out, QuantConfig(weight_rounding="gptq"))


def quantize_graphlens_target(model: Path, npz: Path, out: Path) -> float:
    """:func:`quantize_graphlens_gptq`; for the recognizer, also ``--target-sqnr`` :data:`RECOGNIZER_TARGET_DB`;
    seconds."""
    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    if "_rec_" not in model.name:
        return quantize_graphlens_gptq(model, npz, out)
    start = time.perf_counter()
    ws = Workspace(keep_history=False)
    ws.open(model)
    result = ws.quantize(QuantConfig(weight_rounding="gptq", target_sqnr_db=RECOGNIZER_TARGET_DB), npz)
    ws.save_as(out)
    if result.target is not None:
        logging.getLogger(__name__).error("recognizer: %s", result.target.line())
    return time.perf_counter() - start
