"""The quantization feature: fake-quantize the model (QDQ), previewed on a scratch copy or done in place, and the
lesson of one tensor.

``ws.quantization.preview(config, calibration)`` (or its job, ``preview_job``) quantizes a scratch copy
(:func:`~graphlens.workspace.quantize_preview.compute_quantize_preview`) and keeps it as
``ws.quantization.previewed`` while the model is at the revision it was computed for; ``ws.quantization.apply()``
puts exactly that in as one undo step. ``ws.quantization.quantize(...)`` quantizes the model itself in one step, as
the command line does. Either way ``ws.quantization.applied`` keeps the result as the record of what was done (an
edit does not drop it; another model does). ``ws.quantization.lesson_job(preview, layer)`` works one tensor of a
preview out with its own numbers, kept as ``ws.quantization.lesson``. Each field has its event in
``ws.quantization.events``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.core.names import check_node_names
from graphlens.core.task import Task
from graphlens.workspace.feature import LossyFeature, feature
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import TensorLessonRequest

if TYPE_CHECKING:
    from graphlens.quantize import CalibrationData, QuantConfig, QuantizeResult
    from graphlens.quantize.lesson import QuantLesson
    from graphlens.quantize.quantize import LayerError
    from graphlens.workspace.quantize_preview import QuantizePreview, QuantizeRequest
    from graphlens.workspace.workspace import Workspace


@dataclass(frozen=True)
class QuantizeLessonResult:
    """Fake quantization of one tensor of ``preview``, worked out with its own numbers."""

    preview: QuantizePreview = field(repr=False)
    lesson: QuantLesson


@feature
@dataclass(eq=False)
class QuantizationFeature(LossyFeature):
    """The quantization previewed, the one applied, and the lesson shown (see the module docstring)."""

    workspace: InitVar[Workspace]
    applied: QuantizeResult | None = None
    """The last quantization put in the model (the record of it: an edit keeps it)."""
    previewed: QuantizePreview | None = None
    """A quantization computed on a scratch copy for the model as it is, not applied."""
    lesson: QuantizeLessonResult | None = None
    """One tensor of a preview worked out; it explains that preview, which it holds, so an edit keeps it."""

    name: ClassVar[str] = "quantization"
    what: ClassVar[str] = "quantization"

    def quantize(
        self,
        config: QuantConfig | None = None,
        calibration: CalibrationData | str | os.PathLike[str] | None = None,
        samples: int = 8,
        *,
        task: Task | None = None,
        preprocess: str | None = None,
        evaluate: Callable[[str], float] | None = None,
    ) -> QuantizeResult:
        """Fold, calibrate (an .npz, a folder of images read by ``preprocess``, given samples, or ``samples``
        random ones) and insert QDQ pairs in the model itself, as :func:`graphlens.quantize.quantize_model` does;
        one undo step, kept as :attr:`applied`.

        ``evaluate(model_path) -> float`` (higher is better) scores the quantized model; with
        ``config.target_score`` the target search uses it in place of the output SQNR."""
        from graphlens.quantize import load_calibration, quantize_model

        ws = self._workspace
        model = ws.require_model()
        check_node_names(config.exclude_nodes if config is not None else (), model.graph.by_name, "exclude")
        if isinstance(calibration, (str, os.PathLike)):
            calibration = load_calibration(os.fspath(calibration), model, preprocess=preprocess)
        result = quantize_model(model, config, calibration, ws.edit_session(), samples=samples, task=task,
                                evaluate=evaluate)
        self.applied = result
        return result

    def request(self, config: QuantConfig | None = None,
                calibration: CalibrationData | str | os.PathLike[str] | None = None,
                samples: int = 8, *, preprocess: str | None = None) -> QuantizeRequest:
        """What :func:`compute_quantize_preview` needs, captured now; samples that do not fit (an .npz, or a
        folder of images read by ``preprocess``) raise here."""
        from graphlens.quantize import QuantConfig, load_calibration
        from graphlens.workspace.quantize_preview import QuantizeRequest

        model = self._workspace.require_model()
        if isinstance(calibration, (str, os.PathLike)):
            calibration = load_calibration(os.fspath(calibration), model, preprocess=preprocess)
        if samples < 1:
            raise GraphLensError(f"need at least 1 calibration sample, not {samples}")
        config = config or QuantConfig()
        check_node_names(config.exclude_nodes, model.graph.by_name, "exclude")
        return QuantizeRequest(config=config, calibration=calibration, samples=samples,
                               model_bytes=model.to_proto().SerializeToString(), model_path=model.path,
                               revision=model.revision)

    def preview_job(self, config: QuantConfig | None = None,
                    calibration: CalibrationData | str | os.PathLike[str] | None = None,
                    samples: int = 8, *, preprocess: str | None = None) -> Job[QuantizeRequest, QuantizePreview]:
        """The preview as a job: its request captured now, computed on a scratch copy anywhere, kept as
        :attr:`previewed` only for the model as it still is."""
        from graphlens.workspace.quantize_preview import compute_quantize_preview

        ws = self._workspace
        return Job(kind="quantization", what="the quantization", model=ws.require_model(),
                   request=self.request(config, calibration, samples, preprocess=preprocess),
                   compute=compute_quantize_preview, keep=self.accept_preview, owner=ws)

    def preview(self, config: QuantConfig | None = None,
                calibration: CalibrationData | str | os.PathLike[str] | None = None, samples: int = 8,
                *, task: Task | None = None) -> QuantizePreview:
        """Quantize a scratch copy here and now, kept as :attr:`previewed`; the model is not touched."""
        preview: QuantizePreview = self.preview_job(config, calibration, samples).run(task)
        return preview

    def apply(self) -> QuantizeResult:
        """Put exactly the previewed quantized model in as one undo step (its nodes and initializers, by
        name; the opset raised with it and lowered by undo), or refuse with a sentence."""
        from graphlens.quantize.opset import OpsetRaise, follow_history, set_opset
        from graphlens.rewrites.lossy import replace_main_graph
        from graphlens.workspace.quantize_preview import default_opset

        preview: QuantizePreview = self._applicable()
        ws = self._workspace
        model, session = ws.require_model(), ws.edit_session()
        before, after = model.opset("") or 1, default_opset(preview.after)
        with session.group("quantize") as change:
            if after > before:
                set_opset(model, after)
            session.apply([replace_main_graph(model, preview.after, "quantize")])
        if after > before:
            follow_history(session, change, OpsetRaise(before, after, "quantization", False))
        result = preview.result
        result.revision = model.revision
        self.applied = result
        return result

    def lesson_job(self, preview: QuantizePreview, layer: LayerError,
                   channel: int | None = None) -> Job[TensorLessonRequest, QuantizeLessonResult]:
        """Fake quantization of ``layer`` (a row of ``preview``'s result) with its own numbers: a weight's
        ``channel`` (None: the one that quantizes worst), or an activation over the calibration samples."""
        ws = self._workspace
        return Job(kind="quantization lesson", what="the quantization lesson", model=ws.require_model(),
                   request=TensorLessonRequest(preview=preview, layer=layer, part=channel),
                   compute=_quantize_lesson, keep=self._keep_lesson, owner=ws)

    def _keep_lesson(self, result: QuantizeLessonResult) -> None:
        self.lesson = result


def _quantize_lesson(request: TensorLessonRequest, task: Task) -> QuantizeLessonResult:
    from graphlens.quantize.lesson import tensor_lesson

    return QuantizeLessonResult(request.preview, tensor_lesson(request.preview, request.layer, request.part))
