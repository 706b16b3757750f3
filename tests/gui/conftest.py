"""GUI tests: settings in a temporary folder, so runs never see each other's (or a user's) state."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QCoreApplication, QSettings


@pytest.fixture(autouse=True)
def isolated_settings(tmp_path, qapp):
    QCoreApplication.setOrganizationName("GraphLensTests")
    QCoreApplication.setApplicationName("GraphLensTests")
    QSettings.setDefaultFormat(QSettings.Format.IniFormat)
    QSettings.setPath(QSettings.Format.IniFormat, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    yield


@pytest.fixture
def window(qtbot):
    from graphlens.gui import MainWindow

    w = MainWindow()
    w.show()
    yield w
    if w.model is not None:
        w.model.modified = False  # closing at teardown must not stop at "save changes?"
    w.close()
    w.deleteLater()
