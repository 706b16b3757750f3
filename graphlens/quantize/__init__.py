"""Fake-quantize a model (QDQ) after folding, and measure where the error comes from (Qt-free).

Public API::

    from graphlens.quantize import QuantConfig, quantize_model, load_calibration, random_calibration

    result = quantize_model(model, QuantConfig(), calibration=None, session=None, samples=8,
                            task=None)        # -> QuantizeResult
    result.output_sqnr_db, result.layers, result.per_node("sqnr_db"), result.to_dict()

``ws.quantization.quantize`` wraps it for the window and scripts, ``graphlens quantize`` for the shell.
The math is in :mod:`~graphlens.quantize.qdq` (scales, zero points), :mod:`~.calibrate`
(ranges), :mod:`graphlens.numerics.metrics` (SQNR and friends); placement in :mod:`~.place`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from graphlens.quantize.config import METHODS, OP_TYPES, QuantConfig

if TYPE_CHECKING:
    from graphlens.quantize.calibrate import CalibrationData, load_calibration, random_calibration
    from graphlens.quantize.quantize import LayerError, QuantizeResult, quantize_model

_LAZY = {
    "CalibrationData": "calibrate", "load_calibration": "calibrate", "random_calibration": "calibrate",
    "LayerError": "quantize", "QuantizeResult": "quantize", "quantize_model": "quantize",
}
"""Imported on first use: the command line builds its ``quantize`` options from :mod:`.config` alone,
and every other command would otherwise pay for the quantizer (and onnxruntime's helpers) at start-up."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphlens.quantize' has no attribute '{name}'")
    return getattr(importlib.import_module(f"graphlens.quantize.{module}"), name)


__all__ = [
    "METHODS",
    "OP_TYPES",
    "CalibrationData",
    "LayerError",
    "QuantConfig",
    "QuantizeResult",
    "load_calibration",
    "quantize_model",
    "random_calibration",
]
