"""Numeric diffs: the measures, the allclose verdict, tolerances per dtype, and boundary tensors."""

from __future__ import annotations

import json
import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto

from graphlens.core.model import load_model
from graphlens.numerics import TOLERANCES, NumericDiff, compare_tensors, diff_models, make_inputs, run_model
from tests.numerics import numeric_models as nm

X = {"x": np.random.default_rng(3).standard_normal((1, 3, 8, 8)).astype(np.float32)}


@pytest.fixture(scope="module")
def base() -> onnx.ModelProto:
    return nm.conv_bn()


def _bn_gain(proto: onnx.ModelProto) -> np.ndarray:
    """gamma / sqrt(var + eps) per channel: how much a change in the conv output moves y."""
    p = {t.name: onnx.numpy_helper.to_array(t).astype(np.float64) for t in proto.graph.initializer}
    return (p["bn_scale"] / np.sqrt(p["bn_var"] + 1e-5))[None, :, None, None]


def test_tolerances():
    assert TOLERANCES["float32"] == (1e-4, 1e-5)
    assert TOLERANCES["float16"] == (1e-2, 1e-3)
    assert TOLERANCES["bfloat16"] == (2e-2, 1e-2)
    assert TOLERANCES["float64"] == (1e-7, 1e-9)
    for name in ("int8", "int32", "int64", "uint8", "bool"):
        assert TOLERANCES[name] == (0, 0)


def test_a_model_against_itself_passes_exactly(base):
    result = diff_models(base, base, X)
    assert result.available and result.reason is None and result.passed
    (y,) = result.outputs
    assert (y.name, y.dtype, y.shape) == ("y", "float32", (1, 4, 8, 8))
    assert y.max_abs == 0.0 and y.max_rel == 0.0 and y.cosine == 1.0
    assert result.max_abs == 0.0 and result.max_rel == 0.0


def test_a_perturbed_weight_fails_with_the_right_numbers(base):
    bumped = nm.perturbed(base, "w", 1.01)
    result = diff_models(base, bumped, X)
    assert result.available and not result.passed
    (y,) = result.outputs
    ya, yb = run_model(base, X).outputs["y"].astype(np.float64), run_model(bumped, X).outputs["y"].astype(np.float64)
    assert y.max_abs == pytest.approx(np.abs(ya - yb).max(), rel=1e-12)
    assert y.max_rel == pytest.approx((np.abs(ya - yb) / np.abs(ya)).max(), rel=1e-12)
    assert (y.rtol, y.atol) == (1e-4, 1e-5)
    assert y.limit == pytest.approx(1e-5 + 1e-4 * np.abs(ya).max(), rel=1e-12)
    cos = float((ya * yb).sum() / np.linalg.norm(ya) / np.linalg.norm(yb))
    assert y.cosine == pytest.approx(cos, abs=1e-12) and 0.999 < y.cosine < 1.0
    # BN is affine per channel, so y moves by 1% of (gain * conv output).
    c = run_model(base, X, ["c"]).outputs["c"].astype(np.float64)
    assert y.max_abs == pytest.approx(np.abs(0.01 * _bn_gain(base) * c).max(), rel=1e-3)
    assert y.max_abs > y.limit and result.max_abs == y.max_abs


def test_float16_model_uses_float16_tolerances():
    half = nm.conv_bn(dtype=TensorProto.FLOAT16)
    inputs = {"x": X["x"].astype(np.float16)}
    same = diff_models(half, half, inputs)
    (y,) = same.outputs
    assert same.passed and y.dtype == "float16" and (y.rtol, y.atol) == (1e-2, 1e-3)
    # 0.5% off at the tensor's scale: fine for float16, far outside float32's tolerance.
    a = np.array([1.0, -2.0, 0.25], np.float16)
    b = (a.astype(np.float32) * np.float32(1.005)).astype(np.float16)
    assert compare_tensors("h", a, b).passed
    assert not compare_tensors("f", a.astype(np.float32), b.astype(np.float32)).passed


def test_near_zero_sigmoid_values_pass_although_max_rel_is_two_percent():
    # A sigmoid map spanning ~1 down to ~1e-6; B is off by 2e-8 (about a third of a float32 ulp
    # of values near 1) on its smallest element: 2% relative there, rounding noise at the tensor's scale.
    a = np.array([1e-6, 3e-4, 0.5, 0.999], np.float32)
    b = a.copy()
    b[0] = np.float32(1.02e-6)
    d = compare_tensors("sigmoid", a, b)
    assert d.max_rel == pytest.approx(0.02, rel=1e-3)
    assert d.max_abs == pytest.approx(2e-8, rel=1e-3)
    assert d.limit == pytest.approx(1e-5 + 1e-4 * 0.999, rel=1e-6)
    assert d.passed and d.cosine == pytest.approx(1.0, abs=1e-12)


def test_near_zero_map_alone_passes_on_atol():
    a = np.full((4, 4), 1e-6, np.float32)
    d = compare_tensors("tiny", a, a * np.float32(1.02))
    assert d.max_rel == pytest.approx(0.02, rel=1e-3) and d.passed


def test_a_real_two_percent_error_at_scale_fails():
    d = compare_tensors("big", np.array([1.0, 0.5], np.float32), np.array([1.02, 0.5], np.float32))
    assert not d.passed and d.max_abs == pytest.approx(0.02, rel=1e-5)


