"""The application model: one open model, its undo history and the three jobs' results.

The window, the command line and scripts all drive a :class:`Workspace`; it holds every piece of
state the jobs have (the model, the history, the current pattern and its matches, the current
explanation, the current preview, the lesson, the inputs previews run on) and says what changed
through :class:`~graphlens.workspace.events.WorkspaceEvents`. Views subscribe and own none of it.

Previews never touch the live model: :meth:`Workspace.preview_request` captures what a preview
needs (the model as bytes, the match by node names, the revision) on the owner's thread;
:func:`compute_preview` runs anywhere on a scratch copy; :meth:`Workspace.accept_preview` keeps
the result only if the model is still at that revision. :meth:`Workspace.apply` applies exactly
the previewed edit, or refuses with a sentence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model
from graphlens.matching.matcher import Match, Matcher
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import get_pattern, resolve_pattern
from graphlens.rewrites.edit import RewriteSession
from graphlens.rewrites.rules import RULES
from graphlens.workspace.compression import CompressionJobs
from graphlens.workspace.events import WorkspaceEvents
from graphlens.workspace.preview import compute_preview, scratch_copy
from graphlens.workspace.results import (
    LESSON_PATTERNS,
    Applied,
    ExplainResult,
    FoldResult,
    LessonResult,
    MatchesResult,
    Opened,
    PreviewInputs,
    PreviewRequest,
    PreviewResult,
    Saved,
    Step,
)

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.compare import Comparison
    from graphlens.overlays.overlay import Overlay
    from graphlens.quantize import QuantizeResult
    from graphlens.workspace.binarize_preview import BinarizePreview
    from graphlens.workspace.quantize_preview import QuantizePreview


def rules_for(pattern: Pattern) -> list[str]:
    """The rules that rewrite matches of ``pattern`` (by pattern name)."""
    return [name for name, rule in RULES.items() if pattern.name in rule.pattern_names]


class Workspace(CompressionJobs):
    """One open model and the results of the jobs on it; see the module docstring.

    ``keep_history=False`` keeps no undo history (one-shot command-line runs: the replaced weights
    can be freed at once).
    """

    def __init__(self, *, keep_history: bool = True) -> None:
        self.events = WorkspaceEvents()
        self.keep_history = keep_history
        self.model: Model | None = None
        self.session: RewriteSession | None = None
        self.matches: MatchesResult | None = None
        self.explanation: ExplainResult | None = None
        self.current_preview: PreviewResult | None = None
        self.current_lesson: LessonResult | None = None
        self.preview_inputs = PreviewInputs()
        self.overlay: Overlay | None = None
        self.quantization: QuantizeResult | None = None
        self.quantize_preview: QuantizePreview | None = None
        self.binarization: BinarizeResult | None = None
        self.binarize_preview: BinarizePreview | None = None
        self.comparison: Comparison | None = None
        """The model compared with another (:meth:`compare_with`); dropped by an edit or a new model."""
        self._revision_seen = -1

    # ================================================================ the model
    def open(self, path: str | os.PathLike[str]) -> Opened:
        """Read ``path`` and make it the workspace's model; a bad file raises, and the current model stays."""
        return self.set_model(load_model(path))

    def set_model(self, model: Model) -> Opened:
        """Make ``model`` (read elsewhere, e.g. in a worker thread) the workspace's model."""
        self.model = model
        self._revision_seen = model.revision
        self.session = RewriteSession(model, on_change=self._on_session_change, keep_history=self.keep_history)
        self.matches = self.explanation = self.current_preview = self.current_lesson = None
        self.preview_inputs = PreviewInputs()
        self.overlay = None  # numbers per node of another model
        self.quantization = None
        self.quantize_preview = None
        self.binarization = None
        self.binarize_preview = None
        if self.comparison is not None:
            self.comparison = None
            self.events.compared.emit(None)
        opened = Opened(model, model.path)
        self.events.opened.emit(opened)
        return opened

    def require_model(self) -> Model:
        if self.model is None:
            raise GraphLensError("no model is open")
        return self.model

    @property
    def revision(self) -> int:
        return self.model.revision if self.model is not None else -1

    @property
    def modified(self) -> bool:
        return bool(self.model is not None and self.model.modified)

    def save(self) -> Saved:
        """Write the model over its file (the history stays: undo after saving still works)."""
        model = self.require_model()
        if model.path is None:
            raise GraphLensError("the model has no file yet; save it under a name")
        return self._save_to(model.path, overwrite_source=True)

    def save_as(self, path: str | os.PathLike[str], *, overwrite_source: bool = False) -> Saved:
        """Write the model to ``path``, which becomes its file; never over its source unless asked."""
        return self._save_to(Path(path), overwrite_source=overwrite_source)

    def _save_to(self, path: Path, *, overwrite_source: bool) -> Saved:
        model = self.require_model()
        model.save(path, overwrite_source=overwrite_source)
        model.path = path
        if self.session is not None:
            self.session.mark_saved()
        model.modified = False
        saved = Saved(path)
        self.events.saved.emit(saved)
        return saved

    # ================================================================ matches
    def find_matches(
        self,
        pattern: str | Pattern,
        *,
        non_overlapping: bool = False,
        progress: Callable[[int, int], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> MatchesResult:
        """Every match of ``pattern``: a built-in name, a ``.pattern``/``.json`` file, or pattern text."""
        model = self.require_model()
        resolved = resolve_pattern(pattern)
        found = Matcher(resolved).find(model, non_overlapping=non_overlapping, progress=progress, cancelled=cancelled)
        return self.accept_matches(MatchesResult(resolved, found, rules_for(resolved), model.revision))

    def accept_matches(self, result: MatchesResult) -> MatchesResult:
        """Make ``result`` (found off the owner's thread, say) the current matches, unless the model changed."""
        if result.revision == self.revision:
            self.matches = result
            self.events.matches_changed.emit(result)
        return result

    def _matches_for(self, rule: str) -> MatchesResult:
        """The current matches if the rule rewrites them, else the rule's own patterns' matches."""
        if rule not in RULES:
            raise GraphLensError(f"unknown rule '{rule}'; rules: {', '.join(RULES)}")
        current = self.matches
        if current is not None and rule in current.rules and current.revision == self.revision:
            return current
        model = self.require_model()
        found = [m for p in RULES[rule].patterns() for m in Matcher(p).find(model)]
        pattern = RULES[rule].patterns()[0] if RULES[rule].patterns() else get_pattern("conv-bn")
        return MatchesResult(pattern, found, [rule], model.revision)

    def match(self, rule: str, index: int) -> Match:
        found = self._matches_for(rule).matches
        if not 0 <= index < len(found):
            raise GraphLensError(f"there is no match {index} for {rule} ({len(found)} matches)")
        return found[index]

    # ================================================================ why not
    def explain(self, pattern: str | Pattern, at: str | None = None) -> ExplainResult:
        """Why ``pattern`` does or does not match at node ``at``; without ``at``, the near misses."""
        from graphlens.matching.explain import explain

        model = self.require_model()
        resolved = resolve_pattern(pattern)
        result = ExplainResult(resolved, at, explain(resolved, model, at=at), model.revision)
        self.explanation = result
        self.events.explained.emit(result)
        return result

    # ================================================================ previews
    def preview(self, rule: str, match_index: int = 0) -> PreviewResult:
        """Plan ``rule`` on a match and measure it on a scratch copy; the model is not touched."""
        result = compute_preview(self.preview_request(rule, match_index))
        self.accept_preview(result)
        return result

    def preview_request(self, rule: str, match_index: int = 0) -> PreviewRequest:
        """What :func:`compute_preview` needs, captured now (call on the thread that owns the workspace)."""
        from graphlens.numerics.dims import remembered_dims

        model = self.require_model()
        match = self.match(rule, match_index)
        settings = self.preview_inputs
        return PreviewRequest(
            rule, match_index, match.graph.path, dict(match.nodes), dict(match.values), match.pattern, match.variant,
            model.to_proto().SerializeToString(), model.path, model.revision,
            dict(settings.dims), settings.file, settings.arrays, remembered_dims(model),
        )

    def accept_preview(self, result: PreviewResult) -> bool:
        """Keep ``result`` as the current preview if the model is still the one it was computed for."""
        if self.model is None or result.revision != self.model.revision:
            return False
        from graphlens.numerics.dims import remember_dims

        used = result.numeric.inputs
        if used is not None and used.file is None and used.dims is not None and used.dims.values:
            remember_dims(self.model, used.dims.values)  # found on the scratch copy; the next preview starts there
        self.current_preview = result
        self.events.preview_changed.emit(result)
        return True

    def set_preview_inputs(self, dims: dict[str, int] | None = None, npz: str | os.PathLike[str] | None = None) -> PreviewInputs:
        """Fix dims for previews (``{}`` chooses all again) and/or read inputs from ``npz`` (``""``: random).

        Inputs that do not fit the model raise :class:`GraphLensError`, and the previous ones stay.
        """
        from graphlens.numerics import load_inputs
        from graphlens.numerics.inputs import check_dim_names

        model = self.require_model()
        old = self.preview_inputs
        new_dims, file, arrays = dict(old.dims), old.file, old.arrays
        if dims is not None:
            check_dim_names(model, dims)
            new_dims = dict(dims)
        if npz is not None and str(npz) == "":
            file, arrays = None, None
        elif npz is not None:
            file, arrays = str(npz), load_inputs(Path(npz), model)
        self.preview_inputs = PreviewInputs(new_dims, file, arrays)
        self.events.preview_inputs_changed.emit(self.preview_inputs)
        return self.preview_inputs

    # ================================================================ overlay
    def set_overlay(self, overlay: Overlay | None) -> Overlay | None:
        """Colour the nodes by ``overlay`` (any per-node numbers: latency, FLOPs, a quantization error), or
        by nothing; kept across edits (nodes an edit removes simply have no box), dropped by a new model."""
        self.overlay = overlay
        self.events.overlay_changed.emit(overlay)
        return overlay

    # ================================================================ compare
    def compare_with(
        self,
        path_or_model: str | os.PathLike[str] | Model,
        numeric: bool = True,
        progress: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> Comparison:
        """Compare the model (A) with another (B: a file or a loaded model), keep it as :attr:`comparison`
        and emit ``compared``; the numbers use the preview inputs (their dims or .npz)."""
        from graphlens.compare import compare_models

        model = self.require_model()
        other = path_or_model if isinstance(path_or_model, Model) else load_model(path_or_model)
        settings = self.preview_inputs
        result = compare_models(model, other, numeric=numeric, inputs=settings.arrays, inputs_file=settings.file,
                                dims=dict(settings.dims) or None, progress=progress, cancelled=cancelled)
        return self.accept_comparison(result)

    def accept_comparison(self, comparison: Comparison) -> Comparison:
        """Make ``comparison`` (computed on a copy of the model in a worker, say) the current one and say so.

        The caller checks that the model has not changed since; pairs name nodes and graphs, which
        the copy and the model share.
        """
        self.comparison = comparison
        self.events.compared.emit(comparison)
        return comparison

    # ================================================================ edits
    def apply(self) -> Applied:
        """Apply exactly the previewed edit as one undo step, or refuse with a sentence."""
        preview = self.current_preview
        if preview is None:
            raise GraphLensError("there is no previewed rewrite to apply")
        if preview.revision != self.revision:
            raise GraphLensError("the model changed after this preview was computed; preview the rewrite again")
        self._session().apply([preview.edit])  # the preview, now describing the past, is dropped with its event
        return Applied(preview.edit.description, 1, self.revision)

    def apply_all(self, rule: str) -> FoldResult:
        """Apply ``rule`` everywhere it applies, to a fixpoint, then tidy up: ``graphlens fold --rules RULE``."""
        return self.fold([rule])

    def fold(
        self,
        rules: list[str] | None = None,
        *,
        progress: Callable[[str], None] | None = None,
        cancelled: Callable[[], bool] | None = None,
    ) -> FoldResult:
        """Apply ``rules`` (default: the fold defaults) until none applies, then clean up; one undo step."""
        from graphlens.rewrites.driver import fold_model, resolve_rules

        model = self.require_model()
        chosen = resolve_rules(rules)
        report = fold_model(model, chosen, self._session(), progress=progress, cancelled=cancelled)
        return FoldResult([r.name for r in chosen], report, model.revision)

    def freeze_inputs(self) -> FoldResult:
        """Make the initializers listed as graph inputs constants (``freeze-inputs``), then ask the last
        question again, since its answer may have changed."""
        asked = self.explanation
        result = self.apply_all("freeze-inputs")
        if asked is not None and result.applied:
            self.explain(asked.pattern, asked.at)
        return result

    def undo(self) -> Step | None:
        change = self._session().undo()
        return None if change is None else Step(change.label, self.revision)

    def redo(self) -> Step | None:
        change = self._session().redo()
        return None if change is None else Step(change.label, self.revision)

    def _session(self) -> RewriteSession:
        self.require_model()
        assert self.session is not None
        return self.session

    def _on_session_change(self) -> None:
        """The model changed: what was computed for it as it was is dropped, each view told.

        Saving also calls here (the modified marker moved); the model is the same, so nothing is dropped.
        """
        if self.model is None or self.model.revision == self._revision_seen:
            return
        self._revision_seen = self.model.revision
        for attribute, signal in (("matches", self.events.matches_changed), ("explanation", self.events.explained),
                                  ("current_preview", self.events.preview_changed),
                                  ("current_lesson", self.events.lesson_changed),
                                  ("quantize_preview", self.events.quantize_preview_changed),
                                  ("binarize_preview", self.events.binarize_preview_changed),
                                  ("comparison", self.events.compared)):
            if getattr(self, attribute) is not None:
                setattr(self, attribute, None)
                signal.emit(None)
        session = self.session
        label = session.undo_stack[-1].label if session is not None and session.undo_stack else ""
        self.events.edited.emit(Step(label, self.revision))

    # ================================================================ lesson
    def lesson(self, match_index: int = 0, channel: int | None = None) -> LessonResult:
        """The BN-folding lesson on a conv-bn / gemm-bn / matmul-bn match: ``channel``, or the most telling.

        The models run once per match (on a scratch copy); other channels reuse that run. For a
        match the fold refuses, the result has no lesson and says why in ``refusal``.
        """
        from graphlens.rewrites.lesson import bn_lesson, run_samples

        model = self.require_model()
        current = self.matches
        if current is None or current.pattern.name not in LESSON_PATTERNS:
            raise GraphLensError("find conv-bn, gemm-bn or matmul-bn matches first; the lesson explains one of them")
        if not 0 <= match_index < len(current.matches):
            raise GraphLensError(f"there is no match {match_index} ({len(current.matches)} matches)")
        match = current.matches[match_index]
        previous = self.current_lesson
        try:
            if previous is not None and previous.match is match and previous.samples is not None:
                samples = previous.samples
            else:
                scratch = scratch_copy(model)
                samples = run_samples(scratch, _match_in(scratch, match))
            result = LessonResult(match_index, match, samples, bn_lesson(model, match, channel, samples=samples),
                                  model.revision)
        except ValueError as exc:  # the fold refuses this match, or there is no such channel
            if previous is not None and previous.match is match and previous.lesson is not None:
                raise GraphLensError(str(exc)) from exc  # a bad channel: the lesson shown stays
            result = LessonResult(match_index, match, None, None, model.revision, refusal=str(exc))
        self.current_lesson = result
        self.events.lesson_changed.emit(result)
        return result


def _match_in(model: Model, match: Match) -> Match:
    """The same match (by graph path and node names) in another copy of the model."""
    return Match(match.pattern, model.graph_at(match.graph.path), dict(match.nodes), dict(match.values), match.variant)
