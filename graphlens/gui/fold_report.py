"""Patterns › Fuse Transformer Ops: every transformer fusion at once, and the Fusion report panel that says what it did.

The same as ``graphlens fold --rules transformers``, with the same words (:class:`FoldReport` writes them): one undo
step. The panel is a bottom tab: the headline (nodes before → after, where they went, the sites fused and left),
what the whole-model rules did, per kind the sites fused and left, and each site left as a row with its reason.
Selecting a row selects its node on the canvas; a double-click or *Why not here?* draws the site with its pattern.
The panel describes the run: after Undo it keeps its content and says the run was undone; a new model clears it.
"""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError

if TYPE_CHECKING:
    from graphlens.gui.workflows import Workflows
    from graphlens.rewrites.driver import FoldReport
    from graphlens.rewrites.edit import Change
    from graphlens.rewrites.sites_left import SiteLeft
    from graphlens.workspace.results import Step

RULE_SET = "transformers"
TRANSFORMERS_TIP = ("Every transformer fusion (attention, norms, rotary, GELU), as graphlens fold --rules "
                    "transformers; one undo step; the Fusion report says what changed and why each site left stayed")
SITE_ROLE = Qt.ItemDataRole.UserRole
"""A site row's index into the panel's sites (kind rows have none)."""


def fuse_transformers(window: Workflows) -> FoldReport | None:
    """Run the transformer rule set on the open model, then show its report; None when nothing was open or it failed."""
    if window.workspace.model is None:
        return None
    window.before_edit()
    QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
    try:
        result = window.workspace.fold([RULE_SET])
    except GraphLensError as exc:
        window.show_error(str(exc))
        return None
    finally:
        QApplication.restoreOverrideCursor()
    report = result.report
    session = window.workspace.session
    change = session.undo_stack[-1] if report.edits and session is not None and session.undo_stack else None
    window.statusBar().showMessage("Transformer fusions applied: the Fusion report says what changed "
                                   "(Ctrl+Z undoes it)", 8000)
    window.fusion_report.show_report(report, change)
    window.raise_panel(window.fusion_report)
    return report


