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
from typing import TYPE_CHECKING, Any, ClassVar

from psygnal import SignalGroupDescriptor

from graphlens.core.errors import GraphLensError

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
        fields = {f.name: f for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        for name in self.reset_on_open if opening else self.dropped_by_edit:
            declared = fields[name]
            factory = declared.default_factory
            setattr(self, name, factory() if factory is not dataclasses.MISSING else declared.default)


class LossyFeature(Feature):
    """What quantization and binarization share: a preview computed on a scratch copy, kept (``previewed``) only
    while the model is at the revision it was computed for, then applied as one undo step, or refused."""

    what: ClassVar[str] = ""
    """The rewrite in words, for refusals: ``"quantization"``."""
    previewed: Any
    events: ClassVar[SignalGroupDescriptor] = feature_events("applied", "previewed", "lesson")
    dropped_by_edit: ClassVar[tuple[str, ...]] = ("previewed",)
    """The rewrite applied and the lesson (which holds the preview it explains) are the record of what was done."""
    reset_on_open: ClassVar[tuple[str, ...]] = ("applied", "previewed", "lesson")

    def accept_preview(self, preview: Any) -> bool:
        """Keep ``preview`` as :attr:`previewed` if the model is still the one it was computed for (None drops the
        current one); False when the model moved on."""
        model = self._workspace.model
        if preview is not None and (model is None or preview.revision != model.revision):
            return False
        self.previewed = preview
        return True

    def _applicable(self) -> Any:
        """The preview, if it can be applied to the model as it is; else a sentence saying why not."""
        preview = self.previewed
        if preview is None:
            raise GraphLensError(f"there is no previewed {self.what} to apply; press Run first")
        if preview.revision != self._workspace.revision:
            raise GraphLensError(f"the model changed after this {self.what} was previewed; run it again")
        return preview
