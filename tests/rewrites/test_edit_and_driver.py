"""Edits apply, undo and redo exactly; the driver tidies up and reports; all on the demo model too."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory, GraphEdit
from tests import models
from tests.rewrites.checks import assert_rewrite_is_sound, count


def test_demo_model_folds_everything_foldable(demo_path):
    original = demo_path.read_bytes()
    model = load_model(demo_path)
    session = EditHistory(model)
    report = fold_model(model, session=session)
    assert report.applied["fold-bn"] == 7
    assert [b["node"] for b in report.bn_left] == ["/stage2/block1/bn"]
    assert "so folding would change '/stage2/block1/tap/maxpool'" in report.bn_left[0]["reason"]
    assert count(model, "Constant") == 0  # the BN parameters behind Constant nodes went with it
    assert len(session.undo_stack) == 1  # the whole run is one undo step
    assert model.modified
    assert_rewrite_is_sound(original, model, session)
    assert not model.modified


def test_undo_redo_round_trip(demo_path):
    original = demo_path.read_bytes()
    model = load_model(demo_path)
    session = EditHistory(model)
    fold_model(model, session=session)
    folded = model.to_proto().SerializeToString()
    session.undo()
    assert model.to_proto().SerializeToString() == original
    session.redo()
    assert model.to_proto().SerializeToString() == folded
    assert session.redo() is None and session.undo() is not None and session.undo() is None


def test_reroute_and_graph_output_names_survive():
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Identity", ["r"], ["i"], name="id"),
        helper.make_node("Sigmoid", ["i"], ["y"], name="sig"),
        helper.make_node("Identity", ["r"], ["out2"], name="kept"),
    ]
    proto = models.make_model(nodes, [models.tensor("x", shape=[2])],
                              [models.tensor("y", shape=[2]), models.tensor("out2", shape=[2])])
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    report = fold_model(model, resolve_rules([]), session)
    assert report.cleanup["identity nodes bypassed"] == 1
    assert [n.name for n in model.graph.nodes] == ["relu", "sig", "kept"]  # 'kept' writes a graph output
    assert model.graph.node("sig").inputs == ["r"]
    assert_rewrite_is_sound(original, model, session, inputs={"x": np.array([-1.0, 2.0], np.float32)})


def test_dead_nodes_and_unused_initializers_go():
    nodes = [
        helper.make_node("Relu", ["x"], ["y"], name="relu"),
        helper.make_node("Mul", ["x", "unused_w"], ["dead"], name="dead_mul"),
    ]
    proto = models.make_model(nodes, [models.tensor("x", shape=[2])], [models.tensor("y", shape=[2])],
                              [models.init("unused_w", np.ones(2, np.float32)),
                               models.init("orphan", np.ones(3, np.float32))])
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    report = fold_model(model, resolve_rules([]), session)
    assert report.cleanup == {"dead nodes removed": 1, "unused initializers removed": 2}
    assert [n.name for n in model.graph.nodes] == ["relu"] and model.graph.initializers == {}
    assert_rewrite_is_sound(original, model, session)


def test_edits_that_collide_are_refused_and_change_nothing(demo_path):
    model = load_model(demo_path)
    session = EditHistory(model)
    edit = GraphEdit("main", "test", "drop the stem relu", remove=["/stem/relu"])
    with pytest.raises(GraphLensError, match="two rewrites remove node '/stem/relu'"):
        session.apply([edit, edit])
    assert model.to_proto().SerializeToString() == demo_path.read_bytes()
    with pytest.raises(GraphLensError, match="not in main"):
        session.apply([GraphEdit("main", "test", "ghost", remove=["nope"])])


def test_unknown_rule_names_list_the_known_ones():
    with pytest.raises(GraphLensError,
                       match="unknown rule 'fold-bm'; rules: freeze-inputs, fuse-decomposed-bn, fold-bn, fold-affine"):
        resolve_rules(["fold-bm"])


def test_preview_compares_the_boundary_tensor_and_leaves_the_model_alone(demo_path):
    from graphlens.matching.matcher import find_matches
    from graphlens.patterns.library import get_pattern
    from graphlens.rewrites.preview import preview_edit
    from graphlens.rewrites.rules import RULES

    model = load_model(demo_path)
    match = find_matches(get_pattern("conv-bn"), model)[0]
    edit = RULES["fold-bn"].plan(match)
    result = preview_edit(model, edit)
    assert model.to_proto().SerializeToString() == demo_path.read_bytes() and not model.modified
    assert result.numeric.available and result.numeric.passed
    (boundary,) = result.numeric.boundary
    assert boundary.name == "/stem/bn_output_0" and boundary.max_abs < boundary.limit
    assert boundary.max_abs > 0  # float32 rounding differs: the comparison is real
    assert [n.op_type for n in result.after.graph.node].count("BatchNormalization") == 7


def test_all_or_nothing_takes_back_every_edit_when_the_work_fails(demo_path):
    """quantize and binarize run inside it: a failure or a cancel half-way leaves the model as it was."""
    original = demo_path.read_bytes()
    model = load_model(demo_path)
    session = EditHistory(model)
    with pytest.raises(GraphLensError, match="stopped half-way"), session.all_or_nothing("fold then fail"):
        fold_model(model, session=session)
        assert model.to_proto().SerializeToString() != original  # edits were applied inside
        raise GraphLensError("stopped half-way")
    assert model.to_proto().SerializeToString() == original
    assert not session.undo_stack and not session.redo_stack
    with session.all_or_nothing("fold"):
        fold_model(model, session=session)
    assert len(session.undo_stack) == 1  # the whole run is one undo step
    session.undo()
    assert model.to_proto().SerializeToString() == original
