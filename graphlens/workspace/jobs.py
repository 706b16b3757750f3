"""The one job protocol: request → compute off the caller's thread → accepted only at the same revision.

Every job of the workspace that can take long (matches, explain, rewrite previews, quantize and
binarize previews, compare, metric overlays, profiles) goes the same way:

1. ``job = workspace.<kind>_job(...)``, on the thread that owns the workspace, captures a request: a
   keyword-only dataclass holding the settings, what the job reads (the model as bytes, a scratch
   copy, or, for read-only jobs, the live model) and the model's revision. Bad settings raise here.
2. ``result = job.compute(task)`` runs anywhere, a worker thread say. It touches only what the request
   holds, reports its progress to the :class:`~graphlens.core.task.Task`, and stops with
   :class:`~graphlens.core.task.Cancelled` when the task or :meth:`Job.cancel` says so; the model is left
   as it was either way.
3. ``job.accept(result)``, back on the owner's thread, keeps the result (its slot set, its event
   emitted) only if the workspace still has the same model at the same revision; otherwise the result
   is dropped and ``events.job_dropped`` says so with a :class:`Dropped`.

``job.run()`` does all three here and now, as the command line and scripts do.

A job that reads the live model rather than a copy (matching a large model: a copy would cost more
than the match) is stopped by the workspace, and waited for, before any edit.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Cancelled, Task

if TYPE_CHECKING:
    from graphlens.core.model import Model

R = TypeVar("R")
Q = TypeVar("Q")

@dataclass(frozen=True, kw_only=True)
class Dropped:
    """A job's result the workspace did not keep: the model changed, or another was opened, while it ran."""

    kind: str
    """The result slot the job fills (``"comparison"``, ``"overlay"``, …)."""
    what: str
    """The job in words, for a status line: ``"the comparison"``."""
    revision: int
    """The revision the job was computed for."""
    now: int
    """The model's revision when the result came back (-1: no model, or another model)."""

    def message(self) -> str:
        return f"The model changed while {self.what} was computed; run it again"


class Job(Generic[Q, R]):
    """One job: a request captured for ``model`` at ``revision``, a computation, and how to keep its result.

    ``compute(request, task)`` must not touch the live model unless ``reads_live``
    (then it only reads, and the workspace stops it before any edit). ``keep(result)`` runs on the
    owner's thread once the revision is checked: it sets the result's slot and emits its event.
    """

    def __init__(self, *, kind: str, what: str, model: Model, request: Q,
                 compute: Callable[[Q, Task], R], keep: Callable[[R], Any],
                 owner: JobOwner, reads_live: bool = False) -> None:
        self.kind, self.what, self.model, self.request = kind, what, model, request
        self.revision = model.revision
        self.reads_live = reads_live
        self._compute, self._keep, self._owner = compute, keep, owner
        self._stop = threading.Event()
        self._finished = threading.Event()
        self._finished.set()  # nothing running until compute starts

    # ---------------------------------------------------------------- off the owner's thread
    def compute(self, task: Task | None = None) -> R:
        """Compute the result from the request (any thread), reporting to ``task``; :class:`Cancelled` if
        ``task`` or :meth:`cancel` stopped it."""
        outer = task
        task = Task(None if outer is None else outer.report,
                    lambda: self._stop.is_set() or (outer is not None and outer.stopped))
        self._finished.clear()
        if self.reads_live:
            self._owner._live_jobs.add(self)
        try:
            task.check(self.what)
            try:
                result = self._compute(self.request, task)
            except GraphLensError:
                if task.stopped:  # whatever the computation raised on its way out, the job was cancelled
                    raise Cancelled(f"{self.what} was cancelled") from None
                raise
            task.check(self.what)
            task.report(1.0)
            return result
        finally:
            self._owner._live_jobs.discard(self)
            self._finished.set()

    def cancel(self) -> None:
        """Ask the computation to stop (from any thread); it raises :class:`Cancelled` soon after."""
        self._stop.set()

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until a running computation has returned (True) or ``timeout`` seconds passed (False)."""
        return self._finished.wait(timeout)

    # ---------------------------------------------------------------- on the owner's thread
    @property
    def current(self) -> bool:
        """Whether the workspace still has the model this job was made for, at the same revision."""
        return self._owner.model is self.model and self.model.revision == self.revision

    def accept(self, result: R) -> bool:
        """Keep ``result`` if the model is still as it was when the request was made; else drop it, and say so."""
        if self.cancelled:
            return False
        if not self.current:
            now = self._owner.model.revision if self._owner.model is self.model else -1
            self._owner.events.job_dropped.emit(Dropped(kind=self.kind, what=self.what, revision=self.revision,
                                                        now=now))
            return False
        self._keep(result)
        return True

    def run(self, task: Task | None = None) -> R:
        """Compute here and now, then accept: what the command line and scripts do."""
        result = self.compute(task)
        self.accept(result)
        return result


class JobOwner:
    """What a :class:`Job` needs of the workspace: its model, its events, and the live-reading jobs to stop."""

    model: Model | None
    events: Any

    def __init__(self) -> None:
        self._live_jobs: set[Job[Any, Any]] = set()

    def stop_live_jobs(self, timeout: float = 10.0) -> None:
        """Stop the jobs reading the live model and wait for them: the model is about to change."""
        jobs = list(self._live_jobs)
        for job in jobs:
            job.cancel()
        for job in jobs:
            job.wait(timeout)


def worker_copy(model: Model, *, weights: bool = True) -> Model:
    """A copy of ``model`` a job may read in a worker while the model itself is edited (``weights=False``: its
    structure alone); it starts from the dims that last ran for the model."""
    from graphlens.core.model import Model as Copy
    from graphlens.core.model import scratch_copy
    from graphlens.numerics.dims import remember_dims, remembered_dims

    copy = scratch_copy(model) if weights else Copy(model.weightless_proto(), path=model.path,
                                                    external_data=model.external_data)
    last = remembered_dims(model)
    if last:
        remember_dims(copy, last)
    return copy
