"""Every result the workspace keeps, declared once: its type, its event, and when it goes.

The workspace derives from :data:`RESULTS` what opening a model resets and what an edit drops;
each reset or drop emits the result's event with its empty value, so a view never shows a result
the workspace no longer has. Types are named by import path and resolved only when asked for
(:meth:`ResultSlot.payload_type`), so importing the workspace does not import the quantizer.
"""

from __future__ import annotations

import builtins
import importlib
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, kw_only=True)
class ResultSlot:
    """One result of the workspace: the attribute holding it and how it lives."""

    attribute: str
    """The :class:`~graphlens.workspace.Workspace` attribute that holds it."""
    type: str
    """``module:Name`` of its type."""
    event: str
    """The :class:`~graphlens.workspace.events.WorkspaceEvents` signal announcing each new value."""
    reset_on_open: bool = True
    """Opening a model sets it back to its empty value."""
    dropped_by_edit: bool = True
    """An edit (apply, undo, redo, fold, quantize) drops it: it described the model as it was."""
    empty: str | None = None
    """``module:Name`` of a type whose no-argument instance is its empty value; None: the value None."""

    def payload_type(self) -> builtins.type:  # the field ``type`` shadows the builtin here
        return _resolve(self.type)

    def empty_value(self) -> Any:
        return None if self.empty is None else _resolve(self.empty)()

    def is_empty(self, value: Any) -> bool:
        return value is None if self.empty is None else value == self.empty_value()


_W = "graphlens.workspace"
RESULTS: tuple[ResultSlot, ...] = (
    ResultSlot(attribute="current_lesson", type=f"{_W}.results:LessonResult", event="lesson_changed"),
    ResultSlot(attribute="preview_inputs", type=f"{_W}.results:PreviewInputs", event="preview_inputs_changed",
               dropped_by_edit=False, empty=f"{_W}.results:PreviewInputs"),
    ResultSlot(attribute="quantization", type="graphlens.quantize.quantize:QuantizeResult", event="quantized",
               dropped_by_edit=False),  # what was done, kept as the record of it
    ResultSlot(attribute="quantize_preview", type="graphlens.rewrites.lossy:LossyPreview",
               event="quantize_preview_changed"),
    ResultSlot(attribute="binarization", type="graphlens.binarize.binarize:BinarizeResult", event="binarized",
               dropped_by_edit=False),
    ResultSlot(attribute="binarize_preview", type="graphlens.rewrites.lossy:LossyPreview",
               event="binarize_preview_changed"),
    ResultSlot(attribute="quantize_lesson", type=f"{_W}.lessons:QuantizeLessonResult", event="quantize_lesson_changed",
               dropped_by_edit=False),  # it explains a preview, which it holds, not the model as it is
    ResultSlot(attribute="binarize_lesson", type=f"{_W}.lessons:BinarizeLessonResult", event="binarize_lesson_changed",
               dropped_by_edit=False),
)
SLOTS: dict[str, ResultSlot] = {slot.attribute: slot for slot in RESULTS}


def _resolve(path: str) -> type:
    module, _, name = path.partition(":")
    found = getattr(importlib.import_module(module), name)
    assert isinstance(found, type), path
    return found
