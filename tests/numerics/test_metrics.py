"""The error measures against numpy computed directly, the edge-case policy, chunking and the verdicts."""

from __future__ import annotations

import json
import math

import ml_dtypes
import numpy as np
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.numerics import metrics
from graphlens.numerics.metrics import (
    FAIR_DB,
    GOOD_DB,
    ErrorStats,
    Verdict,
    cosine,
    error_stats,
    max_rel,
    relative_rms,
    sqnr_db,
    verdict,
)

RNG = np.random.default_rng(7)


def _direct(a: np.ndarray, b: np.ndarray) -> dict[str, float]:
    """The measures as the module docstring writes them, in float64 numpy, whole arrays."""
    x, y = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    d = x - y
    return {"sqnr_db": 10 * np.log10(np.sum(x * x) / np.sum(d * d)), "mse": np.mean(d * d),
            "cosine": np.sum(x * y) / np.sqrt(np.sum(x * x) * np.sum(y * y)), "max_abs": np.abs(d).max(),
            "max_rel": (np.abs(d) / np.abs(x)).max()}


@pytest.mark.parametrize("fast", [False, True])
def test_measures_match_numpy_on_a_noisy_tensor(fast):
    a = RNG.standard_normal((3, 5, 7)).astype(np.float32)
    b = a + np.float32(0.05) * RNG.standard_normal(a.shape).astype(np.float32)
    stats, want = error_stats(a, b, fast=fast), _direct(a, b)
    tol = 1e-5 if fast else 1e-12
    assert stats.sqnr_db == pytest.approx(want["sqnr_db"], rel=tol)
    assert stats.mse == pytest.approx(want["mse"], rel=tol)
    assert stats.cosine == pytest.approx(want["cosine"], rel=tol)
    assert stats.max_abs == pytest.approx(want["max_abs"], rel=1e-12)
    assert max_rel(a, b) == pytest.approx(want["max_rel"], rel=1e-12)
    assert sqnr_db(a, b) == pytest.approx(want["sqnr_db"], rel=1e-12)
    assert cosine(a, b) == pytest.approx(want["cosine"], rel=1e-12)


def test_batches_across_chunks_sum_to_the_whole(monkeypatch):
    monkeypatch.setattr(metrics, "CHUNK", 1000)  # a 2,500-element tensor read in three chunks
    monkeypatch.setattr(metrics, "_ROW", 300)  # and its dot products taken in rows of 300
    a, b = RNG.standard_normal(2500), RNG.standard_normal(2500)
    whole = error_stats(a, b)
    batched = ErrorStats()
    batched.add(a[:1200], b[:1200])
    batched.add(a[1200:], b[1200:])
    want = _direct(a, b)
    for stats in (whole, batched):
        assert stats.count == 2500
        assert stats.sqnr_db == pytest.approx(want["sqnr_db"], rel=1e-12)
        assert stats.cosine == pytest.approx(want["cosine"], rel=1e-12)
        assert stats.max_abs == pytest.approx(want["max_abs"], rel=1e-12)
    assert max_rel(a, b) == pytest.approx(want["max_rel"], rel=1e-12)


def test_equal_tensors_are_exact():
    a = RNG.standard_normal(10).astype(np.float32)
    stats = error_stats(a, a.copy())
    assert (stats.sqnr_db, stats.mse, stats.max_abs, stats.cosine, max_rel(a, a)) == (math.inf, 0.0, 0.0, 1.0, 0.0)
    empty = error_stats(np.zeros(0), np.zeros(0))
    assert (empty.sqnr_db, empty.mse, empty.cosine) == (math.inf, 0.0, 1.0)


def test_zero_signal():
    zero = np.zeros(4, np.float32)
    assert sqnr_db(zero, np.array([0, 0, 1, 0], np.float32)) == -math.inf
    assert cosine(zero, np.ones(4)) == 0.0 and cosine(np.ones(4), zero) == 0.0
    assert cosine(zero, zero) == 1.0 and sqnr_db(zero, zero) == math.inf


