"""The one task object every long computation reports to and is stopped through."""

from __future__ import annotations

import threading

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Cancelled, Task, task_or_idle


def test_check_raises_cancelled_naming_the_work_once_cancelled():
    task = Task()
    task.check("the layout")  # not stopped: nothing happens
    task.cancel()
    with pytest.raises(Cancelled, match="^the layout was cancelled$"):
        task.check("the layout")
    assert issubclass(Cancelled, GraphLensError), "a cancel reaches the user as one line, like any other refusal"


def test_the_callers_own_flag_stops_it_too():
    flag = threading.Event()
    task = Task(cancelled=flag.is_set)
    assert not task.stopped
    flag.set()
    assert task.stopped


def test_cancel_from_another_thread_is_seen():
    task = Task()
    worker = threading.Thread(target=task.cancel)
    worker.start()
    worker.join(10)
    assert task.stopped


def test_report_clamps_to_zero_and_one():
    seen: list[float] = []
    task = Task(seen.append)
    for fraction in (-0.5, 0.25, 1.5):
        task.report(fraction)
    assert seen == [0.0, 0.25, 1.0]


def test_a_part_maps_its_own_progress_into_its_range_of_the_whole():
    seen: list[float] = []
    whole = Task(seen.append)
    first, second = whole.part(0.0, 0.4), whole.part(0.4, 1.0)
    first.report(0.5)
    first.report(1.0)
    second.report(0.5)
    inner = second.part(0.5, 1.0)  # parts of parts nest
    inner.report(1.0)
    assert seen == pytest.approx([0.2, 0.4, 0.7, 1.0])


def test_a_part_and_a_quiet_task_stop_with_the_whole_and_quiet_reports_nowhere():
    seen: list[float] = []
    whole = Task(seen.append)
    part, quiet = whole.part(0.2, 0.8), whole.quiet()
    quiet.report(0.5)
    assert seen == []
    whole.cancel()
    assert part.stopped and quiet.stopped
    with pytest.raises(Cancelled):
        quiet.check()


def test_cancelling_a_part_does_not_stop_the_whole():
    whole = Task()
    part = whole.part(0.0, 0.5)
    part.cancel()
    assert part.stopped and not whole.stopped


def test_no_task_means_one_that_never_stops():
    idle = task_or_idle(None)
    idle.report(0.5)
    idle.check()
    given = Task()
    assert task_or_idle(given) is given
