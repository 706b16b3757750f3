"""The application model: one open model, its undo history, its preview inputs, and one model per feature.

The window, the command line and scripts all drive a :class:`Workspace`; it holds every piece of state the jobs
have and says what changed. Views subscribe and own none of it. The workspace is composed of one model per feature
(:mod:`graphlens.workspace.feature`), as napari composes its viewer model: ``ws.matches`` (matches and "why
not?"), ``ws.rewrite`` (a rewrite previewed and applied), ``ws.bn_lesson``, ``ws.quantization``,
``ws.binarization``, ``ws.comparison`` and ``ws.overlay``, each holding its results as evented fields, its jobs
and its apply. The workspace itself announces the model's life (:class:`~graphlens.workspace.events.WorkspaceEvents`:
opened, edited, saved, a job's result dropped) and the preview inputs every numeric job runs on.

Every job goes through one protocol (:mod:`graphlens.workspace.jobs`): a request captured on the
owner's thread, computed anywhere (a scratch copy when it may run while the model is edited), and
kept only if the model is still at the revision it was made for.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model
from graphlens.core.task import Task
from graphlens.rewrites.edit import EditHistory
from graphlens.workspace.binarization import BinarizationFeature
from graphlens.workspace.bn_lesson import BnLessonFeature
from graphlens.workspace.comparison import ComparisonFeature
from graphlens.workspace.events import WorkspaceEvents
from graphlens.workspace.feature import Feature
from graphlens.workspace.jobs import JobOwner
from graphlens.workspace.matching import MatchingFeature, rules_for
from graphlens.workspace.overlay import OverlayFeature
from graphlens.workspace.quantization import QuantizationFeature
from graphlens.workspace.results import FoldResult, Opened, PreviewInputs, Saved, Step
from graphlens.workspace.rewrite import RewriteFeature

if TYPE_CHECKING:
    from graphlens.core.io import BeforeCommit

__all__ = ["Workspace", "rules_for"]


class Workspace(JobOwner):
    """One open model and the results of the jobs on it; see the module docstring.

    ``keep_history=False`` keeps no undo history (one-shot command-line runs: the replaced weights
    can be freed at once).
    """

    def __init__(self, *, keep_history: bool = True) -> None:
        super().__init__()
        self.events = WorkspaceEvents()
        self.keep_history = keep_history
        self.model: Model | None = None
        self.session: EditHistory | None = None
        self.preview_inputs = PreviewInputs()
        """The inputs previews, comparisons, profiles and metrics run on (a new model starts with none fixed)."""
        self.matches = MatchingFeature(self)
        self.rewrite = RewriteFeature(self)
        self.bn_lesson = BnLessonFeature(self)
        self.quantization = QuantizationFeature(self)
        self.binarization = BinarizationFeature(self)
        self.comparison = ComparisonFeature(self)
        self.overlay = OverlayFeature(self)
        self.features: tuple[Feature, ...] = (self.matches, self.rewrite, self.bn_lesson, self.quantization,
                                              self.binarization, self.comparison, self.overlay)
        self._revision_seen = -1

    def _clear_results(self, *, opening: bool) -> None:
        """Reset (a new model) or drop (an edit) what each feature declares goes, each with its event; a new model
        also starts with no preview inputs fixed."""
        if opening and self.preview_inputs != PreviewInputs():
            self._set_preview_inputs(PreviewInputs())
        for feature in self.features:
            feature.clear(opening=opening)

    def _set_preview_inputs(self, inputs: PreviewInputs) -> PreviewInputs:
        self.preview_inputs = inputs
        self.events.preview_inputs_changed.emit(inputs)
        return inputs

    # ================================================================ the model
    def open(self, path: str | os.PathLike[str]) -> Opened:
        """Read ``path`` and make it the workspace's model; a bad file raises, and the current model stays."""
        return self.set_model(load_model(path))

    def set_model(self, model: Model) -> Opened:
        """Make ``model`` (read elsewhere, e.g. in a worker thread) the workspace's model."""
        self.model = model
        self._revision_seen = model.revision
        self.session = EditHistory(model, on_change=self._on_session_change, keep_history=self.keep_history)
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
        return self._set_preview_inputs(PreviewInputs(new_dims, file, arrays))

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

    def edit_session(self) -> EditHistory:
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
