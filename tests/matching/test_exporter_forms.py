"""Every built-in pattern finds what current exporters write: one match covering the whole activation."""

from __future__ import annotations

import onnx
import pytest

from graphlens.core.model import load_model
from graphlens.matching.explain import explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from tests.matching import exporter_forms as ef


@pytest.mark.parametrize("build", ef.FORMS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("anchored", [True, False], ids=["anchored", "plain"])
def test_the_pattern_covers_the_exporters_form(write_model, build, anchored):
    form = build()
    onnx.checker.check_model(form.model, full_check=True)
    model = load_model(write_model(form.model))
    [match] = find_matches(get_pattern(form.pattern), model, anchored=anchored)
    assert sorted(match.nodes.values()) == sorted(form.covered)
    assert match.nodes["out"] == form.out


@pytest.mark.parametrize("build", ef.FORMS, ids=lambda f: f.__name__)
def test_explain_at_the_last_node_says_it_matches(write_model, build):
    form = build()
    result = explain(get_pattern(form.pattern), load_model(write_model(form.model)), at=form.out)
    assert result.matched, result.message


@pytest.mark.parametrize(
    ("build", "label", "expected"),
    [
        (ef.gelu_tanh_torchscript, "square", "Mul"),  # x³ read as x * (x * x)
        (ef.gelu_tanh_dynamo, "cube", "Pow"),
        (ef.swish_paddle2onnx, "beta_x", "Mul"),
        (ef.layer_norm_torchscript_half, "centered_cast", "Cast"),
        (ef.layer_norm_torchscript_half, "normalized_cast", "Cast"),
        (ef.layer_norm_tf_moments, "inv_std", "Reciprocal"),
        (ef.decomposed_bn_rsqrt_unfolded, "inv_std", "Div"),
    ],
)
def test_each_form_binds_its_own_nodes(write_model, build, label, expected):
    form = build()
    model = load_model(write_model(form.model))
    [match] = find_matches(get_pattern(form.pattern), model)
    assert model.graph.by_name[match.nodes[label]].op_type == expected


def test_a_layer_norm_without_epsilon_binds_no_eps(write_model):
    form = ef.layer_norm_dynamo_tiny_eps()
    [match] = find_matches(get_pattern("layer-norm"), load_model(write_model(form.model)))
    assert "var_eps" not in match.nodes and "eps" not in match.values


def test_the_folded_bn_binds_the_folded_constant(write_model):
    [match] = find_matches(get_pattern("decomposed-bn"), load_model(write_model(ef.decomposed_bn_folded_div().model)))
    assert set(match.values) == {"x", "mean", "std_value", "gamma", "beta"}
