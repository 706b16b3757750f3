"""The BN-folding lesson: its numbers are the rewrite's, its samples agree, its refusals say why."""

from __future__ import annotations

import re

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model, load_model
from graphlens.matching.match import Match
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.bn_lesson import bn_lesson, channel_slice, explain_text, run_samples
from graphlens.rewrites.lesson_text import number, parse_number
from graphlens.rewrites.rules import RULES, Refusal
from tests import models
from tests.rewrites.linear_models import Config, linear_bn


def match_at(model: Model, pattern: str, bn: str) -> Match:
    return next(m for m in find_matches(get_pattern(pattern), model) if m.nodes["bn"] == bn)


@pytest.fixture
def demo(demo_path) -> Model:
    return load_model(demo_path)


@pytest.fixture
def stem(demo) -> Match:
    return match_at(demo, "conv-bn", "/stem/bn")


def numbers_after(line: str, marker: str) -> list[float]:
    """The numbers in ``line`` after ``marker``, in order, written as the lesson writes them."""
    tail = line.split(marker, 1)[1]
    return [parse_number(t) for t in re.findall(r"\(?−?\d+(?:\.\d+)?(?:e[-+]\d+)?\)?", tail)]


def line_starting(lines: list[str], prefix: str) -> str:
    return next(line for line in lines if line.startswith(prefix))


def test_formula_numbers_are_the_fold_details(demo, stem):
    details = RULES["fold-bn"].details(stem)
    lesson = bn_lesson(demo, stem, channel=3)
    p, c = details.params, 3
    same = lambda got, want: got == pytest.approx(float(want), rel=1e-4, abs=1e-12)  # noqa: E731 - 5 digits shown
    var, eps, std = numbers_after(line_starting(lesson.formula_lines, "σ = "), "= √(")
    assert same(var, p.var[c]) and same(eps, p.epsilon) and same(std, p.std[c])
    gamma, std2, scale = numbers_after(line_starting(lesson.formula_lines, "scale s"), "γ / σ = ")
    assert same(gamma, p.gamma[c]) and same(std2, p.std[c]) and same(scale, p.scale[c])
    b, mean, s, beta, b_new = numbers_after(line_starting(lesson.formula_lines, "b' = "), "+ β = ")
    assert same(b, details.bias_before[c]) and same(mean, p.mean[c]) and same(s, p.scale[c])
    assert same(beta, p.beta[c]) and same(b_new, details.bias_after[c])
    # Formatted the same way, the numbers appear verbatim.
    text = "\n".join(lesson.formula_lines)
    for value in (p.gamma[c], p.beta[c], p.mean[c], p.var[c], p.scale[c], details.bias_after[c]):
        assert number(value) in text


def test_weight_examples_are_read_from_the_details(demo, stem):
    details = RULES["fold-bn"].details(stem)
    lesson = bn_lesson(demo, stem, channel=5)
    examples = [line for line in lesson.formula_lines if "w[" in line]
    assert len(examples) == 3 and examples[0].startswith("w' = w · s")
    for line in examples:
        index = tuple(int(i) for i in re.search(r"w\[([\d,]+)\]", line).group(1).split(","))
        assert index[0] == 5  # a Conv's output channels are the weight's first axis
        before, _, _, after = numbers_after(line, "] = ")
        assert before == pytest.approx(details.weight_before[index], rel=1e-4)
        assert after == pytest.approx(details.weight_after[index], rel=1e-4)


@pytest.mark.parametrize(
    "cfg",
    [Config(kind="ConvTranspose", group=2, c_in=4, c_out=6), Config(kind="Gemm", trans_b=0),
     Config(kind="Gemm", trans_b=1),
     Config(kind="MatMul"), Config(c_in=6, c_out=6, group=3)],
    ids=lambda c: f"{c.kind}-g{c.group}-tB{c.trans_b}",
)
def test_weight_examples_lie_on_the_axis_the_rewrite_scales(cfg):
    model = Model(linear_bn(cfg))
    pattern = {"Conv": "conv-bn", "ConvTranspose": "conv-bn", "Gemm": "gemm-bn", "MatMul": "matmul-bn"}[cfg.kind]
    match = match_at(model, pattern, "bn")
    details = RULES["fold-bn"].details(match)
    for c in range(details.channels):
        lesson = bn_lesson(model, match, channel=c)
        for line in (line for line in lesson.formula_lines if "w[" in line):
            index = tuple(int(i) for i in re.search(r"w\[([\d,]+)\]", line).group(1).split(","))
            assert details.weight_after[index] == pytest.approx(details.weight_before[index] * details.params.scale[c])


def test_default_channel_is_the_scale_farthest_from_one(demo, stem):
    lesson = bn_lesson(demo, stem)
    assert lesson.channel == int(np.argmax(np.abs(lesson.details.params.scale - 1)))
    np.testing.assert_array_equal(lesson.scale_factors, lesson.details.params.scale)


def test_samples_before_and_after_agree_to_float32_rounding(demo, stem):
    lesson = bn_lesson(demo, stem)
    assert lesson.unavailable_reason is None
    assert lesson.sample_before.shape == lesson.sample_after.shape == (32, 32)
    np.testing.assert_allclose(lesson.sample_after, lesson.sample_before, rtol=1e-4, atol=1e-5)
    assert lesson.max_abs_difference == pytest.approx(float(np.abs(lesson.sample_after - lesson.sample_before).max()))
    assert lesson.max_abs_difference < 1e-4 and lesson.within_tolerance
    assert not np.array_equal(lesson.sample_before, np.zeros_like(lesson.sample_before))