def test_nans_in_the_same_places_are_no_error_but_never_pass_elsewhere_infinite():
    a = np.array([1.0, np.nan, np.inf, 2.0], np.float32)
    same = compare_tensors("t", a, a.copy())
    assert same.max_abs == 0.0 and same.cosine == 1.0
    assert not same.passed and same.not_finite == "A holds 1 NaN, 1 inf of 4 values, B holds 1 NaN, 1 inf of 4 values"
    mask = np.array([0.0, -np.inf, 2.0], np.float32)  # the same infinities on both sides: a mask, noted
    masked = compare_tensors("m", mask, mask.copy())
    assert masked.passed and masked.note == "A and B hold 1 inf of 3 values, in the same places"
    moved = compare_tensors("t", a, np.array([np.nan, 1.0, np.inf, 2.0], np.float32))
    assert not moved.passed and moved.max_abs == math.inf


def test_shape_mismatch_fails_with_a_note():
    d = compare_tensors("t", np.zeros((2, 3), np.float32), np.zeros((3, 2), np.float32))
    assert not d.passed and d.shape == (2, 3) and d.note == "shape [2, 3] in A, [3, 2] in B"


def test_integers_compare_exactly():
    a = np.array([1, 2, 2**62], np.int64)
    assert compare_tensors("i", a, a.copy()).passed
    assert not compare_tensors("i", a, a + np.array([0, 0, 1])).passed
    assert not compare_tensors("i", a, a + np.array([1, 0, 0])).passed
    assert compare_tensors("i", a, a.copy()).limit == 0.0


def test_cosine_of_all_zeros_is_one_and_of_opposites_minus_one():
    assert compare_tensors("z", np.zeros(5, np.float32), np.zeros(5, np.float32)).cosine == 1.0
    assert compare_tensors("o", np.ones(3), -np.ones(3)).cosine == pytest.approx(-1.0)
    assert compare_tensors("s", np.float32(2.0), np.float32(2.0)).passed


def test_boundary_tensors_are_compared_under_either_name(base):
    bumped = nm.renamed_conv_output(nm.perturbed(base, "w", 1.01))
    result = diff_models(base, bumped, X, boundary=[("c", "conv_out")])
    (c,) = result.boundary
    assert c.name == "c" and c.note == "'conv_out' in B"
    conv = run_model(base, X, ["c"]).outputs["c"].astype(np.float64)
    assert c.max_abs == pytest.approx(0.01 * np.abs(conv).max(), rel=1e-3)
    assert not c.passed and not result.passed

    clean = diff_models(base, nm.renamed_conv_output(base), X, boundary=[("c", "conv_out")])
    assert clean.passed and clean.boundary[0].max_abs == 0.0


def test_a_failing_boundary_alone_fails_the_diff(base):
    result = diff_models(base, base, X, boundary=[("c", "c")])
    assert result.passed
    result.boundary[0].passed = False
    assert not result.passed


def test_unknown_boundary_tensor_is_unavailable(base):
    result = diff_models(base, base, X, boundary=[("c", "ghost")])
    assert not result.available and "'ghost'" in result.reason


def test_a_model_onnxruntime_cannot_run_is_unavailable_not_an_exception(base, write_model):
    a = load_model(write_model(nm.conv_bn(3), "A.onnx"))
    b = load_model(write_model(nm.custom_op(), "B.onnx"))
    inputs = make_inputs(a)
    result = diff_models(a, b, inputs)
    assert not result.available and not result.passed
    assert result.reason.startswith("onnxruntime cannot run B.onnx: ") and "Mystery" in result.reason
    assert result.outputs == [] and math.isnan(result.max_abs)
    assert result.summary_lines() == [f"numeric diff not available: {result.reason}"]


def test_different_output_counts_are_unavailable(base):
    two = onnx.ModelProto()
    two.CopyFrom(base)
    two.graph.output.append(onnx.helper.make_empty_tensor_value_info("c"))
    result = diff_models(base, two, X)
    assert not result.available and "has 1 outputs but" in result.reason and "by position" in result.reason


def test_json_is_strict_and_complete(base):
    result = diff_models(base, nm.perturbed(base), X, boundary=[("c", "c")])
    data = json.loads(json.dumps(result.to_json(), allow_nan=False))
    assert data["available"] is True and data["passed"] is False
    assert data["outputs"][0]["name"] == "y" and data["outputs"][0]["shape"] == [1, 4, 8, 8]
    assert set(data["outputs"][0]) >= {"dtype", "max_abs", "max_rel", "cosine", "rtol", "atol", "limit", "passed"}
    assert data["boundary"][0]["name"] == "c"
    nan_case = compare_tensors("t", np.array([np.nan]), np.array([1.0])).to_json()
    assert nan_case["max_abs"] is None and json.dumps(nan_case, allow_nan=False)
    unavailable = NumericDiff(False, "why", [], []).to_json()
    assert unavailable["max_abs"] is None and unavailable["passed"] is False


def test_summary_lines_table(base):
    result = diff_models(base, nm.perturbed(base), X, boundary=[("c", "c")])
    lines = result.summary_lines()
    assert lines[0].split() == ["tensor", "dtype", "max", "abs", "max", "rel", "cosine", "limit"]
    assert lines[1].startswith("y ") and lines[1].endswith("FAIL") and "float32" in lines[1]
    assert lines[2] == "boundary tensors:" and lines[3].startswith("c ")
    assert lines[-1] == "FAIL: 2 of 2 tensors outside tolerance (y, c)"
    assert diff_models(base, base, X).summary_lines()[-1] == "PASS: 1 tensor within tolerance"
    assert diff_models(base, base, X, [("c", "c")]).summary_lines()[-1] == "PASS: all 2 tensors within tolerance"


def test_numerics_never_loads_qt():
    import subprocess
    import sys

    code = "import graphlens.numerics, sys; assert not [m for m in sys.modules if m.startswith('PySide6')]"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
