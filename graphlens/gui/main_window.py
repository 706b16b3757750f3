"""The main window: holds one model, opens others, and reports bad files without losing it."""

from __future__ import annotations

import os
from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QFileDialog, QLabel, QMainWindow, QMessageBox

from graphlens.core.bulk import release_kept
from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model


class MainWindow(QMainWindow):
    """GraphLens's window. Scriptable: ``open_model(path)`` is what File > Open calls."""

    def __init__(self) -> None:
        super().__init__()
        self.model: Model | None = None
        self.last_error: str | None = None
        self._summary = QLabel(alignment=Qt.AlignmentFlag.AlignCenter)
        self._summary.setTextFormat(Qt.TextFormat.RichText)
        self.setCentralWidget(self._summary)
        self.resize(1100, 750)
        self._build_menus()
        self._refresh()

    def _build_menus(self) -> None:
        file_menu = self.menuBar().addMenu("&File")
        open_action = QAction("&Open…", self, shortcut=QKeySequence.StandardKey.Open)
        open_action.triggered.connect(self._ask_open)
        file_menu.addAction(open_action)
        file_menu.addSeparator()
        quit_action = QAction("&Quit", self, shortcut=QKeySequence.StandardKey.Quit)
        quit_action.triggered.connect(self.close)
        file_menu.addAction(quit_action)

    # ------------------------------------------------------------ scripting
    def open_model(self, path: str | os.PathLike[str]) -> bool:
        """Open ``path``; on failure show the reason in a dialog and keep the current model."""
        try:
            model = load_model(path)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        self.set_model(model)
        return True

    def set_model(self, model: Model) -> None:
        if self.model is not None and self.model is not model:
            release_kept()  # the previous model's objects may be collected now
        self.model = model
        self._refresh()

    def show_error(self, message: str) -> None:
        """Tell the user, without blocking scripts or tests that drive the window."""
        self.last_error = message
        box = QMessageBox(QMessageBox.Icon.Warning, "GraphLens", message, QMessageBox.StandardButton.Ok, self)
        box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        box.open()
        self.error_box = box

    # -------------------------------------------------------------- private
    def _ask_open(self) -> None:
        start = str(self.model.path.parent) if self.model and self.model.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open ONNX model", start, "ONNX models (*.onnx);;All files (*)")
        if path:
            self.open_model(Path(path))

    def _refresh(self) -> None:
        if self.model is None:
            self.setWindowTitle("GraphLens")
            self._summary.setText("<p>Open an ONNX model with <b>File › Open</b> (Ctrl+O).</p>")
            return
        self.setWindowTitle(f"{self.model.name} — GraphLens")
        count = self.model.node_count()
        top = ", ".join(f"{op} {n}" for op, n in list(self.model.op_counts().items())[:6])
        self._summary.setText(f"<h2>{self.model.name}</h2><p>{count} nodes</p><p style='color:gray'>{top}</p>")
