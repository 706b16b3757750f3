"""Saving checks the model fully (shape inference included), judges onnxruntime's contrib ops by its own
schemas, and leaves nothing behind when the check or the caller's last step fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.errors import SaveError
from graphlens.core.full_check import full_check_problem
from graphlens.core.model import Model
from tests import models


def skip_layer_norm(*, domain: str = "com.microsoft", op: str = "SkipLayerNormalization",
                    **attrs: object) -> onnx.ModelProto:
    h = 8
    nodes = [helper.make_node(op, ["a", "b", "gamma"], ["y"], name="norm", domain=domain, **attrs)]
    model = models.make_model(nodes, [models.tensor("a", shape=[1, 2, h]), models.tensor("b", shape=[1, 2, h])],
                              [models.tensor("y", shape=[1, 2, h])], [models.init("gamma", np.ones(h, np.float32))])
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


def test_a_shape_error_the_plain_check_misses_is_refused_and_nothing_is_written(tmp_path):
    model = models.conv_bn()
    model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = -1
    onnx.checker.check_model(model)  # the structural check alone lets it by
    with pytest.raises(SaveError, match="not written, the model fails the ONNX checker: .*differ in dimension 2"):
        Model(model).save(tmp_path / "out.onnx")
    assert list(tmp_path.iterdir()) == []
    Model(model).save(tmp_path / "forced.onnx", full_check=False)  # what --force asks for
    assert (tmp_path / "forced.onnx").exists()


def test_contrib_ops_are_judged_by_onnxruntime_schemas():
    assert full_check_problem(skip_layer_norm().SerializeToString()) is None
    bogus = skip_layer_norm(bogus=1)
    assert full_check_problem(bogus.SerializeToString()) == (
        "Unrecognized attribute: bogus for operator SkipLayerNormalization")
    # one onnxruntime registers in the default domain, which onnx alone does not know
    simplified = skip_layer_norm(domain="", op="SimplifiedLayerNormalization")
    simplified.graph.node[0].input.remove("b")
    assert full_check_problem(simplified.SerializeToString()) is None
    # the schemas are there for the check only: the rest of the process sees onnx's registry as it was
    assert not onnx.defs.has("SimplifiedLayerNormalization")
    assert not onnx.defs.has("SkipLayerNormalization", "com.microsoft")


def test_a_custom_domain_onnxruntime_does_not_know_is_left_to_its_runtime():
    model = skip_layer_norm(domain="example.custom", op="Mystery")
    assert full_check_problem(model.SerializeToString()) is None


def test_a_failure_before_the_commit_leaves_nothing_and_an_old_file_as_it_was(tmp_path):
    target = tmp_path / "out.onnx"
    target.write_bytes(b"old")
    seen = []

    def fail(staged):
        seen.append(onnx.load(staged).graph.name)  # the staged file is complete and readable under its own name
        assert staged.name == target.name
        raise RuntimeError("numeric check failed")

    with pytest.raises(RuntimeError):
        Model(models.conv_bn()).save(target, before_commit=fail)
    assert seen == ["test"] and target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.onnx"]


def test_a_graph_output_without_shape_fails_the_full_check():
    """onnx's full check requires every main-graph output to declare a shape (a rank, at least)."""
    model = models.make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                              [models.tensor("x", shape=[2])], [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                               None)])
    assert "Field 'shape' of 'type' is required but missing" in (full_check_problem(model.SerializeToString()) or "")
