"""The three jobs in the window: panels wired to the workspace, and the marks they leave on the canvas.

Mixed into :class:`MainWindow`. The :class:`~graphlens.workspace.Workspace` holds every result;
the panels show what its events carry and send the user's requests back to it. The public
methods here are the window's scripting API (docs/scripting.md): scripts call them
synchronously; buttons and menus call the same code, with what can take long (matching a large
model, a preview's onnxruntime runs) in worker threads whose results the workspace drops if the
model changed meanwhile.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSignalBlocker, Qt, QTimer
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QApplication, QDockWidget, QMenu, QWidget

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.gui import marks, workers
from graphlens.gui.after_edit import AfterEdit
from graphlens.gui.binarize_panel import BinarizePanel
from graphlens.gui.explain_menu import ExplainMenu
from graphlens.gui.fold_report import TRANSFORMERS_TIP, FusionReportPanel, fuse_transformers
from graphlens.gui.lesson_jobs import LessonWork
from graphlens.gui.patterns_panel import PatternsPanel
from graphlens.gui.preview_inputs import PreviewInputsWork
from graphlens.gui.quantize_panel import QuantizePanel
from graphlens.gui.window_layout import bottom_share
from graphlens.gui.work_panels import MatchesPanel, PreviewPanel, WhyPanel
from graphlens.layout.collapse_matches import match_keys
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import library, resolve_pattern
from graphlens.workspace import Dropped, ExplainResult, MatchesResult, RewritePreview
from graphlens.workspace.binarize_preview import linear_nodes

if TYPE_CHECKING:
    from graphlens.matching.match import Match

ASYNC_MATCH_NODES = 20_000
"""Models with more nodes than this are matched in a worker thread, with progress and cancel."""


class Workflows(LessonWork, ExplainMenu, AfterEdit, PreviewInputsWork):
    """Matches, explain, previews, lessons; expects the attributes :class:`MainWindow` sets up."""

    def _build_workflows(self) -> None:
        self.match_jobs = workers.WorkerSlot()
        self.preview_jobs = workers.WorkerSlot()
        self.patterns_panel = PatternsPanel()
        self.matches_panel = MatchesPanel()
        self.why_panel = WhyPanel()
        self.preview_panel = PreviewPanel()
        self._build_lessons()
        self.quantize_panel = QuantizePanel(self.workspace, self.panel, self.show_error, self.before_edit)
        self.binarize_panel = BinarizePanel(self.workspace, self.panel, self.show_error, self.before_edit)
        self.fusion_report = FusionReportPanel(self)
        patterns_dock = self.add_dock(self.patterns_panel, "Patterns", Qt.DockWidgetArea.LeftDockWidgetArea)
        bottom = [self.add_dock(w, t, Qt.DockWidgetArea.BottomDockWidgetArea) for w, t in (
            (self.matches_panel, "Matches"), (self.why_panel, "Why not here?"), (self.preview_panel, "Rewrite preview"),
            (self.lesson_view, "Learn BN folding"), (self.quantize_panel, "Quantize"))]
        self.tabifyDockWidget(self._dock_of(self.outline), patterns_dock)
        for dock in bottom[1:]:
            self.tabifyDockWidget(bottom[0], dock)
        bottom[0].raise_()
        # one more tab, hidden until a lesson is asked for: six tabs are what a small window's bottom holds
        lesson_dock = self.add_dock(self.quantize_lesson, "Learn fake quantization",
                                    Qt.DockWidgetArea.BottomDockWidgetArea)
        self.tabifyDockWidget(bottom[-1], lesson_dock)
        lesson_dock.hide()
        for widget, title in ((self.binarize_panel, "Binarize"), (self.binarize_lesson, "Learn binarization"),
                              (self.fusion_report, "Fusion report")):
            dock = self.add_dock(widget, title, Qt.DockWidgetArea.BottomDockWidgetArea)  # shown when asked for
            self.tabifyDockWidget(bottom[-1], dock)
            dock.hide()
        self._dock_of(self.outline).raise_()
        bottom[0].raise_()  # a newcomer starts at Matches, whatever tab was added last
        # the user's requests, to the workspace
        self.patterns_panel.run_requested.connect(self._run_pattern_async)
        self.matches_panel.match_selected.connect(self.show_match)
        self.matches_panel.preview_requested.connect(self._preview_async)
        self.matches_panel.apply_all_requested.connect(self._apply_all)
        self.matches_panel.lesson_requested.connect(lambda index: self.show_lesson(index, background=True))
        self.matches_panel.cancel_requested.connect(self._cancel_matching)
        self.matches_panel.collapse_toggled.connect(self.collapse_matches)
        self.why_panel.near_miss_selected.connect(self._show_near_miss)
        self.why_panel.freeze_inputs_requested.connect(self.freeze_inputs)
        self.preview_panel.apply_requested.connect(self._apply_preview)
        self.preview_panel.show_after_toggled.connect(self._show_after)
        self.preview_panel.inputs_requested.connect(self.edit_preview_inputs)
        self.quantize_panel.lesson_requested.connect(self.show_quantize_lesson)
        self.quantize_panel.save_requested.connect(self.save)
        self.matches_panel.binarize_requested.connect(lambda index: self.binarize_matches(None if index < 0 else index))
        self.binarize_panel.lesson_requested.connect(self.show_binarize_lesson)
        self.binarize_panel.save_requested.connect(self.save)
        for filled, other in ((self.quantize_panel, self.binarize_panel), (self.binarize_panel, self.quantize_panel)):
            filled.filled.connect(lambda panel=filled: self.raise_panel(panel))  # closed until a job fills it
            filled.filled.connect(lambda other=other: other.show_after.setChecked(False))  # one graph "after" shown
        # what the workspace says changed, to the panels
        events = self.workspace.events
        self.workspace.matches.events.result.connect(self._on_matches)
        self.workspace.matches.events.explanation.connect(self._on_explained)
        self.workspace.rewrite.events.previewed.connect(self._on_preview)
        events.job_dropped.connect(self._on_job_dropped)
        self.workspace.quantization.events.previewed.connect(self._on_quantize_preview)
        self._build_patterns_menu()

    def _build_patterns_menu(self) -> None:
        """The Patterns menu's actions (their keys work with the menus hidden), then the Explain menu."""
        K = QKeySequence
        self.act_run = self.add_action("&Run Pattern", self.run_pattern, K("Ctrl+M"),
                                       tip="Find every match of the pattern in the editor (the last one run, or "
                                           "conv-bn, when it is empty)")
        self.act_next_match = self.add_action("Next Match", lambda: self.matches_panel.step(1), K("Alt+Down"))
        self.act_prev_match = self.add_action("Previous Match", lambda: self.matches_panel.step(-1), K("Alt+Up"))
        self.act_sketch = self.add_action("New Pattern from &Selection", self.new_pattern_from_selection,
                                          K("Ctrl+Shift+N"))
        self.act_apply = self.add_action("&Apply Previewed Rewrite", self._apply_preview,
                                         [K("Ctrl+Return"), K("Ctrl+Enter")])
        self.act_binarize = self.add_action("&Binarize Weights…",
                                            lambda: self.raise_panel(self.binarize_panel, share=0.45),
                                            tip="The Binarize panel: weights as sums of ±α, previewed, then applied")
        self.act_quantize = self.add_action("&Quantize…", lambda: self.raise_panel(self.quantize_panel, share=0.45),
                                            tip="The Quantize panel: int8 or int4 with QDQ pairs, calibrated, "
                                                "measured per layer, previewed, then applied")
        self.act_transformers = self.add_action("Fuse &Transformer Ops", lambda: fuse_transformers(self),
                                                K("Ctrl+Shift+T"), tip=TRANSFORMERS_TIP)
        menu = QMenu("&Patterns", self)
        for action in (self.act_run, self.act_next_match, self.act_prev_match, self.act_sketch, self.act_apply,
                       self.act_transformers, self.act_quantize, self.act_binarize):
            menu.addAction(action)
        self.menuBar().insertMenu(self.menuBar().actions()[-1], menu)  # before Help
        self.menuBar().insertMenu(self.menuBar().actions()[-1], self._build_explain_menu())

    def _dock_of(self, widget: QWidget) -> QDockWidget:
        return next(d for d in self.findChildren(QDockWidget) if d.widget() is widget)

    def raise_panel(self, widget: QWidget, share: float | None = None) -> None:
        """Bring a panel to the front. A bottom one takes ``share`` of the window's height (by default what its
        content needs: a list a third, a lesson half), so the canvas keeps the rest whichever tab is in front."""
        dock = self._dock_of(widget)
        dock.show()
        dock.raise_()
        bottom = self.dockWidgetArea(dock) == Qt.DockWidgetArea.BottomDockWidgetArea
        share = share if share is not None else bottom_share(widget) if bottom else None
        if share is not None and not dock.isFloating():
            self.resizeDocks([dock], [int(self.height() * share)], Qt.Orientation.Vertical)
        QTimer.singleShot(0, self.hide_stale_tab_bars)

    def _on_quantize_preview(self, preview: object) -> None:
        if preview is not None:
            self._make_room(self.quantize_panel, 0.45)

    def _make_room(self, widget: QWidget, share: float) -> None:
        """A result arrived in a panel on screen: give it at least ``share`` of the window's height, so its summary
        and the first rows of its table show (a panel the user made taller keeps its height)."""
        dock = self._dock_of(widget)
        wanted = int(self.height() * share)
        if dock.isVisible() and not dock.isFloating() and dock.height() < wanted:
            self.resizeDocks([dock], [wanted], Qt.Orientation.Vertical)

    def _reset_job_panels(self) -> None:
        """A new model: every panel of the three jobs starts empty."""
        for slot in (self.match_jobs, self.preview_jobs, self.lesson_jobs, self.quantize_lesson_jobs):
            slot.cancel()
        self.end_busy()
        self._clear_marks()
        self._forget_questions()
        self.matches_panel.set_matches("", [], [])
        self.why_panel.clear()
        self.preview_panel.clear()
        self.lesson_view.clear()
        self.quantize_lesson.clear()
        self.binarize_lesson.clear()
        self.fusion_report.clear()

    def before_edit(self) -> None:
        """A running match reads the live model: stop it before the model changes under it."""
        if self.match_jobs.busy:
            self._cancel_matching(wait=10.0)

    def _cancel_matching(self, wait: float = 0.0) -> None:
        self.match_jobs.cancel(wait)
        self.end_busy()
        self.matches_panel.set_matches("", [], [])

    # ======================================================================= patterns
    def resolve_pattern(self, pattern: str | Pattern) -> Pattern:
        """A built-in name, a .pattern/.json file, pattern text, or a Pattern: as everywhere else."""
        return resolve_pattern(pattern)

    def current_pattern(self) -> Pattern:
        """The pattern the user is working with: the editor's if it parses, else the last one run, else conv-bn."""
        current = self.workspace.matches.result
        return self.patterns_panel.pattern() or (current.pattern if current else None) or library()["conv-bn"]

    def run_pattern(self) -> None:
        """Ctrl+M: every match of the Patterns panel's pattern; with its editor empty (a first run, the panel closed),
        of the pattern last run, conv-bn at first. A text that does not parse opens the panel at the error."""
        panel = self.patterns_panel
        if not panel.editor.toPlainText().strip():
            current = self.current_pattern()
            if current.name not in library():
                self._run_pattern_async(current)
                return
            panel.editor.setPlainText(current.name)  # a library name alone loads its text
        panel.run()
        if panel.pattern() is None:
            self.raise_panel(panel)

    def new_pattern_from_selection(self) -> None:
        """Sketch a pattern from the selected nodes into the Patterns panel (Ctrl+Shift+N)."""
        view, graph = self.panel.view, self.panel.graph
        if view is None or graph is None:
            return
        chosen = (view.items[i] for i in sorted(self.canvas.marks.selected))
        names = [item.node for item in chosen if item.kind == "node" and item.node is not None]
        if not names:
            self.show_error("select one or more nodes first (click, Shift+click or Shift+drag)")
            return
        try:
            self.patterns_panel.start_sketch(graph, names)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return
        self.raise_panel(self.patterns_panel)

    # ======================================================================= matches
    @property
    def matches(self) -> list[Match]:
        current = self.workspace.matches.result
        return current.matches if current is not None else []

    def _run_pattern_async(self, pattern: Pattern) -> None:
        model = self.workspace.model
        if model is None:
            return
        if model.node_count() <= ASYNC_MATCH_NODES:
            self.workspace.matches.find(pattern)  # its result event fills the panel and tints the canvas
            return
        job = self.workspace.matches.job(pattern)
        self.matches_panel.set_busy(f"Matching {pattern.name} on {model.node_count():,} nodes…")
        self.raise_panel(self.matches_panel)

        def failed(message: str | None) -> None:
            self.end_busy()
            self.matches_panel.set_matches("", [], [])
            if message:
                self.show_error(message)

        self.progress.setValue(0)
        self.progress.show()
        self.match_jobs.start_job(job, lambda result, kept: None, failed,
                                  progress=lambda f: self.progress.setValue(int(f * 100)), ended=self.end_busy)

    def _on_matches(self, result: MatchesResult | None) -> None:
        self._clear_marks()
        if self.panel.collapsed_matches:  # a new run starts with its matches drawn node by node
            self.panel.set_collapsed_matches({})
        if result is None:
            self._rerun_row = self.matches_panel.list.currentRow()  # selected again if the pattern runs again
            self.matches_panel.set_matches("", [], [])
            return
        quiet, self._quiet_matches = self._quiet_matches, False
        self._shown_pattern = result.pattern
        with QSignalBlocker(self.matches_panel.list) if quiet else nullcontext():  # a re-run keeps the view
            self.matches_panel.set_matches(result.pattern.name, [m.to_json() for m in result.matches], result.rules,
                                           lesson=result.lesson_available)
            if quiet:
                self.matches_panel.list.setCurrentRow(min(self._rerun_row, len(result.matches) - 1))
        self.matches_panel.set_binarizable(bool(self._binarizable(None, first=True)))
        self._tint_matches()
        if not quiet:
            self.raise_panel(self.matches_panel)

    def collapse_matches(self, on: bool) -> None:
        """Draw every current match as one box named after its pattern (``on``), or node by node again."""
        keys: dict[str, dict[str, str]] = {}
        current = self.workspace.matches.result
        if on and current is not None:
            for graph in dict.fromkeys(m.graph for m in current.matches):
                keys[graph.path] = match_keys(current.pattern.name,
                                              (m.node_names for m in current.matches if m.graph is graph))
        self.panel.set_collapsed_matches(keys)
        self._tint_matches()

    def _inspect(self, name: str) -> None:
        """Select node ``name`` of the graph on screen without moving the view: the Inspector shows it, and the
        selection, the Menu key and the Explain menu agree with what a match or a preview is about."""
        self.panel.select_nodes([name])

    def _tint_matches(self) -> None:
        marks.tint_matches(self.panel, self.matches)

    def show_match(self, index: int) -> None:
        """Outline match ``index`` and centre on it (entering its subgraph if needed)."""
        if not 0 <= index < len(self.matches):
            return
        match = self.matches[index]
        if match.graph is not self.panel.graph:
            self.panel.show_path(match.graph)
            self._tint_matches()
        marks.outline_match(self.panel, match)
        self._inspect(match.node_names[-1])  # the match's last node (a BN, an attention's output), selected

    # ======================================================================= why not
    @property
    def _last_explain(self) -> dict[str, Any]:
        current = self.workspace.matches.explanation
        return current.to_dict() if current is not None else {}

    def _on_explained(self, result: ExplainResult | None) -> None:
        if result is None:
            self.why_panel.clear()
            return
        data = result.to_dict()
        self.why_panel.show_result(data)
        self._asked_at = (result.pattern, result.at) if result.at is not None else None
        if result.at is not None and not self._quiet_explain:
            self._draw_explanation(data)
        if not self._quiet_explain:
            self.raise_panel(self.why_panel)

    def _draw_explanation(self, result: dict[str, Any]) -> None:
        model = self.workspace.model
        if result.get("graph") and model is not None:
            self.panel.show_path(model.graph_at(result["graph"]))
        marks.draw_explanation(self.panel, result)

    def freeze_inputs(self) -> int:
        """Make every initializer listed as a graph input a constant (one undo step), then ask again."""
        if self.workspace.model is None:
            return 0
        self.before_edit()
        result = self.workspace.freeze_inputs()
        count = sum(len(e.drop_inputs) for e in result.report.edits)
        if count:
            self.statusBar().showMessage(f"freeze-inputs: {count} initializers are constants now (Ctrl+Z undoes it)",
                                         6000)
        return count

    def _show_near_miss(self, row: int) -> None:
        misses = self._last_explain.get("near_misses", [])
        if 0 <= row < len(misses):
            self._draw_explanation(misses[row])

    def _clear_marks(self) -> None:
        marks.clear(self.panel)

    # ======================================================================= rewrites
    @property
    def pending(self) -> RewritePreview | None:
        """The preview on screen (the workspace's current one)."""
        return self.workspace.rewrite.previewed

    def _preview_async(self, rule: str, index: int) -> None:
        try:
            job = self.workspace.rewrite.preview_job(rule, index)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return
        self.preview_panel.set_computing(f"{rule} on match {index + 1}")
        self.raise_panel(self.preview_panel)

        def done(result: RewritePreview, kept: bool) -> None:
            if not kept:  # the model changed while it was computed; job_dropped says so
                self.preview_panel.clear()

        def failed(message: str | None) -> None:
            self.preview_panel.clear()
            if message:
                self.show_error(message)

        self.preview_jobs.start_job(job, done, failed)

    def _on_job_dropped(self, dropped: Dropped) -> None:
        """A result came back for a model that changed meanwhile: say so, and that the job can be run again."""
        self.statusBar().showMessage(dropped.message(), 6000)

    def _on_preview(self, result: RewritePreview | None) -> None:
        self.preview_panel.show_after.setChecked(False)
        if result is None:
            if not self.preview_panel.shown:  # an edit dropped it: _ask_again marks it applied, or history
                self.preview_panel.clear()
            return
        self.preview_panel.show_preview(result.to_dict(), result.error)
        self.raise_panel(self.preview_panel, share=0.45)  # first: the canvas frames the nodes at its new height
        QApplication.sendPostedEvents()
        marks.mark_removed(self.panel, result.edit.remove)
        if 0 <= result.match_index < len(self.matches):
            self._inspect(self.matches[result.match_index].node_names[-1])

    def _show_after(self, on: bool) -> None:
        shown = self.pending
        if shown is None:
            return
        if not on:
            self.panel.restore()
            return
        self.panel.show_temporary(Model(shown.after).graph_at(shown.edit.graph))
        marks.frame(self.panel, marks.tint(self.panel, [node.name for node in shown.edit.add], marks.MATCHED_GREEN))

    def _apply_preview(self) -> bool:
        """Apply the previewed rewrite as one undo step (refused with a reason if the model changed)."""
        if self.pending is None:
            return False
        self.before_edit()
        self.preview_panel.show_after.setChecked(False)
        self._applying = True
        try:
            applied = self.workspace.rewrite.apply()
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        finally:
            self._applying = False
        self.statusBar().showMessage(f"Applied: {applied.label} (Ctrl+Z undoes it)", 6000)
        return True

    def _apply_all(self, rule: str) -> int:
        """Apply ``rule`` everywhere it applies, as ``graphlens fold --rules RULE`` does; one undo step."""
        if self.workspace.model is None:
            return 0
        self.before_edit()
        try:
            result = self.workspace.apply_all(rule)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return 0
        done = result.report.applied.get(rule, 0)
        self.statusBar().showMessage(f"{rule}: applied {done}, left {result.refused} (Ctrl+Z undoes it)", 6000)
        return done

    # ======================================================================= binarization
    def _binarizable(self, index: int | None, *, first: bool = False) -> list[str]:
        """The linear layers with a constant weight in match ``index`` (None: in every match) of the main graph
        (``first``: only the first found)."""
        model = self.workspace.model
        found = (self.matches if index is None
                 else self.matches[index:index + 1] if 0 <= index < len(self.matches) else [])
        if model is None:
            return []
        names = [n for m in found if m.graph is model.graph for n in m.nodes.values()]
        return linear_nodes(model.graph, names, first=first)

    def binarize_matches(self, index: int | None = None, *, background: bool = True) -> Any:
        """Binarize the linear layers of match ``index`` (None: of every match) in the Binarize panel, a preview
        the model does not see until Apply; returns it when not computed in the background."""
        layers = self._binarizable(index)
        if not layers:
            self.show_error("these matches hold no Conv, ConvTranspose, Gemm or MatMul with a constant weight "
                            "to binarize")
            return None
        pattern = self.workspace.matches.result.pattern.name if self.workspace.matches.result else "pattern"
        scope = f"the {pattern} matches" if index is None else f"{pattern} match {index + 1}"
        self.binarize_panel.set_scope(layers, scope)
        self.raise_panel(self.binarize_panel, share=0.45)
        return self.binarize_panel.run(background=background)
