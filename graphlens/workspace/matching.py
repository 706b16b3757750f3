"""The matching feature: every match of a pattern in the model, and why a pattern does or does not match.

``ws.matches.find(pattern)`` finds every match and keeps it as ``ws.matches.result``; ``ws.matches.explain(pattern,
at)`` answers "why not here?" (without ``at``: the near misses) and keeps it as ``ws.matches.explanation``. Each is
announced by its own event (``ws.matches.events.result``, ``.explanation``); an edit or another model drops both.
Both jobs read the live model (a copy would cost more than the search), so the workspace stops them before an
edit. :meth:`MatchingFeature.match` gives a rule's match by index, the one a rewrite preview or a lesson is for.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import get_pattern, resolve_pattern
from graphlens.workspace.feature import Feature, feature
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import ExplainResult, MatchesResult

if TYPE_CHECKING:
    from graphlens.matching.match import Match
    from graphlens.workspace.workspace import Workspace


def rules_for(pattern: Pattern) -> list[str]:
    """The rules that rewrite matches of ``pattern`` (by pattern name)."""
    from graphlens.rewrites.rules import RULES  # every rule module: imported when something was matched

    return [name for name, rule in RULES.items() if pattern.name in rule.pattern_names]


@dataclass(frozen=True, kw_only=True)
class MatchesRequest:
    """Find every match of ``pattern`` in ``model`` (the live model: matching only reads it)."""

    pattern: Pattern
    model: Model = field(repr=False)
    non_overlapping: bool = False


@dataclass(frozen=True, kw_only=True)
class ExplainRequest:
    """Why ``pattern`` does or does not match at node ``at`` (None: the near misses)."""

    pattern: Pattern
    at: str | None
    model: Model = field(repr=False)


@feature
@dataclass(eq=False)
class MatchingFeature(Feature):
    """The matches found and the last "why not?" answered (see the module docstring)."""

    workspace: InitVar[Workspace]
    result: MatchesResult | None = None
    """The matches of the last pattern searched, in the model as it is."""
    explanation: ExplainResult | None = None
    """The last answer to "why (not) here?", for the model as it is."""

    name: ClassVar[str] = "matches"

    def job(self, pattern: str | Pattern, *, non_overlapping: bool = False) -> Job[MatchesRequest, MatchesResult]:
        """Every match of ``pattern`` (a built-in name, a ``.pattern``/``.json`` file, or pattern text)."""
        model = self._workspace.require_model()
        request = MatchesRequest(pattern=resolve_pattern(pattern), model=model, non_overlapping=non_overlapping)
        return Job(kind="matches", what=f"matching {request.pattern.name}", model=model, request=request,
                   compute=_find, keep=self._keep_result, owner=self._workspace, reads_live=True)

    def find(self, pattern: str | Pattern, *, non_overlapping: bool = False, task: Task | None = None) -> MatchesResult:
        """Every match of ``pattern``, found here and now and kept as :attr:`result`."""
        result: MatchesResult = self.job(pattern, non_overlapping=non_overlapping).run(task)
        return result

    def explain_job(self, pattern: str | Pattern, at: str | None = None) -> Job[ExplainRequest, ExplainResult]:
        """Why ``pattern`` does or does not match at node ``at``; without ``at``, the near misses."""
        model = self._workspace.require_model()
        request = ExplainRequest(pattern=resolve_pattern(pattern), at=at, model=model)
        return Job(kind="explanation", what="the explanation", model=model, request=request, compute=_explain,
                   keep=self._keep_explanation, owner=self._workspace, reads_live=True)

    def explain(self, pattern: str | Pattern, at: str | None = None) -> ExplainResult:
        """The explanation, computed here and now and kept as :attr:`explanation`."""
        result: ExplainResult = self.explain_job(pattern, at).run()
        return result

    def for_rule(self, rule: str) -> MatchesResult:
        """The current matches if ``rule`` rewrites them, else the rule's own patterns' matches."""
        from graphlens.matching.matcher import Matcher  # networkx, imported when something is matched
        from graphlens.rewrites.rules import RULES

        if rule not in RULES:
            raise GraphLensError(f"unknown rule '{rule}'; rules: {', '.join(RULES)}")
        current, model = self.result, self._workspace.require_model()
        if current is not None and rule in current.rules and current.revision == model.revision:
            return current
        found = [m for p in RULES[rule].patterns() for m in Matcher(p).find(model)]
        pattern = RULES[rule].patterns()[0] if RULES[rule].patterns() else get_pattern("conv-bn")
        return MatchesResult(pattern, found, [rule], model.revision)

    def match(self, rule: str, index: int) -> Match:
        """Match ``index`` of :meth:`for_rule`, or a sentence saying there is none."""
        found = self.for_rule(rule).matches
        if not 0 <= index < len(found):
            raise GraphLensError(f"there is no match {index} for {rule} ({len(found)} matches)")
        return found[index]

    def _keep_result(self, result: MatchesResult) -> None:
        self.result = result

    def _keep_explanation(self, explanation: ExplainResult) -> None:
        self.explanation = explanation


def _find(request: MatchesRequest, task: Task) -> MatchesResult:
    from graphlens.matching.matcher import Matcher

    model = request.model
    found = Matcher(request.pattern).find(model, non_overlapping=request.non_overlapping, task=task)
    return MatchesResult(request.pattern, found, rules_for(request.pattern), model.revision)


def _explain(request: ExplainRequest, task: Task) -> ExplainResult:
    from graphlens.matching.explain import explain

    outcome = explain(request.pattern, request.model, at=request.at)
    return ExplainResult(request.pattern, request.at, outcome, request.model.revision)
