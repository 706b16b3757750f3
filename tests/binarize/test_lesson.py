"""The binarization lesson's numbers: the same α and SQNR as binarize(), at most 2^K levels, a
non-decreasing SQNR against K, and formulas filled in with the kernel's own numbers."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.binarize.bits import binarize
from graphlens.binarize.lesson import weight_lesson
from graphlens.core.errors import GraphLensError
from graphlens.numerics.metrics import sqnr_db
from graphlens.rewrites.lesson_text import number


@pytest.fixture
def conv_weight() -> np.ndarray:
    rng = np.random.default_rng(3)
    w = rng.normal(0.0, 0.1, (6, 3, 3, 3)).astype(np.float32)
    w[4] *= 5.0  # one kernel far wider than the others
    w[2, 0, 0, 0] = 1.5  # and one with an outlier: the worst to binarize
    return w


@pytest.mark.parametrize("bits", [1, 2, 3, 5])
def test_alphas_and_sqnr_are_binarizes_own(conv_weight, bits):
    lesson = weight_lesson(conv_weight, bits, axis=0, kernel=4)
    result = binarize(conv_weight, bits, axis=0)
    assert lesson.alphas == pytest.approx(list(result.alphas[:, 4]), rel=1e-12)
    kernel = conv_weight[4].astype(np.float64)
    assert lesson.sqnr_db == pytest.approx(sqnr_db(kernel, result.approx[4]), rel=1e-9)
    assert np.allclose(lesson.approx, result.approx[4].reshape(-1))
    assert len(np.unique(lesson.levels)) <= 2 ** bits
    assert set(np.round(lesson.approx, 12)) <= set(np.round(lesson.levels, 12))  # every weight sits on a level
    assert lesson.alphas[0] == pytest.approx(float(np.abs(kernel).mean()))  # α₁ = mean |W|


def test_the_sqnr_never_falls_as_bits_are_added(conv_weight):
    lesson = weight_lesson(conv_weight, 2, axis=0)
    curve = [s.sqnr_db for s in lesson.curve]
    assert len(curve) == 8 and all(b >= a - 1e-9 for a, b in zip(curve, curve[1:]))
    assert curve[1] == pytest.approx(lesson.sqnr_db)
    energy = lesson.residual_energy()  # each bit removes n·αᵢ² of error
    n = lesson.values.size
    for i, alpha in enumerate(lesson.alphas, 1):
        assert energy[i] == pytest.approx(energy[i - 1] - n * alpha**2, rel=1e-9, abs=1e-12)


def test_it_opens_on_the_worst_kernel_and_refuses_one_that_is_not_there(conv_weight):
    lesson = weight_lesson(conv_weight, 1, axis=0)
    assert lesson.kernel == int(np.argmin(lesson.kernel_sqnr_db)) == 2 and lesson.kernels == 6
    with pytest.raises(GraphLensError, match="no kernel 6"):
        weight_lesson(conv_weight, 1, axis=0, kernel=6)


def test_per_tensor_the_whole_weight_is_one_kernel(conv_weight):
    lesson = weight_lesson(conv_weight, 2, axis=None)
    result = binarize(conv_weight, 2, axis=None)
    assert lesson.kernels == 1 and lesson.values.size == conv_weight.size
    assert lesson.alphas == pytest.approx(list(result.alphas[:, 0]))


def test_the_formulas_carry_the_kernels_numbers(conv_weight):
    lesson = weight_lesson(conv_weight, 2, axis=0, kernel=1)
    text = "\n".join(lesson.formula_lines())
    assert "α₁ = mean |R₀| = " in text and number(lesson.alphas[0]) in text and number(lesson.alphas[1]) in text
    assert f"{lesson.steps[0].sqnr_db:.2f} dB" in text and f"{lesson.sqnr_db:.2f} dB" in text
    assert "levels: " + ", ".join(number(v) for v in lesson.levels) in text
    w, signs, w_hat = lesson.example()
    assert len(signs) == 2 and abs(w - w_hat) <= abs(w) + 1e-12 and "ŵ = " in text


def test_a_grouped_conv_transpose_lesson_explains_one_output_channel():
    rng = np.random.default_rng(8)
    w = rng.normal(0.0, 0.1, (4, 3, 3, 3))  # ConvTranspose (C=4, M/g=3, 3, 3), group 2: 6 output channels
    w[2:] *= 6.0  # group 1 far wider than group 0
    lesson = weight_lesson(w, 2, axis=1, kernel=4, groups=2)  # output channel 4 = group 1, column 1
    kernel = w[2:4, 1].reshape(-1)
    assert lesson.kernels == 6 and lesson.groups == 2
    np.testing.assert_array_equal(lesson.values, kernel)
    assert lesson.alphas[0] == pytest.approx(float(np.abs(kernel).mean()), rel=1e-12)  # α₁ = mean |W| of that channel
    result = binarize(w, 2, axis=1, groups=2)
    assert lesson.sqnr_db == pytest.approx(sqnr_db(kernel, result.approx[2:4, 1].reshape(-1)), rel=1e-9)
    assert len(lesson.kernel_sqnr_db) == 6
    with pytest.raises(GraphLensError):
        weight_lesson(w, 1, axis=1, kernel=6, groups=2)