class FusionReportPanel(QWidget):
    """The last Fuse Transformer Ops run: its headline, what the rules did, and a tree of kinds and sites left."""

    def __init__(self, window: Workflows) -> None:
        super().__init__()
        self.host = window
        self.sites: list[SiteLeft] = []
        self._change: weakref.ref[Change] | None = None
        self.headline = QLabel()
        font = QFont(self.headline.font())
        font.setBold(True)
        self.headline.setFont(font)
        self.details = QLabel()
        self.state = QLabel()
        for label in (self.headline, self.details, self.state):
            label.setTextFormat(Qt.TextFormat.PlainText)  # names come from the model
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.tree = QTreeWidget()
        self.tree.setHeaderLabels(["Kind", "Node", "Why it was left"])
        self.tree.setColumnWidth(0, 150)
        self.tree.setColumnWidth(1, 260)
        self.tree.setUniformRowHeights(True)
        self.tree.setToolTip("Select a site left to select its node; double-click it to see why on the graph")
        self.tree.currentItemChanged.connect(self._on_current)
        self.tree.itemDoubleClicked.connect(lambda item, _column: self._explain_item(item))
        self.why_button = QPushButton("Why not here?")
        self.why_button.setToolTip("Pick a site left in the table, then draw it with its pattern: what matched, and "
                                   "where it failed (double-clicking a site does the same)")
        self.why_button.setEnabled(False)
        self.why_button.clicked.connect(lambda: self._explain_item(self.tree.currentItem()))
        buttons = QHBoxLayout()
        buttons.addWidget(self.state, 1)
        buttons.addWidget(self.why_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.headline)
        layout.addWidget(self.details)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)
        window.workspace.events.edited.connect(self._on_edited)
        self.clear()

    # ------------------------------------------------------------------ content
    def show_report(self, report: FoldReport, change: Change | None = None) -> None:
        """Show ``report``; ``change`` is the undo step the run made (None when it changed nothing)."""
        self.clear()
        self.headline.setText(report.headline() or "Transformer fusions")
        lines = report.done_lines()
        missing = report.not_found_line()
        if missing is not None:
            lines.append(missing)
        if report.already:
            lines.append(report.already_line())
        self.details.setText("\n".join(lines))
        self.details.setVisible(bool(lines))
        self.sites = list(report.left)
        for kind, fused, left in report.kind_counts():
            by_layer = report.layers.text(kind)  # "fused on 31 of 32 layers; left on layer 7"
            counts = f"{fused} fused, {left} left" + (f" · {by_layer}" if by_layer else "")
            row = QTreeWidgetItem([kind, "", counts])
            self.tree.addTopLevelItem(row)
            for index, site in enumerate(self.sites):
                if site.kind == kind:
                    row.addChild(self._site_row(index, site))
            row.setExpanded(True)
        self._change = weakref.ref(change) if change is not None else None
        self.state.setText("Ctrl+Z undoes the run" if change is not None else "The run changed nothing")

    def _site_row(self, index: int, site: SiteLeft) -> QTreeWidgetItem:
        where = "" if site.graph == "main" else f" [{site.graph}]"
        row = QTreeWidgetItem([site.kind, site.node + where, site.reason])
        row.setData(0, SITE_ROLE, index)
        row.setToolTip(2, site.reason)
        return row

    def clear(self) -> None:
        """Empty: no run on this model yet."""
        self.tree.clear()
        self.sites = []
        self._change = None
        self.headline.setText("No fusion run on this model yet: Patterns › Fuse Transformer Ops (Ctrl+Shift+T)")
        self.details.clear()
        self.details.hide()
        self.state.clear()
        self.why_button.setEnabled(False)

    def site_rows(self) -> list[QTreeWidgetItem]:
        """The rows of the sites left, in the report's order of kinds."""
        rows: list[QTreeWidgetItem] = []
        for k in range(self.tree.topLevelItemCount()):
            kind = self.tree.topLevelItem(k)
            if kind is not None:
                rows.extend(row for row in (kind.child(c) for c in range(kind.childCount())) if row is not None)
        return rows

    # ------------------------------------------------------------------ the canvas
    def _site_of(self, item: QTreeWidgetItem | None) -> SiteLeft | None:
        index = None if item is None else item.data(0, SITE_ROLE)
        return self.sites[index] if isinstance(index, int) and 0 <= index < len(self.sites) else None

    def _on_current(self, item: QTreeWidgetItem | None, _previous: QTreeWidgetItem | None = None) -> None:
        site = self._site_of(item)
        self.why_button.setEnabled(site is not None and bool(site.pattern))
        model = self.host.workspace.model
        if site is None or model is None:
            return
        graph = model.graph_at(site.graph)
        if graph is not self.host.panel.graph:
            self.host.panel.show_path(graph)
        self.host.panel.select_nodes([site.node], center=True)

    def _explain_item(self, item: QTreeWidgetItem | None) -> None:
        site = self._site_of(item)
        if site is None or not site.pattern or self.host.workspace.model is None:
            return
        try:
            self.host.workspace.matches.explain(site.pattern, at=site.node)
        except GraphLensError as exc:  # the node went with a later edit
            self.host.show_error(str(exc))

    # ------------------------------------------------------------------ undo
    def _on_edited(self, _step: Step) -> None:
        """Undo and redo keep the report (it describes the run) and say whether the run is in the model now."""
        change = self._change() if self._change is not None else None
        session = self.host.workspace.session
        if change is None or session is None:
            return
        if any(step is change for step in session.undo_stack):
            self.state.setText("Ctrl+Z undoes the run")
        elif any(step is change for step in session.redo_stack):
            self.state.setText("Undone: the model is as it was before this run (Ctrl+Y redoes it)")
        else:
            self.state.setText("Undone, and later edits replaced it: this report describes a model no longer open")
