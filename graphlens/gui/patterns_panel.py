"""The Patterns panel: pick a built-in, edit pattern text with live errors, run it, sketch one from a selection.

The text is always the source of truth: the library and the sketch editor only write text into
the editor, so what runs is exactly what the user sees (and can save as ``.pattern`` or ``.json``).
"""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, QSize, Qt, QTimer, Signal
from PySide6.QtGui import (
    QColor,
    QFont,
    QFontMetrics,
    QKeyEvent,
    QKeySequence,
    QPainter,
    QPalette,
    QStandardItemModel,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QApplication,
    QComboBox,
    QFileDialog,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QStyle,
    QStyledItemDelegate,
    QStyleOptionViewItem,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.gui.code_editor import ERROR_COLOR, CodeEditor, fixed_font
from graphlens.gui.lossy_panel import table_cell
from graphlens.patterns.ir import Pattern
from graphlens.patterns.jsonform import dumps as pattern_to_json_text
from graphlens.patterns.jsonform import loads as pattern_from_json_text
from graphlens.patterns.library import builtin_text, library
from graphlens.patterns.sketch import sketch_boundary, sketch_nodes, sketch_pattern
from graphlens.patterns.syntax import PatternSyntaxError, format_pattern, parse_pattern

DIM_COLOR = "#607d8b"
CHECK_DELAY_MS = 250
RUN_KEYS = QKeySequence("Ctrl+M")
NAME_ROLE = Qt.ItemDataRole.UserRole
DESCRIPTION_ROLE = Qt.ItemDataRole.UserRole + 1
KINDS = (("wildcard", "any"), ("constant", "const"))


def _library_list() -> QListWidget:
    """The built-ins, two lines each, at most three and a half rows tall so the editor keeps the room."""
    widget = QListWidget()
    widget.setItemDelegate(_LibraryDelegate(widget))
    widget.setUniformItemSizes(True)
    widget.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    for name, pattern in library().items():
        item = QListWidgetItem(name)
        item.setData(NAME_ROLE, name)
        item.setData(DESCRIPTION_ROLE, pattern.description)
        item.setToolTip(f"<b>{html.escape(name)}</b><br>{html.escape(pattern.description)}")
        widget.addItem(item)
    row_height = 2 * QFontMetrics(widget.font()).height() + 8
    widget.setMinimumHeight(int(row_height * 1.5) + 2 * widget.frameWidth())
    widget.setMaximumHeight(int(row_height * 3.5) + 2 * widget.frameWidth())
    widget.setProperty("rows_height", row_height)
    return widget


class _LibraryDelegate(QStyledItemDelegate):
    """Two lines per built-in: the name in bold, the description dimmed and elided (full text in the tooltip)."""

    def paint(self, painter: QPainter, option: QStyleOptionViewItem,
              index: QModelIndex | QPersistentModelIndex) -> None:
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        name, description = opt.text, index.data(DESCRIPTION_ROLE) or ""
        opt.text = ""
        style = opt.widget.style() if opt.widget is not None else QApplication.style()
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, opt.widget)
        selected = bool(opt.state & QStyle.StateFlag.State_Selected)
        rect = opt.rect.adjusted(6, 3, -6, -3)
        bold = QFont(opt.font)
        bold.setBold(True)
        line = QFontMetrics(opt.font).height()
        painter.save()
        painter.setFont(bold)
        painter.setPen(opt.palette.color(QPalette.ColorRole.HighlightedText if selected else QPalette.ColorRole.Text))
        painter.drawText(rect.adjusted(0, 0, 0, -line), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, name)
        painter.setFont(opt.font)
        painter.setPen(opt.palette.color(QPalette.ColorRole.HighlightedText) if selected else QColor(DIM_COLOR))
        elided = QFontMetrics(opt.font).elidedText(description, Qt.TextElideMode.ElideRight, rect.width())
        painter.drawText(rect.adjusted(0, line, 0, 0), Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignTop, elided)
        painter.restore()

    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        return QSize(200, 2 * QFontMetrics(option.font).height() + 8)


