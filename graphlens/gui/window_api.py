"""What the window's mixins may use of the window, declared once so that mypy checks their calls.

:class:`~graphlens.gui.commands.WindowCommands` and :class:`~graphlens.gui.workflows.Workflows` are
mixed into :class:`~graphlens.gui.main_window.MainWindow`, which sets these up; at run time the base
is plain ``object``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMainWindow, QProgressBar, QWidget

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.gui.canvas import GraphCanvas
    from graphlens.gui.comparer import Comparer
    from graphlens.gui.fold_report import FusionReportPanel
    from graphlens.gui.graph_panel import GraphPanel
    from graphlens.gui.inspector import Inspector
    from graphlens.gui.outline import OutlinePanel
    from graphlens.workspace import Workspace

    class WindowBase(QMainWindow):
        workspace: Workspace
        canvas: GraphCanvas
        panel: GraphPanel
        outline: OutlinePanel
        inspector: Inspector
        comparer: Comparer
        progress: QProgressBar
        fusion_report: FusionReportPanel  # the last Fuse Transformer Ops run (graphlens.gui.fold_report)

        @property
        def model(self) -> Model | None: ...
        def open_model_async(self, path: str | os.PathLike[str]) -> object: ...
        def save(self) -> bool: ...
        def save_as(self, path: str | os.PathLike[str]) -> bool: ...
        def export_image(self, path: str | os.PathLike[str], *, visible_only: bool = False) -> Path | None: ...
        def show_error(self, message: str) -> None: ...
        def end_busy(self) -> None: ...
        def hide_stale_tab_bars(self) -> None: ...
        def add_dock(self, widget: QWidget, title: str, area: Qt.DockWidgetArea) -> QDockWidget: ...
        def add_action(self, text: str, slot: Callable[..., object],
                       shortcut: QKeySequence | list[QKeySequence] | None = None,
                       checkable: bool = False, checked: bool = False, tip: str = "") -> QAction: ...
else:
    WindowBase = object
