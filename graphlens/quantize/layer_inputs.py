"""How a layer's input becomes the columns ``x`` of ``W_r x`` that GPTQ's ``H = Σ x xᵀ`` is summed over
(:mod:`~.rounding`): a Conv's input patches (any rank, any padding), a ConvTranspose's (explicit pads), a
MatMul's or Gemm's input rows; and a weight as rows ``(groups, r, d)`` and back. Patches are drawn at random
output positions with the caller's generator, so ``H`` is the same on every run.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from graphlens.core.graph import Graph
from graphlens.quantize.place import Site


@dataclass
class Layout:
    """How one site's input becomes columns ``x`` of ``W_r x``: ``groups`` of ``d`` inputs each."""

    op_type: str
    groups: int
    d: int
    kernel: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()
    """Begin pads then end pads (ONNX's order); with ``auto_pad`` SAME_*, worked out per input."""
    auto_pad: str = "NOTSET"
    output_padding: tuple[int, ...] = ()
    """A ConvTranspose's."""


def _conv_layout(graph: Graph, site: Site, weight: np.ndarray) -> Layout | None:
    node = graph.by_name[site.node]
    groups, kernel = int(node.attr("group", 1)), tuple(int(k) for k in weight.shape[2:])
    rank = len(kernel)
    transposed = site.op_type == "ConvTranspose"
    if rank == 0 or transposed and node.attr("output_shape", None) is not None:
        return None  # a ConvTranspose given its output shape works out its pads itself: nearest rounding
    strides = tuple(node.attr("strides", [1] * rank))
    dilations = tuple(node.attr("dilations", [1] * rank))
    pads = tuple(node.attr("pads", [0] * (2 * rank)))
    auto_pad = node.attr("auto_pad", "NOTSET")
    auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else str(auto_pad)
    if len(strides) != rank or len(dilations) != rank or len(pads) != 2 * rank:
        return None
    if transposed:
        output_padding = tuple(node.attr("output_padding", [0] * rank))
        if auto_pad != "NOTSET" or len(output_padding) != rank:
            return None
        d = int(weight.shape[0]) // groups * math.prod(kernel)
        return Layout("ConvTranspose", groups, d, kernel, strides, dilations, pads, auto_pad, output_padding)
    d = int(weight.shape[1]) * math.prod(kernel)
    return Layout("Conv", groups, d, kernel, strides, dilations, pads, auto_pad)


def layout_of(graph: Graph, site: Site, weight: np.ndarray) -> Layout | None:
    """The site's layout, or None when it keeps nearest rounding."""
    if site.op_type in ("Conv", "ConvTranspose") and site.weight_slot == 1 and weight.ndim >= 3:
        return _conv_layout(graph, site, weight)
    if site.op_type == "MatMul" and site.weight_slot == 1 and weight.ndim == 2:
        return Layout("MatMul", 1, int(weight.shape[0]))
    if site.op_type == "Gemm" and site.weight_slot == 1 and weight.ndim == 2:
        node = graph.by_name[site.node]
        if node.attr("transA", 0):
            return None
        trans_b = bool(node.attr("transB", 0))
        return Layout("GemmT" if trans_b else "MatMul", 1, int(weight.shape[1] if trans_b else weight.shape[0]))
    return None


