"""One long computation's line to whoever waits for it: how far it has got, and whether to stop.

A :class:`Task` goes from the caller (the window's worker, a workspace job, a script) down to the inner loop of
every long computation: a layout, a pattern search, a calibration pass, a comparison. The computation calls
:meth:`Task.check` between steps, which raises :class:`Cancelled` once a stop was asked for, and
:meth:`Task.report` with the fraction done. A step that is a known part of the whole hands its callee
:meth:`Task.part`, so the callee reports its own 0 to 1 and the caller's bar still moves once, from 0 to 1.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from graphlens.core.errors import GraphLensError

Progress = Callable[[float], None]
"""Told the fraction of the work done, 0 to 1."""


class Cancelled(GraphLensError):
    """A computation stopped because its caller asked; whatever it was changing is as it was."""


class Task:
    """Progress reported up and a stop request passed down, for one computation (safe to cancel from any thread).

    ``progress`` is told each fraction reported; ``cancelled``, when given, is asked too by :attr:`stopped` (a
    caller's own flag, such as a window's stop button read off its thread).
    """

    __slots__ = ("_cancelled", "_progress", "_span", "_stop")

    def __init__(self, progress: Progress | None = None, cancelled: Callable[[], bool] | None = None) -> None:
        self._progress = progress
        self._cancelled = cancelled
        self._stop = threading.Event()
        self._span = (0.0, 1.0)

    def cancel(self) -> None:
        """Ask the computation to stop: its next :meth:`check` raises :class:`Cancelled`."""
        self._stop.set()

    @property
    def stopped(self) -> bool:
        return self._stop.is_set() or (self._cancelled is not None and self._cancelled())

    def check(self, what: str = "the computation") -> None:
        """Raise :class:`Cancelled` (``"<what> was cancelled"``) if a stop was asked for."""
        if self.stopped:
            raise Cancelled(f"{what} was cancelled")

    def report(self, fraction: float) -> None:
        """Say that ``fraction`` (0 to 1, clamped) of this task's work is done."""
        if self._progress is not None:
            start, end = self._span
            self._progress(start + (end - start) * min(max(float(fraction), 0.0), 1.0))

    def part(self, start: float, end: float) -> Task:
        """The task for the step from ``start`` to ``end`` of this one: it reports its own 0 to 1 as that range,
        and stops when this one does."""
        part = Task(self._progress, lambda: self.stopped)
        low, high = self._span
        part._span = (low + (high - low) * start, low + (high - low) * end)
        return part

    def quiet(self) -> Task:
        """A task for a step whose progress is not shown: it reports nowhere, and stops when this one does."""
        return Task(None, lambda: self.stopped)


def task_or_idle(task: Task | None) -> Task:
    """``task``, or one that reports nowhere and is never cancelled (for a caller that passed none)."""
    return Task() if task is None else task
