"""The built-in patterns on small models: what each one finds, label by label, and what it leaves alone."""

from __future__ import annotations

from functools import partial

import onnx
import pytest

from graphlens.core.model import load_model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern, library
from tests.matching import pattern_models as pm
from tests.matching.transformer_library_cases import CASES as TRANSFORMER_CASES


@pytest.fixture
def search(write_model):
    """Run a built-in pattern over a model, written to disk and loaded as the viewer loads it."""

    def run(pattern_name: str, model: onnx.ModelProto, **options):
        onnx.checker.check_model(model, full_check=True)  # the models themselves must be valid ONNX
        return find_matches(get_pattern(pattern_name), load_model(write_model(model)), **options)

    return run


def found(matches) -> list[tuple[str, dict[str, str]]]:
    """(graph path, pattern label -> node name) of each match, in the order returned."""
    return [(m.graph.path, m.nodes) for m in matches]


def in_main(*node_maps: dict[str, str]) -> list[tuple[str, dict[str, str]]]:
    return [("main", nodes) for nodes in node_maps]


def case(pattern: str, build, *expected: dict[str, str], what: str, marks=()):
    return pytest.param(pattern, build, list(expected), id=f"{pattern}: {what}", marks=marks)


CONV_BN = {"conv": "conv", "bn": "bn"}
GELU_ERF = {"scaled_x": "div", "erf": "erf", "plus1": "add1", "mul": "mul_x", "out": "mul_half"}
LAYER_NORM = {
    "mean": "mean", "centered": "sub", "squared": "pow", "var": "var", "var_eps": "add_eps",
    "std": "sqrt", "normalized": "div", "scaled": "mul_gamma", "out": "add_beta",
}
DECOMPOSED_BN_TAIL = {"scaled": "mul_gamma", "out": "add_beta"}

