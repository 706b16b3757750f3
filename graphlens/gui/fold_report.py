"""Patterns › Fuse Transformer Ops: every transformer fusion at once, and a report of what fused and what did not.

The same as ``graphlens fold --rules transformers``: one undo step. The report lists, per kind,
the sites fused and each site left with its reason; "Why not here?" on one of them draws it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QMessageBox

from graphlens.core.errors import GraphLensError

if TYPE_CHECKING:
    from graphlens.gui.workflows import Workflows
    from graphlens.rewrites.driver import FoldReport

RULE_SET = "transformers"


def fuse_transformers(window: Workflows) -> FoldReport | None:
    """Run the transformer rule set on the open model, then show its report; None when nothing was open or it failed."""
    if window.workspace.model is None:
        return None
    window._before_edit()
    QApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
    try:
        result = window.workspace.fold([RULE_SET])
    except GraphLensError as exc:
        window.show_error(str(exc))
        return None
    finally:
        QApplication.restoreOverrideCursor()
    report = result.report
    fused = sum(report.fused.values())
    summary = f"Transformer fusions: {fused} site{'s' if fused != 1 else ''} fused, {len(report.left)} left"
    window.statusBar().showMessage(f"{summary} (Ctrl+Z undoes it)", 8000)
    show_report(window, summary, report)
    return report


def show_report(window: Workflows, summary: str, report: FoldReport) -> None:
    """The report's lines in a dialog that does not block (scripts and tests go on)."""
    box = QMessageBox(QMessageBox.Icon.Information, "Fuse Transformer Ops", summary, QMessageBox.StandardButton.Ok,
                      window)
    box.setTextFormat(Qt.TextFormat.PlainText)
    lines = report.lines()
    box.setInformativeText("\n".join(line for line in lines if " left at " not in line) or "nothing to fuse")
    left = [line for line in lines if " left at " in line]
    if left:
        box.setDetailedText("Sites left, and why (right-click a node › Why not here? to see one on the graph):\n\n"
                            + "\n".join(left))
    box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    window.last_report = box
    box.open()
