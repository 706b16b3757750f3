"""The window's three jobs, joined to the core: find matches, ask why not, preview and apply rewrites, learn.

Mixed into :class:`MainWindow`. Every public method here is also the scripting API (see
docs/scripting.md): scripts call it synchronously; the window's buttons and menus call the same
code, running what can take long (matching a large model, onnxruntime) in worker threads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenu

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.gui import workers
from graphlens.gui.lesson import LessonView
from graphlens.gui.patterns_panel import PatternsPanel
from graphlens.gui.work_panels import DimRow, MatchesPanel, PreviewInputs, PreviewInputsDialog, PreviewPanel, WhyPanel
from graphlens.matching.explain import explain as explain_pattern
from graphlens.matching.matcher import Match, Matcher
from graphlens.numerics import load_inputs
from graphlens.numerics.dims import LADDER, dynamic_dims, remembered_dims
from graphlens.numerics.inputs import check_dim_names
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import library
from graphlens.patterns.syntax import parse_pattern
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.preview import Preview, preview_edit
from graphlens.rewrites.rule import Refusal
from graphlens.rewrites.rules import RULES

MATCH_TINT = QColor("#ff9800")
CURRENT_MATCH = QColor("#e65100")
MATCHED_GREEN = QColor("#43a047")
FAILED_RED = QColor("#e53935")
ASYNC_MATCH_NODES = 20_000
"""Models with more nodes than this are matched in a worker thread, with progress and cancel."""


def rules_for(pattern: Pattern) -> list[str]:
    """The rules that rewrite matches of ``pattern`` (by pattern name)."""
    return [name for name, rule in RULES.items() if pattern.name in rule.pattern_names]


class Workflows:
    """Matches, explain, previews, lessons; expects the attributes :class:`MainWindow` sets up."""

    model: Model | None

    def _build_workflows(self) -> None:
        self.matches: list[Match] = []
        self.match_pattern: Pattern | None = None
        self.pending: tuple[GraphEdit, Preview, dict] | None = None
        self.match_job: workers.Job | None = None
        self.patterns_panel = PatternsPanel()
        self.matches_panel = MatchesPanel()
        self.why_panel = WhyPanel()
        self.preview_panel = PreviewPanel()
        self.lesson_view = LessonView()
        patterns_dock = self._dock(self.patterns_panel, "Patterns", Qt.DockWidgetArea.LeftDockWidgetArea)
        bottom = [self._dock(w, t, Qt.DockWidgetArea.BottomDockWidgetArea) for w, t in (
            (self.matches_panel, "Matches"), (self.why_panel, "Why not here?"), (self.preview_panel, "Rewrite preview"),
            (self.lesson_view, "Learn BN folding"))]
        self.tabifyDockWidget(self._dock_of(self.outline), patterns_dock)
        for dock in bottom[1:]:
            self.tabifyDockWidget(bottom[0], dock)
        bottom[0].raise_()
        self._dock_of(self.outline).raise_()
        self.patterns_panel.run_requested.connect(self._run_pattern_async)
        self.matches_panel.match_selected.connect(self.show_match)
        self.matches_panel.preview_requested.connect(self._preview_async)
        self.matches_panel.apply_all_requested.connect(self.apply_all)
        self.matches_panel.lesson_requested.connect(self.show_lesson)
        self.matches_panel.cancel_requested.connect(lambda: self.match_job and self.match_job.cancel())
        self.why_panel.near_miss_selected.connect(self._show_near_miss)
        self.why_panel.freeze_inputs_requested.connect(self.freeze_inputs)
        self.preview_panel.apply_requested.connect(self.apply_preview)
        self.preview_panel.show_after_toggled.connect(self._show_after)
        self.preview_panel.inputs_requested.connect(self.edit_preview_inputs)
        K = QKeySequence
        self.act_run = self._action("&Run Pattern", self.patterns_panel.run, K("Ctrl+M"), tip="Find every match of the pattern in the editor")
        self.act_next_match = self._action("Next Match", lambda: self.matches_panel.step(1), K("Alt+Down"))
        self.act_prev_match = self._action("Previous Match", lambda: self.matches_panel.step(-1), K("Alt+Up"))
        self.act_sketch = self._action("New Pattern from &Selection", self.new_pattern_from_selection, K("Ctrl+Shift+N"))
        self.act_apply = self._action("&Apply Previewed Rewrite", self.apply_preview, [K("Ctrl+Return"), K("Ctrl+Enter")])
        menu = QMenu("&Patterns", self)
        for action in (self.act_run, self.act_next_match, self.act_prev_match, self.act_sketch, self.act_apply):
            menu.addAction(action)
        self.menuBar().insertMenu(self.menuBar().actions()[-1], menu)  # before Help

    def _dock_of(self, widget) -> QDockWidget:
        return next(d for d in self.findChildren(QDockWidget) if d.widget() is widget)

    def _raise(self, widget, share: float | None = None) -> None:
        """Bring a result panel to the front; ``share`` gives it that fraction of the window's height."""
        dock = self._dock_of(widget)
        dock.show()
        dock.raise_()
        if share is not None and not dock.isFloating():
            self.resizeDocks([dock], [int(self.height() * share)], Qt.Orientation.Vertical)

    # ======================================================================= patterns
    def resolve_pattern(self, pattern: str | Pattern) -> Pattern:
        """A library name, pattern text, or a Pattern."""
        if isinstance(pattern, Pattern):
            return pattern
        if pattern in library():
            return library()[pattern]
        return parse_pattern(pattern)

    def current_pattern(self) -> Pattern:
        """The pattern the user is working with: the editor's if it parses, else the last one run, else conv-bn."""
        return self.patterns_panel.pattern() or self.match_pattern or library()["conv-bn"]

    def new_pattern_from_selection(self) -> None:
        """Sketch a pattern from the selected nodes into the Patterns panel (Ctrl+Shift+N)."""
        view, graph = self.panel.view, self.panel.graph
        if view is None or graph is None:
            return
        names = [view.items[i].node for i in sorted(self.canvas.marks.selected) if view.items[i].kind == "node"]
        if not names:
            self.show_error("select one or more nodes first (click, Shift+click or Shift+drag)")
            return
        try:
            self.patterns_panel.start_sketch(graph, names)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return
        self._raise(self.patterns_panel)

    # ======================================================================= matches
    def find_matches(self, pattern: str | Pattern) -> list[dict]:
        """Every match of ``pattern`` (a library name, pattern text or Pattern); tinted on the canvas."""
        if self.model is None:
            return []
        resolved = self.resolve_pattern(pattern)
        self._show_matches(resolved, Matcher(resolved).find(self.model))
        return [m.to_json() for m in self.matches]

    def _run_pattern_async(self, pattern: Pattern) -> None:
        if self.model is None:
            return
        if self.model.node_count() <= ASYNC_MATCH_NODES:
            self.find_matches(pattern)
            return
        model = self.model
        self.matches_panel.set_busy(f"Matching {pattern.name} on {model.node_count():,} nodes…")
        self._raise(self.matches_panel)

        def work(progress, cancelled):
            return Matcher(pattern).find(model, progress=lambda done, total: progress(done / max(total, 1)), cancelled=cancelled)

        job = workers.Job(work)
        job.signals.progress.connect(lambda f: self.progress.setValue(int(f * 100)))
        job.signals.finished.connect(lambda found, p=pattern: (self._end_busy(), self._show_matches(p, found)))
        job.signals.failed.connect(lambda message: (self._end_busy(), self.matches_panel.set_matches(pattern.name, [], []),
                                                    self.show_error(message)))
        job.signals.cancelled.connect(lambda: (self._end_busy(), self.matches_panel.set_matches("", [], [])))
        self.progress.setValue(0)
        self.progress.show()
        self.match_job = workers.start(job)

    def _show_matches(self, pattern: Pattern, matches: list[Match]) -> None:
        self.match_job = None
        self.match_pattern, self.matches = pattern, matches
        self._clear_marks()
        rules = rules_for(pattern)
        self.matches_panel.set_matches(pattern.name, [m.to_json() for m in matches], rules,
                                       lesson=pattern.name in ("conv-bn", "gemm-bn", "matmul-bn"))
        self._tint_matches()
        self._raise(self.matches_panel)

    def _tint_matches(self) -> None:
        graph = self.panel.graph
        for match in self.matches:
            if match.graph is graph:
                for name in match.nodes.values():
                    index = self.panel.item_of(name)
                    if index is not None:
                        self.canvas.marks.tints[index] = MATCH_TINT
        self.canvas.update()

    def show_match(self, index: int) -> None:
        """Outline match ``index`` and centre on it (entering its subgraph if needed)."""
        if not 0 <= index < len(self.matches):
            return
        match = self.matches[index]
        if match.graph is not self.panel.graph:
            self.panel.show_path(match.graph)
            self._tint_matches()
        items = [i for i in (self.panel.item_of(n) for n in match.nodes.values()) if i is not None]
        self.canvas.marks.outline = {i: CURRENT_MATCH for i in items}
        if items:
            self.canvas.center_on(items[-1])
        self.canvas.update()

    # ======================================================================= why not
    def explain(self, pattern: str | Pattern, at: str | None = None) -> dict:
        """Why ``pattern`` does or does not match at node ``at`` (or the near misses); shown and drawn."""
        if self.model is None:
            return {}
        result = explain_pattern(self.resolve_pattern(pattern), self.model, at=at).to_json()
        self.why_panel.show_result(result)
        self._last_explain = result
        self._last_explain_query = (pattern, at)
        if at is not None:
            self._draw_explanation(result)
        self._raise(self.why_panel)
        return result

    def _draw_explanation(self, result: dict) -> None:
        if result.get("graph") and self.model is not None:
            self.panel.show_path(self.model.graph_at(result["graph"]))
        self._clear_marks()
        marks = self.canvas.marks
        for name in result.get("mapping", {}).values():
            index = self.panel.item_of(name)
            if index is not None:
                marks.tints[index] = MATCHED_GREEN
        failing = self.panel.item_of(result["node"]) if result.get("node") else None
        if failing is not None and not result["matched"]:
            marks.outline[failing] = FAILED_RED
            marks.tints.pop(failing, None)
            view = self.panel.view
            tensor = result.get("tensor")
            if result.get("kind") == "sole_use":  # the edge that leaves the match is the problem
                outside = {self.panel.item_of(n) for n in result.get("outside_consumers", [])}
                wanted = [k for k, e in enumerate(view.edges) if e.source == failing and e.target in outside]
            else:  # the input that did not fit
                wanted = [k for k, e in enumerate(view.edges) if e.target == failing and (tensor is None or tensor in e.tensors)]
                wanted = wanted[:1] if tensor is not None else wanted
            for k in wanted:
                marks.edges[k] = FAILED_RED
            self.canvas.center_on(failing)
        self.canvas.update()

    def freeze_inputs(self) -> int:
        """Make every initializer listed as a graph input a constant (one undo step), then ask again."""
        if self.model is None or self.session is None:
            return 0
        edits = RULES["freeze-inputs"].model_edits(self.model)
        if not edits:
            return 0
        self.session.apply(edits, label="freeze-inputs")
        count = sum(len(e.drop_inputs) for e in edits)
        self.statusBar().showMessage(f"freeze-inputs: {count} initializers are constants now (Ctrl+Z undoes it)", 6000)
        query = getattr(self, "_last_explain_query", None)
        if query is not None:
            self.explain(*query)
        return count

    def _show_near_miss(self, row: int) -> None:
        misses = getattr(self, "_last_explain", {}).get("near_misses", [])
        if 0 <= row < len(misses):
            self._draw_explanation(misses[row])

    def _clear_marks(self) -> None:
        marks = self.canvas.marks
        marks.tints.clear()
        marks.outline.clear()
        marks.edges.clear()

    # ======================================================================= rewrites
    def _match_for(self, rule: str, index: int) -> Match:
        if rule not in RULES:
            raise GraphLensError(f"unknown rule '{rule}'; rules: {', '.join(RULES)}")
        if not (self.match_pattern is not None and rule in rules_for(self.match_pattern)):
            self.matches = [m for p in RULES[rule].patterns() for m in Matcher(p).find(self.model)]
        if not 0 <= index < len(self.matches):
            raise GraphLensError(f"there is no match {index} for {rule} ({len(self.matches)} matches)")
        return self.matches[index]

    def preview_rewrite(self, rule: str, match_index: int = 0) -> dict:
        """Plan ``rule`` on a match and show what it would change; the model is not touched."""
        match = self._match_for(rule, match_index)
        self._last_preview_request = (rule, match_index)
        result, error = self._compute_preview(self.model, RULES[rule], match, self.preview_settings())
        self._show_preview(result, error)
        return result["result"]

    def _preview_async(self, rule: str, index: int) -> None:
        try:
            match = self._match_for(rule, index)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return
        self._last_preview_request = (rule, index)
        self.preview_panel.set_computing(f"{rule} on match {index + 1}")
        self._raise(self.preview_panel)
        model, rule_object, settings = self.model, RULES[rule], self.preview_settings()
        job = workers.Job(lambda progress, cancelled: self._compute_preview(model, rule_object, match, settings))
        job.signals.finished.connect(lambda out: self._show_preview(*out))
        job.signals.failed.connect(lambda message: (self.preview_panel.clear(), self.show_error(message)))
        self.preview_job = workers.start(job)

    @staticmethod
    def _compute_preview(model: Model, rule, match: Match, settings: PreviewInputs) -> tuple[dict, np.ndarray | None]:
        planned = rule.plan(match)
        if isinstance(planned, Refusal):
            raise GraphLensError(planned.reason)
        preview = preview_edit(model, planned, settings.arrays, dims=settings.dims, inputs_file=settings.file)
        error = None
        if preview.numeric.boundary_values:  # the diff kept them: no second onnxruntime run
            a, b = preview.numeric.boundary_values[0]
            error = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).reshape(-1)
        details = rule.details(match)
        parameters = details.rows() if details is not None else []
        result = {
            "rule": rule.name,
            "description": planned.description,
            "summary": planned.summary(),
            "removed": list(planned.remove),
            "added": [n.name for n in planned.add],
            "numeric": preview.numeric.to_json(),
            "inputs": preview.numeric.inputs.line() if preview.numeric.inputs is not None else "",
            "parameters": parameters,
        }
        return {"result": result, "edit": planned, "preview": preview, **result}, error

    def _show_preview(self, out: dict, error: np.ndarray | None) -> None:
        self.pending = (out["edit"], out["preview"], out["result"])
        self.preview_panel.show_preview(out["result"], error)
        self._clear_marks()
        removed = [i for i in (self.panel.item_of(n) for n in out["edit"].remove) if i is not None]
        for index in removed:
            self.canvas.marks.tints[index] = FAILED_RED
        if removed:
            self.canvas.center_on(removed[-1])
        self.canvas.update()
        self._raise(self.preview_panel, share=0.45)

    # ----------------------------------------------------------------- preview inputs
    def preview_settings(self) -> PreviewInputs:
        """The dims and .npz the preview runs on; new models start with all dims chosen automatically."""
        if getattr(self, "_inputs_model", None) is not self.model:
            self._inputs_model, self._preview_inputs = self.model, PreviewInputs()
        return self._preview_inputs

    def set_preview_inputs(self, dims: dict[str, int] | None = None, npz: str | Path | None = None) -> bool:
        """Fix dims for previews (``{}`` chooses all again) and/or read their inputs from ``npz`` (``""``: random).

        Re-runs the preview on screen. When they do not fit the model, says why and keeps the previous ones.
        """
        if self.model is None:
            return False
        old = self.preview_settings()
        new = PreviewInputs(dict(old.dims), old.file, old.arrays)
        try:
            if dims is not None:
                check_dim_names(self.model, dims)
                new.dims = dict(dims)
            if npz == "":
                new.file, new.arrays = None, None
            elif npz is not None:
                new.file, new.arrays = str(npz), load_inputs(Path(npz), self.model)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        self._preview_inputs = new
        self._rerun_preview(background=False)
        return True

    def edit_preview_inputs(self) -> PreviewInputsDialog | None:
        """The Inputs… dialog: every dynamic dim prefilled with the size last used, and Load .npz…."""
        if self.model is None:
            return None
        model, settings = self.model, self.preview_settings()
        last = self.pending[1].numeric.inputs if self.pending is not None else None
        used = dict(last.dims.values) if last is not None and last.dims is not None and last.file is None else {}
        used = {**(remembered_dims(model, settings.dims) or {}), **used, **settings.dims}
        rows = [DimRow(d.label, used.get(d.label, 1 if d.batch_like else LADDER[0]), d.label in settings.dims,
                       ", ".join(d.where)) for d in dynamic_dims(model)]
        dialog = PreviewInputsDialog(rows, settings, lambda path: load_inputs(Path(path), model), self)
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.accepted.connect(lambda: self._accept_preview_inputs(model, dialog.settings()))
        dialog.open()
        self.inputs_dialog = dialog
        return dialog

    def _accept_preview_inputs(self, model: Model, settings: PreviewInputs) -> None:
        if model is self.model:
            self._preview_inputs = settings
            self._rerun_preview(background=True)

    def _rerun_preview(self, background: bool) -> None:
        """Preview the same rewrite again with the new inputs, when one is on screen."""
        request = getattr(self, "_last_preview_request", None)
        if request is None or self.pending is None:
            return
        if background:
            self._preview_async(*request)
            return
        try:
            self.preview_rewrite(*request)
        except GraphLensError as exc:
            self.show_error(str(exc))

    def _show_after(self, on: bool) -> None:
        if self.pending is None:
            return
        if not on:
            self.panel.restore()
            return
        edit, preview, _ = self.pending
        self.panel.show_temporary(Model(preview.after).graph_at(edit.graph))
        for node in edit.add:
            index = self.panel.item_of(node.name)
            if index is not None:
                self.canvas.marks.tints[index] = MATCHED_GREEN
        self.canvas.update()

    def apply_preview(self) -> bool:
        """Apply the previewed rewrite as one undo step."""
        if self.pending is None or self.session is None:
            return False
        edit = self.pending[0]
        self.preview_panel.show_after.setChecked(False)
        self.pending = None
        self.session.apply([edit])
        self.preview_panel.clear()
        self.matches = []
        self.matches_panel.set_matches("", [], [])
        self._clear_marks()
        self.statusBar().showMessage(f"Applied: {edit.description} (Ctrl+Z undoes it)", 6000)
        return True

    def apply_all(self, rule: str) -> int:
        """Apply ``rule`` to all its (non-overlapping) matches as one undo step; returns how many."""
        if self.model is None or self.session is None:
            return 0
        rule_object = RULES[rule]
        edits, refused = [], []
        for pattern in rule_object.patterns():
            for match in Matcher(pattern).find(self.model, non_overlapping=True):
                planned = rule_object.plan(match)
                (refused if isinstance(planned, Refusal) else edits).append(planned)
        if edits:
            self.session.apply(edits, label=f"{rule} on {len(edits)} matches")
        self.matches = []
        self.matches_panel.set_matches("", [], [])
        self._clear_marks()
        self.statusBar().showMessage(f"{rule}: applied {len(edits)}, left {len(refused)} (Ctrl+Z undoes it)", 6000)
        return len(edits)

    def show_lesson(self, match_index: int = 0) -> Any:
        """Open the BN-folding lesson on a conv-bn / gemm-bn / matmul-bn match."""
        if not 0 <= match_index < len(self.matches):
            return None
        try:
            self.lesson_view.show_lesson(self.model, self.matches[match_index])
        except (ValueError, GraphLensError) as exc:
            self.show_error(str(exc))
            return None
        self._raise(self.lesson_view, share=0.55)
        return self.lesson_view.lesson
