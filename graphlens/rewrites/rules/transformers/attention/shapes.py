"""What fuse-attention reads off the graph around a match: head counts and sizes, the scale, causal masks.

Exporters compute the heads-split shape at run time (``Concat(Unsqueeze(Gather(Shape(x))), 16, 64)``)
and sometimes the scale too (TorchScript's scaled_dot_product_attention: ``Sqrt(1 / Sqrt(Cast(Shape(q)[-1])))``
on both Q and Kᵀ), so neither is a constant. Here each is evaluated only as far as the answer needs:
the shape's constant entries at their positions, and a scalar from the dims that are known.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.rewrites.rules.transformers.graph_dims import Dims, dims_of, shape_entries

LARGE_NEGATIVE = -1e4
"""A mask entry at or below this hides its key: exporters write -inf, the dtype's lowest value or -10000."""

_LAYOUT_OPS = frozenset({"Unsqueeze", "Reshape", "Cast", "Identity", "Squeeze", "Expand"})
"""Ops that carry a mask from its triangle to the scores without changing which entries are hidden."""


def producer(graph: Graph, tensor: str) -> Node | None:
    found = graph.producer(tensor) if tensor else None
    return None if found is None else found[0]


def dims(graph: Graph, tensor: str) -> Dims | None:
    """The tensor's shape: a constant's, else the declared or inferred one; None if the rank is unknown."""
    value = graph.constant_value(tensor)
    if value is not None:
        return tuple(int(d) for d in value.shape)
    return graph.tensor_type(tensor).shape


def static_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


# ------------------------------------------------------------------------------ heads
def heads_from_split(graph: Graph, reshape: Node, flat: str | None, heads_at: int = 2) -> tuple[int | None, int | None]:
    """(heads, head size) from a Reshape to [..., heads, head_size] at positions ``heads_at``, ``heads_at + 1``.

    A -1 in one of the two places is worked out from the other and the last dim of ``flat`` (the
    hidden size) when that is known; a 0 copies an input dim, which is left unknown.
    """
    entries = shape_entries(graph, reshape.inputs[1]) if len(reshape.inputs) > 1 else None
    if entries is None or len(entries) != heads_at + 2:
        return None, None
    heads, size = entries[heads_at], entries[heads_at + 1]
    heads = None if heads == 0 else heads
    size = None if size == 0 else size
    hidden = None
    if flat is not None:
        flat_dims = dims_of(graph, flat)  # also past the com.microsoft ops shape inference stops at
        hidden = static_int(flat_dims[-1]) if flat_dims else None
    if heads == -1 and size not in (None, -1) and hidden is not None and size > 0 and hidden % size == 0:
        heads = hidden // size
    if size == -1 and heads not in (None, -1) and hidden is not None and heads > 0 and hidden % heads == 0:
        size = hidden // heads
    return (heads if heads is None or heads > 0 else None), (size if size is None or size > 0 else None)


def heads_view(graph: Graph, heads: str) -> tuple[str, Node, int | None, int | None] | None:
    """(flat, its Reshape, heads, head size) where ``heads`` [B, H, S, D] is Transpose([0, 2, 1, 3]) of a
    Reshape of a 3-D ``flat`` [B, S, H·D] (the split the attention pattern reads, made outside the match:
    a rotation's, a cache's new tokens); None otherwise."""
    transpose = producer(graph, heads)
    if transpose is None or transpose.op_type != "Transpose" or list(transpose.attrs.get("perm", ())) != [0, 2, 1, 3]:
        return None
    reshape = producer(graph, transpose.inputs[0])
    if reshape is None or reshape.op_type != "Reshape" or len(reshape.inputs) < 2:
        return None
    flat = reshape.inputs[0]
    flat_dims, split_dims = dims_of(graph, flat), dims_of(graph, reshape.outputs[0]) or (None,) * 4
    if flat_dims is None or len(flat_dims) != 3 or len(split_dims) != 4:
        return None
    count, size = heads_from_split(graph, reshape, flat)
    return flat, reshape, count or static_int(split_dims[2]), size or static_int(split_dims[3])


