"""After an edit (Apply, Undo, Redo, a fusion) the panels describe the model as it is, and the view stays put.

The workspace drops what it computed for the model as it was (its matches, the why-not answer, the preview);
the window asks the same questions again of the model as it is now, quietly: the match list keeps its row,
the answer its node, and neither moves the canvas or switches the bottom tab. An applied preview stays on
screen, marked applied, until another edit makes it history. Mixed into
:class:`~graphlens.gui.workflows.Workflows`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from graphlens.core.errors import GraphLensError
from graphlens.gui.window_api import WindowBase

if TYPE_CHECKING:
    from graphlens.gui.work_panels import MatchesPanel, PreviewPanel
    from graphlens.patterns.ir import Pattern


class AfterEdit(WindowBase):
    """What the window asks again after an edit, and the flags that keep a re-asked answer quiet."""

    _shown_pattern: Pattern | None = None
    """The pattern whose matches the Matches panel lists (kept when an edit drops them, to run it again)."""
    _asked_at: tuple[Pattern, str] | None = None
    """The last "why not here?" question at a node, asked again after an edit while that node is there."""
    _quiet_matches = False
    """Re-run matches are arriving: the list updates in place; the view and the tabs stay as they are."""
    _quiet_explain = False
    """The same, for the why-not answer."""
    _rerun_row = -1
    """The Matches panel's row before the edit, selected again in the new list (-1: none)."""
    _applying = False
    """Apply is under way: the preview it drops stays on screen, marked applied."""

    if TYPE_CHECKING:
        matches_panel: MatchesPanel
        preview_panel: PreviewPanel

        def _run_pattern_async(self, pattern: Pattern) -> None: ...

    def _forget_questions(self) -> None:
        """Another model: nothing to ask again."""
        self._shown_pattern, self._asked_at, self._rerun_row = None, None, -1
        self._quiet_matches = False

    def _ask_again(self) -> None:
        """The model changed: run the listed pattern again and ask the last why-not question again."""
        if self._applying:
            self.preview_panel.mark_applied()
        else:
            self.preview_panel.mark_history()
        model = self.workspace.model
        if model is None:
            return
        if self._shown_pattern is not None:
            self._quiet_matches = True  # a large model's matches arrive later; _on_matches resets it
            self._run_pattern_async(self._shown_pattern)
        if self._asked_at is not None:
            pattern, at = self._asked_at
            if model.find_node(at) is None:
                return
            self._quiet_explain = True
            try:
                self.workspace.matches.explain(pattern, at)
            except GraphLensError:  # the question no longer applies to the model as it is
                self._asked_at = None
            finally:
                self._quiet_explain = False
