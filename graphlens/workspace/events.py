"""The workspace's events, as psygnal signals (napari's signal library).

psygnal rather than plain callbacks: views connect and disconnect per signal, a view that is
garbage collected is dropped from the connections by itself (weak references to bound methods),
``events.all`` lets a log or test see every event, and nothing of Qt is needed: the window's
panels connect to these signals exactly as a script or a notebook does.
"""

from __future__ import annotations

from psygnal import Signal, SignalGroup


class WorkspaceEvents(SignalGroup):
    """What changed in a :class:`~graphlens.workspace.Workspace`; every signal carries its new value."""

    opened = Signal(object)
    """A model was opened (an ``Opened``): every view resets."""
    edited = Signal(object)
    """The model changed: a rewrite applied, undone or redone (a ``Step``). Results computed for the
    model as it was (matches, explanation, preview, lesson) are dropped, each with its own event."""
    saved = Signal(object)
    """The model was written (a ``Saved``); the modified marker follows."""
    matches_changed = Signal(object)
    """A ``MatchesResult``, or None when the matches were dropped."""
    explained = Signal(object)
    """An ``ExplainResult``, or None when dropped."""
    preview_changed = Signal(object)
    """A ``PreviewResult``, or None when dropped (applied, stale, or a new model)."""
    lesson_changed = Signal(object)
    """A ``LessonResult``, or None when dropped."""
    preview_inputs_changed = Signal(object)
    """The ``PreviewInputs`` previews run on."""
    quantized = Signal(object)
    """A ``QuantizeResult``: the model was quantized (its ``edited`` event comes first)."""
    quantize_preview_changed = Signal(object)
    """A ``QuantizePreview`` (computed on a scratch copy, not applied), or None when dropped (applied,
    stale, or a new model)."""
    binarized = Signal(object)
    """A ``BinarizeResult``: the model's weights were binarized (its ``edited`` event comes first)."""
    overlay_changed = Signal(object)
    """The per-node ``Overlay`` the canvas colours by, or None when there is none (a new model drops it)."""
    binarize_preview_changed = Signal(object)
    """A ``BinarizePreview`` (computed on a scratch copy, not applied), or None when dropped (applied,
    stale, or a new model)."""
    compared = Signal(object)
    """A ``Comparison`` of the model (A) with another (B), or None when dropped (a new model, an edit)."""
