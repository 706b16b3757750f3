"""The one job protocol: a request captured now, computed anywhere, kept only for the model as it still is;
and the results table the workspace resets and drops by."""

from __future__ import annotations

import dataclasses
import threading

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.workspace import Cancelled, Dropped, Job, Task
from graphlens.workspace.events import PAYLOADS
from tests.workspace import test_workspace

ws = test_workspace.ws  # the demo model open in a workspace
recorder = test_workspace.recorder


def test_a_job_whose_model_changed_midway_is_dropped_and_the_event_says_so(ws):
    job = ws.comparison.job(ws.model, numeric=False, scratch=True)
    started, edited = threading.Event(), threading.Event()

    def progress(fraction: float) -> None:
        started.set()
        edited.wait(30)  # the owner edits the model while the job is half way

    out: list[object] = []
    worker = threading.Thread(target=lambda: out.append(job.compute(Task(progress))))
    worker.start()
    assert started.wait(30)
    revision = ws.revision
    ws.fold()  # folds the demo's BNs: the model changes under the running job
    assert ws.revision != revision
    edited.set()
    worker.join(30)
    seen = recorder(ws)
    assert out and not job.accept(out[0])
    assert ws.comparison.result is None
    assert seen == [("job_dropped", Dropped(kind="comparison", what="the comparison", revision=revision,
                                            now=ws.revision))]
    assert "changed while the comparison was computed" in seen[0][1].message()


def test_a_result_for_another_model_is_dropped_even_at_the_same_revision(ws, demo_path):
    job = ws.overlay.metric_job("flops", scratch=True)
    overlay = job.compute()
    ws.open(demo_path)  # a new model, at revision 0 too
    assert not job.accept(overlay) and ws.overlay.shown is None


def test_cancel_leaves_the_model_as_it_was(ws):
    before, revision = ws.model.to_proto().SerializeToString(), ws.revision
    ws.matches.find("conv-bn")
    job = ws.rewrite.preview_job("fold-bn", 0)
    job.cancel()
    with pytest.raises(Cancelled):
        job.run()
    profile = ws.overlay.profile_job(50)
    with pytest.raises(Cancelled):
        profile.run(Task(lambda fraction: profile.cancel()))  # stopped after the first timed run
    assert ws.model.to_proto().SerializeToString() == before and ws.revision == revision
    assert ws.rewrite.previewed is None and ws.overlay.profile is None and ws.overlay.shown is None
    assert not profile.accept(object()), "a cancelled job delivers nothing"


def test_progress_is_reported_from_start_to_end(ws):
    fractions: list[float] = []
    result = ws.overlay.profile_job(3).run(Task(fractions.append))
    assert fractions == sorted(fractions) and all(0.0 <= f <= 1.0 for f in fractions)
    assert len(fractions) >= 3 and fractions[-1] == 1.0
    assert ws.overlay.profile is result and ws.overlay.shown is result.overlay


def test_an_edit_stops_a_job_reading_the_live_model_first(ws):
    running = threading.Event()

    def reads(request, task) -> str:
        running.set()
        for _ in range(3000):  # at most 30 s
            if task.stopped:
                raise GraphLensError("stopped")
            threading.Event().wait(0.01)
        return "finished"

    job = Job(kind="matches", what="matching", model=ws.model, request=None, compute=reads, keep=print, owner=ws,
              reads_live=True)
    errors: list[BaseException] = []

    def work() -> None:
        try:
            job.compute()
        except Cancelled as exc:
            errors.append(exc)

    worker = threading.Thread(target=work)
    worker.start()
    assert running.wait(30)
    ws.fold()  # waits for the job to stop before the model changes
    assert job.cancelled and job.wait(0) and errors
    worker.join(30)


def test_each_features_fields_reset_and_drop_as_declared_each_with_its_event(ws, demo_path):
    import dataclasses

    def mark_all() -> dict[tuple[str, str], object]:
        marks = {}
        for feature in ws.features:
            for f in dataclasses.fields(feature):
                marks[(type(feature).__name__, f.name)] = mark = object()
                setattr(feature, f.name, mark)
        return marks

    def heard() -> list[tuple[str, str, object]]:
        seen: list[tuple[str, str, object]] = []

        def record(feature_name: str, field_name: str):
            return lambda value: seen.append((feature_name, field_name, value))

        for feature in ws.features:
            for f in dataclasses.fields(feature):
                getattr(feature.events, f.name).connect(record(type(feature).__name__, f.name))
        return seen

    for opening in (False, True):
        marks = mark_all()
        seen = heard()
        ws.open(demo_path) if opening else ws.fold()
        for feature in ws.features:
            cleared = [f.name for f in dataclasses.fields(feature) if opening or f.name not in feature.kept_by_edit]
            for f in dataclasses.fields(feature):
                kept = getattr(feature, f.name) is marks[(type(feature).__name__, f.name)]
                assert kept == (f.name not in cleared), (type(feature).__name__, f.name, opening)
                assert ((type(feature).__name__, f.name, f.default) in seen) == (f.name in cleared)


