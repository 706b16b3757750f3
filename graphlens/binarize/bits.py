"""Multi-bit binarization of a weight (CNTK netopt's ``MultibitKernel``), the math stated once here.

For a weight ``W`` and ``K`` bits, greedily on the residual::

    R₀ = W
    for i = 1..K:
        Bᵢ = sign(Rᵢ₋₁) ∈ {−1, +1}          (sign(0) = −1: ``Where(Greater(r, 0), 1, −1)``)
        αᵢ = mean |Rᵢ₋₁|                     over the kernel (per kernel) or the tensor (per tensor),
                                             counting only the elements whose bit map allows a bit i
        Rᵢ = Rᵢ₋₁ − αᵢ·Bᵢ
    Ŵ = Σᵢ αᵢ·Bᵢ

- **Sign of 0.** An element that is exactly 0 (or whose residual is) gets ``Bᵢ = −1``, as the
  seed's ``element_select(greater(x, 0), 1, −1)`` and the activation sign in the graph do.
- **Bit map.** ``bit_map[e] = kₑ ∈ 0..K`` gives element ``e`` only its first ``kₑ`` bits:
  ``Bᵢ[e] = 0`` for ``i > kₑ`` (stored as 0 in :attr:`Binarized.signs`) and the element does not
  count in ``αᵢ``; a kernel with no element allowed a bit i has ``αᵢ = 0``.
- **Kernels.** A kernel is everything one output channel reads: the slices along the weight's
  output-channel axis, which :mod:`graphlens.core.linear` states for each op
  (``LinearOp.output_axis``; a Conv's is axis 0 whatever its groups). Per tensor there is one kernel.
- **Grouped ConvTranspose** (``groups = g > 1``, kernel axis 1): its weight ``(C, M/g, k…)`` holds
  ``M`` output channels, not ``M/g``; channel ``m = gᵢ·(M/g) + j`` reads column ``j`` of the rows of
  group ``gᵢ`` only, as :class:`graphlens.core.linear.ConvTranspose` lays them out, and is one kernel.
  (Axis 1 alone would give ``M/g`` kernels, each shared by one channel of every group.)
- **Never worse with more bits.** On the elements counted, ``Σ Rᵢ₋₁·Bᵢ = Σ |Rᵢ₋₁| = n·αᵢ``, so
  ``‖Rᵢ‖² = ‖Rᵢ₋₁‖² − n·αᵢ²``: each bit removes ``n·αᵢ²`` of error, and the SQNR
  ``10·log10(‖W‖² / ‖W − Ŵ‖²)`` never decreases as K grows.
- **One bit.** With K = 1 per kernel this is XNOR-Net's binary-weight network, ``α = mean |W|``
  (the least-squares scale for ``B = sign W``). For Gaussian weights ``E|w| = σ·√(2/π)``, so the
  error is ``σ²·(1 − 2/π)`` and the SQNR ``−10·log10(1 − 2/π) ≈ 4.40 dB``.
- **Levels.** A kernel of K bits takes at most ``2^K`` values, ``Σᵢ ±αᵢ``.

Everything is computed in float64; the model stores Ŵ (or αᵢ) in the weight's own dtype.
"""

from __future__ import annotations

import functools
import itertools
from dataclasses import dataclass

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.linear import LINEAR_OP_TYPES, LINEAR_OPS, ConvTranspose
from graphlens.numerics.metrics import sqnr_db

MAX_BITS = 8


@dataclass(frozen=True)
class Binarized:
    """One weight binarized with K bits; see the module docstring."""

    approx: np.ndarray
    """Ŵ = Σ αᵢ·Bᵢ, float64, W's shape."""
    signs: np.ndarray
    """Bᵢ, int8 ±1, shape ``(K, *W.shape)``; 0 where the bit map gives an element no bit i."""
    alphas: np.ndarray
    """αᵢ, float64, shape ``(K, kernels)`` (one kernel per tensor)."""
    axis: int | None
    """The kernel axis of W; None per tensor."""
    bits: int
    """K."""
    groups: int = 1
    """ConvTranspose's ``group``: axis 0 holds that many groups, each with its own kernels (module docstring)."""

    @property
    def kernels(self) -> int:
        return int(self.alphas.shape[1])

    def alpha_shape(self) -> tuple[int, ...]:
        """The shape of :meth:`scales`: ``(K, 1, …, kernels, …, 1)``; grouped, ``(K, C, M/g, 1, …)``."""
        return self.scales().shape

    def scales(self) -> np.ndarray:
        """αᵢ shaped to broadcast against ``signs`` (float64): ``Ŵ = Σᵢ scales[i]·signs[i]``."""
        shape = self.signs.shape[1:]
        return np.stack([_expand(a, shape, self.axis, self.groups) for a in self.alphas])

    def distinct_values(self) -> int:
        """The most distinct values of Ŵ in one kernel (at most 2^K with a uniform bit map)."""
        return distinct_values(self.approx, self.axis, self.groups)


