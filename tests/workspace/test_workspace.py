"""The workspace, headless: each of the three jobs, its events, and the rules previews live by."""

from __future__ import annotations

import subprocess
import sys

import onnx
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.workspace import MatchesResult, RewritePreview, Workspace, compute_rewrite_preview

STAGE2_BN = "/stage2/block1/bn"


@pytest.fixture
def ws(demo_path) -> Workspace:
    workspace = Workspace()
    workspace.open(demo_path)
    return workspace


def recorder(ws: Workspace) -> list[tuple[str, object]]:
    """Every event of the workspace and of its features (``matches.result``, ``rewrite.previewed``…), in order."""
    seen: list[tuple[str, object]] = []
    ws.events.all.connect(lambda info: seen.append((info.signal.name, info.args[0])))
    for feature in ws.features:
        feature.events.all.connect(lambda info, f=feature.name: seen.append((f"{f}.{info.signal.name}", info.args[0])))
    return seen


def test_inspecting_opening_gives_the_model_and_a_bad_file_keeps_it(ws, tmp_path):
    model = ws.model
    assert model is not None and model.name == "demo.onnx"
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(GraphLensError, match="bad.onnx: is not an ONNX model"):
        ws.open(bad)
    assert ws.model is model


def test_matches_then_explain_then_preview_then_apply_undo_redo(ws):
    seen = recorder(ws)
    found = ws.matches.find("conv-bn")
    assert isinstance(found, MatchesResult) and len(found.matches) == 6 and found.rules == ["fold-bn"]
    assert found.to_dict()["matches"][0]["nodes"] == {"conv": "/stem/conv", "bn": "/stem/bn"}
    why = ws.matches.explain("conv-bn", at=STAGE2_BN)
    assert not why.matched and "so folding would change '/stage2/block1/tap/maxpool'" in why.message
    before = ws.model.to_proto().SerializeToString()
    preview = ws.rewrite.preview("fold-bn", 0)
    assert preview.numeric.passed and preview.parameters and preview.to_dict()["removed"] == ["/stem/conv", "/stem/bn"]
    assert ws.model.to_proto().SerializeToString() == before, "a preview never touches the live model"
    applied = ws.rewrite.apply()
    assert applied.edits == 1 and ws.modified
    assert ws.matches.result is None and ws.rewrite.previewed is None, "results for the model as it was are dropped"
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before
    ws.redo()
    assert "/stem/bn" not in ws.model.graph.by_name
    names = [name for name, _ in seen]
    assert names[:3] == ["matches.result", "matches.explanation", "rewrite.previewed"]
    assert names.count("edited") == 3 and ("matches.result", None) in seen and ("rewrite.previewed", None) in seen


def test_a_preview_for_an_older_revision_is_dropped_and_apply_refuses(ws):
    ws.matches.find("conv-bn")
    job = ws.rewrite.preview_job("fold-bn", 1)
    ws.apply_all("fuse-decomposed-bn")  # no-op on the demo: nothing changes, revision stays
    ws.rewrite.preview("fold-bn", 0)
    ws.rewrite.apply()  # the model changes
    stale = job.compute()  # computed for the model as it was, e.g. in a worker
    assert isinstance(stale, RewritePreview) and compute_rewrite_preview(job.request).rule == "fold-bn"
    assert not job.accept(stale) and ws.rewrite.previewed is None
    with pytest.raises(GraphLensError, match="no previewed rewrite"):
        ws.rewrite.apply()


def test_apply_refuses_a_preview_the_model_has_moved_past(ws):
    ws.matches.find("conv-bn")
    ws.rewrite.preview("fold-bn", 0)
    ws.model.graph.changed()  # a script edited the graph behind the workspace's back
    with pytest.raises(GraphLensError, match="changed after this preview"):
        ws.rewrite.apply()
    assert "/stem/bn" in ws.model.graph.by_name


def test_refused_preview_says_why(ws):
    ws.matches.find("conv-bn")
    with pytest.raises(GraphLensError, match="there is no match 99"):
        ws.rewrite.preview("fold-bn", 99)
    with pytest.raises(GraphLensError, match="unknown rule 'fold-bm'"):
        ws.rewrite.preview("fold-bm", 0)


