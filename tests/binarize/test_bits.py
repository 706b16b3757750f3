"""The binarization math against a direct numpy computation of the recurrence
R₀ = W, Bᵢ = sign Rᵢ₋₁, αᵢ = mean |Rᵢ₋₁|."""

from __future__ import annotations

import math

import numpy as np
import pytest

from graphlens.binarize.bits import binarize, kernel_axis, random_bit_map, residual_steps
from graphlens.core.errors import GraphLensError
from graphlens.numerics.metrics import sqnr_db


def kernel_index(shape: tuple[int, ...], axis: int | None, groups: int = 1) -> list[tuple]:
    """The index of each output channel's elements, written out: output channel ``m = g·(M/g) + j`` of a
    grouped ConvTranspose (weight ``(C, M/g, k…)``, axis 1) reads rows ``g·C/g … (g+1)·C/g − 1`` at column ``j``."""
    if axis is None:
        return [(slice(None),)]
    if groups == 1:
        return [(slice(None),) * axis + (k,) for k in range(shape[axis])]
    assert axis == 1
    rows = shape[0] // groups
    return [(slice(g * rows, (g + 1) * rows), j) for g in range(groups) for j in range(shape[1])]


def reference(w: np.ndarray, bits: int, axis: int | None, bit_map: np.ndarray | None = None,
              groups: int = 1) -> np.ndarray:
    """The recurrence kernel by kernel, with plain loops over the kernels and the bits."""
    w = w.astype(np.float64)
    bit_map = np.full(w.shape, bits) if bit_map is None else np.broadcast_to(bit_map, w.shape)
    out = np.zeros_like(w)
    for index in kernel_index(w.shape, axis, groups):
        r, m, approx = w[index].copy(), bit_map[index], np.zeros_like(w[index])
        for i in range(bits):
            hot = m > i
            alpha = np.abs(r[hot]).mean() if hot.any() else 0.0
            b = np.where(r > 0, 1.0, -1.0) * hot
            approx += alpha * b
            r -= alpha * b
        out[index] = approx
    return out


@pytest.mark.parametrize("axis", [0, 1, None])
@pytest.mark.parametrize("bits", [1, 2, 3, 5])
def test_bits_match_the_recurrence(axis, bits):
    w = np.random.default_rng(bits).normal(0, 0.3, (6, 4, 3, 3)).astype(np.float32)
    result = binarize(w, bits, axis=axis)
    np.testing.assert_allclose(result.approx, reference(w, bits, axis), rtol=1e-12, atol=1e-12)
    assert result.signs.shape == (bits, *w.shape) and result.signs.dtype == np.int8
    assert result.alphas.shape == (bits, 1 if axis is None else w.shape[axis])
    rebuilt = (result.signs * result.alphas.reshape(result.alpha_shape())).sum(axis=0)
    np.testing.assert_allclose(rebuilt, result.approx, rtol=1e-12)