# (pattern, model builder, every match expected in the main graph, in order)
MATCHES = [
    case("conv-bn", pm.conv_bn, CONV_BN, what="Conv -> BN"),
    case("conv-bn", pm.conv_with_bias_bn, CONV_BN, what="Conv with its own bias -> BN"),
    case("conv-bn", pm.conv_transpose_bn, {"conv": "deconv", "bn": "bn"}, what="ConvTranspose -> BN"),
    case(
        "conv-bn", pm.conv_bias_add_bn, {"conv": "conv", "bias_add": "bias_add", "bn": "bn"},
        what="Conv -> Add [C,1,1] -> BN",
    ),
    case(
        "conv-bn", pm.conv_bn_params_behind_constants, CONV_BN,
        what="BN params behind Constant, ConstantOfShape, Identity",
    ),
    case("conv-bn", pm.conv_bn_output_also_graph_output, CONV_BN, what="BN output is a graph output"),
    case("conv-bn", pm.conv_bn_training_mode_0, CONV_BN, what="training_mode=0"),
    case("conv-bn", partial(pm.conv_bn_opset6, 1), CONV_BN, what="opset 6, is_test=1"),
    case(
        "conv-bn", pm.two_convs_sharing_weight, {"conv": "conv_a", "bn": "bn_a"}, {"conv": "conv_b", "bn": "bn_b"},
        what="two convs sharing one weight",
    ),
    case("gemm-bn", pm.gemm_bn, {"gemm": "gemm", "bn": "bn"}, what="Gemm(transB=1, C) -> BN"),
    case("matmul-bn", pm.matmul_bn, {"matmul": "matmul", "bn": "bn"}, what="MatMul by [K,N] -> BN"),
    case(
        "matmul-bn", pm.matmul_bias_add_bn, {"matmul": "matmul", "bias_add": "bias_add", "bn": "bn"},
        what="MatMul -> Add -> BN",
    ),
    case(
        "decomposed-bn", pm.decomposed_bn_div,
        {"centered": "sub", "var_eps": "add_eps", "std": "sqrt", "normalized": "div", **DECOMPOSED_BN_TAIL},
        what="Div form",
    ),
    case(
        "decomposed-bn", pm.decomposed_bn_reciprocal,
        {
            "centered": "sub", "var_eps": "add_eps", "std": "sqrt", "inv_std": "recip", "normalized": "mul_inv",
            **DECOMPOSED_BN_TAIL,
        },
        what="Reciprocal form",
    ),
    # Conv -> Mul alone also fits Conv -> Mul -> Add, but at one conv the first alternative that
    # matches is the match: the whole chain.
    case(
        "conv-mul-add", pm.conv_mul_add, {"conv": "conv", "mul": "mul", "out": "add"},
        what="Conv -> Mul -> Add",
    ),
    case("conv-mul-add", pm.conv_mul, {"conv": "conv", "out": "mul"}, what="Conv -> Mul"),
    case("conv-mul-add", pm.conv_add, {"conv": "conv", "out": "add"}, what="Conv -> Add"),
    case("silu", pm.silu_x_first, {"sigmoid": "sigmoid", "out": "mul"}, what="Mul(x, Sigmoid(x))"),
    case("silu", pm.silu_sigmoid_first, {"sigmoid": "sigmoid", "out": "mul"}, what="Mul(Sigmoid(x), x)"),
    case("hard-swish", pm.hard_swish_hard_sigmoid, {"hard_sigmoid": "hard_sigmoid", "out": "mul"},
         what="HardSigmoid form"),
    case(
        "hard-swish", pm.hard_swish_hard_sigmoid_default_beta, {"hard_sigmoid": "hard_sigmoid", "out": "mul"},
        what="HardSigmoid(alpha=1/6) with default beta (as torch.onnx exports it)",
    ),
    case(
        "hard-swish", pm.hard_swish_clip, {"plus3": "add3", "clip": "clip", "mul": "mul", "out": "div6"},
        what="Clip form",
    ),
    case("gelu", pm.gelu_erf, GELU_ERF, what="erf form, (x * (1 + erf)) * 0.5"),
    case(
        "gelu", pm.gelu_erf_half_first,
        {"scaled_x": "div", "erf": "erf", "plus1": "add1", "half_x": "mul_half", "out": "mul_x"},
        what="erf form, (x * 0.5) * (1 + erf)",
    ),
    case(
        "gelu", pm.gelu_tanh,
        {
            "cube": "pow", "cube_term": "mul_coef", "inner": "add_inner", "scaled": "mul_k", "tanh": "tanh",
            "plus1": "add1", "mul": "mul_x", "out": "mul_half",
        },
        what="tanh form",
    ),
    case("layer-norm", pm.layer_norm_opset17, LAYER_NORM, what="opset 17, axes attribute"),
    case("layer-norm", pm.layer_norm_opset18, LAYER_NORM, what="opset 18, axes input"),
    case(
        "layer-norm", pm.layer_norm_without_eps, {k: v for k, v in LAYER_NORM.items() if k != "var_eps"},
        what="no Add(eps), as the dynamo exporter leaves a tiny epsilon",
    ),
    case("leaky-relu", pm.leaky_relu_where, {"positive": "greater", "negative": "mul", "out": "where"},
         what="Where form"),
    case("leaky-relu", pm.leaky_relu_max, {"negative": "mul", "out": "max"}, what="Max form"),
]

# (pattern, model builder): a model the pattern must not match anywhere
REFUSALS = [
    case("conv-bn", pm.conv_bn_training_mode, what="BN training_mode=1"),
    case("conv-bn", partial(pm.conv_bn_opset6, 0), what="opset 6, is_test=0"),
    case("conv-bn", pm.conv_bn_mean_from_input, what="BN mean is a graph input"),
    case("conv-bn", pm.conv_feeds_bn_and_relu, what="conv output has a second consumer"),
    case("conv-bn", pm.conv_output_is_graph_output, what="conv output is a graph output"),
    case("conv-bn", pm.conv_weight_from_input, what="conv weight is a graph input"),
    case("conv-bn", pm.conv_weight_overridable, what="conv weight initializer is also a graph input"),
    case("conv-bn", pm.conv_full_add_bn, what="Add between Conv and BN is not per-channel"),
    case("gemm-bn", pm.gemm_weight_from_input, what="Gemm B is a graph input"),
    case("gemm-bn", pm.gemm_feeds_bn_and_relu, what="Gemm output has a second consumer"),
    case("matmul-bn", pm.matmul_rank3_weight_bn, what="rank-3 weight"),
    case("matmul-bn", pm.matmul_weight_from_input, what="weight is a graph input"),
    case("decomposed-bn", pm.decomposed_bn_mean_from_input, what="mean is a graph input"),
    case("decomposed-bn", pm.decomposed_bn_gamma_not_per_channel, what="gamma of shape [C,H,W]"),
    case("conv-mul-add", pm.conv_mul_by_input, what="Mul by a graph input"),
    case("silu", pm.sigmoid_times_other, what="Mul(z, Sigmoid(x))"),
    case("hard-swish", pm.hard_sigmoid_default_alpha, what="HardSigmoid with default alpha 0.2"),
    case("hard-swish", pm.hard_swish_clip_max_5, what="Clip max 5"),
    case("gelu", pm.gelu_erf_div_by_2, what="erf form dividing by 2.0"),
    case("layer-norm", pm.layer_norm_cubed, what="Pow by 3, not a variance"),
    case("leaky-relu", pm.max_of_other_times_alpha, what="Max(x, z * a)"),
    case("leaky-relu", pm.max_of_x_and_2x, what="Max(x, 2 * x), which is not a leaky ReLU"),
]


