"""The application model: one open model, its undo history and the results of the jobs on it.

The window, the command line and scripts all drive a :class:`Workspace`; it holds every piece of
state the jobs have (the model, the history, and the results) and says what changed. Views subscribe and
own none of it. The workspace is composed of one model per feature (:mod:`graphlens.workspace.feature`),
each with its own results, events and jobs: ``ws.matches``, ``ws.rewrite``, ``ws.comparison``,
``ws.overlay``; the results not yet moved into a feature are declared in
:data:`~graphlens.workspace.slots.RESULTS` (the lessons, quantization, binarization, …) and announced
through :class:`~graphlens.workspace.events.WorkspaceEvents`.

Every job goes through one protocol (:mod:`graphlens.workspace.jobs`): a request captured on the
owner's thread, computed anywhere (a scratch copy when it may run while the model is edited), and
kept only if the model is still at the revision it was made for. :meth:`Workspace.apply` applies
exactly the previewed edit, or refuses with a sentence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model
from graphlens.core.task import Task
from graphlens.rewrites.edit import RewriteSession
from graphlens.workspace.comparison import ComparisonFeature
from graphlens.workspace.compression import CompressionJobs
from graphlens.workspace.events import WorkspaceEvents
from graphlens.workspace.feature import Feature
from graphlens.workspace.jobs import Job, JobOwner
from graphlens.workspace.lessons import BinarizeLessonResult, LessonJobs, QuantizeLessonResult
from graphlens.workspace.matching import MatchingFeature, rules_for
from graphlens.workspace.overlay import OverlayFeature
from graphlens.workspace.results import (
    FoldResult,
    LessonResult,
    Opened,
    PreviewInputs,
    Saved,
    Step,
)
from graphlens.workspace.rewrite import RewriteFeature
from graphlens.workspace.slots import RESULTS, SLOTS

if TYPE_CHECKING:

    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.core.io import BeforeCommit
    from graphlens.quantize import QuantizeResult
    from graphlens.workspace.binarize_preview import BinarizePreview
    from graphlens.workspace.quantize_preview import QuantizePreview

__all__ = ["Workspace", "rules_for"]


class Workspace(CompressionJobs, LessonJobs, JobOwner):
    """One open model and the results of the jobs on it; see the module docstring.

    ``keep_history=False`` keeps no undo history (one-shot command-line runs: the replaced weights
    can be freed at once).
    """

    # the results, as RESULTS declares them (their initial values and lifetimes come from there)
    current_lesson: LessonResult | None
    preview_inputs: PreviewInputs
    quantization: QuantizeResult | None
    quantize_preview: QuantizePreview | None
    binarization: BinarizeResult | None
    binarize_preview: BinarizePreview | None
    quantize_lesson: QuantizeLessonResult | None
    binarize_lesson: BinarizeLessonResult | None

    def __init__(self, *, keep_history: bool = True) -> None:
        super().__init__()
        self.events = WorkspaceEvents()
        self.keep_history = keep_history
        self.model: Model | None = None
        self.session: RewriteSession | None = None
        for slot in RESULTS:
            setattr(self, slot.attribute, slot.empty_value())
        self.matches = MatchingFeature(self)
        self.rewrite = RewriteFeature(self)
        self.comparison = ComparisonFeature(self)
        self.overlay = OverlayFeature(self)
        self.features: tuple[Feature, ...] = (self.matches, self.rewrite, self.comparison, self.overlay)
        self._revision_seen = -1

    def _job(self, kind: str, what: str, request: Any, compute: Callable[[Any, Task], Any],
             keep: Callable[[Any], Any] | None = None, *, reads_live: bool = False) -> Job[Any, Any]:
        """A job whose result, once kept, is the slot ``kind`` (the results not yet in a feature)."""
        return Job(kind=kind, what=what, model=self.require_model(), request=request, compute=compute,
                   keep=keep or (lambda result: self._set_result(kind, result)), owner=self, reads_live=reads_live)

    def _set_result(self, attribute: str, value: Any) -> Any:
        """Make ``value`` the result ``attribute`` and announce it with that result's event."""
        setattr(self, attribute, value)
        getattr(self.events, SLOTS[attribute].event).emit(value)
        return value

    def _clear_results(self, *, opening: bool) -> None:
        """Reset (a new model) or drop (an edit) the results RESULTS says go, each with its event."""
        for slot in RESULTS:
            if (slot.reset_on_open if opening else slot.dropped_by_edit) \
                    and not slot.is_empty(getattr(self, slot.attribute)):
                self._set_result(slot.attribute, slot.empty_value())
        for feature in self.features:
            feature.clear(opening=opening)

    # ================================================================ the model
    def open(self, path: str | os.PathLike[str]) -> Opened:
        """Read ``path`` and make it the workspace's model; a bad file raises, and the current model stays."""
        return self.set_model(load_model(path))

    def set_model(self, model: Model) -> Opened:
        """Make ``model`` (read elsewhere, e.g. in a worker thread) the workspace's model."""
        self.model = model
        self._revision_seen = model.revision
        self.session = RewriteSession(model, on_change=self._on_session_change, keep_history=self.keep_history)
        self._clear_results(opening=True)
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

    def save_as(self, path: str | os.PathLike[str], *, overwrite_source: bool = False, full_check: bool = True,
                before_commit: BeforeCommit | None = None) -> Saved:
        """Write the model to ``path``, which becomes its file; never over its source unless asked.

        Only a model that passes the ONNX checker's full check is written (``full_check=False``: its structural
        check alone); ``before_commit`` sees the written file before it takes its name, and raising there
        leaves nothing written (see :meth:`Model.save`)."""
        return self._save_to(Path(path), overwrite_source=overwrite_source, full_check=full_check,
                             before_commit=before_commit)

    def _save_to(self, path: Path, *, overwrite_source: bool, full_check: bool = True,
                 before_commit: BeforeCommit | None = None) -> Saved:
        model = self.require_model()
        model.save(path, overwrite_source=overwrite_source, full_check=full_check, before_commit=before_commit)
        model.path = path
        if self.session is not None:
            self.session.mark_saved()
        model.modified = False
        saved = Saved(path)
        self.events.saved.emit(saved)
        return saved

    # ================================================================ preview inputs
    def set_preview_inputs(self, dims: dict[str, int] | None = None,
                           npz: str | os.PathLike[str] | None = None) -> PreviewInputs:
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
        inputs: PreviewInputs = self._set_result("preview_inputs", PreviewInputs(new_dims, file, arrays))
        return inputs

    # ================================================================ edits
    def apply_all(self, rule: str) -> FoldResult:
        """Apply ``rule`` everywhere it applies, to a fixpoint, then tidy up: ``graphlens fold --rules RULE``."""
        return self.fold([rule])

    def fold(
        self,
        rules: list[str] | None = None,
        *,
        task: Task | None = None,
    ) -> FoldResult:
        """Apply ``rules`` (default: the fold defaults) until none applies, then clean up; one undo step."""
        from graphlens.rewrites.driver import fold_model, resolve_rules

        model = self.require_model()
        chosen = resolve_rules(rules)
        report = fold_model(model, chosen, self.edit_session(), task=task)
        return FoldResult([r.name for r in chosen], report, model.revision)

    def freeze_inputs(self) -> FoldResult:
        """Make the initializers listed as graph inputs constants (``freeze-inputs``), then ask the last
        question again, since its answer may have changed."""
        asked = self.matches.explanation
        result = self.apply_all("freeze-inputs")
        if asked is not None and result.applied:
            self.matches.explain(asked.pattern, asked.at)
        return result

    def undo(self) -> Step | None:
        change = self.edit_session().undo()
        return None if change is None else Step(change.label, self.revision)

    def redo(self) -> Step | None:
        change = self.edit_session().redo()
        return None if change is None else Step(change.label, self.revision)

    def edit_session(self) -> RewriteSession:
        """The history edits go through; a job reading the live model is stopped first, since it is about to change."""
        self.require_model()
        assert self.session is not None
        self.stop_live_jobs()
        return self.session

    def _on_session_change(self) -> None:
        """The model changed: what was computed for it as it was is dropped, each view told.

        Saving also calls here (the modified marker moved); the model is the same, so nothing is dropped.
        """
        if self.model is None or self.model.revision == self._revision_seen:
            return
        self._revision_seen = self.model.revision
        self._clear_results(opening=False)
        session = self.session
        label = session.undo_stack[-1].label if session is not None and session.undo_stack else ""
        self.events.edited.emit(Step(label, self.revision))
