"""The BN-folding lesson: what folding a batch norm into its layer does, with the layer's own numbers.

``ws.bn_lesson.run(match_index, channel)`` explains match ``match_index`` of the current conv-bn / gemm-bn /
matmul-bn matches (``ws.matches.result``) on ``channel`` (None: the most telling) and keeps it as
``ws.bn_lesson.result``, announced by ``ws.bn_lesson.events.result``; an edit or another model drops it. The models
run once per match, on a scratch copy; another channel of the lesson shown reuses that run (then the job only reads
the live model's batch norm). For a match the fold refuses, the result has no lesson and says why in ``refusal``.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.matching.match import Match
from graphlens.workspace.feature import Feature, feature
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import LESSON_PATTERNS, BnLessonResult

if TYPE_CHECKING:
    from graphlens.rewrites.bn_lesson import Samples
    from graphlens.workspace.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class BnLessonRequest:
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


@feature
@dataclass(eq=False)
class BnLessonFeature(Feature):
    """The BN-folding lesson shown (see the module docstring)."""

    workspace: InitVar[Workspace]
    result: BnLessonResult | None = None
    """The lesson of the model as it is; None before one, or once the model changed."""

    name: ClassVar[str] = "bn_lesson"

    def job(self, match_index: int = 0, channel: int | None = None) -> Job[BnLessonRequest, BnLessonResult]:
        """The lesson on match ``match_index`` of the current matches, ``channel`` or the most telling."""
        ws = self._workspace
        model = ws.require_model()
        current = ws.matches.result
        if current is None or current.pattern.name not in LESSON_PATTERNS:
            raise GraphLensError("find conv-bn, gemm-bn or matmul-bn matches first; the lesson explains one of them")
        if not 0 <= match_index < len(current.matches):
            raise GraphLensError(f"there is no match {match_index} ({len(current.matches)} matches)")
        match = current.matches[match_index]
        previous = self.result
        same = previous is not None and previous.match is match
        samples = previous.samples if previous is not None and same else None
        request = BnLessonRequest(match_index=match_index, match=match, channel=channel, samples=samples,
                                  shown=same and previous is not None and previous.lesson is not None,
                                  model=model if samples is not None else None,
                                  model_bytes=None if samples is not None else model.to_proto().SerializeToString(),
                                  model_path=model.path, revision=model.revision)
        return Job(kind="bn_lesson", what="the lesson", model=model, request=request, compute=_bn_lesson,
                   keep=self._keep, owner=ws, reads_live=samples is not None)

    def run(self, match_index: int = 0, channel: int | None = None) -> BnLessonResult:
        """The lesson, computed here and now (see :meth:`job`) and kept as :attr:`result`."""
        result: BnLessonResult = self.job(match_index, channel).run()
        return result

    def _keep(self, result: BnLessonResult) -> None:
        self.result = result


def _bn_lesson(request: BnLessonRequest, task: Task) -> BnLessonResult:
    from graphlens.core.model import scratch_from_bytes
    from graphlens.rewrites.bn_lesson import bn_lesson, run_samples

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
        return BnLessonResult(request.match_index, match, None, None, request.revision, refusal=str(exc))
    return BnLessonResult(request.match_index, match, samples, lesson, request.revision)


def _match_in(model: Model, match: Match) -> Match:
    """The same match (by graph path and node names) in another copy of the model."""
    return Match(match.pattern, model.graph_at(match.graph.path), dict(match.nodes), dict(match.values), match.variant)