@dataclass(frozen=True)
class Step:
    """One bit of one kernel, for the lesson: αᵢ, the SQNR after it, the 2^i levels Σ ±αⱼ (j ≤ i)."""

    bit: int
    alpha: float
    sqnr_db: float
    levels: np.ndarray


def kernel_axis(op_type: str, *, trans_b: int = 0, ndim: int = 2) -> int:
    """The output-channel (kernel) axis of a weight of ``ndim`` dims of an ``op_type`` layer, as
    :meth:`graphlens.core.linear.LinearOp.output_axis` gives it; for scripts that have an op type, not a node.

    A grouped ConvTranspose also splits axis 0 in its groups (:func:`binarize`'s ``groups``).
    """
    op = LINEAR_OPS.get(op_type)
    if op is None:
        raise GraphLensError(f"cannot binarize op type '{op_type}'; op types: {', '.join(LINEAR_OP_TYPES)}")
    return op(trans_b=trans_b).output_axis(ndim)


def _check_bits(bits: int) -> None:
    if isinstance(bits, bool) or not isinstance(bits, (int, np.integer)) or not 1 <= bits <= MAX_BITS:
        raise GraphLensError(f"bits must be 1 to {MAX_BITS}, not {bits}")


def _check_groups(shape: tuple[int, ...], axis: int | None, groups: int) -> None:
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)) or groups < 1:
        raise GraphLensError(f"groups must be a positive integer, not {groups}")
    if groups == 1 or axis is None:
        return
    if axis != 1 or len(shape) < 2:
        raise GraphLensError(f"groups split axis 0 of the weight with kernels along axis 1 (a ConvTranspose's); "
                             f"the kernel axis must be 1, not {axis}")
    if shape[0] % groups:
        raise GraphLensError(f"a weight of shape {list(shape)} cannot hold {groups} groups: "
                             f"{shape[0]} is not a multiple of {groups}")


def kernel_count(shape: tuple[int, ...], axis: int | None, groups: int = 1) -> int:
    """How many kernels (output channels) a weight of ``shape`` has: 1 per tensor, else ``groups·shape[axis]``."""
    return 1 if axis is None else int(shape[axis]) * int(groups)


def _by_kernel(x: np.ndarray, axis: int | None, groups: int = 1) -> np.ndarray:
    """``x`` as ``(kernels, elements per kernel)``; grouped, kernel ``m = gᵢ·shape[1] + j`` (the module docstring)."""
    if axis is None:
        return x.reshape(1, -1)
    if groups == 1:
        return np.moveaxis(x, axis, 0).reshape(x.shape[axis], -1)
    kernels: np.ndarray = x.reshape(-1)[_grouped_positions(x.shape, groups)]
    return kernels


@functools.lru_cache(maxsize=2)
def _grouped_positions(shape: tuple[int, ...], groups: int) -> np.ndarray:
    """A grouped ConvTranspose's output channels as flat indices, ``(kernels, elements per kernel)``; kept for the
    next call, since :func:`binarize` regroups the same weight twice a bit."""
    positions = ConvTranspose(group=groups).positions(shape, "out")
    positions.setflags(write=False)
    return positions


def _expand(per_kernel: np.ndarray, shape: tuple[int, ...], axis: int | None, groups: int = 1) -> np.ndarray:
    """A ``(kernels,)`` vector shaped to broadcast against a weight of ``shape``
    (kernel order of :func:`_by_kernel`)."""
    ndim = len(shape)
    if axis is None:
        return per_kernel.reshape([1] * ndim)
    if groups == 1:
        target = [1] * ndim
        target[axis] = per_kernel.size
        return per_kernel.reshape(target)
    rows_and_columns = (shape[0], shape[1], *[1] * (ndim - 2))  # one value per (row, column) pair of a kernel
    expanded: np.ndarray = per_kernel[ConvTranspose(group=groups).channel_index(rows_and_columns, "out")]
    return expanded


def kernel_values(x: np.ndarray, axis: int | None, kernel: int, groups: int = 1) -> np.ndarray:
    """The elements of kernel ``kernel`` of ``x`` (a weight-shaped array), flat; the whole array per tensor."""
    x = np.asarray(x)
    return x.reshape(-1) if axis is None else _by_kernel(x, axis, groups)[kernel]


