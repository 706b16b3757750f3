"""Broken and hostile files, in process: refused with one line, or loaded and usable end to end."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core import constants
from graphlens.core.errors import ModelLoadError
from graphlens.core.model import Model, load_model
from graphlens.layout.layered import layout_view
from graphlens.layout.view import ViewOptions, build_view
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.driver import fold_model
from tests import hostile_models as hm
from tests import models


@pytest.mark.parametrize("case", hm.REFUSED, ids=lambda c: c.name)
def test_refused_files_raise_one_line_naming_the_file(tmp_path, case):
    path = case.write(tmp_path)
    with pytest.raises(ModelLoadError) as caught:
        load_model(path)
    message = str(caught.value)
    assert len(message.splitlines()) == 1 and message.startswith(f"{path}: ")
    assert re.search(case.refused, message), message


@pytest.mark.parametrize("case", hm.LOADED, ids=lambda c: c.name)
def test_loaded_files_go_through_layout_matching_explain_and_fold(tmp_path, case):
    model = load_model(case.write(tmp_path))
    for graph in model.graph.walk():
        for grouping in (True, False):
            layout = layout_view(build_view(graph, ViewOptions(grouping=grouping)))
            assert len(layout.x) == len(build_view(graph, ViewOptions(grouping=grouping)).items)
    pattern = get_pattern("conv-bn")
    matches = find_matches(pattern, model)
    for match in matches:
        assert explain(pattern, model, at=match.nodes["bn"]).matched
    assert explain(pattern, model).message
    report = fold_model(model)
    assert report.lines()
    assert model.to_proto().graph.output


def test_huge_constant_of_shape_is_constant_but_never_evaluated():
    graph = Model(hm.huge_constant_of_shape_bn()).graph
    assert graph.why_not_constant("bn_scale") is None
    assert graph.constant_value("bn_scale") is None
    missing = constants.unevaluated(graph, "bn_scale")
    assert missing is not None and missing.shape == tuple(hm.HUGE_SHAPE)
    assert constants.input_refusal(graph, graph.node("bn"), 1) == (
        "input 1 (scale) of BatchNormalization 'bn' is a constant of 1,000,000,000,000 elements (3.64 TiB), "
        "too large to evaluate (the limit is 256 MiB)"
    )


def test_fold_and_explain_say_which_constant_is_too_large():
    model = Model(hm.huge_constant_of_shape_bn())
    report = fold_model(model)
    text = "\n".join(report.lines())
    assert "BatchNormalization 'bn' left in place: input 1 (scale) of BatchNormalization 'bn' is a constant of " \
        "1,000,000,000,000 elements" in text
    assert "too large to evaluate" in explain(get_pattern("conv-bn"), model, at="bn").message
    assert [n.op_type for n in model.graph.nodes] == ["ConstantOfShape", "Conv", "BatchNormalization"]


def test_a_constant_declaring_more_elements_than_it_holds_is_refused_as_too_large():
    graph = Model(hm.constant_declaring_huge_dims()).graph
    assert graph.is_constant("bn_scale") and graph.constant_value("bn_scale") is None
    assert "too large to evaluate" in constants.unevaluated(graph, "bn_scale").reason


def test_an_initializer_holding_less_data_than_its_dims_has_no_value():
    graph = Model(hm.initializer_declaring_huge_dims()).graph
    assert graph.is_constant("bn_scale") and graph.constant_value("bn_scale") is None
    reason = constants.input_refusal(graph, graph.node("bn"), 1)
    assert reason.startswith("input 1 (scale) of BatchNormalization 'bn' is an initializer whose data is malformed")


def test_real_constant_data_over_the_limit_is_not_evaluated(monkeypatch):
    monkeypatch.setattr(constants, "MAX_EVALUATED_BYTES", 1000)
    big = models.init("big", np.ones(300, np.float32))  # 1,200 bytes: over the lowered limit
    small = models.init("small", np.ones(200, np.float32))
    nodes = [
        helper.make_node("Constant", [], ["a"], name="big_const", value=big),
        helper.make_node("Constant", [], ["b"], name="small_const", value=small),
        helper.make_node("Cast", ["b"], ["c"], name="widen", to=onnx.TensorProto.DOUBLE),  # 1,600 bytes
        helper.make_node("Add", ["a", "c"], ["y"], name="add"),
    ]
    graph = Model(models.make_model(nodes, [], [models.tensor("y", shape=[300])])).graph
    assert graph.constant_value("a") is None and "300 elements" in constants.unevaluated(graph, "a").reason
    assert graph.constant_value("b").shape == (200,)
    assert graph.constant_value("c") is None and "too large" in constants.unevaluated(graph, "c").reason


def test_a_20000_node_identity_chain_resolves_without_recursion():
    graph = Model(hm.identity_chain_to_conv_weight()).graph
    last = f"w_{hm.CHAIN_LENGTH - 1}"
    assert graph.why_not_constant(last) is None
    np.testing.assert_array_equal(graph.constant_value(last), graph.constant_value("w"))


def test_reasons_along_a_long_chain_name_its_start_and_stay_short():
    proto = hm.identity_chain_to_conv_weight()
    weight = next(t for t in proto.graph.initializer if t.name == "w")
    proto.graph.initializer.remove(weight)
    proto.graph.input.append(models.tensor("w", shape=[4, 3, 3, 3]))
    graph = Model(proto).graph
    reason = graph.why_not_constant(f"w_{hm.CHAIN_LENGTH - 1}")
    assert reason == (
        f"is produced by Identity 'id_{hm.CHAIN_LENGTH - 1}', whose input 'w_{hm.CHAIN_LENGTH - 2}' is at the end "
        f"of a chain of {hm.CHAIN_LENGTH - 1:,} shape-only nodes starting from 'w', which comes from graph input 'w'"
    )
    assert graph.why_not_constant("w_1") == (
        "is produced by Identity 'id_1', whose input 'w_0' is produced by Identity 'id_0', "
        "whose input 'w' comes from graph input 'w'"
    )


def test_cycle_search_accepts_nodes_out_of_order_and_names_a_node_on_the_cycle():
    proto = hm.relu_chain(50)
    shuffled = list(proto.graph.node)[::-1]
    proto.graph.ClearField("node")
    proto.graph.node.extend(shuffled)
    assert len(Model(proto).graph.nodes) == 50  # out of order but acyclic: still loads
    proto = hm.two_node_cycle()
    proto.graph.node.insert(0, proto.graph.node.pop())  # 'after' (downstream of the cycle) comes first
    with pytest.raises(ModelLoadError, match=r"node (Add 'cycle_a'|Relu 'cycle_b') is part of a cycle"):
        Model(proto, path=None)


def test_nested_ifs_25_deep_have_paths_and_matches_at_the_bottom():
    model = Model(hm.nested_if())
    graphs = model.graphs()
    assert max(g.depth for g in graphs) == hm.IF_DEPTH
    deepest, _ = model.find_node("deep_bn")
    assert deepest.depth == hm.IF_DEPTH
    assert deepest.path.count("/") == hm.IF_DEPTH and model.graph_at(deepest.path) is deepest
    matches = find_matches(get_pattern("conv-bn"), model)
    assert [m.graph for m in matches] == [deepest]
    assert "fold-bn: applied 1 time" in fold_model(model).lines()


def test_hostile_names_load_with_unique_names():
    graph = Model(hm.hostile_names()).graph
    names = [n.name for n in graph.nodes]
    assert len(set(names)) == len(names) and all(names)
    assert set(hm.HOSTILE_NAMES) <= set(names)
