"""The lessons as jobs: BN folding on a match, fake quantization of one tensor, binarization of one kernel.

Mixed into :class:`~graphlens.workspace.Workspace`. Each lesson goes through the one job protocol
(:mod:`graphlens.workspace.jobs`): ``*_lesson_job`` captures the request on the owner's thread,
the computation runs anywhere, and the result is kept (``current_lesson``, ``quantize_lesson``,
``binarize_lesson``, each announced by its event) only for the model as it still is.

What takes long: the BN lesson's first view of a match runs the model and the folded model once (on
a scratch copy; other channels reuse that run), and an activation's quantization lesson runs the
float model over the calibration samples. A weight's lesson, or another channel, is numpy on
numbers already there.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task
from graphlens.matching.match import Match
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import LESSON_PATTERNS, LessonResult

if TYPE_CHECKING:
    from graphlens.binarize.binarize import LayerBits
    from graphlens.binarize.lesson import BinarizeLesson
    from graphlens.core.model import Model
    from graphlens.quantize.lesson import QuantLesson
    from graphlens.quantize.quantize import LayerError
    from graphlens.rewrites.lesson import Samples
    from graphlens.workspace.binarize_preview import BinarizePreview
    from graphlens.workspace.matching import MatchingFeature
    from graphlens.workspace.quantize_preview import QuantizePreview


@dataclass(frozen=True, kw_only=True)
class LessonRequest:
    """The BN-folding lesson of one match: a channel (None: the most telling), and the run to reuse."""

    match_index: int
    match: Match
    channel: int | None
    samples: Samples | None = field(repr=False)
    """The match's sample run, when the lesson shown is of the same match; None: run the models."""
    shown: bool
    """A lesson of this match is on screen: a bad channel is an error, and that lesson stays."""
    model: Model | None = field(repr=False)
    """The live model (only with ``samples``: then the job only reads it and the workspace stops it before an edit)."""
    model_bytes: bytes | None = field(repr=False)
    """The model to run, as bytes (without ``samples``): computed on a scratch copy."""
    model_path: Path | None
    revision: int


@dataclass(frozen=True, kw_only=True)
class TensorLessonRequest:
    """The lesson of one row of a quantize or binarize preview: ``layer`` of ``preview``, ``part`` of it
    (a weight's channel or kernel; None: the one that suffers most) and, for binarization, ``bits``."""

    preview: Any = field(repr=False)
    layer: Any
    part: int | None
    bits: int | None = None


@dataclass(frozen=True)
class QuantizeLessonResult:
    """Fake quantization of one tensor of ``preview``, worked out with its own numbers."""

    preview: QuantizePreview = field(repr=False)
    lesson: QuantLesson


@dataclass(frozen=True)
class BinarizeLessonResult:
    """Binarization of one kernel of ``layer`` (a row of ``preview``), worked out bit by bit."""

    preview: BinarizePreview = field(repr=False)
    layer: LayerBits
    lesson: BinarizeLesson


