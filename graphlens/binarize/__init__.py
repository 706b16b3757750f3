"""Binarize weights with one bit or several (CNTK netopt's multibit binarization), and measure the cost (Qt-free).

Public API::

    from graphlens.binarize import BinarizeConfig, binarize_model

    result = binarize_model(model, BinarizeConfig(bits=2), session=None, calibration=None, samples=4,
                            task=None)          # -> BinarizeResult
    result.output_sqnr_db, result.layers, result.per_node("sqnr_db"), result.to_dict()

The math (Bᵢ, αᵢ, the residuals, the bit map) is in :mod:`graphlens.binarize.bits`; the graph
edits in :mod:`~graphlens.binarize.binarize`. ``ws.binarization.binarize`` wraps it for the window and
scripts, ``graphlens binarize`` for the shell. The function for one array is
:func:`graphlens.binarize.bits.binarize` (the package attribute ``binarize`` is the module).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from graphlens.binarize.config import FORMS, OP_TYPES, BinarizeConfig

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult, LayerBits, binarize_model
    from graphlens.binarize.bits import Binarized, Step, kernel_axis, random_bit_map, residual_steps
    from graphlens.numerics.metrics import sqnr_db

_LAZY = {
    "BinarizeResult": "graphlens.binarize.binarize", "LayerBits": "graphlens.binarize.binarize",
    "binarize_model": "graphlens.binarize.binarize",
    "Binarized": "graphlens.binarize.bits", "Step": "graphlens.binarize.bits", "kernel_axis": "graphlens.binarize.bits",
    "random_bit_map": "graphlens.binarize.bits", "residual_steps": "graphlens.binarize.bits",
    "sqnr_db": "graphlens.numerics.metrics",
}
"""Imported on first use: the command line builds its options from :mod:`.config` alone."""


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'graphlens.binarize' has no attribute '{name}'")
    return getattr(importlib.import_module(module), name)


__all__ = [
    "FORMS", "OP_TYPES", "BinarizeConfig", "BinarizeResult", "Binarized", "LayerBits", "Step", "binarize_model",
    "kernel_axis", "random_bit_map", "residual_steps", "sqnr_db",
]