@pytest.mark.parametrize("fast", [False, True])
def test_matching_non_finite_values_count_as_equal(fast):
    a = np.array([1.0, np.nan, np.inf, -np.inf, 2.0], np.float32)
    b = np.array([1.5, np.nan, np.inf, -np.inf, 2.0], np.float32)
    stats = error_stats(a, b, fast=fast)
    # only the finite elements carry a size: 1 and 2 against 1.5 and 2
    assert stats.sqnr_db == pytest.approx(10 * math.log10(5 / 0.25))
    assert stats.mse == pytest.approx(0.25 / 5) and stats.max_abs == 0.5
    assert stats.cosine == pytest.approx((1.5 + 4) / math.sqrt(5 * 6.25))
    assert error_stats(a, a.copy(), fast=fast).sqnr_db == math.inf


@pytest.mark.parametrize("fast", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_non_finite_value_facing_another_value_is_an_infinite_error(fast, bad):
    a = np.array([1.0, 2.0, 3.0], np.float32)
    b = np.array([1.0, bad, 3.0], np.float32)
    for x, y in ((a, b), (b, a)):
        stats = error_stats(x, y, fast=fast)
        assert stats.sqnr_db == -math.inf and stats.mse == math.inf and stats.max_abs == math.inf
        assert stats.cosine == pytest.approx(1.0)  # over the elements finite on both sides
        assert max_rel(x, y) == math.inf
    opposite = error_stats(np.array([np.inf]), np.array([-np.inf]))
    assert opposite.sqnr_db == -math.inf and opposite.max_abs == math.inf
    assert json.dumps(error_stats(a, b).to_dict(), allow_nan=False)  # infinities written as null


def test_float32_sums_that_overflow_are_redone_in_float64():
    a = np.array([3e19, -2e19, 1e19], np.float32)  # squares beyond float32's range
    b = a * np.float32(1.001)
    fast = error_stats(a, b, fast=True)
    assert math.isfinite(fast.sqnr_db)
    assert fast.sqnr_db == pytest.approx(_direct(a, b)["sqnr_db"], rel=1e-9)


def test_integer_and_bool_tensors_are_compared_as_numbers():
    a, b = np.array([1, 2, 3], np.int64), np.array([1, 2, 5], np.int64)
    assert sqnr_db(a, b) == pytest.approx(10 * math.log10(14 / 4))
    assert error_stats(a, b).max_abs == 2.0
    assert error_stats(np.array([True, False]), np.array([True, True])).max_abs == 1.0
    half = np.array([1.0, 2.0], ml_dtypes.bfloat16)
    assert sqnr_db(half, half) == math.inf


def test_tensors_that_cannot_be_measured_are_refused_with_their_name():
    with pytest.raises(GraphLensError, match=r"conv_out: cannot compare a tensor of shape \[2, 3\] with one of "
                                             r"shape \[3, 2\]"):
        error_stats(np.zeros((2, 3)), np.zeros((3, 2)), name="conv_out")
    with pytest.raises(GraphLensError, match="shape"):
        ErrorStats().add(np.zeros(6), np.zeros((2, 3)))
    with pytest.raises(GraphLensError, match="complex128"):
        sqnr_db(np.zeros(2, complex), np.zeros(2, complex))


def test_verdicts():
    assert (GOOD_DB, FAIR_DB) == (30.0, 20.0)
    assert [verdict(db) for db in (math.inf, 30.0, 29.9, 20.0, 19.9, -math.inf, math.nan)] == [
        Verdict.GOOD, Verdict.GOOD, Verdict.FAIR, Verdict.FAIR, Verdict.POOR, Verdict.POOR, Verdict.POOR]
    a = RNG.standard_normal(1000)
    b = a + 0.03 * RNG.standard_normal(1000)
    assert relative_rms(sqnr_db(a, b)) == pytest.approx(np.linalg.norm(a - b) / np.linalg.norm(a), rel=1e-12)
    assert relative_rms(GOOD_DB) == pytest.approx(10 ** -1.5) and relative_rms(math.inf) == 0.0