@pytest.mark.parametrize(("shape", "groups"), [((4, 3, 3, 3), 2), ((6, 1, 3, 3), 6), ((6, 2, 2, 2), 3)])
@pytest.mark.parametrize("bits", [1, 3])
def test_a_grouped_conv_transpose_has_one_kernel_per_output_channel(shape, groups, bits):
    w = np.random.default_rng(bits).normal(0, 0.3, shape)
    w[: shape[0] // groups] *= 4.0  # group 0 far larger: an α shared across groups would be visibly wrong
    result = binarize(w, bits, axis=1, groups=groups)
    assert result.kernels == groups * shape[1] and result.alphas.shape == (bits, groups * shape[1])
    np.testing.assert_allclose(result.approx, reference(w, bits, 1, groups=groups), rtol=1e-12, atol=1e-12)
    rows = shape[0] // groups
    for m in range(groups * shape[1]):  # XNOR-Net's α₁ = mean |w| over output channel m's own weights
        g, j = divmod(m, shape[1])
        assert result.alphas[0, m] == pytest.approx(np.abs(w[g * rows:(g + 1) * rows, j]).mean(), rel=1e-12)
    np.testing.assert_allclose((result.signs * result.scales()).sum(axis=0), result.approx, rtol=1e-12)
    assert result.distinct_values() <= 2**bits
    steps = residual_steps(w, bits, 1, kernel=groups * shape[1] - 1, groups=groups)
    assert [s.alpha for s in steps] == pytest.approx(result.alphas[:, -1].tolist())
    assert steps[-1].sqnr_db == pytest.approx(sqnr_db(w[-rows:, -1], result.approx[-rows:, -1]))
    per_channel = random_bit_map(shape, 2.0, 4, seed=1, axis=1, groups=groups)
    assert all(np.unique(per_channel[index]).size == 1 for index in kernel_index(shape, 1, groups))


@pytest.mark.parametrize("axis", [0, None])
def test_a_bit_map_gives_each_element_its_own_bits(axis):
    rng = np.random.default_rng(7)
    w = rng.normal(0, 1, (5, 8))
    bit_map = rng.integers(0, 4, w.shape)
    result = binarize(w, 3, axis=axis, bit_map=bit_map)
    np.testing.assert_allclose(result.approx, reference(w, 3, axis, bit_map), rtol=1e-12, atol=1e-12)
    for i in range(3):  # no bit i where the map gives fewer bits; ±1 where it gives one
        assert (result.signs[i][bit_map <= i] == 0).all()
        assert (np.abs(result.signs[i][bit_map > i]) == 1).all()
    assert (result.approx[bit_map == 0] == 0).all()


def test_zero_takes_the_minus_one_bit():
    result = binarize(np.array([[0.0, 2.0], [-2.0, 0.0]]), 1, axis=None)
    assert result.signs[0].tolist() == [[-1, 1], [-1, -1]]
    assert result.alphas[0, 0] == 1.0  # mean |W| = (0 + 2 + 2 + 0) / 4
    assert result.approx.tolist() == [[-1.0, 1.0], [-1.0, -1.0]]


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_each_kernel_takes_at_most_two_to_the_k_values(bits):
    w = np.random.default_rng(1).normal(0, 1, (8, 3, 5, 5))
    result = binarize(w, bits, axis=0)
    per_kernel = [np.unique(result.approx[k]).size for k in range(8)]
    assert max(per_kernel) <= 2**bits and result.distinct_values() == max(per_kernel)
    assert np.unique(binarize(w, bits, axis=None).approx).size <= 2**bits


@pytest.mark.parametrize("axis", [0, None])
def test_sqnr_never_decreases_with_more_bits(axis):
    w = np.random.default_rng(3).standard_t(3, (16, 8, 3, 3))  # heavy tails
    values = [sqnr_db(w, binarize(w, k, axis=axis).approx) for k in range(1, 9)]
    assert all(b >= a for a, b in zip(values, values[1:], strict=False)), values
    assert values[-1] > values[0] + 5


def test_one_gaussian_bit_is_4_4_db():
    w = np.random.default_rng(0).normal(0, 2.0, 1_000_000)
    expected = -10 * math.log10(1 - 2 / math.pi)
    assert expected == pytest.approx(4.40, abs=0.01)
    assert sqnr_db(w, binarize(w, 1, axis=None).approx) == pytest.approx(expected, abs=0.02)
    w2 = w.reshape(1000, 1000)  # per kernel (XNOR-Net's α = mean |W| per output channel): the same figure
    assert sqnr_db(w2, binarize(w2, 1, axis=0).approx) == pytest.approx(expected, abs=0.05)


def test_sqnr_against_numpy():
    w, approx = np.array([3.0, 4.0]), np.array([3.0, 3.0])
    assert sqnr_db(w, approx) == pytest.approx(10 * math.log10(25.0))
    assert sqnr_db(w, w) == math.inf


def test_kernel_axes_are_the_output_channels():
    assert kernel_axis("Conv") == 0
    assert kernel_axis("ConvTranspose") == 1
    assert kernel_axis("Gemm", trans_b=1) == 0 and kernel_axis("Gemm", trans_b=0) == 1
    assert kernel_axis("MatMul") == 1 and kernel_axis("MatMul", ndim=3) == 2
    with pytest.raises(GraphLensError):
        kernel_axis("Relu")


def test_random_bit_map_is_seeded_around_its_mean():
    a = random_bit_map((64, 64), 2.5, 4, seed=3)
    assert (a == random_bit_map((64, 64), 2.5, 4, seed=3)).all()
    assert not (a == random_bit_map((64, 64), 2.5, 4, seed=4)).all()
    assert a.min() >= 1 and a.max() <= 4 and abs(a.mean() - 2.5) < 0.2
    per_kernel = random_bit_map((8, 3, 3), 2.0, 3, seed=0, axis=0)
    assert all(np.unique(per_kernel[k]).size == 1 for k in range(8))


def test_residual_steps_explain_one_kernel():
    w = np.random.default_rng(5).normal(0, 1, (4, 9))
    steps = residual_steps(w, 3, 0, kernel=2)
    result = binarize(w, 3, axis=0)
    assert [s.bit for s in steps] == [1, 2, 3]
    assert [s.alpha for s in steps] == pytest.approx(result.alphas[:, 2].tolist())
    assert steps[-1].sqnr_db == pytest.approx(sqnr_db(w[2], result.approx[2]))
    assert [len(s.levels) for s in steps] == [2, 4, 8]
    assert set(np.round(result.approx[2], 12)) <= set(np.round(steps[-1].levels, 12))
    assert all(b.sqnr_db >= a.sqnr_db for a, b in zip(steps, steps[1:], strict=False))


def test_bad_input_is_one_line():
    w = np.ones((2, 2))
    for call in (lambda: binarize(w, 0, axis=0), lambda: binarize(w, 9, axis=0), lambda: binarize(w, 1, axis=2),
                 lambda: binarize(w, 2, axis=0, bit_map=np.full((2, 2), 3)),
                 lambda: binarize(w, 1, axis=0, bit_map=np.ones((3,))),
                 lambda: binarize(np.array([np.nan, 1.0]), 1, axis=None),
                 lambda: random_bit_map((2,), 5.0, 4, seed=0),
                 lambda: binarize(np.ones((3, 2, 2)), 1, axis=1, groups=2),
                 lambda: binarize(np.ones((4, 2, 2)), 1, axis=0, groups=2),
                 lambda: binarize(w, 1, axis=1, groups=0)):
        with pytest.raises(GraphLensError) as info:
            call()
        assert "\n" not in str(info.value)
