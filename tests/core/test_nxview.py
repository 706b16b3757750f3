"""The networkx projection keeps op types, attributes, slots and tensor names."""

from __future__ import annotations

import networkx as nx
import numpy as np
from onnx import helper

from graphlens.core.model import load_model
from tests import models


def test_nodes_carry_op_domain_and_attributes(write_model):
    g = load_model(write_model(models.conv_bn())).graph.to_networkx()
    assert isinstance(g, nx.DiGraph)
    assert g.nodes["conv"]["op_type"] == "Conv" and g.nodes["conv"]["domain"] == ""
    assert g.nodes["conv"]["attrs"]["pads"] == [1, 1, 1, 1]
    assert g.edges["conv", "bn"]["links"] == ((0, 0, "c"),)


def test_input_order_and_repeated_inputs_survive(write_model):
    nodes = [
        helper.make_node("Split", ["x"], ["a", "b"], name="split", axis=0, num_outputs=2),
        helper.make_node("Sub", ["b", "a"], ["d"], name="sub"),
        helper.make_node("Mul", ["d", "d"], ["y"], name="square"),
    ]
    m = models.make_model(nodes, [models.tensor("x", shape=[4])], [models.tensor("y", shape=[2])], opset=18)
    g = load_model(write_model(m)).graph.to_networkx()
    assert sorted(g.edges["split", "sub"]["links"]) == [(0, 1, "a"), (1, 0, "b")]
    assert g.edges["sub", "square"]["links"] == ((0, 0, "d"), (0, 1, "d"))


def test_subgraph_gets_its_own_projection(write_model):
    model = load_model(write_model(models.if_with_conv_bn()))
    then_graph = model.graph.node("branch").subgraphs["then_branch"][0]
    g = then_graph.to_networkx()
    assert set(g.nodes) == {"then_conv", "then_bn"}
    assert g.graph["path"] == "main/branch:then_branch"
    assert set(model.graph.to_networkx().nodes) == {"branch"}


def test_projection_is_built_once(write_model):
    graph = load_model(write_model(models.conv_bn())).graph
    assert graph.to_networkx() is graph.to_networkx()
    assert np.isclose(graph.to_networkx().nodes["bn"]["attrs"]["epsilon"], 1e-5)


def test_fast_construction_equals_the_public_api_one(write_model, demo_path):
    from graphlens.core.nxview import to_networkx, to_networkx_reference

    for path in (demo_path, write_model(models.conv_bn_params_behind_constants())):
        graph = load_model(path).graph
        fast, reference = to_networkx(graph), to_networkx_reference(graph)
        assert nx.utils.graphs_equal(fast, reference)
        assert list(fast.nodes) == list(reference.nodes)
        assert dict(fast.pred["/stage1/block1/add"] if "/stage1/block1/add" in fast else {}) == dict(
            reference.pred["/stage1/block1/add"] if "/stage1/block1/add" in reference else {}
        )