def test_opening_a_model_drops_the_overlay_and_says_so(ws, demo_path):
    ws.overlay.show_metric("params")
    seen = recorder(ws)
    ws.overlay.events.shown.connect(lambda value: seen.append(("overlay.shown", value)))
    ws.open(demo_path)
    assert ws.overlay.shown is None and ("overlay.shown", None) in seen
    assert [name for name, _ in seen].index("overlay.shown") < [name for name, _ in seen].index("opened")


def test_every_event_carries_its_declared_type(ws, demo_path, tmp_path):
    assert set(PAYLOADS) == set(ws.events), "every signal of the workspace's own has a declared payload type"
    for name, kind in PAYLOADS.items():
        (parameter,) = ws.events[name].signature.parameters.values()
        assert kind.__name__ in str(parameter.annotation), name
    seen = recorder(ws)
    ws.matches.find("conv-bn")
    ws.matches.explain("conv-bn", at="/stage2/block1/bn")
    ws.rewrite.preview("fold-bn", 0)
    ws.bn_lesson.run(0)
    ws.set_preview_inputs({})
    ws.comparison.run(demo_path, numeric=False)
    ws.overlay.run_profile(1)
    ws.overlay.show_metric("bytes")
    stale = ws.overlay.metric_job("flops")
    ws.rewrite.apply()
    stale.run()  # computed now, for the model as it was: dropped
    ws.undo()
    ws.save_as(tmp_path / "saved.onnx")
    ws.open(demo_path)
    emitted = {name for name, _ in seen}
    assert {"job_dropped", "edited", "saved", "opened", "bn_lesson.result", "matches.result", "matches.explanation",
            "rewrite.previewed", "comparison.result", "overlay.profile", "overlay.shown"} <= emitted
    for name, value in seen:
        if "." in name:  # a feature's field: the type it declares (named in its annotation), or None
            feature, field_name = name.split(".")
            declared = {f.name: str(f.type) for f in dataclasses.fields(getattr(ws, feature))}[field_name]
            assert value is None or type(value).__name__ in declared, (name, value, declared)
            continue
        assert isinstance(value, PAYLOADS[name]), (name, value)


def test_requests_take_keywords_only(ws):
    from graphlens.workspace import RewritePreviewRequest

    ws.matches.find("conv-bn")
    request = ws.rewrite.request("fold-bn", 0)
    with pytest.raises(TypeError):
        RewritePreviewRequest(*[getattr(request, f) for f in ("rule", "match_index")])  # type: ignore[misc]


def test_quantize_and_binarize_previews_are_jobs_like_the_others(ws):
    from graphlens.quantize import QuantConfig

    job = ws.quantization.preview_job(QuantConfig(), samples=1)
    preview = job.compute()
    ws.fold()
    assert not job.accept(preview) and ws.quantization.previewed is None
    kept = ws.binarization.preview_job(samples=1).run()
    assert ws.binarization.previewed is kept


def test_an_unknown_excluded_node_is_an_error_for_the_workspace_too(ws):
    from graphlens.quantize import QuantConfig

    before = ws.model.to_proto().SerializeToString()
    for run in (lambda config: ws.quantization.quantize(config, samples=1), ws.quantization.preview_job):
        with pytest.raises(GraphLensError, match="exclude: no node named '/stem/cnv' in the model; did you mean"):
            run(QuantConfig(exclude_nodes=("/stem/cnv",)))
    assert ws.model.to_proto().SerializeToString() == before and ws.quantization.applied is None


def test_a_cancelled_fold_leaves_the_model_as_it_was_and_nothing_to_undo(ws):
    before, revision = ws.model.to_proto().SerializeToString(), ws.revision
    with pytest.raises(Cancelled, match="the fold was cancelled"):
        ws.fold(task=Task(cancelled=lambda: ws.model.revision != revision))  # stopped once it has edited
    assert ws.model.to_proto().SerializeToString() == before
    assert ws.undo() is None and ws.redo() is None, "the taken-back fold is neither undone nor redone"
    ws.fold()  # and the same fold, not cancelled, still folds the demo's BNs
    assert ws.revision != revision
