"""The window's view and file-dialog commands, as public methods: the menus call these, and so can scripts.

Each is one thing a user asks for (fit, zoom, search, show or hide a layer of the drawing, pick a file);
the table in :mod:`graphlens.gui.menus` binds them to menu entries and keys by name.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QDockWidget,
    QFileDialog,
    QHeaderView,
    QMessageBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from graphlens.gui.window_api import WindowBase

ZOOM_STEP = 1.25
TENSOR_SHAPES_MIN_SCALE = 0.7
"""Below this zoom the renderer leaves tensor shapes off the edges (they would not be readable)."""
MOUSE_GESTURES = [("Zoom at the cursor", "Ctrl+wheel"), ("Select with a rubber band", "Shift+drag"),
                  ("Add to the selection", "Shift+click"), ("Expand a group / open a subgraph", "Double-click"),
                  ("The selected node's menu (Why not here?…)", "Right-click, Menu, Shift+F10"),
                  ("Pan", "Drag, arrow keys"), ("Clear the selection", "Esc")]
"""What the canvas does with the mouse and its own keys, listed after the menu keys in Help › Keyboard Shortcuts."""


def shortcuts_table(rows: list[tuple[str, str]], parent: QWidget | None = None) -> QTableWidget:
    """What each shortcut does, one per row: the action on the left, its keys on the right, in aligned columns."""
    table = QTableWidget(len(rows), 2, parent)
    table.setHorizontalHeaderLabels(["Action", "Shortcut"])
    table.verticalHeader().hide()
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    for r, (name, keys) in enumerate(rows):
        table.setItem(r, 0, QTableWidgetItem(name))
        table.setItem(r, 1, QTableWidgetItem(keys))
    header = table.horizontalHeader()
    header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
    table.resizeRowsToContents()
    return table


class WindowCommands(WindowBase):
    """Mixed into :class:`~graphlens.gui.main_window.MainWindow`, which provides the panels used here."""

    # ================================================================ view
    def fit(self) -> None:
        """The whole graph in the window."""
        self.canvas.fit()

    def zoom_in(self) -> None:
        self.canvas.zoom(ZOOM_STEP)

    def zoom_out(self) -> None:
        self.canvas.zoom(1 / ZOOM_STEP)

    def search(self) -> None:
        """Show the Outline / Search panel wherever it is (closed, behind the Patterns tab, floating) and put the
        cursor in its search field."""
        dock = next(d for d in self.findChildren(QDockWidget) if d.widget() is self.outline)
        dock.show()
        dock.raise_()
        self.outline.focus_search()

    def search_next(self) -> None:
        self.outline.next()

    def search_previous(self) -> None:
        self.outline.previous()

    def show_constants(self, on: bool) -> None:
        """Draw Constant nodes as boxes (off: they are read as values of the edges they feed)."""
        self.panel.set_show_constants(on)

    def show_shape_ops(self, on: bool) -> None:
        """Draw the nodes that compute shapes as boxes, not as a line in the box using them."""
        self.panel.set_show_shape_ops(on)

    def expand_groups(self) -> None:
        self.panel.set_expand_all(True)

    def collapse_groups(self) -> None:
        self.panel.set_expand_all(False)

    def back_to_parent(self) -> None:
        """Leave the subgraph shown for the graph that holds it."""
        self.panel.leave()

    def relayout(self) -> None:
        """Lay the graph out again, keeping the view where it is."""
        self.panel.relayout(keep_view=True)

    def show_tensor_shapes(self, on: bool) -> None:
        if self.canvas.renderer is not None:
            self.canvas.renderer.show_edge_labels = on
            if on and self.canvas.scale < TENSOR_SHAPES_MIN_SCALE:
                self.statusBar().showMessage(
                    f"Tensor shapes show when zoomed in to {TENSOR_SHAPES_MIN_SCALE:.0%} or more", 4000)
        self.canvas.update()

    def show_legend(self, on: bool) -> None:
        self.canvas.show_legend = on
        self.canvas.update()

    def show_minimap(self, on: bool) -> None:
        self.canvas.show_minimap = on
        self.canvas.update()

    # ================================================================ dialogs
    def ask_open(self) -> None:
        """Pick a model to open (read in a worker; the window stays responsive)."""
        start = str(self.model.path.parent) if self.model and self.model.path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open ONNX model", start, "ONNX models (*.onnx);;All files (*)")
        if path:
            self.open_model_async(path)

    def ask_save_as(self) -> bool:
        """Pick a file name and save the model there; False when cancelled or failed."""
        if self.model is None:
            return False
        start = str(self.model.path) if self.model.path else "model.onnx"
        path, _ = QFileDialog.getSaveFileName(self, "Save model as", start, "ONNX models (*.onnx)")
        return bool(path) and self.save_as(path)

    def ask_export(self, visible_only: bool = False) -> None:
        """Pick a .png or .svg file and draw the graph into it (with ``visible_only``, what the canvas shows)."""
        if self.model is None:
            return
        default = str(Path(self.model.path or "graph").with_suffix(".png"))
        title = "Export the visible area as an image" if visible_only else "Export image"
        path, _ = QFileDialog.getSaveFileName(self, title, default, "PNG image (*.png);;SVG image (*.svg)")
        if path:
            written = self.export_image(path, visible_only=visible_only)
            if written is not None:
                self.statusBar().showMessage(f"Wrote {written}", 5000)

    def ask_export_visible(self) -> None:
        self.ask_export(visible_only=True)

    def ask_compare(self) -> None:
        """Pick another model to show beside this one, node by node."""
        self.comparer.ask()

    shortcuts_dialog: QDialog | None = None

    def show_shortcuts(self) -> None:
        """Every action with a shortcut, read from the actions themselves so the list never goes stale, then what the
        mouse does: a table the user can keep open beside the window."""
        native = QKeySequence.SequenceFormat.NativeText
        rows = [(a.text().replace("&", ""), ", ".join(k.toString(native) for k in a.shortcuts()))
                for a in self.actions() if not a.shortcut().isEmpty()]
        if self.shortcuts_dialog is not None:
            self.shortcuts_dialog.close()
            self.shortcuts_dialog.deleteLater()
        dialog = QDialog(self)
        dialog.setWindowTitle("Keyboard shortcuts")
        table = shortcuts_table(rows + MOUSE_GESTURES, dialog)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(dialog.close)
        layout = QVBoxLayout(dialog)
        layout.addWidget(table)
        layout.addWidget(buttons)
        width = table.horizontalHeader().length() + table.verticalScrollBar().sizeHint().width() + 48
        height = table.horizontalHeader().height() + sum(table.rowHeight(r) for r in range(table.rowCount()))
        dialog.resize(max(width, 420), min(height + 90, int(self.height() * 0.85)))
        self.shortcuts_dialog = dialog
        dialog.show()

    def show_about(self) -> None:
        QMessageBox.about(self, "About GraphLens",
                          "GraphLens: inspect ONNX models, find and explain patterns, fold rewrites.")
