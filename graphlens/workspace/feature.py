"""One model per feature, composed by the workspace as napari composes ``Dims``, ``LayerList`` and ``Camera`` into its
``ViewerModel``.

A feature is a dataclass whose fields are its results (``ws.comparison.result``). Each field is its own signal,
typed with the field's type (psygnal's :class:`~psygnal.SignalGroupDescriptor`): ``ws.comparison.events.result``
is emitted with the new value whenever another is set, by identity (a result is replaced, never edited in place).
A feature also holds the jobs that compute its results, through the workspace's one job protocol
(:mod:`graphlens.workspace.jobs`), and declares which of its fields an edit of the model drops and which opening
another model resets; the workspace clears those, each with its own event, before it announces the edit or the
new model.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, ClassVar

from psygnal import SignalGroupDescriptor

if TYPE_CHECKING:
    from graphlens.workspace.workspace import Workspace


def feature_events(*fields: str) -> SignalGroupDescriptor:
    """A feature's ``events``: one signal per field, emitted when the field is set to another object."""
    return SignalGroupDescriptor(equality_operators=dict.fromkeys(fields, operator.is_))


class Feature:
    """The base of the workspace's features (see the module docstring): subclasses are dataclasses whose first
    parameter is ``workspace: InitVar[Workspace]`` and whose fields are results."""

    name: ClassVar[str] = ""
    """The workspace's attribute holding the feature (``ws.<name>``)."""
    dropped_by_edit: ClassVar[tuple[str, ...]] = ()
    """The fields an edit of the model drops: they described the model as it was."""
    reset_on_open: ClassVar[tuple[str, ...]] = ()
    """The fields opening another model sets back to their defaults."""

    def __post_init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    def clear(self, *, opening: bool) -> None:
        """Set the fields an edit drops (or, ``opening``, those a new model resets) back to their defaults."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        for name in self.reset_on_open if opening else self.dropped_by_edit:
            setattr(self, name, defaults[name])
