"""Long work off the GUI thread: results come back through signals, cancellation through a Task.

A :class:`Worker` runs one function of a :class:`~graphlens.core.task.Task` (a workspace job's
``compute``, a layout) on Qt's thread pool. Every started worker is kept here until its ``run`` has
returned, so its signals object can never be freed while it still emits (which Qt reports as "Signal
source has been deleted"), and :func:`shutdown` can silence and wait for all of them when the window
closes: nothing runs, and no late signal arrives, after the window is gone.
"""

from __future__ import annotations

import atexit
import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task

_running: set[Worker] = set()
_lock = threading.Lock()
_exit_hook = False


class _Signals(QObject):
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()
    progress = Signal(float)


class Worker(QRunnable):
    """Run ``work(task)`` on the thread pool; the task's progress comes back as the ``progress`` signal."""

    def __init__(self, work: Callable[[Task], Any]) -> None:
        super().__init__()
        self.work = work
        self.signals = _Signals()
        self.task = Task(self.signals.progress.emit)
        self.done = threading.Event()
        self.setAutoDelete(False)

    def cancel(self) -> None:
        self.task.cancel()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until ``run`` has returned (True) or ``timeout`` seconds passed (False)."""
        return self.done.wait(timeout)

    def run(self) -> None:
        try:
            self._run()
        finally:
            self.done.set()
            with _lock:
                _running.discard(self)

    def _run(self) -> None:
        try:
            result = self.work(self.task)
        except GraphLensError as exc:  # a Cancelled among them
            if self.task.stopped:
                self.signals.cancelled.emit()
            else:
                self.signals.failed.emit(str(exc))
            return
        except Exception as exc:  # a bug to report, unless it came on the way out of a cancelled computation
            if self.task.stopped:
                self.signals.cancelled.emit()
            else:
                self.signals.failed.emit(f"internal error: {type(exc).__name__}: {exc}\n"
                                         f"{traceback.format_exc(limit=3)}")
            return
        if self.task.stopped:
            self.signals.cancelled.emit()
        else:
            self.signals.finished.emit(result)


def start(job: Worker) -> Worker:
    global _exit_hook
    with _lock:
        _running.add(job)
        if not _exit_hook:  # a script that ends with work running: stop it before the interpreter goes
            atexit.register(shutdown)
            _exit_hook = True
    QThreadPool.globalInstance().start(job)
    return job


def running() -> list[Worker]:
    with _lock:
        return list(_running)


def shutdown(timeout: float = 10.0) -> bool:
    """Cancel every job, silence its signals and wait for the workers; True if all stopped in time."""
    jobs = running()
    for job in jobs:
        job.signals.blockSignals(True)
        job.cancel()
    return QThreadPool.globalInstance().waitForDone(int(timeout * 1000))


class WorkerSlot:
    """At most one worker of a kind (a layout, a match, a preview): starting another replaces it, and
    the result of a replaced or cancelled one is never delivered."""

    def __init__(self) -> None:
        self.job: Worker | None = None

    @property
    def busy(self) -> bool:
        return self.job is not None

    def start(
        self,
        work: Callable[[Task], Any],
        done: Callable[[Any], None],
        failed: Callable[[str | None], None],
        progress: Callable[[float], None] | None = None,
    ) -> Worker:
        """Run ``work``; ``done(result)``, or ``failed(message)`` (``None`` when cancelled), on the GUI thread."""
        self.cancel()
        job = Worker(work)
        if progress is not None:
            job.signals.progress.connect(progress)

        def finished(result: Any) -> None:
            if self._end(job):
                done(result)

        def stopped(message: str | None = None) -> None:
            if self._end(job):
                failed(message)

        job.signals.finished.connect(finished)
        job.signals.failed.connect(stopped)
        job.signals.cancelled.connect(stopped)
        self.job = job
        return start(job)

    def start_job(
        self,
        job: Any,
        done: Callable[[Any, bool], None],
        failed: Callable[[str | None], None],
        progress: Callable[[float], None] | None = None,
        ended: Callable[[], None] | None = None,
    ) -> Worker:
        """Compute a workspace job (:class:`graphlens.workspace.Job`) in a worker, then hand its result to the
        workspace on the GUI thread: ``done(result, kept)``, ``kept`` False when the model changed meanwhile
        (the workspace's ``job_dropped`` event says so). A job the workspace stopped fails with None.
        ``ended()`` runs first whatever the outcome (the busy display goes before the result's events come)."""

        def finished(result: Any) -> None:
            if ended is not None:
                ended()
            done(result, job.accept(result))

        def stopped(message: str | None) -> None:
            if ended is not None:
                ended()
            failed(None if job.cancelled else message)

        return self.start(job.compute, finished, stopped, progress)

    def cancel(self, wait: float = 0.0) -> None:
        """Stop the current job (waiting up to ``wait`` seconds for it to return); it delivers nothing."""
        job, self.job = self.job, None
        if job is not None:
            job.cancel()
            if wait:
                job.wait(wait)

    def _end(self, job: Worker) -> bool:
        """True (and the slot freed) if ``job`` is still the current one."""
        if job is not self.job:
            return False
        self.job = None
        return True
