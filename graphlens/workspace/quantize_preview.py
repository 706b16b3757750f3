"""Previewing a quantization on a scratch copy, and applying exactly that result to the live model.

:func:`compute_quantize_preview` runs anywhere (a worker thread): it folds and quantizes a copy
made from the request's bytes, keeping the folded float model and the calibration samples it
used, so the lesson can explain any tensor with the very numbers the quantizer saw.
:func:`~graphlens.workspace.preview.replace_main_graph` turns the preview into one :class:`GraphEdit`
on the live main graph (every node replaced by the quantized model's, new and changed initializers
added, unread ones dropped), so Apply puts in exactly what was previewed, in milliseconds, as one undo step.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from graphlens.core.task import Task, task_or_idle
from graphlens.rewrites.edit import RewriteSession
from graphlens.workspace.preview import scratch_from_bytes

if TYPE_CHECKING:
    from graphlens.quantize import CalibrationData, QuantConfig, QuantizeResult


@dataclass(frozen=True, kw_only=True)
class QuantizeRequest:
    """What a quantize preview needs, captured from the live model on its owner's thread."""

    config: QuantConfig
    calibration: CalibrationData | None
    """Samples (from an .npz, read when asked); None: ``samples`` random ones."""
    samples: int
    model_bytes: bytes = field(repr=False)
    model_path: Path | None
    revision: int


@dataclass
class QuantizePreview:
    """A quantization computed for ``revision`` of the model, not applied (dropped once it changes)."""

    result: QuantizeResult
    after: onnx.ModelProto = field(repr=False)
    """The quantized model."""
    float_model: onnx.ModelProto = field(repr=False)
    """The model after folding, before the QDQ pairs: the float values the errors compare against."""
    calibration: CalibrationData = field(repr=False)
    revision: int

    @property
    def config(self) -> QuantConfig:
        return self.result.config

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, **self.result.to_dict()}


def compute_quantize_preview(request: QuantizeRequest, task: Task | None = None) -> QuantizePreview:
    """Fold, calibrate and quantize a scratch copy; bad settings or a model onnxruntime cannot run raise
    :class:`GraphLensError` in one line, a cancel :class:`~graphlens.core.task.Cancelled`."""
    from graphlens.quantize import quantize_model, random_calibration
    from graphlens.rewrites.driver import fold_model, resolve_rules

    scratch = scratch_from_bytes(request.model_bytes, request.model_path)
    session = RewriteSession(scratch)
    config = request.config
    fold = None
    task = task_or_idle(task)
    if config.fold_rules:  # folded here, not inside quantize_model, to keep the folded float model
        fold = fold_model(scratch, resolve_rules(list(config.fold_rules)), session, task=task)
    task.check("quantization")
    folded = onnx.ModelProto()
    folded.CopyFrom(scratch.to_proto())
    data = request.calibration or random_calibration(folded, request.samples, seed=config.seed)
    result = quantize_model(scratch, config.with_changes(fold_rules=()), data, session, samples=request.samples,
                            task=task)
    result.config, result.fold, result.revision = config, fold, request.revision
    after = scratch.to_proto()  # the scratch copy is dropped here: its protobuf needs no second copy
    return QuantizePreview(result, after, folded, data, request.revision)


def default_opset(proto: onnx.ModelProto) -> int:
    return next((e.version for e in proto.opset_import if e.domain in ("", "ai.onnx")), 1)