@pytest.mark.parametrize(("pattern", "build", "expected"), MATCHES)
def test_pattern_matches(search, pattern, build, expected):
    assert found(search(pattern, build())) == in_main(*expected)


@pytest.mark.parametrize(("pattern", "build", "expected"), REFUSALS)
def test_pattern_refuses(search, pattern, build, expected):
    assert found(search(pattern, build())) == []


@pytest.mark.parametrize(
    ("pattern", "build", "expected"), [pytest.param(*p.values, id=p.id) for p in MATCHES + REFUSALS]
)
def test_plain_vf2_finds_the_same(search, pattern, build, expected):
    anchored = search(pattern, build())
    plain = search(pattern, build(), anchored=False)
    assert found(plain) == found(anchored)


def test_every_builtin_pattern_has_matching_and_refused_models():
    matched = {p.values[0] for p in MATCHES} | set(TRANSFORMER_CASES)
    refused = {p.values[0] for p in REFUSALS} | set(TRANSFORMER_CASES)
    assert matched == refused == set(library())


@pytest.mark.parametrize("pattern", list(TRANSFORMER_CASES))
def test_transformer_pattern_matches_its_model_and_not_the_near_one(search, pattern):
    matching, near, _ = TRANSFORMER_CASES[pattern]
    assert search(pattern, matching())
    assert search(pattern, near()) == []


# ------------------------------------------------------------------- what the matches bind
def test_bn_params_behind_constant_nodes_bind_the_node_outputs(search):
    [match] = search("conv-bn", pm.conv_bn_params_behind_constants())
    assert {k: match.values[k] for k in ("x", "weight", "scale", "B", "mean", "var")} == {
        "x": "x", "weight": "w", "scale": "scale", "B": "bias", "mean": "mean", "var": "var",
    }


def test_a_shared_weight_is_a_value_of_both_matches(search):
    matches = search("conv-bn", pm.two_convs_sharing_weight())
    assert [m.values["weight"] for m in matches] == ["w", "w"]


def test_silu_binds_x_whichever_side_of_the_mul_it_is(search):
    for build in (pm.silu_x_first, pm.silu_sigmoid_first):
        [match] = search("silu", build())
        assert match.values == {"x": "x"}


@pytest.mark.parametrize(
    ("build", "axes"), [(pm.layer_norm_opset17, {}), (pm.layer_norm_opset18, {"axes": "axes", "var_axes": "axes"})]
)
def test_layer_norm_binds_reduce_mean_axes_only_when_they_are_an_input(search, build, axes):
    [match] = search("layer-norm", build())
    assert {k: v for k, v in match.values.items() if k in ("axes", "var_axes")} == axes


# ---------------------------------------------------------------------------- subgraphs
def test_conv_bn_inside_an_if_branch_reports_the_branch_path(search):
    matches = search("conv-bn", pm.if_with_conv_bn())
    assert found(matches) == [("main/branch:then_branch", {"conv": "then_conv", "bn": "then_bn"})]
    assert matches[0].values["weight"] == "w"  # an initializer of the outer graph


def test_subgraphs_false_searches_the_main_graph_only(search):
    assert search("conv-bn", pm.if_with_conv_bn(), subgraphs=False) == []


# --------------------------------------------------------------------- order and overlap
def test_matches_come_in_file_order_not_name_order(search):
    matches = search("conv-bn", pm.conv_bn_chain_named_out_of_order())
    assert found(matches) == in_main(
        {"conv": "z_conv", "bn": "z_bn"}, {"conv": "m_conv", "bn": "m_bn"}, {"conv": "a_conv", "bn": "a_bn"}
    )


def test_non_overlapping_keeps_matches_that_share_only_a_value(search):
    matches = search("conv-bn", pm.two_convs_sharing_weight(), non_overlapping=True)
    assert found(matches) == in_main({"conv": "conv_a", "bn": "bn_a"}, {"conv": "conv_b", "bn": "bn_b"})