def repeat_source(graph: Graph, heads: str) -> tuple[str, int | None] | None:
    """(K or V before it was repeated, its head count if known) where ``heads`` [B, H, T, D] is HF's repeat_kv of
    it: ``Reshape(Expand(Unsqueeze(x, 2), [B, kv, H/kv, T, D]), [B, H, T, D])``; None otherwise."""
    reshape = producer(graph, heads)
    if reshape is None or reshape.op_type != "Reshape" or len(reshape.inputs) < 2:
        return None
    expand = producer(graph, reshape.inputs[0])
    if expand is None or expand.op_type != "Expand":
        return None
    unsqueeze = producer(graph, expand.inputs[0])
    if unsqueeze is None or unsqueeze.op_type != "Unsqueeze":
        return None
    axes = (graph.constant_value(unsqueeze.inputs[1]) if len(unsqueeze.inputs) > 1
            else np.asarray(unsqueeze.attrs.get("axes", ())))
    if axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] != [2]:
        return None
    source = unsqueeze.inputs[0]
    source_dims = dims_of(graph, source)
    entries = shape_entries(graph, expand.inputs[1])
    if (source_dims is not None and len(source_dims) != 4) or (entries is not None and len(entries) != 5):
        return None
    kv = static_int(source_dims[1]) if source_dims is not None else None
    return source, kv or (entries[1] if entries is not None and entries[1] and entries[1] > 1 else None)


def plain_merge(graph: Graph, reshape: Node, width: int | None) -> bool:
    """Does the heads-merging Reshape make [batch, seq, heads·head_size] (``width``), as the fused ops do?"""
    entries = shape_entries(graph, reshape.inputs[1])
    if entries is None or len(entries) != 3 or entries.count(-1) > 1:
        return False
    return entries[2] == -1 or (width is not None and entries[2] == width)


def prescale(graph: Graph, flat: str, split: Node) -> tuple[str, float]:
    """(the query projection, a constant factor on it) where only the heads split reads their product.

    HF's eager attention scales the query projection (``q_proj(x) * scaling``) before the heads
    split; the fused op can read the projection and take the factor into its scale. (flat, 1.0) else.
    """
    node = producer(graph, flat)
    if (node is None or node.op_type not in ("Mul", "Div") or node.domain not in ("", "ai.onnx")
            or len(node.inputs) != 2):
        return flat, 1.0
    if [reader.name for reader, _ in graph.consumers(flat)] != [split.name] or flat in graph.outputs:
        return flat, 1.0
    for slot in ((1, 0) if node.op_type == "Mul" else (1,)):
        factor = graph.constant_value(node.inputs[slot])
        if factor is not None and factor.size == 1 and float(factor.reshape(-1)[0]) != 0:
            value = float(np.asarray(factor, dtype=np.float64).reshape(-1)[0])
            return node.inputs[1 - slot], value if node.op_type == "Mul" else 1 / value
    return flat, 1.0


# ------------------------------------------------------------------------------ causal masks
def is_causal_bias(graph: Graph, tensor: str) -> bool:
    """Is the additive mask the causal one, square, 0 on and below the diagonal and hidden above?

    Square, because the fused ops align a causal mask differently when there are more keys than
    queries (a cache); a mask not known to be square stays an additive bias.
    """
    value = graph.constant_value(tensor)
    if value is not None:
        matrix = _one_matrix(value)
        if matrix is None:
            return False
        below = np.tril(np.ones(matrix.shape, dtype=bool))
        return bool(np.all(matrix[below] == 0) and np.all(matrix[~below] <= LARGE_NEGATIVE)) and _square(matrix)
    trilu = _through_layout(graph, tensor)
    if (trilu is None or trilu.op_type != "Trilu" or int(trilu.attrs.get("upper", 1)) != 1
            or _trilu_k(graph, trilu) != 1):
        return False
    fill = _fill_value(graph, trilu.inputs[0])
    if fill is None or not fill <= LARGE_NEGATIVE:
        return False
    return _square_fill(graph, trilu.inputs[0])


