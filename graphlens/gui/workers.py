"""Long work off the GUI thread: results come back through signals, cancellation through an Event."""

from __future__ import annotations

import threading
import traceback
from collections.abc import Callable
from typing import Any

from PySide6.QtCore import QObject, QRunnable, QThreadPool, Signal

from graphlens.core.errors import GraphLensError


class _Signals(QObject):
    finished = Signal(object)
    failed = Signal(str)
    cancelled = Signal()
    progress = Signal(float)


class Job(QRunnable):
    """Run ``work(report_progress, is_cancelled)`` on the thread pool."""

    def __init__(self, work: Callable[[Callable[[float], None], Callable[[], bool]], Any]) -> None:
        super().__init__()
        self.work = work
        self.signals = _Signals()
        self.stop = threading.Event()
        self.setAutoDelete(False)

    def cancel(self) -> None:
        self.stop.set()

    def run(self) -> None:
        try:
            result = self.work(self.signals.progress.emit, self.stop.is_set)
        except GraphLensError as exc:
            self.signals.failed.emit(str(exc))
            return
        except Exception as exc:  # a cancelled layout raises its own error; anything else is a bug to report
            if self.stop.is_set():
                self.signals.cancelled.emit()
            else:
                self.signals.failed.emit(f"internal error: {type(exc).__name__}: {exc}\n{traceback.format_exc(limit=3)}")
            return
        if self.stop.is_set():
            self.signals.cancelled.emit()
        else:
            self.signals.finished.emit(result)


def start(job: Job) -> Job:
    QThreadPool.globalInstance().start(job)
    return job
