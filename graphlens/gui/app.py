"""Starting the Qt application, and the window's process-wide collector setting."""

from __future__ import annotations

import gc
import os
import sys
import time
from types import TracebackType

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QApplication

from graphlens.core.bulk import keep_built
from graphlens.core.model import Model
from graphlens.gui.canvas import GraphCanvas
from graphlens.gui.main_window import MainWindow


def application() -> QApplication:
    """The process's QApplication, created on first use."""
    app = QApplication.instance()
    if app is None:
        app = QApplication(sys.argv[:1])
        app.setApplicationName("GraphLens")
        app.setOrganizationName("GraphLens")
        app.setOrganizationDomain("graphlens.org")
    return app  # type: ignore[return-value]


class IdleCollector(QObject):
    """Runs the cyclic collector from the event loop, never in the middle of building a model.

    Loading, viewing and laying out 100,000 nodes allocates millions of objects; the automatic
    collector would rescan the growing heap again and again meanwhile. While the window runs, it
    is off; every ``interval_ms`` this collects young garbage, and after a bulk build freezes what
    was built (``gc.freeze``) so that later passes skip it. When the window releases a closed model
    (``graphlens.core.bulk.release_kept``), the next tick collects everything once.
    """

    BULK = 200_000
    """New container objects since the last tick above which a build (not garbage) is assumed."""

    def __init__(self, parent: QObject | None = None, interval_ms: int = 1000) -> None:
        super().__init__(parent)
        self._timer = QTimer(self)
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.tick)
        self._was_enabled = True
        self._frozen = 0
        self._ticks = 0

    def __enter__(self) -> IdleCollector:
        self._was_enabled = gc.isenabled()
        gc.disable()
        self._frozen = gc.get_freeze_count()
        self._timer.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._timer.stop()
        if self._was_enabled:
            gc.enable()

    FULL_EVERY = 60
    """Ticks between full passes, which see only what was not frozen, so stay short."""

    def tick(self) -> None:
        self._ticks += 1
        if gc.get_freeze_count() < self._frozen:  # a model was released: free it now, keep the rest
            gc.collect()
            keep_built()
        elif gc.get_count()[0] > self.BULK:
            keep_built()
        elif self._ticks % self.FULL_EVERY == 0:
            gc.collect()
        elif gc.get_count()[0] > gc.get_threshold()[0]:
            gc.collect(1)
        self._frozen = gc.get_freeze_count()


REPORT_DRAWN_VARIABLE = "GRAPHLENS_REPORT_DRAWN"
"""Set to 1, the window prints ``drawn <seconds since the process started>`` on stderr once the canvas has
first painted a graph, and quits: how ``benchmarks/bench_window.py`` times a start as a person sees it."""


def seconds_since_process_start() -> float:
    """Seconds since this process was started (by the kernel's clock, to its 10 ms ticks), or since Python
    started where ``/proc`` does not say."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        return time.clock_gettime(time.CLOCK_BOOTTIME) - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, AttributeError):
        return time.perf_counter()  # CPython's perf_counter starts near zero on Linux; a fallback only


class FirstDrawReport(QObject):
    """Watches the canvas for its first paint of a graph (not a "laying out…" message), then reports and quits."""

    def __init__(self, app: QApplication, canvas: GraphCanvas) -> None:
        super().__init__(canvas)
        self._app = app
        self._canvas = canvas
        canvas.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802 (Qt's name)
        canvas = self._canvas
        if event.type() == QEvent.Type.Paint and canvas.renderer is not None and not canvas.message:
            canvas.removeEventFilter(self)
            QTimer.singleShot(0, self._report)  # runs once this paint (and its flush to the screen) is done
        return False

    def _report(self) -> None:
        print(f"drawn {seconds_since_process_start():.3f}", file=sys.stderr, flush=True)
        self._app.exit(0)


def run(model: Model) -> int:
    """The window's entry point: show ``model`` and run the event loop until the window closes."""
    app = application()
    with IdleCollector(app):
        window = MainWindow()
        if os.environ.get(REPORT_DRAWN_VARIABLE, "") == "1":
            FirstDrawReport(app, window.canvas)
        window.set_model(model)
        window.show()
        return app.exec()
