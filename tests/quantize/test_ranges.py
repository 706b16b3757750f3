"""Entropy (KL) ranges against a direct computation, and auto's choice per tensor."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.core.model import Model
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize.calibrate import CalibrationData, collect_ranges
from graphlens.quantize.qdq import QType, fake_quantize, scale_zero_point
from graphlens.quantize.ranges import (
    Range,
    auto_range,
    entropy_histogram,
    entropy_range,
    entropy_windows,
    kl_divergences,
)
from tests.quantize.quant_models import layer


def direct_kl(h: np.ndarray, a: int, b: int, levels: int) -> float:
    """KL(P‖Q) of the window [a, b) written out bin by bin, as TensorRT's calibration describes it."""
    h = h.astype(np.float64)
    p = h[a:b].copy()
    p[0] += h[:a].sum()
    p[-1] += h[b:].sum()
    sliced = h[a:b]
    n = b - a
    level = np.arange(n) * levels // n  # bin r of the window goes to level floor(r·L/n)
    merged = np.bincount(level, weights=sliced, minlength=levels)
    used = np.bincount(level, weights=(p > 0).astype(float), minlength=levels)
    q = np.where(p > 0, merged[level] / np.maximum(used[level], 1), 0.0)  # spread over the level's used bins
    p, q = p / p.sum(), q / q.sum()
    mask = p > 0
    return float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))


def laplace_with_outliers(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = np.abs(rng.laplace(0.0, 1.0, 100_000))
    x[:30] = rng.uniform(60.0, 80.0, 30)  # 0.03 % far out
    return x


@pytest.mark.parametrize("symmetric", [False, True])
def test_entropy_threshold_is_the_least_kl_window_computed_directly(symmetric):
    x = laplace_with_outliers()
    spec = entropy_histogram(0.0, float(x.max()), QType(8, symmetric), symmetric)
    counts = spec.counts(x)
    assert (spec.levels, spec.bins) == ((128, 2048) if symmetric else (256, 4096))
    kls = [direct_kl(counts, 0, n, spec.levels) for n in range(spec.levels, spec.bins + 1)]
    best_n = spec.levels + int(np.argmin(kls))
    r = entropy_range(counts, spec, 0.0, float(x.max()))
    assert r.high == pytest.approx(spec.edges[best_n])
    assert r.method == "entropy"
    assert 4.0 < r.high < 40.0  # the outliers (60..80) are clipped, the Laplacian's bulk is not
    starts, stops = entropy_windows(spec.bins, spec.levels, 0.0)
    fast = kl_divergences(counts, starts, stops, spec.levels)
    np.testing.assert_allclose(fast[::97], kls[::97], rtol=1e-6, atol=1e-9)


def test_entropy_on_two_signed_values_clips_the_outliers_and_keeps_the_other_side():
    x = laplace_with_outliers() * np.where(np.arange(100_000) % 2, 1.0, -1.0)  # Laplacian on both sides
    x[:30] = np.abs(x[:30])  # outliers only above
    lo, hi = float(x.min()), float(x.max())
    spec = entropy_histogram(lo, hi, QType(8, False), False)
    counts = spec.counts(x)
    starts, stops = entropy_windows(spec.bins, spec.levels, -spec.low / (spec.high - spec.low) * spec.bins)
    kls = [direct_kl(counts, int(a), int(b), spec.levels) for a, b in zip(starts, stops)]
    best = int(np.argmin(kls))
    r = entropy_range(counts, spec, lo, hi)
    assert (r.low, r.high) == pytest.approx((spec.edges[starts[best]], spec.edges[stops[best]]))
    assert r.high < 40.0 and r.low < -5.0  # the high outliers dropped, the Laplacian's negative side kept


def _collect(method: str, values: np.ndarray) -> Range:
    data = CalibrationData({"x": values.reshape(-1, 3, 4).astype(np.float32)}, "given")
    return collect_ranges(layer("MatMul"), ["x"], data, QuantConfig(method=method, batch_size=1))["x"]


def test_entropy_through_the_calibration_passes_clips_outliers():
    x = laplace_with_outliers()[:12 * 500]
    x[:3] = 70.0
    r = _collect("entropy", x)
    assert r.method == "entropy" and r.low == pytest.approx(0.0, abs=1e-3) and 3.0 < r.high < 30.0


def test_entropy_leaves_a_relus_exact_zeros_out_of_its_histogram():
    """A ReLU's output: most values exactly 0, the rest a tail. The zeros quantize exactly in every window, so the
    range is the one the nonzero values alone give; with their spike in the histogram the narrowest window won."""
    from graphlens.quantize.ranges import entropy_histogram, entropy_range

    rng = np.random.default_rng(5)
    tail = np.abs(rng.laplace(0.0, 1.0, 12 * 500))
    x = np.concatenate([tail, np.zeros(4 * tail.size)])
    rng.shuffle(x)
    r = _collect("entropy", x)
    spec = entropy_histogram(0.0, float(x.max()), QType(8, False), False)
    alone = entropy_range(spec.counts(tail.astype(np.float32)), spec, 0.0, float(x.max()))
    assert (r.low, r.high) == pytest.approx((alone.low, alone.high), rel=1e-6)
    spiked = entropy_range(spec.counts(x.astype(np.float32)), spec, 0.0, float(x.max()))
    assert spiked.high == pytest.approx(x.max() / 16, rel=0.02)  # what the zeros used to do: a sixteenth
    assert _qdq_mse(tail, r) < _qdq_mse(tail, spiked) / 2


def _qdq_mse(x: np.ndarray, r: Range) -> float:
    params = scale_zero_point(r.low, r.high, QType(8, False), False)
    xf = x.astype(np.float32)
    return float(np.mean((xf.astype(np.float64) - fake_quantize(xf, params)) ** 2))


def _wide_ranges(method: str, values: np.ndarray) -> Range:
    """The range of a graph input of 100,000 values per sample, fed as a batch."""
    from onnx import TensorProto, helper

    from tests import models

    proto = models.make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                              [models.tensor("x", TensorProto.FLOAT, ["n", 100_000])],
                              [models.tensor("y", TensorProto.FLOAT, ["n", 100_000])])
    data = CalibrationData({"x": values.reshape(-1, 1, 100_000).astype(np.float32)}, "given")
    return collect_ranges(proto, ["x"], data, QuantConfig(method=method))["x"]