class LessonJobs:
    """The three lessons as jobs (see the module docstring).

    Expects what :class:`~graphlens.workspace.Workspace` provides: ``require_model()``, ``matches``,
    ``current_lesson`` and ``_job()``.
    """

    current_lesson: LessonResult | None
    quantize_lesson: QuantizeLessonResult | None
    binarize_lesson: BinarizeLessonResult | None

    if TYPE_CHECKING:
        matches: MatchingFeature

        def require_model(self) -> Model: ...
        def _job(self, kind: str, what: str, request: Any, compute: Callable[[Any, Task], Any],
                 keep: Callable[[Any], Any] | None = None, *, reads_live: bool = False) -> Job[Any, Any]: ...

    # ================================================================ BN folding
    def lesson_job(self, match_index: int = 0, channel: int | None = None) -> Job[LessonRequest, LessonResult]:
        """The BN-folding lesson on a conv-bn / gemm-bn / matmul-bn match: ``channel``, or the most telling.

        The models run once per match, on a scratch copy; another channel of the lesson shown reuses
        that run (then the job only reads the live model's BN). For a match the fold refuses, the
        result has no lesson and says why in ``refusal``.
        """
        model = self.require_model()
        current = self.matches.result
        if current is None or current.pattern.name not in LESSON_PATTERNS:
            raise GraphLensError("find conv-bn, gemm-bn or matmul-bn matches first; the lesson explains one of them")
        if not 0 <= match_index < len(current.matches):
            raise GraphLensError(f"there is no match {match_index} ({len(current.matches)} matches)")
        match = current.matches[match_index]
        previous = self.current_lesson
        same = previous is not None and previous.match is match
        samples = previous.samples if previous is not None and same else None
        request = LessonRequest(match_index=match_index, match=match, channel=channel, samples=samples,
                                shown=same and previous is not None and previous.lesson is not None,
                                model=model if samples is not None else None,
                                model_bytes=None if samples is not None else model.to_proto().SerializeToString(),
                                model_path=model.path, revision=model.revision)
        return self._job("current_lesson", "the lesson", request, _bn_lesson, reads_live=samples is not None)

    def lesson(self, match_index: int = 0, channel: int | None = None) -> LessonResult:
        """The BN-folding lesson, computed here and now (see :meth:`lesson_job`); kept as ``current_lesson``."""
        result: LessonResult = self.lesson_job(match_index, channel).run()
        return result

    # ================================================================ fake quantization
    def quantize_lesson_job(self, preview: QuantizePreview, layer: LayerError,
                            channel: int | None = None) -> Job[TensorLessonRequest, QuantizeLessonResult]:
        """Fake quantization of ``layer`` (a row of ``preview``'s result) with its own numbers: a weight's
        ``channel`` (None: the one that quantizes worst), or an activation over the calibration samples."""
        self.require_model()
        request = TensorLessonRequest(preview=preview, layer=layer, part=channel)
        return self._job("quantize_lesson", "the quantization lesson", request, _quantize_lesson)

    # ================================================================ binarization
    def binarize_lesson_job(self, preview: BinarizePreview, layer: LayerBits, kernel: int | None = None,
                            bits: int | None = None) -> Job[TensorLessonRequest, BinarizeLessonResult]:
        """Binarization of one kernel of ``layer`` (a row of ``preview``'s result; None: the kernel that
        binarizes worst) with ``bits`` bits (None: the layer's), step by step."""
        self.require_model()
        request = TensorLessonRequest(preview=preview, layer=layer, part=kernel, bits=bits)
        return self._job("binarize_lesson", "the binarization lesson", request, _binarize_lesson)


# ==================================================================== the computations (any thread)
def _bn_lesson(request: LessonRequest, task: Task) -> LessonResult:
    from graphlens.core.model import scratch_from_bytes
    from graphlens.rewrites.lesson import bn_lesson, run_samples

    match = request.match
    try:
        if request.samples is not None and request.model is not None:
            model, at, samples = request.model, match, request.samples
        else:
            assert request.model_bytes is not None
            model = scratch_from_bytes(request.model_bytes, request.model_path)
            at = _match_in(model, match)
            samples = run_samples(model, at)
        lesson = bn_lesson(model, at, request.channel, samples=samples)
    except ValueError as exc:  # the fold refuses this match, or there is no such channel
        if request.shown:
            raise GraphLensError(str(exc)) from exc  # a bad channel: the lesson shown stays
        return LessonResult(request.match_index, match, None, None, request.revision, refusal=str(exc))
    return LessonResult(request.match_index, match, samples, lesson, request.revision)


def _quantize_lesson(request: TensorLessonRequest, task: Task) -> QuantizeLessonResult:
    from graphlens.quantize.lesson import tensor_lesson

    return QuantizeLessonResult(request.preview, tensor_lesson(request.preview, request.layer, request.part))


def _binarize_lesson(request: TensorLessonRequest, task: Task) -> BinarizeLessonResult:
    from graphlens.binarize.lesson import layer_lesson

    lesson = layer_lesson(request.preview, request.layer, request.part, request.bits)
    return BinarizeLessonResult(request.preview, request.layer, lesson)


def _match_in(model: Model, match: Match) -> Match:
    """The same match (by graph path and node names) in another copy of the model."""
    return Match(match.pattern, model.graph_at(match.graph.path), dict(match.nodes), dict(match.values), match.variant)
