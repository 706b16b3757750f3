"""Loading: graph structure, subgraphs, shapes, external data, and every kind of bad file."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.errors import ModelLoadError
from graphlens.core.model import load_model
from tests import models
from tests.bad_files import KINDS, make_bad_file


def test_nodes_tensors_producers_and_consumers(write_model):
    model = load_model(write_model(models.conv_bn()))
    g = model.graph
    assert [n.name for n in g.nodes] == ["conv", "bn"]
    conv, bn = g.node("conv"), g.node("bn")
    assert g.producer("c") == (conv, 0)
    assert g.consumers("c") == [(bn, 0)]
    assert g.consumers("bn_mean") == [(bn, 3)]
    assert g.producer("x") is None and g.is_graph_input("x")
    assert set(g.initializers) == {"w", "bn_scale", "bn_bias", "bn_mean", "bn_var"}
    assert g.outputs == ["y"]
    assert bn.attrs["epsilon"] == pytest.approx(1e-5)
    assert conv.attrs["pads"] == [1, 1, 1, 1]


def test_unnamed_and_duplicate_nodes_get_unique_names(write_model):
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Relu", ["a"], ["b"], name="r"),
        helper.make_node("Relu", ["b"], ["y"], name="r"),
    ]
    m = models.make_model(nodes, [models.tensor("x", shape=[2])], [models.tensor("y", shape=[2])])
    g = load_model(write_model(m)).graph
    names = [n.name for n in g.nodes]
    assert len(set(names)) == 3 and names[1] == "r"
    assert all(g.node(n).op_type == "Relu" for n in names)


def test_subgraphs_are_nested_graphs_that_know_their_parent(write_model):
    model = load_model(write_model(models.if_with_conv_bn()))
    branch = model.graph.node("branch")
    then_graph = branch.subgraphs["then_branch"][0]
    assert then_graph.parent is branch and then_graph.parent_graph is model.graph
    assert then_graph.path == "main/branch:then_branch"
    # an outer-scope tensor resolves through the enclosing graph
    assert then_graph.producer("x") is None and then_graph.owner_of("w") is model.graph
    assert then_graph.is_constant("w")
    assert sorted(g.path for g in model.graphs()) == ["main", "main/branch:else_branch", "main/branch:then_branch"]
    assert model.op_counts() == {"Conv": 2, "BatchNormalization": 1, "If": 1}


def test_shapes_come_from_shape_inference(write_model):
    model = load_model(write_model(models.conv_bn(channels=6)))
    assert str(model.graph.tensor_type("c")) == "float32 [1, 6, 8, 8]"
    assert model.shape_inference_error is None


def test_model_that_fails_shape_inference_still_loads(write_model):
    # Conv weight rank contradicts the input rank: inference fails, loading must not.
    nodes = [helper.make_node("Conv", ["x", "w"], ["y"], name="conv")]
    m = models.make_model(
        nodes,
        [models.tensor("x", shape=[1, 3, 8, 8])],
        [models.tensor("y", shape=None)],
        [models.init("w", np.ones((2, 3, 3), np.float32))],
    )
    model = load_model(write_model(m))
    assert model.graph.tensor_type("y").shape is None
    assert model.graph.tensor_type("x").shape == (1, 3, 8, 8)
    assert model.node_count() == 1


def test_crash_in_shape_inference_is_recorded_not_raised(write_model, monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("[ShapeInferenceError] something went wrong\nmore")

    monkeypatch.setattr(onnx.shape_inference, "infer_shapes", broken)
    model = load_model(write_model(models.conv_bn(channels=6)))
    assert str(model.graph.tensor_type("y")) == "float32 [1, 6, 8, 8]"  # declared, so still known
    assert model.graph.tensor_type("c").shape is None
    assert model.shape_inference_error == "[ShapeInferenceError] something went wrong"


def test_external_data_is_loaded_from_beside_the_model(tmp_path):
    m = models.conv_bn(channels=16)
    expected = onnx.numpy_helper.to_array(m.graph.initializer[0])
    path = tmp_path / "ext.onnx"
    onnx.save(m, path, save_as_external_data=True, location="ext.weights", size_threshold=64)
    assert (tmp_path / "ext.weights").exists()
    model = load_model(path)
    assert model.external_data
    w = model.graph.constant_value("w")
    np.testing.assert_array_equal(w, expected)


def test_missing_external_data_names_the_data_file(tmp_path):
    path = tmp_path / "ext.onnx"
    onnx.save(models.conv_bn(channels=16), path, save_as_external_data=True, location="w.bin", size_threshold=64)
    (tmp_path / "w.bin").unlink()
    with pytest.raises(ModelLoadError, match=r"ext\.onnx: external data file 'w\.bin' .* is missing"):
        load_model(path)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_files_raise_one_line_naming_the_file(tmp_path, kind):
    path, expected = make_bad_file(tmp_path, kind)
    with pytest.raises(ModelLoadError) as info:
        load_model(path)
    message = str(info.value)
    assert message.startswith(str(path)), message
    assert "\n" not in message
    assert re.search(expected, message), message