def test_auto_clips_a_tensor_with_outliers_and_keeps_the_range_of_a_uniform_one():
    """A million values with one far out: the squared error is least with the outlier clipped (its
    clipping error is less than the rounding error a range 5x wider puts on every other value)."""
    rng = np.random.default_rng(2)
    x = np.abs(rng.laplace(0.0, 1.0, 1_000_000))
    x[12345] = 70.0
    outliers = _wide_ranges("auto", x)
    assert outliers.method in ("entropy", "percentile", "mse") and outliers.high < 35.0
    assert _qdq_mse(x, outliers) < _qdq_mse(x, Range(0.0, 70.0)) / 2
    u = rng.uniform(-2.0, 3.0, 1_000_000)
    uniform = _wide_ranges("auto", u)
    assert (uniform.low, uniform.high) == pytest.approx((u.min(), u.max()), rel=0.01)


def test_auto_picks_the_candidate_with_the_least_error_and_leaves_exact_zeros_out():
    edges = np.linspace(0.0, 10.0, 2049)
    counts = np.zeros(2048)
    counts[:200] = 1e5  # twenty million values up to ~1
    counts[-1] = 1.0  # one at 10
    candidates = {"minmax": Range(0.0, 10.0, "minmax"), "mse": Range(0.0, 1.0, "mse")}
    r, errors = auto_range(candidates, counts, edges, 0.0, QType(8, False), False)
    assert r.method == "mse" and errors["mse"] < errors["minmax"]
    spike = counts.copy()
    spike[0] += 1e9  # a ReLU's zeros: exact in both ranges, so they must not decide
    r0, errors0 = auto_range(candidates, spike, edges, 1e9, QType(8, False), False)
    assert r0.method == "mse" and errors0 == pytest.approx(errors)


@pytest.mark.parametrize("method", ["entropy", "auto"])
def test_entropy_and_auto_quantize_a_model_and_the_report_says_which_method_each_tensor_got(method):
    result = quantize_model(Model(layer("Conv")), QuantConfig(method=method))
    assert result.output_sqnr_db > 20
    methods = result.to_dict()["range_methods"]
    assert methods and set(methods.values()) <= {"minmax", "entropy", "percentile", "mse"}
    if method == "entropy":
        assert set(methods.values()) == {"entropy"}
