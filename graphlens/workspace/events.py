"""The workspace's own events, as psygnal signals (napari's signal library), each with its payload type.

psygnal rather than plain callbacks: views connect and disconnect per signal, a view that is
garbage collected is dropped from the connections by itself (weak references to bound methods),
``events.all`` lets a log or test see every event, and nothing of Qt is needed: the window's
panels connect to these signals exactly as a script or a notebook does.

These are the model's life (opened, edited, saved), a job's result dropped, and the preview inputs. Each
feature's results have their own events, on the feature (:mod:`graphlens.workspace.feature`).
"""

from __future__ import annotations

from psygnal import Signal, SignalGroup

from graphlens.workspace.jobs import Dropped
from graphlens.workspace.results import Opened, PreviewInputs, Saved, Step


class WorkspaceEvents(SignalGroup):
    """What changed in a :class:`~graphlens.workspace.Workspace`; every signal carries its new value."""

    opened = Signal(Opened)
    """A model was opened: every view resets. The results it reset were announced just before, each
    with its own event and empty value."""
    edited = Signal(Step)
    """The model changed: a rewrite applied, undone or redone. Results computed for the model as it
    was (all but each feature's ``kept_by_edit``) are dropped first, each with its own event."""
    saved = Signal(Saved)
    """The model was written; the modified marker follows."""
    job_dropped = Signal(Dropped)
    """A job's result came back for a model that changed meanwhile, and was not kept."""
    preview_inputs_changed = Signal(PreviewInputs)
    """The inputs previews, comparisons and profiles run on (a new model starts with none fixed)."""


PAYLOADS: dict[str, type] = {"opened": Opened, "edited": Step, "saved": Saved, "job_dropped": Dropped,
                             "preview_inputs_changed": PreviewInputs}
"""What each of the workspace's own events carries (never None)."""