class PatternsPanel(QWidget):
    """Library, editor with errors checked as you type, Open/Save/Run, and the sketch editor."""

    run_requested = Signal(object)  # Pattern
    pattern_changed = Signal(object)  # Pattern | None

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._default_name = "custom"
        self._path: Path | None = None
        self._sketch_graph: Graph | None = None
        self._sketch_names: list[str] = []
        self._filling = False

        self.library_list = _library_list()
        self.library_list.itemClicked.connect(self._load_builtin_item)
        self.library_list.itemSelectionChanged.connect(self._load_selected_builtins)

        self.editor = CodeEditor()
        self.editor.setMinimumHeight(5 * self.editor.fontMetrics().lineSpacing() + 2 * self.editor.frameWidth())
        self.editor.setPlaceholderText("conv = Conv(x, w: const)\nbn = BatchNormalization(conv, ...)\n\n"
                                       "or pick a built-in above")
        self._timer = QTimer(self, singleShot=True, interval=CHECK_DELAY_MS)
        self._timer.timeout.connect(self.check_now)
        self.editor.textChanged.connect(self._timer.start)

        self.error_label = QLabel("")
        self.error_label.setWordWrap(True)
        self.error_label.setVisible(False)
        self.error_label.setFont(fixed_font(-1))
        self.error_label.setStyleSheet(f"color: {ERROR_COLOR}")
        self.error_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error_label.setTextFormat(Qt.TextFormat.PlainText)

        buttons = QHBoxLayout()
        for text, tip, slot in (
            ("Open…", "Open a .pattern or .json file", self._ask_open),
            ("Save…", "Save the text as .pattern, or the parsed pattern as .json", self._ask_save),
            ("Run (Ctrl+M)", "Find every match of this pattern in the model", self.run),
        ):
            if slot == self.run:
                buttons.addStretch(1)
            button = QPushButton(text)
            button.setToolTip(tip)
            button.clicked.connect(slot)
            buttons.addWidget(button)

        self._build_sketch_section()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.setSpacing(4)
        layout.addWidget(self.library_list)
        layout.addWidget(self.editor, 1)
        layout.addWidget(self.error_label)
        layout.addLayout(buttons)
        layout.addWidget(self.sketch_box)
        for target in (self, self.editor, self.library_list, self.sketch_nodes_table, self.sketch_values_table):
            target.installEventFilter(self)

    def _build_sketch_section(self) -> None:
        self.sketch_box = QGroupBox("New pattern from selection")
        hint = QLabel("Changes here rewrite the text above; Run finds the matches.", wordWrap=True)
        hint.setStyleSheet(f"color: {DIM_COLOR}")
        self.sketch_nodes_table = _table(["node", "op (A|B, *)", "optional"])
        self.sketch_nodes_table.itemChanged.connect(self._sketch_item_changed)
        self.sketch_values_table = _table(["value", "tensor", "kind"])
        close = QPushButton("Close")
        close.setToolTip("Hide the sketch options (the text stays)")
        close.clicked.connect(lambda: self._show_sketch(False))
        box = QVBoxLayout(self.sketch_box)
        box.setContentsMargins(6, 6, 6, 6)
        box.setSpacing(4)
        for widget in (hint, self.sketch_nodes_table, self.sketch_values_table):
            box.addWidget(widget)
        box.addWidget(close, 0, Qt.AlignmentFlag.AlignRight)
        self.sketch_box.setVisible(False)

    # ------------------------------------------------------------------ text and errors
    def pattern(self) -> Pattern | None:
        """The editor text parsed, or None when it does not parse."""
        try:
            return parse_pattern(self.editor.toPlainText(), name=self._default_name)
        except GraphLensError:
            return None

    def set_text(self, text: str) -> None:
        """Replace the editor text and check it at once (no typing delay for text we put there)."""
        self.editor.setPlainText(text)
        self.check_now()

    def check_now(self) -> Pattern | None:
        """Parse the text now, show or clear the error and its mark, and report the result."""
        self._timer.stop()
        text = self.editor.toPlainText()
        pattern: Pattern | None = None
        if text.strip():
            try:
                pattern = parse_pattern(text, name=self._default_name)
            except PatternSyntaxError as exc:
                self._show_error(f"line {exc.line}, column {exc.column}: {exc.reason}", exc.line, exc.column)
            except GraphLensError as exc:
                self._show_error(str(exc))
        if pattern is not None or not text.strip():
            self._show_error("")
        self.pattern_changed.emit(pattern)
        return pattern

    def run(self) -> None:
        """Ask for matches of the current text; a text that does not parse keeps its error shown and gets the cursor.
        A library pattern's name alone (``conv-bn``, as the command line and scripts take it) loads its text."""
        name = self.editor.toPlainText().strip()
        if name in library():
            self._take_text(builtin_text(name), name, None)
        pattern = self.check_now()
        if pattern is not None:
            self.run_requested.emit(pattern)
            return
        for mark in self.editor.extraSelections()[-1:]:
            cursor = self.editor.textCursor()
            cursor.setPosition(mark.cursor.selectionStart())
            self.editor.setTextCursor(cursor)
        self.editor.setFocus()

    def _show_error(self, message: str, line: int = 0, column: int = 0) -> None:
        self.error_label.setText(message)
        self.error_label.setVisible(bool(message))
        self.editor.mark_error(line if message else 0, column)

    # ------------------------------------------------------------------ library and files
    def _load_selected_builtins(self) -> None:
        for item in self.library_list.selectedItems():
            self._load_builtin_item(item)

    def _load_builtin_item(self, item: QListWidgetItem | None) -> None:
        if item is None or (item.data(NAME_ROLE) == self._default_name
                            and self.editor.toPlainText() == builtin_text(self._default_name)):
            return
        self._show_sketch(False)
        self._default_name, self._path = item.data(NAME_ROLE), None
        self.set_text(builtin_text(item.data(NAME_ROLE)))

    def _take_text(self, text: str, name: str, path: Path | None, *, sketching: bool = False) -> None:
        """Text from somewhere other than the library: forget the library choice (so clicking it reloads)."""
        self.library_list.blockSignals(True)
        self.library_list.clearSelection()
        self.library_list.setCurrentRow(-1)
        self.library_list.blockSignals(False)
        self._show_sketch(sketching)
        self._default_name, self._path = name, path
        self.set_text(text)

    def open_file(self, path: str | Path) -> None:
        """Load a ``.pattern`` file verbatim, or a ``.json`` pattern as its canonical text."""
        target = Path(path)
        try:
            text = target.read_text(encoding="utf-8")
            if target.suffix.lower() == ".json":
                text = format_pattern(pattern_from_json_text(text))
        except (OSError, UnicodeDecodeError, GraphLensError) as exc:
            self._show_error(f"cannot open {target.name}: {exc}")
            return
        self._take_text(text, target.stem, target)

    def save_file(self, path: str | Path) -> None:
        """Write the text as is (``.pattern``), or the parsed pattern as JSON (``.json``)."""
        target = Path(path)
        try:
            if target.suffix.lower() == ".json":
                pattern = self.check_now()
                if pattern is None:
                    reason = self.error_label.text() or "it is empty"
                    return self._show_error(f"cannot save {target.name} as JSON: the text does not parse ({reason})")
                target.write_text(pattern_to_json_text(pattern) + "\n", encoding="utf-8")
            else:
                target.write_text(self.editor.toPlainText(), encoding="utf-8")
        except (OSError, GraphLensError) as exc:
            self._show_error(f"cannot save {target.name}: {exc}")
            return
        self._path = target
        self.check_now()

    def _ask_open(self) -> None:
        start = str(self._path.parent) if self._path else ""
        path, _ = QFileDialog.getOpenFileName(self, "Open pattern", start, "Patterns (*.pattern *.json);;All files (*)")
        if path:
            self.open_file(path)

    def _ask_save(self) -> None:
        pattern = self.pattern()
        default = str(self._path) if self._path else f"{pattern.name if pattern else self._default_name}.pattern"
        path, chosen = QFileDialog.getSaveFileName(self, "Save pattern", default,
                                                   "Pattern text (*.pattern);;Pattern JSON (*.json)")
        if path:
            self.save_file(path if Path(path).suffix else path + (".json" if "json" in chosen else ".pattern"))

    # ------------------------------------------------------------------ sketch
    def _show_sketch(self, visible: bool) -> None:
        """The sketch section takes the library's room (one and a half rows) while it is open."""
        rows = 1.5 if visible else 3.5
        self.library_list.setMaximumHeight(int(self.library_list.property("rows_height") * rows)
                                           + 2 * self.library_list.frameWidth())
        self.sketch_box.setVisible(visible)

    def start_sketch(self, graph: Graph, node_names: list[str]) -> None:
        """Show the sketch options for a selection and put its pattern in the editor."""
        try:
            nodes, values = sketch_nodes(graph, node_names), sketch_boundary(graph, node_names)
        except GraphLensError as exc:
            self._show_error(f"cannot sketch a pattern: {exc}")
            return
        self._sketch_graph, self._sketch_names = graph, [n.name for n in nodes]
        self._filling = True
        nodes_table, values_table = self.sketch_nodes_table, self.sketch_values_table
        nodes_table.setRowCount(len(nodes))
        for row, node in enumerate(nodes):
            nodes_table.setItem(row, 0, _fixed_item(node.label, f"{node.name}\n{node.op_type}", node.name))
            op_item = QTableWidgetItem(node.op_type)
            op_item.setToolTip("An op type, alternatives like Conv|ConvTranspose, or * for any op")
            nodes_table.setItem(row, 1, op_item)
            check = QTableWidgetItem("")
            check.setCheckState(Qt.CheckState.Unchecked)
            check.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsUserCheckable if node.can_be_optional
                           else Qt.ItemFlag.NoItemFlags)
            check.setToolTip(
                "The match may skip this node (its input from the selection takes its place)"
                if node.can_be_optional else "Cannot be optional: no other selected node feeds it"
            )
            nodes_table.setItem(row, 2, check)
        values_table.setRowCount(len(values))
        for row, value in enumerate(values):
            values_table.setItem(row, 0, _fixed_item(value.label, value.tensor, value.tensor))
            values_table.setItem(row, 1, _fixed_item(value.tensor, value.tensor, value.tensor))
            values_table.setCellWidget(row, 2, self._kind_combo(value.is_constant))
        self._filling = False
        for table in (nodes_table, values_table):
            _fit_height(table)
        text = self._sketch_text()
        if text is not None:
            self._take_text(text, "sketch", None, sketching=True)

    def _kind_combo(self, is_constant: bool) -> QComboBox:
        combo = QComboBox()
        for text, kind in KINDS:
            combo.addItem(text, kind)
        combo.setCurrentIndex(1 if is_constant else 0)
        combo.setToolTip("wildcard: any tensor; constant: a constant of this dtype" if is_constant
                         else "not constant here: wildcard only")
        model = combo.model()
        if not is_constant and isinstance(model, QStandardItemModel):
            model.item(1).setEnabled(False)
        combo.currentIndexChanged.connect(lambda _index: self._regenerate())
        combo.installEventFilter(self)
        return combo

    def _sketch_item_changed(self, item: QTableWidgetItem) -> None:
        if not self._filling and item.column() in (1, 2):
            self._regenerate()

    def sketch_options(self) -> tuple[dict[str, str], set[str], dict[str, str]]:
        """The tables as :func:`sketch_pattern` options: ops, optional nodes, value kinds."""
        nodes, values = self.sketch_nodes_table, self.sketch_values_table
        rows = [(table_cell(nodes, r, 0).data(NAME_ROLE), table_cell(nodes, r, 1).text(),
                 table_cell(nodes, r, 2).checkState()) for r in range(nodes.rowCount())]
        ops = {name: op_text for name, op_text, _ in rows}
        optional = {name for name, _, state in rows if state == Qt.CheckState.Checked}
        kinds: dict[str, str] = {}
        for r in range(values.rowCount()):
            combo = values.cellWidget(r, 2)
            assert isinstance(combo, QComboBox), "every value row has its kind box"
            kinds[table_cell(values, r, 0).data(NAME_ROLE)] = combo.currentData()
        return ops, optional, kinds

    def _regenerate(self) -> None:
        text = None if self._filling else self._sketch_text()
        if text is not None:
            self.set_text(text)

    def _sketch_text(self) -> str | None:
        """The sketch with the tables' options, as text; None (and the reason shown) when they are not possible."""
        if self._sketch_graph is None:
            return None
        ops, optional, kinds = self.sketch_options()
        try:
            return format_pattern(sketch_pattern(self._sketch_graph, self._sketch_names, ops=ops, optional=optional,
                                                 value_kinds=kinds))
        except GraphLensError as exc:
            self._show_error(f"sketch: {exc}")
            return None

    # ------------------------------------------------------------------ Ctrl+M
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Ctrl+M inside the panel runs once, even when the window binds the same key (no ambiguous shortcut)."""
        if (event.type() in (QEvent.Type.ShortcutOverride, QEvent.Type.KeyPress) and isinstance(event, QKeyEvent)
                and QKeySequence(event.keyCombination()) == RUN_KEYS):
            event.accept()
            if event.type() == QEvent.Type.KeyPress:
                self.run()
            return True
        return super().eventFilter(watched, event)


def _table(headers: list[str]) -> QTableWidget:
    table = QTableWidget(0, len(headers))
    table.setHorizontalHeaderLabels(headers)
    table.verticalHeader().setVisible(False)
    table.verticalHeader().setDefaultSectionSize(QFontMetrics(table.font()).height() + 10)
    table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    for column, mode in enumerate(("ResizeToContents", "Stretch", "ResizeToContents")):
        table.horizontalHeader().setSectionResizeMode(column, QHeaderView.ResizeMode[mode])
    return table


def _fixed_item(text: str, tooltip: str, key: str) -> QTableWidgetItem:
    """A read-only cell that remembers the node or tensor name it stands for."""
    item = QTableWidgetItem(text)
    item.setFlags(Qt.ItemFlag.ItemIsEnabled)
    item.setToolTip(tooltip)
    item.setData(NAME_ROLE, key)
    return item


def _fit_height(table: QTableWidget, max_rows: int = 6) -> None:
    """At most as tall as its rows (up to ``max_rows``), down to two rows in a short dock; it scrolls beyond."""
    head = table.horizontalHeader().sizeHint().height() + 2 * table.frameWidth()
    row = table.verticalHeader().defaultSectionSize()
    table.setMinimumHeight(head + min(table.rowCount(), 2) * row)
    table.setMaximumHeight(head + min(table.rowCount(), max_rows) * row)