def is_causal_condition(graph: Graph, tensor: str) -> bool:
    """Is the boolean mask (true = attend) the square lower triangle, diagonal included?"""
    value = graph.constant_value(tensor)
    if value is not None:
        matrix = _one_matrix(value)
        if matrix is None:
            return False
        return bool(np.array_equal(matrix.astype(bool), np.tril(np.ones(matrix.shape, dtype=bool)))) and _square(matrix)
    trilu = _through_layout(graph, tensor)
    if (trilu is None or trilu.op_type != "Trilu" or int(trilu.attrs.get("upper", 1)) != 0
            or _trilu_k(graph, trilu) != 0):
        return False
    fill = _fill_value(graph, trilu.inputs[0])
    if fill is None or fill != 1:
        return False
    return _square_fill(graph, trilu.inputs[0])


def _one_matrix(value: np.ndarray) -> np.ndarray | None:
    """The [S, T] matrix of a mask whose leading dims are all 1, else None."""
    array = np.asarray(value)
    if array.ndim < 2 or any(d != 1 for d in array.shape[:-2]):
        return None
    return array.reshape(array.shape[-2:]).astype(np.float64)


def _square(matrix: np.ndarray) -> bool:
    return bool(matrix.shape[0] == matrix.shape[1])


def _through_layout(graph: Graph, tensor: str) -> Node | None:
    """The first node up from ``tensor`` that is not a reshaping of it (at most a few steps)."""
    node = producer(graph, tensor)
    for _ in range(6):
        if node is None or node.op_type not in _LAYOUT_OPS:
            return node
        if node.op_type == "Expand" and graph.constant_value(node.inputs[1]) is None:
            return None  # an Expand to a computed shape may also grow the matrix
        node = producer(graph, node.inputs[0])
    return None


def _trilu_k(graph: Graph, trilu: Node) -> int | None:
    if len(trilu.inputs) < 2 or not trilu.inputs[1]:
        return 0
    k = graph.constant_value(trilu.inputs[1])
    return None if k is None or k.size != 1 else int(k.reshape(-1)[0])


def _fill_value(graph: Graph, tensor: str) -> float | None:
    """The one value a matrix is filled with: a constant, ConstantOfShape(value) or Expand(scalar)."""
    value = graph.constant_value(tensor)
    if value is not None:
        flat = np.asarray(value, dtype=np.float64).reshape(-1)
        return float(flat[0]) if flat.size and np.all(flat == flat[0]) else None
    node = producer(graph, tensor)
    if node is None:
        return None
    if node.op_type == "ConstantOfShape":
        fill = node.attrs.get("value")
        return 0.0 if fill is None else float(np.asarray(fill, dtype=np.float64).reshape(-1)[0])
    if node.op_type in ("Expand", "Cast", "CastLike"):
        return _fill_value(graph, node.inputs[0])
    return None


def _square_fill(graph: Graph, tensor: str) -> bool:
    """The filled matrix is square: a constant one, or one whose shape is Concat(n, n) of one tensor."""
    value = graph.constant_value(tensor)
    if value is not None:
        return np.asarray(value).ndim >= 2 and value.shape[-1] == value.shape[-2]
    node = producer(graph, tensor)
    if node is None or node.op_type not in ("ConstantOfShape", "Expand"):
        return False
    shape_tensor = node.inputs[0] if node.op_type == "ConstantOfShape" else node.inputs[1]
    entries = shape_entries(graph, shape_tensor)
    if entries is not None and len(entries) >= 2 and entries[-1] is not None and entries[-1] == entries[-2]:
        return True
    concat = producer(graph, shape_tensor)
    return (concat is not None and concat.op_type == "Concat" and len(concat.inputs) >= 2
            and concat.inputs[-1] == concat.inputs[-2])
