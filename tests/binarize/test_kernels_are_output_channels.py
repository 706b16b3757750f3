"""Binarizing per kernel gives one α per output channel exactly as core.linear places the channels in each
op's weight, grouped ConvTranspose included."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.binarize.bits import binarize, kernel_axis
from graphlens.core.linear import Conv, ConvTranspose, Gemm, LinearOp, MatMul


@pytest.mark.parametrize(("op", "shape"), [
    (Conv(group=2), (6, 2, 3, 3)),
    (ConvTranspose(), (4, 3, 2, 2)),
    (ConvTranspose(group=2), (4, 3, 2, 2)),
    (ConvTranspose(group=4), (4, 1, 3)),
    (Gemm(trans_b=0), (5, 3)),
    (Gemm(trans_b=1), (3, 5)),
    (MatMul(), (2, 5, 3)),
])
def test_each_kernel_is_one_output_channel_of_the_op(op: LinearOp, shape: tuple[int, ...]):
    w = np.random.default_rng(0).normal(size=shape)
    result = binarize(w, 1, axis=op.output_axis(w.ndim), groups=op.kernel_groups)
    channels = op.positions(shape, "out")  # flat indices of each output channel's weights
    assert result.kernels == op.output_channels(shape) == channels.shape[0]
    # XNOR-Net's α₁ = mean |w| over the output channel's own weights, and Ŵ = α₁·sign(W) there
    np.testing.assert_allclose(result.alphas[0], np.abs(w.reshape(-1)[channels]).mean(axis=1), rtol=1e-12)
    expected = result.alphas[0][op.channel_index(shape, "out")] * np.where(w > 0, 1.0, -1.0)
    np.testing.assert_allclose(result.approx, expected, rtol=1e-12)
    np.testing.assert_allclose((result.signs * result.scales()).sum(axis=0), result.approx, rtol=1e-12)


def test_kernel_axis_of_an_op_type_is_the_ops_output_axis():
    for op in (Conv(), ConvTranspose(), Gemm(trans_b=0), Gemm(trans_b=1), MatMul()):
        for ndim in (2, 3, 4):
            assert kernel_axis(op.op_type, trans_b=op.trans_b, ndim=ndim) == op.output_axis(ndim)
