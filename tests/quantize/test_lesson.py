"""The fake-quantization lesson: its scale and zero point are the quantizer's, its error is numpy's."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphlens.core.bundled import demo_model_path
from graphlens.core.errors import GraphLensError
from graphlens.quantize import QuantConfig
from graphlens.quantize.lesson import tensor_lesson
from graphlens.workspace import Workspace


@pytest.fixture(scope="module")
def preview():
    ws = Workspace()
    ws.open(demo_model_path())
    return ws.quantization.preview(samples=3)


def _numpy_error(x: np.ndarray, scale: float, zero: int, qmin: int, qmax: int) -> tuple[float, float, float]:
    q = np.clip(np.rint(x.astype(np.float32) / np.float32(scale)) + zero, qmin, qmax)
    x_hat = ((q - zero) * np.float32(scale)).astype(np.float64)
    d = x.astype(np.float64) - x_hat
    sqnr = 10 * math.log10(np.sum(x.astype(np.float64) ** 2) / np.sum(d**2))
    return sqnr, float(np.mean(d**2)), float(np.abs(d).max())


def test_an_activation_lesson_uses_the_quantizers_scale_and_zero_point_and_its_error_is_numpys(preview):
    layer = next(row for row in preview.result.layers if row.kind == "activation" and row.tensor != "image")
    lesson = tensor_lesson(preview, layer)
    assert lesson.scale == pytest.approx(layer.scale[0], rel=1e-7) and lesson.zero_point == layer.zero_point[0]
    assert lesson.values.size > 100
    sqnr, mse, max_abs = _numpy_error(lesson.values, lesson.scale, lesson.zero_point, 0, 255)
    assert lesson.error.sqnr_db == pytest.approx(sqnr, abs=1e-3)
    assert lesson.error.mse == pytest.approx(mse, rel=1e-4)
    assert lesson.error.max_abs == pytest.approx(max_abs, rel=1e-5)
    assert lesson.error.sqnr_db == pytest.approx(layer.local_sqnr_db, abs=1e-3)  # the report's local error, too
    assert lesson.observed == (float(lesson.values.min()), float(lesson.values.max()))
    lines = "\n".join(lesson.formula_lines())
    assert f"= {lesson.zero_point}" in lines and "s = (r_max − r_min) / (q_max − q_min)" in lines
    for x, q, x_hat in lesson.examples():
        assert x_hat == pytest.approx((q - lesson.zero_point) * lesson.scale, rel=1e-6)
        assert abs(x - x_hat) <= lesson.scale / 2 + 1e-6


def test_a_per_channel_weight_is_explained_one_channel_at_a_time_with_the_quantizers_numbers(preview):
    layer = next(row for row in preview.result.layers if row.kind == "weight")
    lesson = tensor_lesson(preview, layer)
    assert lesson.channels == len(layer.scale) > 1 and lesson.zero_point == 0 and lesson.symmetric
    assert lesson.scale == pytest.approx(layer.scale[lesson.channel], rel=1e-7)
    assert np.allclose(lesson.per_channel_scales, layer.scale, rtol=1e-6)
    assert lesson.scale == pytest.approx(2 * max(abs(lesson.observed[0]), abs(lesson.observed[1])) / 254, rel=1e-6)
    other = tensor_lesson(preview, layer, channel=0)
    assert other.channel == 0 and other.scale == pytest.approx(layer.scale[0], rel=1e-7)
    sqnr, _, max_abs = _numpy_error(other.values, other.scale, 0, -127, 127)
    assert other.error.sqnr_db == pytest.approx(sqnr, abs=1e-3) and other.error.max_abs == pytest.approx(max_abs)
    levels = other.levels
    assert len(levels) == 255 and levels[0] == pytest.approx(-127 * other.scale)
    counts, edges = other.histogram()
    assert counts.sum() == other.values.size and edges[0] <= levels[0] and edges[-1] >= levels[-1]
    with pytest.raises(GraphLensError, match="no channel"):
        tensor_lesson(preview, layer, channel=999)


def test_percentile_calibration_clips_and_the_lesson_counts_what_it_clipped():
    ws = Workspace()
    ws.open(demo_model_path())
    preview = ws.quantization.preview(QuantConfig(method="percentile", percentile=99.0), samples=2)
    layer = next(row for row in preview.result.layers if row.kind == "activation" and row.tensor != "image")
    lesson = tensor_lesson(preview, layer)
    assert lesson.scale == pytest.approx(layer.scale[0], rel=1e-6) and lesson.zero_point == layer.zero_point[0]
    assert lesson.calibrated[1] < lesson.observed[1] and lesson.clipped > 0
    assert "percentile calibration" in lesson.formula_lines()[0]


def test_a_weight_held_by_a_constant_node_is_explained_from_its_values(tmp_path):
    """Paddle2ONNX and dynamo exports keep MatMul weights in Constant nodes, not initializers."""
    from onnx import helper, numpy_helper

    from tests.quantize.quant_models import layer

    model = layer("MatMul", relu=False)
    weight = model.graph.initializer.pop()
    model.graph.node.insert(0, helper.make_node("Constant", [], [weight.name], name="w_const", value=weight))
    path = tmp_path / "constant_weight.onnx"
    path.write_bytes(model.SerializeToString())
    ws = Workspace()
    ws.open(path)
    preview = ws.quantization.preview(samples=2)
    row = next(row for row in preview.result.layers if row.kind == "weight")
    lesson = tensor_lesson(preview, row, channel=0)
    assert np.array_equal(lesson.values, numpy_helper.to_array(weight)[:, 0])
    assert lesson.scale == pytest.approx(row.scale[0], rel=1e-7)


def test_a_weight_rounded_by_gptq_says_how_many_of_its_integers_differ_from_the_nearest_shown():
    ws = Workspace()
    ws.open(demo_model_path())
    gptq = ws.quantization.preview(QuantConfig(weight_rounding="gptq"), samples=3)
    layer = next(row for row in gptq.result.layers if row.kind == "weight")
    lesson = tensor_lesson(gptq, layer, channel=0)
    stored = gptq.result.rounding.integers[layer.tensor]
    assert stored.ndim == 4  # a Conv: channel 0 is the first row
    row = stored[0].reshape(-1)
    nearest = np.clip(np.rint(lesson.values / np.float32(lesson.scale)), -127, 127)
    off = int((row != nearest).sum())
    assert [n for n in lesson.notes if "GPTQ" in n] == [
        f"The model stores GPTQ's integers, not these: {off} of this channel's {row.size} values sit off nearest "
        "rounding, so the layer's output loses less (docs/quantize.md, \"Weight rounding\")."]
    nearest_preview = ws.quantization.preview(samples=3)
    layer = next(row for row in nearest_preview.result.layers if row.kind == "weight")
    assert not [n for n in tensor_lesson(nearest_preview, layer).notes if "GPTQ" in n]
