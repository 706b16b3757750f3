"""The Overlay panel: colour the canvas by a number per node, list the nodes by it, and link both ways.

Pick a metric (FLOPs, parameters, output bytes computed from shapes; latency from onnxruntime's
profiler), or import a CSV / Model Explorer node
data file; any overlay a script or the quantizer sets on the workspace shows the same way. The
table sorts by any column; clicking a row selects and centres its node, selecting boxes on the
canvas selects their rows. The canvas's legend becomes the colour scale with its unit.

The numbers come from the workspace's metric and profile jobs (a profile, or a large model's metric,
computed in a worker with progress and Cancel; the workspace keeps the latest profile while the model
is as it was, and drops a result that came back for a model that changed).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelection,
    QItemSelectionModel,
    QModelIndex,
    QPersistentModelIndex,
    Qt,
    Signal,
)
from PySide6.QtGui import QAction, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSpinBox,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.gui import workers
from graphlens.gui.graph_panel import GraphPanel
from graphlens.gui.overlay_legend import colour_by_overlay
from graphlens.overlays import Overlay, attach, load_overlay, save_overlay
from graphlens.overlays.flops import METRICS
from graphlens.workspace import Workspace

CHOICES = [
    ("none", "None (colour by kind)"),
    ("flops", "Compute (FLOPs)"),
    ("params", "Parameters"),
    ("bytes", "Output bytes"),
    ("latency", "Latency (runs the profiler)"),
]
"""The metric picker's entries; one more, "other", shows an imported or script-set overlay."""

ASYNC_METRIC_NODES = 20_000
"""Models with more nodes than this get their FLOPs, parameters or bytes computed in a worker thread."""

FILE_FILTER = "Node values (*.csv *.json);;CSV: node,value (*.csv);;Model Explorer node data (*.json);;All files (*)"

_NO_PARENT = QModelIndex()
"""The invalid index Qt passes for a table's root (the default ``parent`` of the row and column counts)."""


