"""The jobs that read the model and say something about it: matches, explain, rewrite previews,
metric overlays and profiles, each as a :class:`~graphlens.workspace.jobs.Job`.

Mixed into :class:`~graphlens.workspace.Workspace`. Each ``*_job`` method captures its request on the
workspace's thread; the plain methods (``find_matches``, ``explain``, ``preview``,
``show_metric``, ``profile``) run that job here and now. ``scratch=True`` (what a window sending the job
to a worker asks for) computes on a copy of the model, so edits may go on meanwhile; without it the job
reads the model itself, as a job run here and now safely can.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import resolve_pattern
from graphlens.rewrites.rules import RULES
from graphlens.workspace.jobs import Job, JobOwner
from graphlens.workspace.preview import compute_preview
from graphlens.workspace.requests import ExplainRequest, MatchesRequest
from graphlens.workspace.results import ExplainResult, MatchesResult, PreviewRequest, PreviewResult

if TYPE_CHECKING:
    from graphlens.matching.match import Match
    from graphlens.workspace.results import PreviewInputs


def rules_for(pattern: Pattern) -> list[str]:
    """The rules that rewrite matches of ``pattern`` (by pattern name)."""
    return [name for name, rule in RULES.items() if pattern.name in rule.pattern_names]


class AnalysisJobs(JobOwner):
    """Matches, explain, previews, metric overlays and profiles (see the module docstring).

    Expects what :class:`~graphlens.workspace.Workspace` provides: ``require_model()``, ``preview_inputs``,
    ``match()`` and ``_set_result()``.
    """

    preview_inputs: PreviewInputs

    if TYPE_CHECKING:
        def require_model(self) -> Model: ...
        def match(self, rule: str, index: int) -> Match: ...
        def _set_result(self, attribute: str, value: Any) -> Any: ...

    def _job(self, kind: str, what: str, request: Any, compute: Callable[[Any, Task], Any],
             keep: Callable[[Any], Any] | None = None, *, reads_live: bool = False) -> Job[Any, Any]:
        return Job(kind=kind, what=what, model=self.require_model(), request=request, compute=compute,
                   keep=keep or (lambda result: self._set_result(kind, result)), owner=self, reads_live=reads_live)

    # ================================================================ matches
    def matches_job(self, pattern: str | Pattern, *,
                    non_overlapping: bool = False) -> Job[MatchesRequest, MatchesResult]:
        """Every match of ``pattern`` (a built-in name, a ``.pattern``/``.json`` file, or pattern text).

        Matching reads the live model (a copy would cost more than the match); the workspace stops it before an edit.
        """
        request = MatchesRequest(pattern=resolve_pattern(pattern), model=self.require_model(),
                                 non_overlapping=non_overlapping)
        return self._job("matches", f"matching {request.pattern.name}", request, _find, reads_live=True)

    def find_matches(self, pattern: str | Pattern, *, non_overlapping: bool = False,
                     task: Task | None = None) -> MatchesResult:
        """Every match of ``pattern``, kept as :attr:`matches`."""
        result: MatchesResult = self.matches_job(pattern, non_overlapping=non_overlapping).run(task)
        return result

    # ================================================================ why not
    def explain_job(self, pattern: str | Pattern, at: str | None = None) -> Job[ExplainRequest, ExplainResult]:
        """Why ``pattern`` does or does not match at node ``at``; without ``at``, the near misses."""
        request = ExplainRequest(pattern=resolve_pattern(pattern), at=at, model=self.require_model())
        return self._job("explanation", "the explanation", request, _explain, reads_live=True)

    def explain(self, pattern: str | Pattern, at: str | None = None) -> ExplainResult:
        result: ExplainResult = self.explain_job(pattern, at).run()
        return result

    # ================================================================ rewrite previews
    def preview_request(self, rule: str, match_index: int = 0) -> PreviewRequest:
        """What :func:`compute_preview` needs, captured now (call on the thread that owns the workspace)."""
        from graphlens.numerics.dims import remembered_dims

        model = self.require_model()
        match = self.match(rule, match_index)
        settings = self.preview_inputs
        return PreviewRequest(
            rule=rule, match_index=match_index, graph=match.graph.path, nodes=dict(match.nodes),
            values=dict(match.values), pattern=match.pattern, variant=match.variant,
            model_bytes=model.to_proto().SerializeToString(), model_path=model.path, revision=model.revision,
            dims=dict(settings.dims), inputs_file=settings.file, arrays=settings.arrays,
            remembered=remembered_dims(model))

    def preview_job(self, rule: str, match_index: int = 0) -> Job[PreviewRequest, PreviewResult]:
        """Plan ``rule`` on a match and measure it on a scratch copy; the model is not touched."""
        return self._job("current_preview", "the preview", self.preview_request(rule, match_index),
                         compute_preview,
                         self._keep_rewrite_preview)

    def preview(self, rule: str, match_index: int = 0) -> PreviewResult:
        result: PreviewResult = self.preview_job(rule, match_index).run()
        return result

    def _keep_rewrite_preview(self, result: PreviewResult) -> None:
        from graphlens.numerics.dims import remember_dims

        used = result.numeric.inputs
        if used is not None and used.file is None and used.dims is not None and used.dims.values:
            remember_dims(self.require_model(), used.dims.values)  # found on the scratch copy; the next starts there
        self._set_result("current_preview", result)


# ==================================================================== the computations (any thread)
def _find(request: MatchesRequest, task: Task) -> MatchesResult:
    from graphlens.matching.matcher import Matcher

    model = request.model
    found = Matcher(request.pattern).find(model, non_overlapping=request.non_overlapping, task=task)
    return MatchesResult(request.pattern, found, rules_for(request.pattern), model.revision)


def _explain(request: ExplainRequest, task: Task) -> ExplainResult:
    from graphlens.matching.explain import explain

    outcome = explain(request.pattern, request.model, at=request.at)
    return ExplainResult(request.pattern, request.at, outcome, request.model.revision)
