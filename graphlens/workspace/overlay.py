"""The overlay feature: per-node numbers the canvas colours the graph by, and the last profile of the model.

``ws.overlay.shown`` is the overlay shown (any per-node numbers: latency, FLOPs, a quantization error), or None;
it stays across edits (nodes an edit removes simply have no box) and goes with a new model. ``ws.overlay.profile``
is the last latency profile of the model as it is; an edit drops it. Each is announced by its own event
(``ws.overlay.events.shown``, ``ws.overlay.events.profile``). The metrics and the profile run on the workspace's
preview inputs, as jobs (``metric_job``, ``profile_job``) or here and now (``show_metric``, ``run_profile``).
"""

from __future__ import annotations

from dataclasses import InitVar, dataclass, field
from typing import TYPE_CHECKING, ClassVar

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.workspace.feature import Feature, feature
from graphlens.workspace.jobs import Job, worker_copy

if TYPE_CHECKING:
    from graphlens.overlays.overlay import Overlay
    from graphlens.overlays.profile import ProfileResult
    from graphlens.workspace.results import PreviewInputs
    from graphlens.workspace.workspace import Workspace


@dataclass(frozen=True, kw_only=True)
class MetricRequest:
    """FLOPs, parameters or output bytes per node, from shapes (``model``: a weightless copy off the owner's thread)."""

    metric: str
    model: Model = field(repr=False)
    dims: dict[str, int]


@dataclass(frozen=True, kw_only=True)
class ProfileRequest:
    """Time every node with onnxruntime's profiler (``model``: a scratch copy off the owner's thread)."""

    model: Model = field(repr=False)
    runs: int
    inputs: PreviewInputs
    seed: int = 0


@feature
@dataclass(eq=False)
class OverlayFeature(Feature):
    """The overlay shown and the last profile (see the module docstring)."""

    workspace: InitVar[Workspace]
    shown: Overlay | None = None
    """The per-node overlay the canvas colours by; None: colours by kind."""
    profile: ProfileResult | None = None
    """The last profile of the model as it is (its latency overlay shown when it came); None once the model changed."""

    name: ClassVar[str] = "overlay"
    kept_by_edit: ClassVar[tuple[str, ...]] = ("shown",)
    """Nodes an edit removes simply have no box."""

    def show(self, overlay: Overlay | None) -> Overlay | None:
        """Colour the nodes by ``overlay``, or by nothing (None)."""
        self.shown = overlay
        return overlay

    def metric_job(self, metric: str, *, scratch: bool = False) -> Job[MetricRequest, Overlay]:
        """``flops``, ``params`` or ``bytes`` per node at the preview inputs' dims, shown once computed; ``scratch``
        reads a copy of the model's structure, for a worker while the model may change."""
        from graphlens.overlays.flops import METRICS

        if metric not in METRICS:
            raise GraphLensError(f"unknown metric '{metric}'; metrics: {', '.join(METRICS)}")
        ws = self._workspace
        model = ws.require_model()
        request = MetricRequest(metric=metric, model=worker_copy(model, weights=False) if scratch else model,
                                dims=dict(ws.preview_inputs.dims))
        return Job(kind="overlay", what=f"the {METRICS[metric][0]} overlay", model=model, request=request,
                   compute=_metric, keep=self.show, owner=ws)

    def show_metric(self, metric: str) -> Overlay:
        """``metric`` per node, computed here and now and shown."""
        result: Overlay = self.metric_job(metric).run()
        return result

    def profile_job(self, runs: int = 10, *, seed: int = 0,
                    scratch: bool = False) -> Job[ProfileRequest, ProfileResult]:
        """Time every node with onnxruntime's profiler on the preview inputs (``runs`` after one warm-up); once
        kept, the profile is :attr:`profile` and its latency overlay is shown."""
        ws = self._workspace
        model = ws.require_model()
        request = ProfileRequest(model=worker_copy(model) if scratch else model, runs=runs, inputs=ws.preview_inputs,
                                 seed=seed)
        return Job(kind="profile", what="the profile", model=model, request=request, compute=_profile,
                   keep=self._keep_profile, owner=ws)

    def run_profile(self, runs: int = 10, *, seed: int = 0, task: Task | None = None) -> ProfileResult:
        """Profile here and now (see :meth:`profile_job`)."""
        result: ProfileResult = self.profile_job(runs, seed=seed).run(task)
        return result

    def _keep_profile(self, result: ProfileResult) -> None:
        self.profile = result
        self.show(result.overlay)


def _metric(request: MetricRequest, task: Task) -> Overlay:
    from graphlens.overlays import metric_overlay

    return metric_overlay(request.model, request.metric, dims=request.dims)


def _profile(request: ProfileRequest, task: Task) -> ProfileResult:
    from graphlens.overlays import profile_model

    settings = request.inputs
    return profile_model(request.model, request.runs, dims=settings.dims, inputs=settings.arrays,
                         inputs_file=settings.file, seed=request.seed, task=task)
