"""The target row of the real pipeline: the recognizer's float layers chosen by the target search, not by name.

:func:`quantize_graphlens_target` quantizes the recognizer with ``--target-sqnr``
(:data:`RECOGNIZER_TARGET_DB`, measured on its calibration crops; the test pages are not looked at)
and the detector and classifier with the defaults.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from benchmarks.ocr_pipeline import quantize_graphlens

RECOGNIZER_TARGET_DB = 16.0
"""The recognizer's output SQNR target: 11.5 dB with every layer int8 on the calibration crops."""


def quantize_graphlens_target(model: Path, npz: Path, out: Path) -> float:
    """GraphLens's defaults; for the recognizer, ``--target-sqnr`` :data:`RECOGNIZER_TARGET_DB`; seconds."""
    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    if "_rec_" not in model.name:
        return quantize_graphlens(model, npz, out)
    start = time.perf_counter()
    ws = Workspace(keep_history=False)
    ws.open(model)
    result = ws.quantize(QuantConfig(target_sqnr_db=RECOGNIZER_TARGET_DB), npz)
    ws.save_as(out)
    if result.target is not None:
        logging.getLogger(__name__).error("recognizer: %s", result.target.line())
    return time.perf_counter() - start