def weight_rows(weight: np.ndarray, layout: Layout) -> np.ndarray:
    """``W`` as ``(groups, rows per group, d)``: each row one output channel's weights on ``x``."""
    rows: np.ndarray
    if layout.op_type == "Conv":
        rows = weight.reshape(layout.groups, weight.shape[0] // layout.groups, layout.d)
    elif layout.op_type == "ConvTranspose":  # [C_in, C_out/g, k…]: a row is one output channel over its group's inputs
        per_group = weight.shape[0] // layout.groups
        rows = weight.reshape(layout.groups, per_group, weight.shape[1], -1).transpose(0, 2, 1, 3).reshape(
            layout.groups, weight.shape[1], layout.d)
    elif layout.op_type == "GemmT":
        rows = weight.reshape(1, *weight.shape)
    else:
        rows = weight.T.reshape(1, weight.shape[1], weight.shape[0])
    return rows


def unrows(rows: np.ndarray, weight_shape: tuple[int, ...], layout: Layout) -> np.ndarray:
    weight: np.ndarray
    if layout.op_type == "ConvTranspose":
        groups, out_per_group = rows.shape[:2]
        weight = rows.reshape(groups, out_per_group, weight_shape[0] // groups, -1).transpose(0, 2, 1, 3).reshape(
            weight_shape)
    elif layout.op_type in ("Conv", "GemmT"):
        weight = rows.reshape(weight_shape)
    else:
        weight = rows[0].T.reshape(weight_shape)
    return weight


def _same_pads(layout: Layout, spatial: tuple[int, ...]) -> tuple[int, ...]:
    """``auto_pad`` SAME_UPPER / SAME_LOWER pads for an input of ``spatial`` size (ONNX's formula)."""
    begin, end = [], []
    for size, k, s, dl in zip(spatial, layout.kernel, layout.strides, layout.dilations, strict=True):
        total = max((math.ceil(size / s) - 1) * s + (k - 1) * dl + 1 - size, 0)
        small = total // 2
        begin.append(small if layout.auto_pad == "SAME_UPPER" else total - small)
        end.append(total - begin[-1])
    return (*begin, *end)


def _positions(out_shape: tuple[int, ...], count: int, rng: np.random.Generator) -> np.ndarray:
    """``(rank, P)``: ``count`` output positions drawn at random, in order (all of them, if fewer)."""
    total = math.prod(out_shape)
    chosen = np.sort(rng.choice(total, count, replace=False)) if total > count else np.arange(total)
    return np.stack(np.unravel_index(chosen, out_shape))


def _taps(layout: Layout) -> np.ndarray:
    """``(rank, K)``: each kernel tap's offset, dilation applied."""
    taps = np.stack(np.unravel_index(np.arange(math.prod(layout.kernel)), layout.kernel))
    offsets: np.ndarray = taps * np.array(layout.dilations)[:, None]
    return offsets


def _columns(flat_x: np.ndarray, flat: np.ndarray, layout: Layout) -> np.ndarray:
    """``(groups, d, N·P)``: the inputs ``flat`` ``(P, K)`` indexes in ``flat_x`` ``(N, C, positions)``, as columns
    ordered like a weight row (channel of the group, then tap)."""
    n, channels = flat_x.shape[:2]
    picked = flat_x.take(flat, axis=2)  # (N, C, P, K)
    columns = picked.reshape(n, layout.groups, channels // layout.groups, flat.shape[0], flat.shape[1])
    out: np.ndarray = columns.transpose(1, 2, 4, 0, 3).reshape(layout.groups, layout.d, -1)
    return out


def patches(x: np.ndarray, layout: Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(groups, d, columns)``: the input patches of ``count`` output positions per sample (all, if fewer)."""
    rank = len(layout.kernel)
    spatial = tuple(x.shape[2:])
    if layout.auto_pad.startswith("SAME"):
        pads = _same_pads(layout, spatial)
    elif layout.auto_pad == "VALID":
        pads = (0,) * (2 * rank)
    else:
        pads = layout.pads
    if any(pads):
        x = np.pad(x, [(0, 0), (0, 0), *((pads[i], pads[i + rank]) for i in range(rank))])
    padded = x.shape[2:]
    out_shape = tuple((size - (k - 1) * dl - 1) // s + 1 for size, k, dl, s in
                      zip(padded, layout.kernel, layout.dilations, layout.strides, strict=True))
    starts = _positions(out_shape, count, rng) * np.array(layout.strides)[:, None]  # (rank, P)
    flat = np.ravel_multi_index(tuple(starts[:, :, None] + _taps(layout)[:, None, :]), padded)  # (P, K)
    return _columns(x.reshape(*x.shape[:2], -1), flat, layout)


def transposed_patches(x: np.ndarray, layout: Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(groups, d, columns)`` for a ConvTranspose: output ``o`` reads input ``i`` through tap ``k`` where
    ``o + pad = i·s + k·dilation``; a tap with no such ``i`` reads 0."""
    rank = len(layout.kernel)
    spatial = np.array(x.shape[2:])
    strides = np.array(layout.strides)[:, None, None]
    begin, end = np.array(layout.pads[:rank]), np.array(layout.pads[rank:])
    out_shape = tuple(int(v) for v in np.array(layout.strides) * (spatial - 1) + np.array(layout.output_padding)
                      + (np.array(layout.kernel) - 1) * np.array(layout.dilations) + 1 - begin - end)
    t = _positions(out_shape, count, rng)[:, :, None] + begin[:, None, None] - _taps(layout)[:, None, :]  # (rank,P,K)
    valid = ((t % strides == 0) & (t >= 0) & (t // strides < spatial[:, None, None])).all(axis=0)
    source = np.where(valid, t // strides, 0)
    flat = np.where(valid, np.ravel_multi_index(tuple(source), tuple(spatial)), int(np.prod(spatial)))
    n, channels = x.shape[:2]
    with_zero = np.concatenate([x.reshape(n, channels, -1), np.zeros((n, channels, 1), x.dtype)], axis=2)
    return _columns(with_zero, flat, layout)


def input_rows(x: np.ndarray, layout: Layout, count: int, rng: np.random.Generator) -> np.ndarray:
    """``(1, d, rows)``: ``count`` rows per sample of a MatMul's or Gemm's input (all, if fewer)."""
    rows = x.reshape(-1, layout.d)
    limit = count * max(x.shape[0], 1)
    if rows.shape[0] > limit:
        rows = rows[np.sort(rng.choice(rows.shape[0], limit, replace=False))]
    out: np.ndarray = rows.T.reshape(1, layout.d, -1)
    return out
