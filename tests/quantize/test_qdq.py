"""The scale and zero point of a range, against values worked out by hand."""

from __future__ import annotations

import numpy as np

from graphlens.quantize.qdq import (
    QType,
    bias_params,
    fake_quantize,
    quantize,
    quantize_bias,
    scale_zero_point,
    weight_params,
)


def test_asymmetric_uint8_range_maps_its_ends_to_0_and_255():
    p = scale_zero_point(-1.0, 3.0, QType(8, False), symmetric=False)
    assert np.isclose(p.scale, 4.0 / 255) and int(p.zero_point) == 64  # round(0 - (-1) / (4/255)) = round(63.75)
    assert quantize(np.array([-1.0, 0.0, 3.0]), p).tolist() == [0, 64, 255]


def test_a_range_that_excludes_zero_is_widened_to_hold_it():
    p = scale_zero_point(2.0, 5.0, QType(8, False), symmetric=False)
    assert int(p.zero_point) == 0 and np.isclose(p.scale, 5.0 / 255)
    assert fake_quantize(np.array([0.0]), p)[0] == 0.0


def test_symmetric_int8_narrow_range_uses_minus_127_to_127():
    qtype = QType(8, True, narrow=True)
    assert (qtype.qmin, qtype.qmax) == (-127, 127)
    p = scale_zero_point(-0.5, 2.54, qtype, symmetric=True)
    assert np.isclose(p.scale, 2.54 / 127) and int(p.zero_point) == 0
    assert quantize(np.array([-2.54, 2.54, 10.0]), p).tolist() == [-127, 127, 127]


def test_full_range_int8_and_symmetric_uint8():
    p = scale_zero_point(-1.0, 1.0, QType(8, True), symmetric=True)
    assert np.isclose(p.scale, 2.0 / 255) and int(p.zero_point) == 0
    u = scale_zero_point(-1.0, 1.0, QType(8, False), symmetric=True)
    assert np.isclose(u.scale, 2.0 / 255) and int(u.zero_point) == 128


def test_int4_limits():
    assert (QType(4, True).qmin, QType(4, True).qmax) == (-8, 7)
    assert (QType(4, True, narrow=True).qmin, QType(4, False).qmax) == (-7, 15)


def test_rounding_is_half_to_even_as_onnx_quantizelinear():
    p = scale_zero_point(-127.0, 127.0, QType(8, True, True), symmetric=True)  # scale 1
    assert quantize(np.array([0.5, 1.5, 2.5, -0.5]), p).tolist() == [0, 2, 2, 0]


def test_per_channel_weight_scales_follow_the_axis():
    w = np.array([[1.0, -2.0], [0.5, 0.25], [-4.0, 1.0]], np.float32)  # [K=3, N=2], axis 1 (MatMul)
    p = weight_params(w, QType(8, True, True), symmetric=True, axis=1)
    assert np.allclose(p.scale, [4.0 / 127, 2.0 / 127])
    q = quantize(w, p)
    assert q[2, 0] == -127 and q[0, 1] == -127


def test_bias_scale_is_input_scale_times_weight_scale_repeated_over_groups():
    w = weight_params(np.array([[1.0], [2.0]], np.float32).reshape(2, 1), QType(8, True, True), symmetric=True, axis=0)
    b = bias_params(np.float32(0.1), w, channels=4)  # a grouped ConvTranspose: 2 weight scales, 4 channels
    assert np.allclose(b.scale, 0.1 * np.array([1, 2, 1, 2]) / 127)
    assert b.qtype.bits == 32 and not b.zero_point.any()
    q = quantize_bias(np.array([0.5, 0.5, 0.5, 0.5]), b)
    assert q.dtype == np.int32 and q.tolist() == np.rint(0.5 / b.scale.astype(np.float64)).astype(int).tolist()


def test_fake_quantize_equals_quantize_then_dequantize_for_every_type_and_axis():
    """The float32 shortcut the error report uses, held to ONNX's two steps, outliers far past the range included."""
    from graphlens.quantize.qdq import dequantize

    rng = np.random.default_rng(3)
    x = rng.normal(0, 1, (4, 6, 5)).astype(np.float32)
    x[0, 0, 0], x[1, 2, 3], x[2, 1, 0] = 3e9, -5e30, 0.0
    for qtype in (QType(8, True), QType(8, False), QType(8, True, narrow=True), QType(4, True), QType(4, False)):
        for symmetric in (True, False):
            per_tensor = scale_zero_point(-2.0, 3.0, qtype, symmetric)
            per_channel = scale_zero_point(np.linspace(-3, -0.5, 6), np.linspace(0.5, 4, 6), qtype, symmetric, axis=1)
            for p in (per_tensor, per_channel):
                assert np.array_equal(fake_quantize(x, p), dequantize(quantize(x, p), p)), (qtype, symmetric, p.axis)
    assert fake_quantize(np.float32(0.7), per_tensor).shape == ()
