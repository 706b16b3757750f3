"""Previewing a quantization on a scratch copy (:mod:`graphlens.rewrites.lossy`'s pipeline), and applying
exactly that result to the live model.

:func:`~graphlens.workspace.rewrite_preview.replace_main_graph` turns the preview into one :class:`GraphEdit`
on the live main graph (every node replaced by the quantized model's, new and changed initializers
added, unread ones dropped), so Apply puts in exactly what was previewed, in milliseconds, as one undo step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import onnx

from graphlens.core.task import Task
from graphlens.quantize.config import QuantConfig
from graphlens.rewrites.lossy import LossyPreview, LossyRequest, compute_lossy_preview

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.quantize import CalibrationData, QuantizeResult
    from graphlens.rewrites.driver import FoldReport
    from graphlens.rewrites.edit import EditHistory

QuantizeRequest = LossyRequest[QuantConfig]
QuantizePreview = LossyPreview[QuantConfig, "QuantizeResult"]
"""A quantization's preview: the one lossy-preview type, for the quantizer's settings and result."""


def compute_quantize_preview(request: QuantizeRequest, task: Task | None = None) -> QuantizePreview:
    """Fold, calibrate and quantize a scratch copy; bad settings or a model onnxruntime cannot run raise
    :class:`GraphLensError` in one line, a cancel :class:`~graphlens.core.task.Cancelled`."""
    from graphlens.quantize import quantize_model, random_calibration

    config = request.config

    def quantize(scratch: Model, session: EditHistory, folded: onnx.ModelProto, fold: FoldReport | None,
                 task: Task) -> tuple[QuantizeResult, CalibrationData]:
        data = request.calibration or random_calibration(folded, request.samples, seed=config.seed)
        result = quantize_model(scratch, config.with_changes(fold_rules=()), data, session, samples=request.samples,
                                task=task)
        result.config, result.fold, result.revision = config, fold, request.revision
        return result, data

    return compute_lossy_preview(request, config.fold_rules, quantize, "quantization", task)


def default_opset(proto: onnx.ModelProto) -> int:
    return next((e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")), 1)
