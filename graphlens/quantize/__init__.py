"""Fake-quantize a model (QDQ) after folding, and measure where the error comes from (Qt-free).

Public API::

    from graphlens.quantize import QuantConfig, quantize_model, load_calibration, random_calibration

    result = quantize_model(model, QuantConfig(), calibration=None, session=None, samples=8,
                            progress=None, cancelled=None)        # -> QuantizeResult
    result.output_sqnr_db, result.layers, result.per_node("sqnr_db"), result.to_dict()

``Workspace.quantize`` wraps it for the window and scripts, ``graphlens quantize`` for the shell.
The math is in :mod:`~graphlens.quantize.qdq` (scales, zero points), :mod:`~.calibrate`
(ranges), :mod:`~.errors` (SQNR and friends); placement in :mod:`~.place`.
"""

from graphlens.quantize.calibrate import (
    CalibrationData,
    QuantizeCancelled,
    load_calibration,
    random_calibration,
)
from graphlens.quantize.config import METHODS, OP_TYPES, QuantConfig
from graphlens.quantize.quantize import LayerError, QuantizeResult, quantize_model

__all__ = [
    "METHODS",
    "OP_TYPES",
    "CalibrationData",
    "LayerError",
    "QuantConfig",
    "QuantizeCancelled",
    "QuantizeResult",
    "load_calibration",
    "quantize_model",
    "random_calibration",
]
