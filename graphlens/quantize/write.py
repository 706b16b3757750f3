"""Writing the quantization's Q/DQ pairs into the model, the last edit of :func:`~.quantize.quantize_model`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import Placement, QuantizedTensor, WeightMemo, apply_quantization
from graphlens.quantize.qdq import QParams
from graphlens.rewrites.edit import EditHistory, graph_replacement

if TYPE_CHECKING:
    from graphlens.quantize.equalization import QuantizedArm
    from graphlens.quantize.tuning import Tuning


def insert_pairs(model: Model, session: EditHistory, arm: QuantizedArm | None, placement: Placement,
                 params: dict[str, QParams], config: QuantConfig, tuning: Tuning, memo: WeightMemo,
                 ) -> list[QuantizedTensor]:
    """The Q/DQ pairs written into ``model``: the trial's arm kept as it is when nothing after the trial changed it,
    else inserted here with the weights the trial quantized, if it ran. The memo is emptied either way: the weights
    it holds are not to outlive the writing (without a trial nothing is kept, as every weight would be held to the
    end)."""
    try:
        if arm is not None and not tuning.excluded and not tuning.bias_shift:
            return _adopt(model, session, arm)
        return _apply(model, session, placement, params, config, tuning.excluded, tuning.bias_shift, memo or None)
    finally:
        memo.clear()


def _adopt(model: Model, session: EditHistory, arm: QuantizedArm) -> list[QuantizedTensor]:
    """The equalization trial's arm kept, written into ``model`` as one edit: what :func:`_apply` would insert, since
    the arm is a copy of the model as it is now, quantized with the same ranges, and nothing after the trial changed
    either (``for_report``). It is not quantized again."""
    if not arm.records:
        raise GraphLensError("nothing to quantize: every layer was left float")
    session.apply([graph_replacement(model.graph, arm.model.graph, "quantize", "quantize the layers")])
    return arm.records


def _apply(model: Model, session: EditHistory, placement: Placement, params: dict[str, QParams],
           config: QuantConfig, excluded: list[str], bias_shift: dict[str, np.ndarray] | None = None,
           memo: WeightMemo | None = None) -> list[QuantizedTensor]:
    """The pairs inserted by edits, the layers in ``excluded`` left float."""
    skip = set(excluded)
    return apply_quantization(model, placement, params, config, session=session,
                              keep=lambda site: site.node not in skip, bias_shift=bias_shift, required=True,
                              keep_values=False, memo=memo)
