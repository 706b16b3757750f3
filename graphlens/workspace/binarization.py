"""The binarization feature: K-bit weights, previewed on a scratch copy or done in place, and the lesson of one
kernel.

``ws.binarization.preview(config)`` (or ``preview_job``, which may name ``only`` some layers) binarizes a scratch
copy (:func:`~graphlens.workspace.binarize_preview.compute_binarize_preview`) and keeps it as
``ws.binarization.previewed`` while the model is at the revision it was computed for; ``ws.binarization.apply()``
puts exactly that in as one undo step. ``ws.binarization.binarize(...)`` binarizes the model itself in one step, as
the command line does. Either way ``ws.binarization.applied`` keeps the result as the record of what was done.
``ws.binarization.lesson_job(preview, layer)`` works one kernel out bit by bit, kept as ``ws.binarization.lesson``.
Each field has its event in ``ws.binarization.events``.
"""

from __future__ import annotations

import os
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task
from graphlens.workspace.feature import LossyFeature, feature
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import TensorLessonRequest

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult, LayerBits
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.binarize.lesson import BinarizeLesson
    from graphlens.quantize import CalibrationData
    from graphlens.workspace.binarize_preview import BinarizePreview, BinarizeRequest
    from graphlens.workspace.workspace import Workspace


@dataclass(frozen=True)
class BinarizeLessonResult:
    """Binarization of one kernel of ``layer`` (a row of ``preview``), worked out bit by bit."""

    preview: BinarizePreview = field(repr=False)
    layer: LayerBits
    lesson: BinarizeLesson


@feature
@dataclass(eq=False)
class BinarizationFeature(LossyFeature):
    """The binarization previewed, the one applied, and the lesson shown (see the module docstring)."""

    workspace: InitVar[Workspace]
    applied: BinarizeResult | None = None
    """The last binarization put in the model (the record of it: an edit keeps it)."""
    previewed: BinarizePreview | None = None
    """A binarization computed on a scratch copy for the model as it is, not applied."""
    lesson: BinarizeLessonResult | None = None
    """One kernel of a preview worked out; it explains that preview, which it holds, so an edit keeps it."""

    name: ClassVar[str] = "binarization"
    what: ClassVar[str] = "binarization"

    def binarize(self, config: BinarizeConfig | None = None,
                 calibration: CalibrationData | str | os.PathLike[str] | None = None, samples: int = 4, *,
                 task: Task | None = None) -> BinarizeResult:
        """Fold and binarize the weights (K bits per kernel or per tensor) of the model itself, as
        :func:`graphlens.binarize.binarize.binarize_model` does, measuring the output SQNR on the samples (an .npz,
        given samples, or ``samples`` random ones); one undo step, kept as :attr:`applied`."""
        from graphlens.binarize.binarize import binarize_model

        ws = self._workspace
        result = binarize_model(ws.require_model(), config, ws.edit_session(), calibration=calibration,
                                samples=samples, task=task)
        self.applied = result
        return result

    def request(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                samples: int = 4, *, only: list[str] | None = None,
                scope: str = "every linear layer") -> BinarizeRequest:
        """What :func:`compute_binarize_preview` needs, captured now; ``only`` limits it to those layers."""
        from graphlens.binarize.config import BinarizeConfig
        from graphlens.workspace.binarize_preview import BinarizeRequest

        model = self._workspace.require_model()
        if only is not None and not only:
            raise GraphLensError("there is no linear layer with a constant weight to binarize there")
        return BinarizeRequest(config=config or BinarizeConfig(), calibration=calibration, samples=samples,
                               model_bytes=model.to_proto().SerializeToString(), model_path=model.path,
                               revision=model.revision, only=None if only is None else tuple(only), scope=scope)

    def preview_job(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                    samples: int = 4, *, only: list[str] | None = None,
                    scope: str = "every linear layer") -> Job[BinarizeRequest, BinarizePreview]:
        """The preview as a job (see :meth:`QuantizationFeature.preview_job
        <graphlens.workspace.quantization.QuantizationFeature.preview_job>`)."""
        from graphlens.workspace.binarize_preview import compute_binarize_preview

        ws = self._workspace
        return Job(kind="binarization", what="the binarization", model=ws.require_model(),
                   request=self.request(config, calibration, samples, only=only, scope=scope),
                   compute=compute_binarize_preview, keep=self.accept_preview, owner=ws)

    def preview(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                samples: int = 4, *, only: list[str] | None = None) -> BinarizePreview:
        """Binarize a scratch copy here and now (only the layers ``only`` names, if given), kept as
        :attr:`previewed`."""
        preview: BinarizePreview = self.preview_job(config, calibration, samples, only=only).run()
        return preview

    def apply(self) -> BinarizeResult:
        """Put exactly the previewed binarized model in as one undo step, or refuse with a sentence."""
        from graphlens.workspace.binarize_preview import apply_preview

        preview: BinarizePreview = self._applicable()
        ws = self._workspace
        apply_preview(ws.require_model(), ws.edit_session(), preview)
        result = preview.result
        result.revision = ws.revision
        self.applied = result
        return result

    def lesson_job(self, preview: BinarizePreview, layer: LayerBits, kernel: int | None = None,
                   bits: int | None = None) -> Job[TensorLessonRequest, BinarizeLessonResult]:
        """Binarization of one kernel of ``layer`` (a row of ``preview``'s result; None: the kernel that
        binarizes worst) with ``bits`` bits (None: the layer's), step by step."""
        ws = self._workspace
        return Job(kind="binarization lesson", what="the binarization lesson", model=ws.require_model(),
                   request=TensorLessonRequest(preview=preview, layer=layer, part=kernel, bits=bits),
                   compute=_binarize_lesson, keep=self._keep_lesson, owner=ws)

    def _keep_lesson(self, result: BinarizeLessonResult) -> None:
        self.lesson = result


def _binarize_lesson(request: TensorLessonRequest, task: Task) -> BinarizeLessonResult:
    from graphlens.binarize.lesson import layer_lesson

    lesson = layer_lesson(request.preview, request.layer, request.part, request.bits)
    return BinarizeLessonResult(request.preview, request.layer, lesson)