def test_the_lesson_leaves_the_model_untouched(demo, stem):
    before = demo.to_proto().SerializeToString()
    bn_lesson(demo, stem)
    assert demo.to_proto().SerializeToString() == before and not demo.modified


def test_samples_are_reused_and_sliced_per_channel(demo, stem):
    samples = run_samples(demo, stem)
    assert samples.tensor == "/stem/bn_output_0" and samples.before.shape == (1, 16, 32, 32)
    for c in (0, 7):
        lesson = bn_lesson(demo, stem, channel=c, samples=samples)
        np.testing.assert_array_equal(lesson.sample_before, samples.before[0, c])
        np.testing.assert_array_equal(lesson.sample_after, channel_slice(samples.after, c))


def test_gemm_bn_on_the_demo_head(demo):
    match = match_at(demo, "gemm-bn", "/head/bn")
    lesson = bn_lesson(demo, match)
    assert lesson.details.kind == "Gemm" and lesson.details.channels == 10
    assert lesson.sample_before.ndim == 1  # one value per sample of the batch
    assert lesson.within_tolerance
    first = next(line for line in lesson.formula_lines if "w[" in line)
    assert re.search(r"w\[(\d+),", first).group(1) == str(lesson.channel)  # transB=1: a channel is a row
    assert "Gemm '/head/fc'" in explain_text(lesson)


def test_conv_transpose_on_the_demo(demo):
    lesson = bn_lesson(demo, match_at(demo, "conv-bn", "/up/bn"), channel=4)
    first = next(line for line in lesson.formula_lines if "w[" in line)
    assert re.search(r"w\[\d+,(\d+),", first).group(1) == "4"  # output channels are axis 1
    assert lesson.within_tolerance


@pytest.mark.parametrize("channel", [99, -1])
def test_a_channel_out_of_range_is_refused(demo, stem, channel):
    with pytest.raises(ValueError, match=rf"^channel {channel} is out of range: the layer has 16 output channels$"):
        bn_lesson(demo, stem, channel=channel)


def matmul_on_3d_input() -> onnx.ModelProto:
    """matmul-bn matches (the weight is 2-D), but the rule refuses: the MatMul's input is 3-D."""
    params = models.bn_params(6)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
             helper.make_node("BatchNormalization", ["h", *params], ["y"], name="bn")]
    inits = [models.init("w", np.ones((4, 6), np.float32))] + [models.init(k, v) for k, v in params.items()]
    return models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [2, 3, 4])], [models.tensor("y")], inits)


def test_a_match_the_rule_refuses_raises_its_reason():
    model = Model(matmul_on_3d_input())
    match = match_at(model, "matmul-bn", "bn")
    refusal = RULES["fold-bn"].plan(match)
    assert isinstance(refusal, Refusal) and "rank 3" in refusal.reason
    assert refusal.nodes == dict(match.nodes) and RULES["fold-bn"].details(match) is None
    with pytest.raises(ValueError) as caught:
        bn_lesson(model, match)
    assert str(caught.value) == refusal.reason


def test_a_match_of_another_pattern_is_refused(demo):
    match = Match("silu", demo.graph, {"sigmoid": "x", "mul": "y"}, {}, 0)
    with pytest.raises(ValueError, match="conv-bn, gemm-bn or matmul-bn"):
        bn_lesson(demo, match)


def test_a_match_inside_a_subgraph_has_numbers_but_no_samples():
    model = Model(models.if_with_conv_bn())
    match = match_at(model, "conv-bn", "then_bn")
    lesson = bn_lesson(model, match, channel=0)
    assert lesson.sample_before is None and lesson.sample_after is None and lesson.max_abs_difference is None
    assert "subgraph" in lesson.unavailable_reason
    assert any(line.startswith("scale s = ") for line in lesson.formula_lines)


def test_when_onnxruntime_cannot_run_the_model_the_reason_is_kept():
    model = Model(linear_bn(Config(dtype=TensorProto.DOUBLE)))  # onnxruntime has no float64 Conv
    lesson = bn_lesson(model, match_at(model, "conv-bn", "bn"))
    assert lesson.sample_before is None and lesson.unavailable_reason
    assert "Conv" in lesson.unavailable_reason


def test_bias_notes_say_what_b_is(demo):
    no_bias = bn_lesson(demo, match_at(demo, "conv-bn", "/stage1/block1/dw/bn"))
    assert any("no bias" in line for line in no_bias.formula_lines)
    with_add = bn_lesson(demo, match_at(demo, "conv-bn", "/stage1/block2/bn"))
    assert any("Add '/stage1/block2/bias_add'" in line for line in with_add.formula_lines)


def test_explanation_names_the_layers_and_the_formulas(demo, stem):
    lesson = bn_lesson(demo, stem, channel=2)
    text = explain_text(lesson)
    for needle in ("'/stem/bn'", "Conv '/stem/conv'", "y = γ·(x − μ)/σ + β", "b' = (b − μ)·s + β", "16 output channels",
                   f"s = {number(lesson.details.params.scale[2])}"):
        assert needle in text


def test_samples_on_a_model_with_dynamic_dims_use_sizes_that_run():
    from tests.numerics.dynamic_models import fpn

    model = Model(fpn())  # runs only when H and W are multiples of 32
    match = next(m for m in find_matches(get_pattern("conv-bn"), model) if m.nodes["bn"] == "stem/bn")
    samples = run_samples(model, match)
    assert samples.reason is None, samples.reason
    assert samples.before is not None and samples.before.shape[-1] % 32 == 0
    np.testing.assert_allclose(samples.after, samples.before, rtol=1e-4, atol=1e-5)
