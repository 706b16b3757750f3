"""The three lessons in the window: started as workspace jobs, shown from the workspace's events.

Mixed into :class:`~graphlens.gui.workflows.Workflows`. "Learn BN folding" runs the model and the
folded model once per match, and an activation's "Learn fake quantization" runs the float model over
the calibration samples: from a button they go to a worker through each view's job slot (a newer
request replaces a running one), and the workspace keeps the result only for the model as it still is.
Another channel, kernel or K is numpy on numbers already there, so it is computed here and now. The
public methods are the window's scripting API and compute here and now unless asked otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSignalBlocker

from graphlens.core.errors import GraphLensError
from graphlens.gui import workers
from graphlens.gui.binarize_lesson import BinarizeLessonView
from graphlens.gui.bn_lesson import BnLessonView
from graphlens.gui.quantize_lesson import QuantizeLessonView
from graphlens.gui.window_api import WindowBase

if TYPE_CHECKING:
    from PySide6.QtWidgets import QWidget

    from graphlens.gui.work_panels import MatchesPanel
    from graphlens.workspace.jobs import Job


class LessonWork(WindowBase):
    """The lesson views, their job slot, and the requests that go to the workspace."""

    if TYPE_CHECKING:
        def raise_panel(self, widget: QWidget, share: float | None = None) -> None: ...
        def show_match(self, index: int) -> None: ...
        matches_panel: MatchesPanel

    def _build_lessons(self) -> None:
        self.lesson_jobs = workers.WorkerSlot()
        self.quantize_lesson_jobs = workers.WorkerSlot()
        self.lesson_view = BnLessonView()
        self.quantize_lesson = QuantizeLessonView()
        self.binarize_lesson = BinarizeLessonView()
        self.workspace.bn_lesson.events.result.connect(self.lesson_view.show_result)
        self.workspace.quantization.events.lesson.connect(self.quantize_lesson.show_result)
        self.workspace.binarization.events.lesson.connect(self.binarize_lesson.show_result)
        self.lesson_view.channel_requested.connect(self._lesson_channel)
        self.quantize_lesson.channel_requested.connect(self._quantize_lesson_channel)
        self.binarize_lesson.kernel_requested.connect(self._binarize_lesson_again)

    def _run_lesson(self, job: Job[Any, Any] | None, background: bool, view: Any, working: str,
                    slot: workers.WorkerSlot | None = None) -> Any:
        """Compute ``job`` here and now (its result, or None after saying why), or in ``slot``; either way
        it replaces the lesson the slot was working out."""
        if job is None:
            return None
        if slot is not None:
            slot.cancel()
        if not background or slot is None:
            try:
                return job.run()
            except GraphLensError as exc:
                self.show_error(str(exc))
                return None
        view.set_working(working)

        def failed(message: str | None) -> None:
            view.show_result(view.result)  # the lesson shown before, or the empty page
            if message:
                self.show_error(message.splitlines()[0])

        slot.start_job(job, lambda result, kept: None if kept else view.show_result(view.result), failed)
        return None

    def _job_or_error(self, make: Any, *args: Any) -> Job[Any, Any] | None:
        try:
            job: Job[Any, Any] = make(*args)
        except GraphLensError as exc:
            self.show_error(str(exc))
            return None
        return job

    # ======================================================================= BN folding
    def show_lesson(self, match_index: int = 0, *, background: bool = False) -> Any:
        """Open the BN-folding lesson on a conv-bn / gemm-bn / matmul-bn match; returns its data when computed
        here and now (the Learn button computes it in a worker)."""
        job = self._job_or_error(self.workspace.bn_lesson.job, match_index)
        if job is None:
            return None
        with QSignalBlocker(self.matches_panel.list):  # the list, the canvas and the lesson on the same match
            self.matches_panel.list.setCurrentRow(match_index)
        self.show_match(match_index)
        self.raise_panel(self.lesson_view)
        result = self._run_lesson(job, background, self.lesson_view, f"match {match_index + 1}", self.lesson_jobs)
        return result.lesson if result is not None else None

    def _lesson_channel(self, channel: int) -> None:
        current = self.workspace.bn_lesson.result
        if current is not None:
            self._run_lesson(self._job_or_error(self.workspace.bn_lesson.job, current.match_index, channel), False,
                             self.lesson_view, "", self.lesson_jobs)

    # ======================================================================= fake quantization
    def show_quantize_lesson(self, preview: Any, layer: Any, channel: int | None = None, *,
                             background: bool = True) -> Any:
        """Open "Learn fake quantization" on one tensor of a quantize preview; returns the lesson when not
        computed in the background."""
        self.raise_panel(self.quantize_lesson)
        job = self._job_or_error(self.workspace.quantization.lesson_job, preview, layer, channel)
        result = self._run_lesson(job, background, self.quantize_lesson, f"'{layer.tensor}'",
                                  self.quantize_lesson_jobs)
        return result.lesson if result is not None else None

    def _quantize_lesson_channel(self, channel: int) -> None:
        current = self.workspace.quantization.lesson
        if current is not None:  # a weight's channel: numpy only, immediate
            job = self._job_or_error(self.workspace.quantization.lesson_job, current.preview, current.lesson.layer,
                                     channel)
            self._run_lesson(job, False, self.quantize_lesson, "", self.quantize_lesson_jobs)

    # ======================================================================= binarization
    def show_binarize_lesson(self, preview: Any, layer: Any, kernel: int | None = None,
                             bits: int | None = None) -> Any:
        """Open "Learn binarization" on one kernel of a binarized layer (None: the one that binarizes worst),
        computed here and now (one weight, numpy only)."""
        self.raise_panel(self.binarize_lesson)
        job = self._job_or_error(self.workspace.binarization.lesson_job, preview, layer, kernel, bits)
        result = self._run_lesson(job, False, self.binarize_lesson, "")
        return result.lesson if result is not None else None

    def _binarize_lesson_again(self, kernel: int, bits: int) -> None:
        current = self.workspace.binarization.lesson
        if current is not None:
            job = self._job_or_error(self.workspace.binarization.lesson_job, current.preview, current.layer, kernel,
                                     bits)
            self._run_lesson(job, False, self.binarize_lesson, "")
