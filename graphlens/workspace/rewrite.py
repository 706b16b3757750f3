"""The rewrite feature: one rule on one match, previewed on a scratch copy, then applied exactly as previewed.

``ws.rewrite.preview(rule, index)`` plans the rule on match ``index`` of the rule's matches
(:meth:`~graphlens.workspace.matching.MatchingFeature.match`), applies the plan to a copy and diffs before against
after with onnxruntime (:func:`~graphlens.workspace.rewrite_preview.compute_rewrite_preview`); the model is not
touched. The result is ``ws.rewrite.previewed``, announced by ``ws.rewrite.events.previewed``; an edit or another
model drops it. ``ws.rewrite.apply()`` applies exactly the previewed edit as one undo step, or refuses with a sentence.
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.workspace.feature import Feature, feature
from graphlens.workspace.jobs import Job
from graphlens.workspace.results import Applied, RewritePreview, RewritePreviewRequest
from graphlens.workspace.rewrite_preview import compute_rewrite_preview

if TYPE_CHECKING:
    from graphlens.workspace.workspace import Workspace


@feature
@dataclass(eq=False)
class RewriteFeature(Feature):
    """The rewrite previewed (see the module docstring)."""

    workspace: InitVar[Workspace]
    previewed: RewritePreview | None = None
    """The last preview, for the model as it is; None before one, once applied, or once the model changed."""

    name: ClassVar[str] = "rewrite"

    def request(self, rule: str, match_index: int = 0) -> RewritePreviewRequest:
        """What :func:`compute_rewrite_preview` needs, captured now (on the thread that owns the workspace)."""
        from graphlens.numerics.dims import remembered_dims

        ws = self._workspace
        model = ws.require_model()
        match = ws.matches.match(rule, match_index)
        settings = ws.preview_inputs
        return RewritePreviewRequest(
            rule=rule, match_index=match_index, graph=match.graph.path, nodes=dict(match.nodes),
            values=dict(match.values), pattern=match.pattern, variant=match.variant,
            model_bytes=model.to_proto().SerializeToString(), model_path=model.path, revision=model.revision,
            dims=dict(settings.dims), inputs_file=settings.file, arrays=settings.arrays,
            remembered=remembered_dims(model))

    def preview_job(self, rule: str, match_index: int = 0) -> Job[RewritePreviewRequest, RewritePreview]:
        """Plan ``rule`` on a match and measure it on a scratch copy, anywhere; the model is not touched."""
        ws = self._workspace
        request = self.request(rule, match_index)
        return Job(kind="rewrite", what="the preview", model=ws.require_model(), request=request,
                   compute=compute_rewrite_preview, keep=self._keep, owner=ws)

    def preview(self, rule: str, match_index: int = 0) -> RewritePreview:
        """The preview, computed here and now and kept as :attr:`previewed`."""
        result: RewritePreview = self.preview_job(rule, match_index).run()
        return result

    def apply(self) -> Applied:
        """Apply exactly the previewed edit as one undo step, or refuse with a sentence."""
        ws, preview = self._workspace, self.previewed
        if preview is None:
            raise GraphLensError("there is no previewed rewrite to apply")
        if preview.revision != ws.revision:
            raise GraphLensError("the model changed after this preview was computed; preview the rewrite again")
        ws.edit_session().apply([preview.edit])  # the preview, now describing the past, is dropped with its event
        return Applied(preview.edit.description, 1, ws.revision)

    def _keep(self, result: RewritePreview) -> None:
        from graphlens.numerics.dims import remember_dims

        used = result.numeric.inputs
        if used is not None and used.file is None and used.dims is not None and used.dims.values:
            remember_dims(self._workspace.require_model(), used.dims.values)  # found on the copy: the next starts there
        self.previewed = result