def binarize(w: np.ndarray, bits: int, *, axis: int | None, bit_map: np.ndarray | None = None,
             groups: int = 1) -> Binarized:
    """Binarize ``w`` with ``bits`` bits per kernel along ``axis`` (None: per tensor); see the module docstring.

    ``bit_map``: bits per element (broadcast to ``w``'s shape), each 0..``bits``; None gives every element ``bits``.
    ``groups``: a grouped ConvTranspose's ``group`` (its ``M`` kernels span axis 0 and ``axis``).
    """
    _check_bits(bits)
    w = np.asarray(w)
    if w.dtype.kind not in "fiu" or w.ndim == 0 or w.size == 0:
        raise GraphLensError(f"can only binarize a non-empty numeric tensor, not {w.dtype} of shape {list(w.shape)}")
    if axis is not None and not 0 <= axis < w.ndim:
        raise GraphLensError(f"kernel axis {axis} is outside a weight of {w.ndim} dims")
    _check_groups(w.shape, axis, groups)
    groups = int(groups) if axis is not None else 1
    w64 = w.astype(np.float64)
    if not np.isfinite(w64).all():
        raise GraphLensError("cannot binarize a weight holding inf or NaN")
    if bit_map is None:
        allowed = np.full(w.shape, bits, np.int64)
    else:
        try:
            allowed = np.broadcast_to(np.asarray(bit_map), w.shape).astype(np.int64)
        except ValueError as exc:
            raise GraphLensError(f"bit map of shape {list(np.shape(bit_map))} does not fit a weight of shape "
                                 f"{list(w.shape)}") from exc
        if allowed.min() < 0 or allowed.max() > bits:
            raise GraphLensError(f"bit map values must be 0 to {bits}, not {int(allowed.min())}..{int(allowed.max())}")
    kernels = kernel_count(w.shape, axis, groups)
    residual = w64.copy()
    approx = np.zeros_like(w64)
    signs = np.zeros((bits, *w.shape), np.int8)
    alphas = np.zeros((bits, kernels), np.float64)
    for i in range(bits):
        hot = allowed > i
        count = _by_kernel(hot, axis, groups).sum(axis=1)
        total = _by_kernel(np.where(hot, np.abs(residual), 0.0), axis, groups).sum(axis=1)
        alpha = np.divide(total, count, out=np.zeros(kernels), where=count > 0)
        sign = np.where(hot, np.where(residual > 0, 1, -1), 0).astype(np.int8)
        step = _expand(alpha, w.shape, axis, groups) * sign
        approx += step
        residual -= step
        signs[i], alphas[i] = sign, alpha
    return Binarized(approx, signs, alphas, axis, int(bits), groups)


def distinct_values(approx: np.ndarray, axis: int | None, groups: int = 1) -> int:
    """The most distinct values in one kernel of ``approx``."""
    rows = _by_kernel(np.asarray(approx), axis, groups if axis is not None else 1)
    return max(int(np.unique(row).size) for row in rows)


def random_bit_map(shape: tuple[int, ...], mean_bits: float, max_bits: int, seed: int,
                   axis: int | None = None, groups: int = 1) -> np.ndarray:
    """Bits per element drawn around ``mean_bits``, as the seed's ``mean_bits``: ``round(N(mean_bits, 1))``
    clipped to ``1..max_bits`` (int64, ``shape``), from ``numpy.random.default_rng(seed)``.

    ``axis`` None draws one K per element (the seed's); an axis draws one K per kernel along it,
    the same for every element of that kernel (``groups``: a grouped ConvTranspose's kernels).
    """
    _check_bits(max_bits)
    if not 1.0 <= mean_bits <= max_bits:
        raise GraphLensError(f"mean bits must be 1 to {max_bits}, not {mean_bits:g}")
    rng = np.random.default_rng(seed)
    shape = tuple(int(s) for s in shape)
    if axis is None:
        drawn = rng.normal(mean_bits, 1.0, shape)
    else:
        _check_groups(shape, axis, groups)
        drawn = np.broadcast_to(_expand(rng.normal(mean_bits, 1.0, kernel_count(shape, axis, groups)), shape, axis,
                                        groups), shape)
    return np.clip(np.round(drawn), 1, max_bits).astype(np.int64)


def residual_steps(w: np.ndarray, bits: int, axis: int | None, kernel: int = 0,
                   bit_map: np.ndarray | None = None, groups: int = 1) -> list[Step]:
    """Bit by bit for one kernel (output channel ``kernel``; ignored per tensor): αᵢ, the kernel's SQNR
    after bit i, and the ``2^i`` levels ``Σⱼ≤ᵢ ±αⱼ``, sorted (duplicates kept when an αⱼ is 0)."""
    w = np.asarray(w)
    result = binarize(w, bits, axis=axis, bit_map=bit_map, groups=groups)
    if axis is not None and not 0 <= kernel < result.kernels:
        raise GraphLensError(f"kernel {kernel} is outside the {result.kernels} kernels of the weight")
    k = 0 if axis is None else kernel

    def part(x: np.ndarray) -> np.ndarray:
        return kernel_values(x, axis, kernel, result.groups)

    original = part(w.astype(np.float64))
    approx = np.zeros_like(original)
    steps = []
    for i in range(result.bits):
        alpha = float(result.alphas[i, k])
        approx = approx + alpha * part(result.signs[i]).astype(np.float64)
        alphas = result.alphas[: i + 1, k]
        levels = np.sort([float(np.dot(alphas, s)) for s in itertools.product((-1.0, 1.0), repeat=i + 1)])
        steps.append(Step(i + 1, alpha, sqnr_db(original, approx), np.asarray(levels)))
    return steps
