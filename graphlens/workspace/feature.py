"""One model per feature, composed by the workspace as napari composes ``Dims``, ``LayerList`` and ``Camera`` into its
``ViewerModel``.

A feature (made with :func:`feature`) is a dataclass whose fields are its results (``ws.comparison.result``). Each
field is its own signal, typed with the field's type (psygnal's :class:`~psygnal.SignalGroupDescriptor`):
``ws.comparison.events.result`` is emitted with the new value whenever another is set, by identity (a result is
replaced, never edited in place). A feature also holds the jobs that compute its results, through the workspace's
one job protocol (:mod:`graphlens.workspace.jobs`), and declares which of its fields an edit of the model keeps (the
others described the model as it was); the workspace clears the rest on an edit, and every field for a new model,
each with its own event, before it announces the edit or the new model.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from psygnal import SignalGroupDescriptor

from graphlens.core.errors import GraphLensError

if TYPE_CHECKING:
    from graphlens.workspace.workspace import Workspace


class Feature:
    """The base of the workspace's features (see the module docstring): subclasses are dataclasses made features with
    :func:`feature`, whose first parameter is ``workspace: InitVar[Workspace]``."""

    name: ClassVar[str] = ""
    """The workspace's attribute holding the feature (``ws.<name>``)."""
    kept_by_edit: ClassVar[tuple[str, ...]] = ()
    """The fields an edit of the model keeps; the others described the model as it was, and go. A new model resets
    every field."""
    events: ClassVar[SignalGroupDescriptor]

    def __post_init__(self, workspace: Workspace) -> None:
        self._workspace = workspace

    def clear(self, *, opening: bool) -> None:
        """Set the fields an edit drops (or, ``opening``, every field) back to their defaults."""
        for declared in dataclasses.fields(self):  # type: ignore[arg-type]
            if opening or declared.name not in self.kept_by_edit:
                factory = declared.default_factory
                setattr(self, declared.name, factory() if factory is not dataclasses.MISSING else declared.default)


F = TypeVar("F", bound=Feature)


def feature(cls: type[F]) -> type[F]:
    """Make the dataclass ``cls`` (``@feature`` over ``@dataclass(eq=False)``) a feature: each of its fields is its
    own signal in ``cls.events``, emitted when the field is set to another object."""
    events = SignalGroupDescriptor(equality_operators=dict.fromkeys((f.name for f in dataclasses.fields(cls)),  # type: ignore[arg-type]
                                                                     operator.is_))
    cls.events = events
    events.__set_name__(cls, "events")
    return cls


class LossyFeature(Feature):
    """What quantization and binarization share: a preview computed on a scratch copy, kept (``previewed``) only
    while the model is at the revision it was computed for, then applied as one undo step, or refused."""

    what: ClassVar[str] = ""
    """The rewrite in words, for refusals: ``"quantization"``."""
    previewed: Any
    kept_by_edit: ClassVar[tuple[str, ...]] = ("applied", "lesson")
    """The rewrite applied and the lesson (which holds the preview it explains) are the record of what was done."""

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
