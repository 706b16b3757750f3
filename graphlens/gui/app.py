"""Starting the Qt application."""

from __future__ import annotations

import sys

from PySide6.QtWidgets import QApplication

from graphlens.core.model import Model
from graphlens.gui.main_window import MainWindow


def application() -> QApplication:
    """The process's QApplication, created on first use."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
        app.setApplicationName("GraphLens")
        app.setOrganizationName("GraphLens")
        app.setOrganizationDomain("graphlens.org")
    return app  # type: ignore[return-value]


def run(model: Model) -> int:
    app = application()
    window = MainWindow()
    window.set_model(model)
    window.show()
    return app.exec()
