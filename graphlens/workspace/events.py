"""The workspace's events, as psygnal signals (napari's signal library), each with its payload type.

psygnal rather than plain callbacks: views connect and disconnect per signal, a view that is
garbage collected is dropped from the connections by itself (weak references to bound methods),
``events.all`` lets a log or test see every event, and nothing of Qt is needed: the window's
panels connect to these signals exactly as a script or a notebook does.

Each signal declares what it carries. The results' types are in
:data:`graphlens.workspace.slots.RESULTS` (where a type lives in a package the workspace imports
only when used, the signal names it as a string); :func:`payload_types` gives every event's type,
resolved, and the tests check every emitted value against it.
"""

from __future__ import annotations

from inspect import Parameter, Signature

from psygnal import Signal, SignalGroup

from graphlens.workspace.jobs import Dropped
from graphlens.workspace.results import (
    LessonResult,
    Opened,
    PreviewInputs,
    Saved,
    Step,
)
from graphlens.workspace.slots import RESULTS


def _carrying(annotation: object) -> Signature:
    """The one-argument signature psygnal builds for ``Signal(SomeClass)``, here for any annotation: a union,
    or a type named as a string (psygnal accepts those, though its signature names only classes)."""
    return Signature([Parameter("p0", Parameter.POSITIONAL_ONLY, annotation=annotation)])


class WorkspaceEvents(SignalGroup):
    """What changed in a :class:`~graphlens.workspace.Workspace`; every signal carries its new value."""

    opened = Signal(Opened)
    """A model was opened: every view resets. The results it reset were announced just before, each
    with its own event and empty value."""
    edited = Signal(Step)
    """The model changed: a rewrite applied, undone or redone. Results computed for the model as it
    was (those :data:`~graphlens.workspace.slots.RESULTS` marks ``dropped_by_edit``) are dropped
    first, each with its own event."""
    saved = Signal(Saved)
    """The model was written; the modified marker follows."""
    job_dropped = Signal(Dropped)
    """A job's result came back for a model that changed meanwhile, and was not kept."""
    lesson_changed = Signal(_carrying(LessonResult | None))
    """The BN-folding lesson shown, or None when dropped."""
    preview_inputs_changed = Signal(PreviewInputs)
    """The inputs previews, comparisons and profiles run on (a new model starts with none fixed)."""
    quantized = Signal(_carrying("QuantizeResult | None"))
    """The model was quantized (its ``edited`` event comes first), or None (a new model)."""
    quantize_preview_changed = Signal(_carrying("LossyPreview | None"))
    """A quantization computed on a scratch copy, not applied, or None when dropped."""
    binarized = Signal(_carrying("BinarizeResult | None"))
    """The model's weights were binarized (its ``edited`` event comes first), or None (a new model)."""
    binarize_preview_changed = Signal(_carrying("LossyPreview | None"))
    """A binarization computed on a scratch copy, not applied, or None when dropped."""
    quantize_lesson_changed = Signal(_carrying("QuantizeLessonResult | None"))
    """Fake quantization of one tensor of a quantize preview, worked out; None when a new model drops it."""
    binarize_lesson_changed = Signal(_carrying("BinarizeLessonResult | None"))
    """Binarization of one kernel of a binarize preview, worked out; None when a new model drops it."""


FIXED_PAYLOADS: dict[str, type] = {"opened": Opened, "edited": Step, "saved": Saved, "job_dropped": Dropped}
"""The events that are not a result's: what they carry (never None)."""


def payload_types() -> dict[str, tuple[type, bool]]:
    """Every event's payload type, and whether it may be None (a result dropped or reset)."""
    types = {name: (kind, False) for name, kind in FIXED_PAYLOADS.items()}
    for slot in RESULTS:
        types[slot.event] = (slot.payload_type(), slot.empty is None)
    return types
