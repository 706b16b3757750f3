"""Initializers listed as graph inputs: constants in IR < 4, overridable defaults from IR 4 on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest

from graphlens.core.model import Model, load_model
from graphlens.layout.view import build_view
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.numerics import diff_models, make_inputs
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from tests.cli_process import run_graphlens
from tests.initializer_inputs import zoo_cnn


def runtime_inputs(proto: onnx.ModelProto) -> list[str]:
    initialized = {t.name for t in proto.graph.initializer}
    return [v.name for v in proto.graph.input if v.name not in initialized]


def fold(proto: onnx.ModelProto, rules: list[str] | None = None):
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    report = fold_model(model, resolve_rules(rules), session)
    return original, model, session, report


def assert_sound(original: bytes, model: Model, session: EditHistory) -> None:
    """Checker, the inputs a caller feeds and the outputs unchanged, values equal, undo exact."""
    before = onnx.ModelProto.FromString(original)
    after = model.to_proto()
    onnx.checker.check_model(after, full_check=True)
    assert runtime_inputs(after) == runtime_inputs(before)
    assert [o.name for o in after.graph.output] == [o.name for o in before.graph.output]
    diff = diff_models(before, model, make_inputs(model, seed=3))
    assert diff.available, diff.reason
    assert diff.passed, "\n".join(diff.summary_lines())
    while session.undo_stack:
        session.undo()
    assert model.to_proto().SerializeToString() == original


@pytest.mark.parametrize("light", [True, False], ids=["constantofshape-weights", "initializer-weights"])
def test_ir3_initializer_inputs_are_constants_everywhere(light):
    model = Model(zoo_cnn(3, light_weights=light))
    graph = model.graph
    assert graph.inputs == ["data_0"]
    assert graph.is_constant("conv0_w_0") and graph.is_constant("bn0_s")
    assert len(find_matches(get_pattern("conv-bn"), model)) == 2
    assert explain(get_pattern("conv-bn"), model, at="n1").matched
    assert list(make_inputs(model)) == ["data_0"]
    view = build_view(graph)
    assert [view.items[i].title for i in view.inputs] == ["data_0"]
    assert not any(item.title == "ConstantOfShape" for item in view.items)


@pytest.mark.parametrize("light", [True, False], ids=["constantofshape-weights", "initializer-weights"])
def test_ir3_fold_folds_every_bn_and_saves_a_valid_ir3_model(light, tmp_path):
    original, model, session, report = fold(zoo_cnn(3, light_weights=light, head=True))
    assert report.applied["fold-bn"] == 2 and not report.bn_left
    saved = onnx.load(str(model.save(tmp_path / "folded.onnx")))
    assert saved.ir_version == 3
    inits = {t.name for t in saved.graph.initializer}
    listed = {v.name for v in saved.graph.input} - {"data_0"}
    assert listed == inits, "IR 3 lists every initializer as an input, and nothing else"
    assert_sound(original, model, session)


def test_ir4_initializer_inputs_stay_overridable_and_explain_names_the_fix():
    model = Model(zoo_cnn(8))
    graph = model.graph
    assert graph.overridable_initializers and "data_0" in graph.inputs
    assert not graph.is_constant("bn0_s")
    assert find_matches(get_pattern("conv-bn"), model) == []
    message = explain(get_pattern("conv-bn"), model, at="n1").message
    assert "callers may override" in message and "freeze-inputs" in message
    # random inputs never replace an overridable weight
    assert list(make_inputs(model)) == ["data_0"]
    # drawn inside the consumers' boxes, marked, not as a row of inputs
    view = build_view(graph)
    assert [view.items[i].title for i in view.inputs] == ["data_0"]
    bn_box = next(item for item in view.items if item.key.endswith("n1"))
    assert any("· input" in line for line in bn_box.lines)
    conv_box = next(item for item in view.items if item.key.endswith("n0"))
    assert "W ⟨4×3×3×3⟩ · input" in conv_box.lines, "the ConstantOfShape weight is drawn in its conv's box"
    assert not any(item.title == "ConstantOfShape" for item in view.items)


def test_freeze_inputs_then_fold_folds_and_undo_restores_the_inputs():
    original, model, session, report = fold(zoo_cnn(8), ["freeze-inputs", "fold-bn"])
    assert report.applied["freeze-inputs"] == 1 and report.applied["fold-bn"] == 2 and not report.bn_left
    assert model.graph.inputs == ["data_0"]
    assert [v.name for v in model.to_proto().graph.input] == ["data_0"]
    assert_sound(original, model, session)
    assert len(model.graph.overridable_initializers) == 10


def test_freeze_inputs_alone_changes_no_value():
    original, model, session, report = fold(zoo_cnn(8), ["freeze-inputs"])
    assert report.applied["freeze-inputs"] == 1
    before = onnx.ModelProto.FromString(original)
    expected = next(onnx.numpy_helper.to_array(t) for t in before.graph.initializer if t.name == "bn1_riv")
    assert np.array_equal(model.graph.constant_value("bn1_riv"), expected)
    assert_sound(original, model, session)


def test_fold_without_freeze_inputs_leaves_ir4_defaults_alone():
    _, model, _, report = fold(zoo_cnn(8))
    assert not report.applied and len(report.bn_left) == 2
    assert all("freeze-inputs" in left["reason"] for left in report.bn_left)


def graphlens(*args: str) -> subprocess.CompletedProcess[str]:
    return run_graphlens(*args)


def test_cli_info_counts_initializer_inputs_and_fold_takes_freeze_inputs(write_model, tmp_path):
    ir8, ir3 = write_model(zoo_cnn(8), "ir8.onnx"), write_model(zoo_cnn(3), "ir3.onnx")
    info = graphlens("info", ir8)
    assert info.returncode == 0 and "10 also listed as graph inputs" in info.stdout and "freeze-inputs" in info.stdout
    assert "constants" in graphlens("info", ir3).stdout
    summary = json.loads(graphlens("info", ir8, "--json").stdout)
    assert summary["initializer_inputs"] == {"count": 10, "overridable": True}
    assert [i["name"] for i in summary["inputs"]] == ["data_0"]
    out = tmp_path / "folded.onnx"
    result = graphlens("fold", ir8, "-o", out, "--rules", "freeze-inputs,fold-bn", "--check")
    assert result.returncode == 0, result.stderr
    assert "freeze-inputs: applied 1 time" in result.stdout and "fold-bn: applied 2 times" in result.stdout
    assert sum(n.op_type == "BatchNormalization" for n in onnx.load(str(out)).graph.node) == 0


ZOO_BN_LEFT = {"resnet50": 0, "inception_v2": 0, "shufflenet": 0, "densenet121": 62}
"""BatchNormalization nodes onnxslim leaves in onnx's light zoo CNNs (DenseNet's others follow Concat/Pool)."""


@pytest.mark.parametrize("name", list(ZOO_BN_LEFT))
def test_zoo_cnns_as_onnx_ships_them_fold_as_far_as_onnxslim_and_stay_equal(name, tmp_path):
    path = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light" / f"light_{name}.onnx"
    if not path.exists():
        pytest.skip(f"this onnx build does not ship {path.name}")
    model = load_model(path)
    assert len(model.graph.inputs) == 1, "IR 3: only the image is an input"
    before = onnx.load(str(path))
    report = fold_model(model, resolve_rules(None), EditHistory(model, keep_history=False))
    assert len(report.bn_left) == ZOO_BN_LEFT[name]
    assert all("Concat" in left["reason"] or "Pool" in left["reason"] for left in report.bn_left)
    saved = onnx.load(str(model.save(tmp_path / "folded.onnx")))
    onnx.checker.check_model(saved)
    assert runtime_inputs(saved) == runtime_inputs(before)
    diff = diff_models(before, load_model(tmp_path / "folded.onnx"), make_inputs(model, seed=0))
    assert diff.available and diff.passed, "\n".join(diff.summary_lines())
