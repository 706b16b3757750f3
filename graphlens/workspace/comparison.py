"""The comparison feature: the model (A) compared with another (B), node by node and numerically.

``ws.comparison.run(B)`` computes it here and now; ``ws.comparison.job(B, scratch=True)`` captures the request
for a worker (A copied, so the model may be edited meanwhile), and the result is kept only if the model is still
at the revision it was asked for. ``ws.comparison.result`` holds the last one and ``ws.comparison.events.result``
announces each; an edit or another model drops it. The numbers use the workspace's preview inputs.
"""

from __future__ import annotations

import os
from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.model import Model, load_model
from graphlens.core.task import Task
from graphlens.workspace.feature import Feature, feature
from graphlens.workspace.jobs import Job, worker_copy

if TYPE_CHECKING:
    from graphlens.compare import Comparison
    from graphlens.workspace.results import PreviewInputs
    from graphlens.workspace.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class CompareRequest:
    """Compare ``model`` (A: a scratch copy when computed off the owner's thread) with ``other`` (B)."""

    model: Model = field(repr=False)
    other: str | os.PathLike[str] | Model
    numeric: bool
    inputs: PreviewInputs


@feature
@dataclass(eq=False)
class ComparisonFeature(Feature):
    """The model compared with another (see the module docstring)."""

    workspace: InitVar[Workspace]
    result: Comparison | None = None
    """The last comparison of the model as it is; None before one, or once the model changed."""

    name: ClassVar[str] = "comparison"

    def job(self, other: str | os.PathLike[str] | Model, *, numeric: bool = True,
            scratch: bool = False) -> Job[CompareRequest, Comparison]:
        """Compare the model (A) with ``other`` (B: a file, read by the job, or a loaded model); ``scratch``
        compares a copy of A, for a job run in a worker while the model may change."""
        ws = self._workspace
        model = ws.require_model()
        request = CompareRequest(model=worker_copy(model) if scratch else model, other=other, numeric=numeric,
                                 inputs=ws.preview_inputs)
        return Job(kind="comparison", what="the comparison", model=model, request=request, compute=_compare,
                   keep=self._keep, owner=ws)

    def run(self, other: str | os.PathLike[str] | Model, *, numeric: bool = True,
            task: Task | None = None) -> Comparison:
        """Compare here and now, and keep the result."""
        result: Comparison = self.job(other, numeric=numeric).run(task)
        return result

    def _keep(self, comparison: Comparison) -> None:
        comparison.a = self._workspace.require_model()  # pairs name nodes and graphs, alike in a copy and the model
        self.result = comparison


def _compare(request: CompareRequest, task: Task) -> Comparison:
    from graphlens.compare import compare_models

    other = request.other if isinstance(request.other, Model) else load_model(request.other)
    settings = request.inputs
    return compare_models(request.model, other, numeric=request.numeric, inputs=settings.arrays,
                          inputs_file=settings.file, dims=dict(settings.dims) or None, task=task)