def test_apply_all_then_save_as_writes_what_graphlens_fold_writes(ws, demo_path, tmp_path):
    result = ws.apply_all("fold-bn")
    assert result.report.applied["fold-bn"] == 7 and ws.session.undo_stack
    ours = ws.save_as(tmp_path / "window.onnx").path
    cli = tmp_path / "cli.onnx"
    done = subprocess.run([sys.executable, "-m", "graphlens", "fold", str(demo_path), "-o", str(cli), "--rules",
                           "fold-bn"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    a, b = onnx.load(str(ours)), onnx.load(str(cli))
    assert [(n.name, n.op_type, list(n.input), list(n.output)) for n in a.graph.node] == \
           [(n.name, n.op_type, list(n.input), list(n.output)) for n in b.graph.node]
    assert sorted(t.SerializeToString() for t in a.graph.initializer) == \
           sorted(t.SerializeToString() for t in b.graph.initializer)
    assert not ws.modified and ws.model.path == ours


def test_pattern_arguments_mean_the_same_everywhere(ws, tmp_path):
    text = "conv = Conv(x, w: const)\nbn = BatchNormalization(conv, s: const, b: const, m: const, v: const)"
    path = tmp_path / "mine.pattern"
    path.write_text(text)
    from_text = [m.nodes for m in ws.matches.find(text).matches]
    assert from_text and from_text == [m.nodes for m in ws.matches.find(str(path)).matches]
    assert ws.matches.find("conv-bn").pattern.name == "conv-bn"
    with pytest.raises(GraphLensError, match="did you mean 'conv-bn'"):
        ws.matches.find("conv-bm")


def test_lesson_runs_once_per_match_and_a_refused_match_says_why(ws, monkeypatch):
    import graphlens.rewrites.bn_lesson as lesson_module

    runs = []
    real = lesson_module.run_samples
    monkeypatch.setattr(lesson_module, "run_samples", lambda *a, **k: runs.append(1) or real(*a, **k))
    ws.matches.find("conv-bn")
    first = ws.bn_lesson.run(0)
    assert first.lesson is not None and first.samples is not None and first.samples.before is not None
    other = ws.bn_lesson.run(0, channel=(first.lesson.channel + 1) % 16)
    assert other.lesson.channel != first.lesson.channel and len(runs) == 1
    with pytest.raises(GraphLensError, match="out of range"):
        ws.bn_lesson.run(0, channel=99)


def test_opening_a_model_resets_every_result(ws, demo_path):
    ws.matches.find("conv-bn")
    ws.matches.explain("conv-bn", at=STAGE2_BN)
    ws.rewrite.preview("fold-bn", 0)
    seen = recorder(ws)
    ws.open(demo_path)
    assert seen[-1][0] == "opened", "views reset on opened, after each dropped result was announced"
    assert dict(seen[:-1]) == {"matches.result": None, "matches.explanation": None, "rewrite.previewed": None}
    assert ws.matches.result is None and ws.matches.explanation is None
    assert ws.rewrite.previewed is None and ws.bn_lesson.result is None


def test_freeze_inputs_asks_the_last_question_again(write_model):
    from tests.initializer_inputs import zoo_cnn

    ws = Workspace()
    ws.open(write_model(zoo_cnn(8), "inputs.onnx"))
    assert not ws.matches.explain("conv-bn", at="n1").matched
    result = ws.freeze_inputs()
    assert result.report.applied["freeze-inputs"] == 1
    assert ws.matches.explanation is not None and ws.matches.explanation.matched


def test_preview_inputs_that_do_not_fit_keep_the_previous_ones(tmp_path):
    import numpy as np

    from tests.numerics.dynamic_models import fpn

    path = tmp_path / "fpn.onnx"
    onnx.save(fpn(), str(path))
    ws = Workspace()
    ws.open(path)
    ws.set_preview_inputs(dims={"H": 64})
    with pytest.raises(GraphLensError, match="'nope' is not a dynamic dimension"):
        ws.set_preview_inputs(dims={"nope": 3})
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros(3, np.float32))
    with pytest.raises(GraphLensError, match="bad.npz"):
        ws.set_preview_inputs(npz=bad)
    assert ws.preview_inputs.dims == {"H": 64} and ws.preview_inputs.file is None
    ws.matches.find("conv-bn")
    preview = ws.rewrite.preview("fold-bn", 0)
    assert preview.numeric.passed and preview.numeric.inputs.dims.values["H"] == 64


def test_the_headless_example_in_the_scripting_docs_runs(demo_path, tmp_path, monkeypatch):
    from pathlib import Path

    docs = Path(__file__).resolve().parents[2] / "docs" / "scripting.md"
    text = docs.read_text(encoding="utf-8")
    example = text.split("## Headless", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(example.replace("resources/demo.onnx", str(demo_path)), namespace)  # the docs' own code
    assert (tmp_path / "folded.onnx").exists()
    assert namespace["why"].matched is False and namespace["preview"].numeric.passed
    lossy = text.split("### Quantize, binarize", 1)[1].split("```python\n", 1)[1].split("```", 1)[0]
    exec(lossy, namespace)  # the docs' own code, on the workspace the first example left
    assert namespace["result"].output_sqnr_db > 20 and namespace["binarized"].layers
    assert namespace["ws"].overlay.shown is not None and namespace["ws"].overlay.shown.unit


def test_apply_leaves_no_dead_weights_and_undo_restores_them(ws, tmp_path):
    before = ws.model.to_proto().SerializeToString()
    ws.matches.find("conv-bn")
    preview = ws.rewrite.preview("fold-bn", 0)
    assert "stem.conv.weight" in preview.edit.drop_initializers, "the preview shows what Apply will drop"
    ws.rewrite.apply()
    saved = onnx.load(str(ws.save_as(tmp_path / "one.onnx").path))
    read = {t for n in saved.graph.node for t in n.input}
    assert [t.name for t in saved.graph.initializer if t.name not in read] == []
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before
