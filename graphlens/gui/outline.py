"""The Outline/Search panel: find nodes, step through the hits."""

from __future__ import annotations

import html

from PySide6.QtCore import QEvent, QObject, QSize, Qt, Signal
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import (
    QCheckBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.search import search_nodes
from graphlens.gui.plain import tooltip


class OutlinePanel(QWidget):
    """A search field with next/previous; all hits listed and reported to the window."""

    hits_changed = Signal(list)  # node names, in graph order
    current_changed = Signal(str)  # node name
    leave_requested = Signal()  # Esc in the search field: back to the graph

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.graph: Graph | None = None
        self.hits: list[str] = []
        self.current = -1
        self.field = QLineEdit(placeholderText="op type, node or tensor name (Enter: next hit, Esc: back to the graph)")
        self.field.installEventFilter(self)
        self.field.setClearButtonEnabled(True)
        self.field.textChanged.connect(self.run)
        self.field.returnPressed.connect(self.next)
        self.regex = QCheckBox("regex")
        self.regex.toggled.connect(lambda _: self.run())
        self.count = QLabel("")
        previous, following = QPushButton("◀"), QPushButton("▶")
        previous.setToolTip("Previous hit (Shift+F3)")
        following.setToolTip("Next hit (F3, Enter)")
        previous.clicked.connect(self.previous)
        following.clicked.connect(self.next)
        self.results = QListWidget()
        # rows as wide as the list, long scoped names cut in the middle (their op type and last parts show), the
        # whole name in each row's tooltip, rather than a list that scrolls sideways
        self.results.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.results.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.results.setResizeMode(QListView.ResizeMode.Adjust)
        self.results.setUniformItemSizes(True)
        self.results.itemActivated.connect(self._picked)
        self.results.itemClicked.connect(self._picked)
        row = QHBoxLayout()
        row.addWidget(self.regex)
        row.addStretch(1)
        row.addWidget(self.count)
        row.addWidget(previous)
        row.addWidget(following)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.field)
        layout.addLayout(row)
        layout.addWidget(self.results, 1)

    def set_graph(self, graph: Graph | None) -> None:
        self.graph = graph
        self.run()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Esc in the search field hands the keyboard back to the graph (where the Menu key opens the hit's menu)."""
        if watched is self.field and event.type() == QEvent.Type.KeyPress and isinstance(event, QKeyEvent) \
                and event.key() == Qt.Key.Key_Escape:
            self.leave_requested.emit()
            return True
        return super().eventFilter(watched, event)

    def focus_search(self) -> None:
        self.field.setFocus()
        self.field.selectAll()

    def run(self) -> None:
        """Search again with the field's text."""
        self.results.clear()
        self.hits, self.current = [], -1
        text = self.field.text()
        if self.graph is not None and text.strip():
            try:
                found = search_nodes(self.graph, text, regex=self.regex.isChecked())
            except GraphLensError as exc:
                self.count.setText("bad regex")
                self.count.setToolTip(tooltip(str(exc)))
                self.hits_changed.emit([])
                return
            self.hits = [n.name for n in found]
            row = QSize(1, self.results.fontMetrics().height() + 4)  # as wide as the list: the text is elided
            for node in found[:5000]:
                item = QListWidgetItem(f"{node.op_type}   {node.name}")
                item.setData(Qt.ItemDataRole.UserRole, node.name)
                item.setToolTip(f"<p style='white-space:pre'>{html.escape(node.name)}\n{node.op_type}</p>")
                item.setSizeHint(row)
                self.results.addItem(item)
        self.count.setToolTip("")
        self.count.setText(f"{len(self.hits)} hits" if text.strip() else "")
        self.hits_changed.emit(list(self.hits))

    def next(self) -> None:
        self._step(1)

    def previous(self) -> None:
        self._step(-1)

    def _step(self, delta: int) -> None:
        if not self.hits:
            return
        self.current = (self.current + delta) % len(self.hits)
        self.count.setText(f"{self.current + 1} of {len(self.hits)}")
        if self.current < self.results.count():
            self.results.setCurrentRow(self.current)
        self.current_changed.emit(self.hits[self.current])

    def _picked(self, item: QListWidgetItem) -> None:
        name = item.data(Qt.ItemDataRole.UserRole)
        self.current = self.hits.index(name)
        self.count.setText(f"{self.current + 1} of {len(self.hits)}")
        self.current_changed.emit(name)
