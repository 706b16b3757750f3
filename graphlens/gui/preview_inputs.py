"""The rewrite preview's Inputs… dialog: sizes for the model's dynamic dims, or an .npz, as the
command line's ``--dim`` and ``--inputs`` give them; what the previews run on lives in the workspace."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLabel,
    QMessageBox,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from graphlens.core.errors import GraphLensError
from graphlens.gui.window_api import WindowBase
from graphlens.workspace.results import PreviewInputs

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.workspace import Workspace
    from graphlens.workspace.results import RewritePreview


@dataclass(frozen=True)
class DimRow:
    """One dynamic dim in the Inputs dialog: its name, the size to show, and whether the user set it."""

    label: str
    value: int
    given: bool
    where: str = ""
    """Where the model uses it (``x[2]``), shown after a name that says nothing by itself."""
    computed: bool = False
    """An expression of other dims (``s16 + s62``): computed from them unless the user sets it."""


class PreviewInputsDialog(QDialog):
    """Set sizes for the model's dynamic dims, or load the preview's inputs from an .npz, as --dim / --inputs do.

    ``load`` reads an .npz for the model and raises :class:`GraphLensError` with one line when it
    does not fit; the error is shown and the previous choice stays.
    """

    def __init__(self, rows: list[DimRow], settings: PreviewInputs,
                 load: Callable[[str], dict[str, np.ndarray]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Preview inputs")
        self._load = load
        self.file, self.arrays = settings.file, settings.arrays
        self.error: str | None = None
        self.spins: dict[str, QSpinBox] = {}
        self.notes: dict[str, QLabel] = {}
        self._where = {row.label: row.where for row in rows if row.where and row.where != row.label}
        self._computed = {row.label for row in rows if row.computed}
        self.given = {row.label for row in rows if row.given}
        intro = QLabel("Sizes of the model's dynamic dims. Sizes you do not set are chosen until onnxruntime runs."
                       if rows else "The model's inputs have no dynamic dims.")
        intro.setWordWrap(True)
        form = QFormLayout()
        for row in rows:
            spin = QSpinBox()
            spin.setRange(1, 1_000_000)
            spin.setValue(row.value)
            spin.valueChanged.connect(lambda _value, label=row.label: self._set_given(label, True))
            note = QLabel()
            note.setTextFormat(Qt.TextFormat.PlainText)  # dim and input names come from the model
            self.spins[row.label], self.notes[row.label] = spin, note
            field_row = QHBoxLayout()
            field_row.addWidget(spin)
            field_row.addWidget(note, 1)
            name = QLabel(row.label)
            name.setTextFormat(Qt.TextFormat.PlainText)
            form.addRow(name, field_row)
            self._set_given(row.label, row.given)
        self.auto_button = QPushButton("Choose all automatically")
        self.auto_button.clicked.connect(self._choose_all_automatically)
        self.auto_button.setVisible(bool(rows))
        self.source = QLabel()
        self.source.setTextFormat(Qt.TextFormat.PlainText)
        self.source.setWordWrap(True)
        self.load_button = QPushButton("Load .npz…")
        self.load_button.clicked.connect(self._ask_file)
        self.random_button = QPushButton("Use random inputs")
        self.random_button.clicked.connect(lambda: self._use_file(None, None))
        source_row = QHBoxLayout()
        source_row.addWidget(self.source, 1)
        source_row.addWidget(self.load_button)
        source_row.addWidget(self.random_button)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addLayout(form)
        layout.addWidget(self.auto_button, 0, Qt.AlignmentFlag.AlignLeft)
        layout.addLayout(source_row)
        layout.addWidget(buttons)
        self._use_file(self.file, self.arrays)

    def _choose_all_automatically(self) -> None:
        for label in self.spins:
            self._set_given(label, False)

    def _set_given(self, label: str, given: bool) -> None:
        (self.given.add if given else self.given.discard)(label)
        where = f"{self._where[label]}, " if label in self._where else ""
        automatic = "computed from its parts" if label in self._computed else "chosen automatically"
        self.notes[label].setText(where + ("set by you" if given else automatic))
        self.notes[label].setStyleSheet("" if given else "color:#607d8b")

    def _use_file(self, file: str | None, arrays: dict[str, np.ndarray] | None) -> None:
        self.file, self.arrays = file, arrays
        for spin in self.spins.values():
            spin.setEnabled(file is None)
        self.auto_button.setEnabled(file is None)
        self.random_button.setEnabled(file is not None)
        if file is None:
            self.source.setText("Random inputs (seed 0).")
        else:
            shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in (arrays or {}).items())
            self.source.setText(f"From {file}: {shapes}.")

    def _ask_file(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load preview inputs", "", "NumPy arrays (*.npz);;All files (*)")
        if path:
            self.load_file(path)

    def load_file(self, path: str) -> bool:
        """Read ``path``; on failure say why in one line and keep what was chosen before."""
        try:
            arrays = self._load(path)
        except GraphLensError as exc:
            self.error = str(exc)
            box = QMessageBox(QMessageBox.Icon.Warning, "GraphLens", self.error, QMessageBox.StandardButton.Ok, self)
            box.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
            box.open()
            return False
        self.error = None
        self._use_file(path, arrays)
        return True

    def settings(self) -> PreviewInputs:
        """The choice as it stands: the dims the user set, and the file if one is loaded."""
        dims = {label: spin.value() for label, spin in self.spins.items() if label in self.given}
        return PreviewInputs(dims, self.file, self.arrays)


def dim_rows(workspace: Workspace) -> list[DimRow]:
    """Every dynamic dim of the open model, prefilled with the size last used (the user's, or the one chosen)."""
    from graphlens.numerics.dims import LADDER, default_sizes, dynamic_dims, remembered_dims

    model = workspace.require_model()
    settings = workspace.preview_inputs
    shown = workspace.rewrite.previewed
    last = shown.numeric.inputs if shown is not None else None
    used = dict(last.dims.values) if last is not None and last.dims is not None and last.file is None else {}
    used = {**(remembered_dims(model, settings.dims) or {}), **used, **settings.dims}
    found = dynamic_dims(model)
    sizes = default_sizes(found, used, LADDER[0])
    rows = [DimRow(d.label, sizes[d.label], d.label in settings.dims, ", ".join(d.where),
                   computed=d.expression is not None) for d in found]
    return rows


def open_inputs_dialog(workspace: Workspace, parent: QWidget,
                       accepted: Callable[[PreviewInputs], None]) -> PreviewInputsDialog:
    """The dialog for the open model, non-modal; ``accepted`` gets the user's choice."""
    from graphlens.numerics import load_inputs

    model = workspace.require_model()
    dialog = PreviewInputsDialog(dim_rows(workspace), workspace.preview_inputs,
                                 lambda path: load_inputs(Path(path), model), parent)
    dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
    dialog.accepted.connect(lambda: accepted(dialog.settings()))
    dialog.open()
    return dialog


class PreviewInputsWork(WindowBase):
    """The window's side of the inputs previews run on: set from scripts or the dialog, then the preview on screen
    computed again. Mixed into :class:`~graphlens.gui.workflows.Workflows`."""

    if TYPE_CHECKING:
        inputs_dialog: PreviewInputsDialog

        @property
        def pending(self) -> RewritePreview | None: ...
        def _preview_async(self, rule: str, index: int) -> None: ...

    def preview_settings(self) -> PreviewInputs:
        """The dims and .npz previews run on; a new model starts with all dims chosen automatically."""
        return self.workspace.preview_inputs

    def set_preview_inputs(self, dims: dict[str, int] | None = None, npz: str | Path | None = None) -> bool:
        """Fix dims for previews (``{}`` chooses all again) and/or read their inputs from ``npz`` (``""``: random).

        Re-runs the preview on screen. When they do not fit the model, says why and keeps the previous ones.
        """
        if self.workspace.model is None:
            return False
        try:
            self.workspace.set_preview_inputs(dims, npz)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return False
        self._rerun_preview(background=False)
        return True

    def edit_preview_inputs(self) -> PreviewInputsDialog | None:
        """The Inputs… dialog: every dynamic dim prefilled with the size last used, and Load .npz…."""
        model = self.workspace.model
        if model is None:
            return None
        self.inputs_dialog = open_inputs_dialog(self.workspace, self,
                                                lambda settings: self._accept_preview_inputs(model, settings))
        return self.inputs_dialog

    def _accept_preview_inputs(self, model: Model, settings: PreviewInputs) -> None:
        if model is not self.workspace.model:
            return
        try:
            self.workspace.set_preview_inputs(settings.dims, settings.file or "")
        except GraphLensError as exc:
            self.show_error(str(exc))
            return
        self._rerun_preview(background=True)

    def _rerun_preview(self, background: bool) -> None:
        """Preview the same rewrite again with the new inputs, when one is on screen."""
        shown = self.pending
        if shown is None:
            return
        if background:
            self._preview_async(shown.rule, shown.match_index)
            return
        try:
            self.workspace.rewrite.preview(shown.rule, shown.match_index)
        except GraphLensError as exc:
            self.show_error(str(exc))