class OverlayTable(QAbstractTableModel):
    """Node, op, value rows of an overlay; sorts numerically on values."""

    HEADERS = ("Node", "Op", "Value")

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[tuple[str, str, float, str, QColor]] = []
        self.row_of: dict[str, int] = {}

    def set_rows(self, rows: list[tuple[str, str, float, str, QColor]]) -> None:
        self.beginResetModel()
        self.rows = rows
        self._index()
        self.endResetModel()

    def _index(self) -> None:
        self.row_of = {row[0]: k for k, row in enumerate(self.rows)}

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = _NO_PARENT) -> int:
        return 0 if parent.isValid() else len(self.rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = _NO_PARENT) -> int:
        return 0 if parent.isValid() else 3

    def headerData(self, section: int, orientation: Qt.Orientation,
                   role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return self.HEADERS[section]
        return None

    def data(self, index: QModelIndex | QPersistentModelIndex, role: int = Qt.ItemDataRole.DisplayRole) -> Any:
        node, op, value, label, colour = self.rows[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (node, op, label)[column]
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{node}: {value!r}"
        if role == Qt.ItemDataRole.DecorationRole and column == 2:
            return colour
        if role == Qt.ItemDataRole.TextAlignmentRole and column == 2:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def sort(self, column: int, order: Qt.SortOrder = Qt.SortOrder.AscendingOrder) -> None:
        self.layoutAboutToBeChanged.emit()
        key = (lambda r: r[0].lower()) if column == 0 else (lambda r: (r[1], r[2])) if column == 1 else (lambda r: r[2])
        self.rows.sort(key=key, reverse=order == Qt.SortOrder.DescendingOrder)
        self._index()
        self.layoutChanged.emit()


class OverlayPanel(QWidget):
    """The dock: metric picker, Profile / Import / Export, what the numbers are, and the table."""

    profile_finished = Signal(object)  # the ProfileResult, or None when it failed or was cancelled
    filled = Signal()  # work started or a result arrived: the window shows this panel

    def __init__(self, workspace: Workspace, graph_panel: GraphPanel, show_error: Callable[[str], None],
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.workspace, self.graph_panel, self.show_error = workspace, graph_panel, show_error
        self.canvas = graph_panel.canvas
        self.profile_jobs = workers.WorkerSlot()
        self.metric_jobs = workers.WorkerSlot()
        self._origin: dict[int, str] = {}  # id(overlay) -> the picker entry of a flipped copy
        self._syncing = False

        self.picker = QComboBox()
        for key, text in CHOICES:
            self.picker.addItem(text, key)
        self.picker.setToolTip("Colour every node by this number; a collapsed group shows its worst member")
        self.picker.activated.connect(lambda k: self.show_metric(self.picker.itemData(k)))
        self.lower_worse = QCheckBox("lower is worse")
        self.lower_worse.setToolTip("For numbers where less is bad (accuracy, SQNR): "
                                    "the lowest values get the darkest colour")
        self.lower_worse.toggled.connect(self.set_lower_is_worse)
        self.runs = QSpinBox()
        self.runs.setRange(1, 1000)
        self.runs.setValue(10)
        self.runs.setPrefix("runs: ")
        self.runs.setMinimumWidth(self.runs.sizeHint().width() + 12)
        self.runs.setToolTip("Timed runs after one warm-up; each node shows its mean time per run")
        self.profile_button = _button("Profile", lambda: self.profile(),
                                      "Time every node with onnxruntime's profiler (CPU, graph optimizations off)")
        self.import_button = _button("Import…", self._ask_import,
                                     "Read node,value rows (.csv) or Model Explorer node data (.json)")
        self.export_button = _button("Export…", self._ask_export,
                                     "Write the values shown as .csv or Model Explorer node data (.json)")
        self.progress = QProgressBar()
        self.cancel_button = _button("Cancel", self.cancel_profile, "Stop profiling; the overlay shown stays")
        self.info = QLabel()
        self.info.setWordWrap(True)
        self.info.setTextFormat(Qt.TextFormat.PlainText)
        self.info.setStyleSheet("color: #455a64")
        self.table_model = OverlayTable()
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setSortingEnabled(True)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.setWordWrap(False)
        self.table.setTextElideMode(Qt.TextElideMode.ElideLeft)  # a name's last parts tell nodes apart
        self.table.verticalHeader().setDefaultSectionSize(20)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(1, QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(2, QHeaderView.ResizeMode.ResizeToContents)
        self.table.selectionModel().selectionChanged.connect(self._on_rows_selected)

        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        for row in ((QLabel("Colour by"), self.picker, self.lower_worse),
                    (self.runs, self.profile_button, self.import_button, self.export_button),
                    (self.progress, self.cancel_button)):
            line = QHBoxLayout()
            for widget in row:
                line.addWidget(widget, 1 if widget in (self.picker, self.progress) else 0)
            layout.addLayout(line)
        layout.addWidget(self.info)
        layout.addWidget(self.table, 1)
        self._set_busy(None)

        workspace.overlay.events.shown.connect(self._on_overlay)
        workspace.events.opened.connect(self._on_opened)
        self.canvas.scene_changed.connect(self._apply_colours)
        self.canvas.selection_changed.connect(self._on_canvas_selection)
        self._on_overlay(workspace.overlay.shown)

    # ================================================================ scripting API
    @property
    def overlay(self) -> Overlay | None:
        return self.workspace.overlay.shown

    def show_metric(self, key: str) -> Overlay | None:
        """Colour by ``none``, ``flops``, ``params``, ``bytes``, ``latency`` (profiles unless a profile of
        this model is at hand) or ``other`` (the last imported or script-set overlay)."""
        model = self.workspace.model
        if model is None:
            return None
        if key == "none":
            return self.workspace.overlay.show(None)
        if key == "latency":
            kept = self.workspace.overlay.profile  # the workspace drops it once the model changes
            if kept is not None:
                return self.workspace.overlay.show(kept.overlay)
            self.profile()
            return None
        if key == "other":
            other = self.picker.itemData(self.picker.count() - 1, Qt.ItemDataRole.UserRole + 1)
            return self.workspace.overlay.show(other) if isinstance(other, Overlay) else None
        large = model.node_count() > ASYNC_METRIC_NODES
        try:
            job = self.workspace.overlay.metric_job(key, scratch=large)
            if not large:
                return job.run()
        except GraphLensError as exc:
            self.show_error(str(exc))
            self._sync_picker(self.overlay)
            return None

        def failed(message: str | None) -> None:
            self._sync_picker(self.overlay)
            if message:
                self.show_error(message.splitlines()[0])

        self._set_busy(f"Computing {dict(CHOICES)[key]} for {model.node_count():,} nodes…")
        self.metric_jobs.start_job(job, lambda overlay, kept: self._sync_picker(self.overlay), failed,
                                   ended=lambda: self._set_busy(None))
        return None

    def set_lower_is_worse(self, lower: bool) -> None:
        """Flip which end of the scale is dark (an imported file cannot say whether higher is worse)."""
        overlay = self.overlay
        if overlay is None or overlay.higher_is_worse == (not lower):
            return
        flipped = replace(overlay, higher_is_worse=not lower)
        self._origin[id(flipped)] = self._key_of(overlay)
        self.workspace.overlay.show(flipped)

    def profile(self, runs: int | None = None, *, background: bool = True) -> Any:
        """Time every node with onnxruntime's profiler (on the Inputs… dims or .npz previews use);
        in a worker with progress and Cancel, or here and now with ``background=False``."""
        model = self.workspace.model
        if model is None:
            return None
        runs = runs or self.runs.value()

        def failed(message: str | None) -> None:
            self._sync_picker(self.overlay)
            if message:
                self.show_error(message.splitlines()[0])
            self.profile_finished.emit(None)

        try:
            job = self.workspace.overlay.profile_job(runs, scratch=background)  # a worker reads its own copy
            if not background:
                result = job.run()
                self.profile_finished.emit(result)
                return result
        except GraphLensError as exc:
            failed(str(exc))
            return None
        self._set_busy(f"Profiling {model.name}: {runs} run{'s' if runs != 1 else ''} after a warm-up…")
        return self.profile_jobs.start_job(job, lambda result, kept: self.profile_finished.emit(result), failed,
                                           progress=lambda f: self.progress.setValue(int(f * 100)),
                                           ended=lambda: self._set_busy(None))

    def cancel_profile(self) -> None:
        """Stop a profile (or a large model's metric); the overlay shown stays."""
        self.profile_jobs.cancel()
        self.metric_jobs.cancel()
        self._set_busy(None)
        self._sync_picker(self.overlay)

    def import_file(self, path: str | Path) -> bool:
        """Colour by a CSV or Model Explorer file's values; a bad file is one line in a dialog and the
        overlay shown stays."""
        model = self.workspace.model
        if model is None:
            return False
        try:
            overlay = attach(load_overlay(path), model)
        except GraphLensError as exc:
            self.show_error(" ".join(str(exc).splitlines()))
            return False
        self.workspace.overlay.show(overlay)
        return True

    def export_file(self, path: str | Path) -> Path | None:
        """Write the overlay shown: ``.json`` as Model Explorer node data, anything else as CSV."""
        overlay = self.overlay
        if overlay is None:
            self.show_error("there is no overlay to export; pick a metric or import one first")
            return None
        try:
            return save_overlay(overlay, path)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None

    def select_node(self, name: str) -> None:
        """What a click on the node's row does: select it on the canvas (its group when collapsed) and centre it."""
        model = self.workspace.model
        if model is None:
            return
        shown = self.graph_panel.graph
        if shown is None or name not in shown.by_name:
            home = next((g for g in model.graphs() if name in g.by_name), None)
            if home is None:
                return
            self.graph_panel.show_path(home)
        self.graph_panel.select_nodes([name], center=True)

    def menu_actions(self) -> list[QAction | None]:
        """View › Overlay: one entry per metric, then Profile, Import and Export (None: a separator)."""
        actions: list[QAction | None] = []
        for key, text in CHOICES:
            action = QAction(text.replace(" (runs the profiler)", " (Profile)"), self)
            action.triggered.connect(lambda _=False, k=key: self.show_metric(k))
            actions.append(action)
        actions.append(None)
        for text, slot in (("&Profile Latency", lambda: self.profile()), ("&Import Node Values…", self._ask_import),
                           ("&Export Node Values…", self._ask_export)):
            action = QAction(text, self)
            action.triggered.connect(slot)
            actions.append(action)
        return actions

    # ================================================================ reactions
    def _on_opened(self, _opened: object) -> None:
        self.profile_jobs.cancel()
        self.metric_jobs.cancel()
        self._set_busy(None)
        self._on_overlay(None)

    def _on_overlay(self, overlay: Overlay | None) -> None:
        if overlay is not None:
            self.filled.emit()
        self._sync_picker(overlay)
        self._fill_table(overlay)
        self._apply_colours()
        self.export_button.setEnabled(overlay is not None)
        self.lower_worse.setEnabled(overlay is not None)
        self.lower_worse.blockSignals(True)
        self.lower_worse.setChecked(overlay is not None and not overlay.higher_is_worse)
        self.lower_worse.blockSignals(False)

    def _key_of(self, overlay: Overlay | None) -> str:
        """The picker entry showing ``overlay``: a metric's or the latency's, else "other"."""
        if overlay is None:
            return "none"
        if id(overlay) in self._origin:
            return self._origin[id(overlay)]
        metric = next((key for key, (name, _unit) in METRICS.items() if overlay.source == f"{name} from shapes"), None)
        if metric is not None:
            return metric
        profile = self.workspace.overlay.profile
        return "latency" if profile is not None and overlay is profile.overlay else "other"

    def _sync_picker(self, overlay: Overlay | None) -> None:
        key = self._key_of(overlay)
        if key == "other" and overlay is not None:
            if self.picker.count() == len(CHOICES):
                self.picker.addItem("", "other")
            last = self.picker.count() - 1
            self.picker.setItemText(last, f"{overlay.title} · {Path(overlay.source).name or 'set by a script'}")
            self.picker.setItemData(last, overlay, Qt.ItemDataRole.UserRole + 1)
        self.picker.setCurrentIndex(self.picker.findData(key))

    def _fill_table(self, overlay: Overlay | None) -> None:
        if overlay is None:
            self.table_model.set_rows([])
            model = self.workspace.model
            self.info.setText("Pick a number to colour the nodes by, press Profile to time them, or import "
                              "node,value rows." if model is not None else "")
            return
        ops = {n.name: n.op_type for g in self.workspace.model.graphs()
               for n in g.nodes} if self.workspace.model else {}
        ranked = overlay.ranked()
        colours = overlay.colours(np.array([v for _, v in ranked])) if ranked else np.zeros((0, 3), np.uint8)
        self.table_model.set_rows([(node, ops.get(node, ""), value, overlay.label(value), QColor(*map(int, rgb)))
                                   for (node, value), rgb in zip(ranked, colours)])
        self.table.horizontalHeader().setSortIndicator(2, Qt.SortOrder.DescendingOrder if overlay.higher_is_worse
                                                       else Qt.SortOrder.AscendingOrder)
        lo, hi = overlay.range()
        lines = [f"{overlay.title}: {len(ranked)} nodes, {overlay.label(lo)} to {overlay.label(hi)}"
                 + (" (log scale)" if overlay.log_scale else ""),
                 *overlay.notes,
                 "Darker is worse (higher)" if overlay.higher_is_worse else "Darker is worse (lower)"]
        self.info.setText("\n".join(lines))

    def _apply_colours(self) -> None:
        renderer = self.canvas.renderer
        overlay = self.overlay
        if renderer is None:
            return
        if overlay is None:
            renderer.set_overlay(None)
            self.canvas.legend_painter = None
            self.canvas.update()
            return
        colour_by_overlay(self.canvas, overlay)
        self.canvas.update()

    def _on_canvas_selection(self, indices: list[int]) -> None:
        view = self.graph_panel.view
        if self._syncing or view is None:
            return
        names = [n for i in indices if 0 <= i < len(view.items) for n in view.items[i].members]
        rows = [r for r in (self.table_model.row_of.get(n) for n in names) if r is not None]
        self._syncing = True
        try:
            selection = QItemSelection()
            for row in rows:
                selection.select(self.table_model.index(row, 0), self.table_model.index(row, 2))
            self.table.selectionModel().select(selection, QItemSelectionModel.SelectionFlag.ClearAndSelect)
            if rows:
                self.table.scrollTo(self.table_model.index(min(rows), 0))
        finally:
            self._syncing = False

    def _on_rows_selected(self, *_args: object) -> None:
        if self._syncing:
            return
        rows = sorted({index.row() for index in self.table.selectionModel().selectedRows()})
        if len(rows) != 1:
            return
        self._syncing = True
        try:
            self.select_node(self.table_model.rows[rows[0]][0])
        finally:
            self._syncing = False

    def _set_busy(self, text: str | None) -> None:
        for widget in (self.progress, self.cancel_button):
            widget.setVisible(text is not None)
        self.progress.setValue(0)
        self.profile_button.setEnabled(text is None)
        if text is not None:
            self.info.setText(text)
            self.filled.emit()

    # ================================================================ dialogs
    def _ask_import(self) -> None:
        if self.workspace.model is None:
            return
        path, _ = QFileDialog.getOpenFileName(self, "Import node values", "", FILE_FILTER)
        if path:
            self.import_file(path)

    def _ask_export(self) -> None:
        overlay, model = self.overlay, self.workspace.model
        if overlay is None or model is None:
            return
        stem = Path(model.path).stem if model.path else "model"
        default = f"{stem}-{overlay.name.lower().replace(' ', '-')}.csv"
        path, chosen = QFileDialog.getSaveFileName(self, "Export node values", default, FILE_FILTER)
        if path:
            if not Path(path).suffix:
                path += ".json" if "Model Explorer" in chosen else ".csv"
            self.export_file(path)


def _button(text: str, slot: Callable[[], Any], tip: str) -> QPushButton:
    button = QPushButton(text)
    button.setToolTip(tip)
    button.clicked.connect(slot)
    return button
