"""Two one-thread onnxruntime sessions of one model, each running its own sample at the same time.

One session spreads each operator over every core, and a model of many small operators leaves the
cores waiting on each other between them. Two sessions of one thread each, fed different samples,
keep both cores of a small machine busy: on a 2-core machine the PP-OCRv4 recognizer's 24 calibration
crops (float runs) took 1.03 s against 1.31 s, and its whole calibration pass 1.39 s against 1.49 s.
Only for models whose weights are small (each session holds its own copy) and for small samples run one
at a time (:data:`SAMPLE_ELEMENTS`; a stacked batch already gives each operator work enough).
"""

from __future__ import annotations

import os
import queue
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.numerics.run import ModelRunner, RunResult, small_weights

Job = tuple[Sequence[str], dict[str, np.ndarray]]
"""The outputs to return (of the session's) and the feed."""


def usable_cores() -> int:
    """Cores this process may run on."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


SAMPLE_ELEMENTS = 2**18
"""Most input elements of a sample run by twins. A larger sample gives each operator work enough for every core,
and a second session's first run pays for its own activations' memory: the detector's 8 pages of 736×992
(2.2 M elements) calibrated in the same time either way (1.56 s, 1.55 s), with two arenas of activations."""


def twins_worthwhile(model: Model | onnx.ModelProto, runs: int, sample_elements: int) -> bool:
    """Whether :class:`TwinRunners` beat one session here: two cores or more, small weights and samples, runs to
    share."""
    proto = model.proto if isinstance(model, Model) else model
    return runs >= 2 and sample_elements <= SAMPLE_ELEMENTS and usable_cores() >= 2 and small_weights(proto)


class TwinRunners:
    """Two :class:`ModelRunner` of one model, one thread each; :meth:`map` runs two jobs at once."""

    def __init__(self, open_runner: Callable[[int], ModelRunner]) -> None:
        """``open_runner(threads)``: a runner of the model with that many threads."""
        self.runners = [open_runner(1), open_runner(1)]
        self.error = next((r.error for r in self.runners if r.error is not None), None)

    def map(self, jobs: Iterable[Job], cancelled: Callable[[], bool] | None = None) -> Iterator[RunResult]:
        """Each job's result, in the jobs' order; at most one job per session in flight. ``cancelled()`` is
        checked before each job starts; once it says stop, nothing more starts and the iteration ends early
        (the caller checks ``cancelled`` again to tell a cancel from the end)."""
        free: queue.SimpleQueue[ModelRunner] = queue.SimpleQueue()
        for runner in self.runners:
            free.put(runner)

        def run(names: Sequence[str], feed: dict[str, np.ndarray]) -> RunResult:
            runner = free.get()
            try:
                return runner.only(names).run(feed)
            finally:
                free.put(runner)

        pending: deque[Future[RunResult]] = deque()
        with ThreadPoolExecutor(len(self.runners), thread_name_prefix="graphlens-run") as pool:
            for names, feed in jobs:
                if cancelled is not None and cancelled():
                    break
                pending.append(pool.submit(run, names, feed))
                if len(pending) >= len(self.runners):
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
