"""What the transformer fusions read off a graph where shape inference gives nothing: dims, element types and
the small values exporters compute from shapes.

Shape inference stops at the com.microsoft ops earlier fusions write and knows no dim of a Reshape whose
target is computed (TorchScript's ``Concat(batch, seq, -1, 64)``), so a decoder's later layers would have
no head count or head size. :func:`dims_of` follows a tensor up through the ops that made it, carrying
the model's own dim names (``seq``) over the ones inference makes up (``unk__3``); :func:`dtype_of` does the
same for element types, and :func:`evaluate` computes ``x.shape[-1] // 2`` or ``1 / √head_dim``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import Dim, dtype_name
from graphlens.rewrites.rules.tidy.dims import ELEMENTWISE_UNARY, FUSED_SAME_SHAPE

Dims = tuple[Any, ...]
"""A shape as far as it is known: ints, symbolic names (str) or None."""
SAME_SHAPE = ELEMENTWISE_UNARY | FUSED_SAME_SHAPE
"""Ops whose first output has their first input's shape: elementwise ones, and the fused ops."""

# ---------------------------------------------------------------------------------- constants
def ints(graph: Graph, tensor: str) -> list[int] | None:
    """A small integer constant's values, also behind a CastLike (as the dynamo exporter writes them)."""
    value = graph.constant_value(tensor)
    if value is None:
        found = graph.producer(tensor)
        if found is None or found[0].op_type != "CastLike":
            return None
        value = graph.constant_value(found[0].inputs[0])
    return None if value is None or value.size > 8 else [int(v) for v in np.asarray(value).reshape(-1)]


def shape_entries(graph: Graph, tensor: str) -> list[int | None] | None:
    """The entries of a 1-D shape tensor: constant ones as ints, computed ones as None.

    A constant gives all; a ``Concat`` gives its constant pieces at their positions, so
    ``Concat(Unsqueeze(batch), Unsqueeze(seq), [16], [64])`` is ``[None, None, 16, 64]``. None when
    even the number of entries is unknown.
    """
    value = graph.constant_value(tensor)
    if value is not None:
        return [int(v) for v in np.asarray(value).reshape(-1)]
    found = graph.producer(tensor)
    if found is None or found[0].op_type != "Concat":
        length = _entry_count(graph, tensor)
        return None if length is None else [None] * length
    entries: list[int | None] = []
    for piece in found[0].inputs:
        part = shape_entries(graph, piece)
        if part is None:
            return None
        entries.extend(part)
    return entries


def _entry_count(graph: Graph, tensor: str) -> int | None:
    """How many entries a computed 1-D shape piece has: inferred, or 1 for the Unsqueeze of a scalar."""
    shape = graph.tensor_type(tensor).shape
    if shape is not None and len(shape) == 1 and isinstance(shape[0], int) and shape[0] >= 0:
        return shape[0]
    found = graph.producer(tensor)
    if found is None or found[0].op_type != "Unsqueeze":
        return None
    inner = found[0].inputs[0]
    if _rank(graph, inner) == 0:
        return 1
    source = graph.producer(inner)
    if source is not None and source[0].op_type == "Gather" and _rank(graph, source[0].inputs[1]) == 0:
        return 1  # a scalar picked out of a Shape
    return None


def _rank(graph: Graph, tensor: str) -> int | None:
    value = graph.constant_value(tensor)
    if value is not None:
        return int(np.asarray(value).ndim)
    shape = graph.tensor_type(tensor).shape
    return None if shape is None else len(shape)


_MEMO: weakref.WeakKeyDictionary[Graph, tuple[int, dict[str, tuple[Dim, ...] | None]]] = weakref.WeakKeyDictionary()
"""Per graph, the dims read so far at the model's revision: a 32-layer decoder's dims are read once, layer by
layer, not again from the embeddings for every site."""
MAX_DEPTH = 48
"""How far one reading follows side inputs (a broadcast's other operand, a Reshape target's pieces)."""


def dims_of(graph: Graph, tensor: str, depth: int = 0) -> tuple[Dim, ...] | None:
    """The tensor's dims: its type's, completed through the shape-only and elementwise ops that made it.

    Shape inference stops at the com.microsoft ops earlier fusions write (the norms and RotaryEmbedding
    keep their input's shape, a MatMul by a weight changes its last dim); Reshapes to constant shapes
    still say what x and the tables are. The chain of first inputs above ``tensor`` is read from the top
    down, each result kept until the model changes, so a deep model costs one pass.
    """
    memo = _memo(graph)
    if tensor in memo:
        return memo[tensor]
    if depth == 0:
        for above in reversed(_chain(graph, tensor, memo)):
            memo[above] = _read_dims(graph, above, 1)
    found = _read_dims(graph, tensor, depth)
    memo[tensor] = found
    return found


def _memo(graph: Graph) -> dict[str, tuple[Dim, ...] | None]:
    if graph.model is None:  # no revision to tell an edit by: nothing is kept
        return {}
    revision = graph.model.revision
    kept = _MEMO.get(graph)
    if kept is None or kept[0] != revision:
        kept = (revision, {})
        _MEMO[graph] = kept
    return kept[1]


def _chain(graph: Graph, tensor: str, memo: dict[str, tuple[Dim, ...] | None]) -> list[str]:
    """The tensors up the first-input chain from ``tensor`` (excluded) to one already read or typed."""
    chain: list[str] = []
    current = tensor
    for _ in range(100_000):
        found = graph.producer(current)
        if found is None or not found[0].inputs:
            break
        node = found[0]
        current = scaled(graph, node) or node.inputs[0]
        shape = graph.tensor_type(current).shape
        if not current or current in memo or (shape is not None and all(isinstance(d, int) for d in shape)):
            break
        chain.append(current)
    return chain


def _read_dims(graph: Graph, tensor: str, depth: int) -> tuple[Dim, ...] | None:
    shape = graph.tensor_type(tensor).shape
    found = graph.producer(tensor)
    if (shape is not None and all(isinstance(d, int) for d in shape)) or found is None or depth > MAX_DEPTH:
        return shape
    node = found[0]
    source = scaled(graph, node) or (node.inputs[0] if node.inputs else "")
    inner = dims_of(graph, source, depth + 1) if source else None
    derived = _derived(graph, node, found[1], inner, depth)
    if derived is None or shape is None or len(shape) != len(derived):
        return derived or shape
    # a size wins, then the derived dim (the input's ``seq``) over a name inference made up (``unk__1``)
    return tuple(e if isinstance(e, int) or (e is not None and not isinstance(d, int)) else d
                 for d, e in zip(shape, derived))


def _derived(graph: Graph, node: Node, output: int, inner: tuple[Dim, ...] | None,
             depth: int) -> tuple[Dim, ...] | None:
    """The dims of ``node``'s ``output`` from its first input's (``inner``) and what the op does to them."""
    op = node.op_type
    derived: tuple[Dim, ...] | None = None
    if (op in SAME_SHAPE and (output == 0 or (op.startswith("Skip") and output == 3))) or scaled(graph, node):
        derived = inner
    elif (op == "MatMul" and inner is not None and len(inner) >= 2
          and len(weight := matrix_dims(graph, node.inputs[1])) == 2):
        derived = (*inner[:-1], weight[-1])
    elif op == "MatMul" and inner is not None and len(inner) >= 2:
        other = dims_of(graph, node.inputs[1], depth + 1)  # activations on both sides: batch dims broadcast
        batch = _broadcast(inner[:-2], other[:-2]) if other is not None and len(other) >= 2 else None
        derived = None if batch is None or other is None else (*batch, inner[-2], other[-1])
    elif op == "Expand" and inner is not None and (entries := shape_entries(graph, node.inputs[1])) is not None:
        grown = tuple(None if d is None else 1 if d in (-1, 1) else d for d in entries)  # -1 and 1 keep x's dim
        derived = _broadcast(inner, grown)
    elif op == "Transpose" and inner is not None:
        derived = tuple(inner[p] for p in node.attrs.get("perm", range(len(inner) - 1, -1, -1)))
    elif op == "Reshape" and (target := ints(graph, node.inputs[1]) or _target_dims(graph, node.inputs[1], depth)):
        # a computed target (TorchScript's Concat of batch, seq, heads, head_dim) still gives its constant entries
        copied = None if node.attrs.get("allowzero", 0) else inner  # the dims a 0 in the target copies
        derived = tuple(d if not isinstance(d, int) or d > 0 else copied[i]
                        if d == 0 and copied is not None and i < len(copied) else None for i, d in enumerate(target))
        derived = _inferred_minus_one(inner, derived, target)
    elif op == "Slice" and inner is not None and len(node.inputs) > 3 and (axes := ints(graph, node.inputs[3])):
        derived = _sliced(graph, node, inner, axes)
    elif op == "EmbedLayerNormalization" and output == 0 and inner is not None and len(node.inputs) > 2:
        table = matrix_dims(graph, node.inputs[2])  # [batch, seq] ids → [batch, seq, the word table's width]
        derived = (*inner, table[1]) if len(table) == 2 else None
    elif op == "Split" and inner is not None:
        derived = _split_part(graph, node, output, inner)
    elif op == "Range" and len(node.inputs) == 3 and ints(graph, node.inputs[2]) == [1]:
        derived = _range_length(graph, node, depth)
    elif op == "Unsqueeze" and inner is not None and (axes := _unsqueeze_axes(graph, node)) is not None:
        rank = len(inner) + len(axes)
        added = {a % rank for a in axes}
        rest = iter(inner)
        derived = tuple(1 if i in added else next(rest) for i in range(rank))
    elif op in _BROADCASTING and len(node.inputs) == 2 and node.domain in ("", "ai.onnx"):
        # x·cos + rotate_half(x)·sin: a rotated Q has the dims its operands broadcast to
        derived = _broadcast(inner, dims_of(graph, node.inputs[1], depth + 1))
    elif op == "Concat" and inner is not None and is_last(int(node.attrs.get("axis", 0)), len(inner)):
        widths = [(dims_of(graph, t, depth + 1) or (None,))[-1] for t in node.inputs]
        known = [w for w in widths if isinstance(w, int)]
        derived = (*inner[:-1], sum(known) if len(known) == len(widths) else None)
    return derived


def _inferred_minus_one(inner: tuple[Dim, ...] | None, derived: tuple[Dim, ...],
                       target: list[int] | list[Dim]) -> tuple[Dim, ...]:
    """The target's one -1 worked out where the other dims account for the input's: ``[batch, seq, 64]`` viewed as
    ``[batch, seq, -1, 16]`` has 4 heads (the same names on both sides cancel)."""
    if inner is None or [d for d in target if d == -1] != [-1]:
        return derived
    names_in = sorted(d for d in inner if isinstance(d, str))
    names_out = sorted(d for d in derived if isinstance(d, str))
    if names_in != names_out or any(d is None for d in inner) or sum(d is None for d in derived) != 1:
        return derived
    total = int(np.prod([d for d in inner if isinstance(d, int)], dtype=np.int64))
    rest = int(np.prod([d for d in derived if isinstance(d, int)], dtype=np.int64))
    if rest <= 0 or total % rest:
        return derived
    return tuple(total // rest if d is None else d for d in derived)


def _sliced(graph: Graph, node: Node, inner: tuple[Dim, ...], axes: list[int]) -> tuple[Dim, ...]:
    """x's dims after a Slice: the length of each cut axis where its bounds are constant and its size known."""
    starts, ends = ints(graph, node.inputs[1]), ints(graph, node.inputs[2])
    steps = ints(graph, node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else [1] * len(axes)
    dims = list(inner)
    for i, axis in enumerate(axes):
        if not -len(inner) <= axis < len(inner):
            continue
        size = dims[axis]
        if starts is None or ends is None or steps is None or not isinstance(size, int):
            dims[axis] = None
        else:
            dims[axis] = len(range(*slice(starts[i], ends[i], steps[i]).indices(size)))
    return tuple(dims)


Linear = dict[str, int]
"""A scalar as a sum of dims: {"past_sequence_length": 1, "sequence_length": 1}; the constant under ""."""


def _range_length(graph: Graph, node: Node, depth: int) -> tuple[Dim, ...] | None:
    """Range(start, limit, 1)'s length where both are sums of dims: optimum's positions
    ``Range(past, past + seq)`` have ``seq`` of them."""
    start, limit = (_linear(graph, t, depth) for t in node.inputs[:2])
    if start is None or limit is None:
        return None
    length = {k: limit.get(k, 0) - start.get(k, 0) for k in {*start, *limit}}
    terms = {k: v for k, v in length.items() if v}
    if set(terms) <= {""}:
        return (terms.get("", 0),)
    name, coefficient = next(iter(terms.items()))
    return (name,) if len(terms) == 1 and coefficient == 1 and name else None


def _linear(graph: Graph, tensor: str, depth: int) -> Linear | None:
    value = ints(graph, tensor)
    if value is not None:
        return {"": value[0]} if len(value) == 1 else None
    found = graph.producer(tensor)
    if found is None or depth > 12:
        return None
    node = found[0]
    if node.op_type in ("Cast", "Squeeze", "Unsqueeze", "Identity"):
        return _linear(graph, node.inputs[0], depth + 1)
    if node.op_type in ("Add", "Sub") and len(node.inputs) == 2:
        a, b = (_linear(graph, t, depth + 1) for t in node.inputs)
        if a is None or b is None:
            return None
        sign = 1 if node.op_type == "Add" else -1
        return {k: a.get(k, 0) + sign * b.get(k, 0) for k in {*a, *b}}
    if node.op_type == "Gather" and len(node.inputs) == 2 and (at := ints(graph, node.inputs[1])) is not None:
        shape = graph.producer(node.inputs[0])
        if shape is None or shape[0].op_type != "Shape" or len(at) != 1:
            return None
        source = dims_of(graph, shape[0].inputs[0], depth + 1)
        if source is None or not -len(source) <= at[0] < len(source):
            return None
        dim = source[at[0]]
        return {"": dim} if isinstance(dim, int) else {dim: 1} if isinstance(dim, str) else None
    return None


def _split_part(graph: Graph, node: Node, output: int, inner: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """One output of a Split: x's dims with the split axis at that part's size (given, or an equal share)."""
    axis = int(node.attrs.get("axis", 0))
    if not -len(inner) <= axis < len(inner):
        return None
    sizes = ints(graph, node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] else node.attrs.get("split")
    whole = inner[axis]
    if sizes is not None and output < len(sizes):
        size: Dim = int(sizes[output])
    elif isinstance(whole, int) and whole % len(node.outputs) == 0:
        size = whole // len(node.outputs)
    else:
        size = None
    return tuple(size if i == axis % len(inner) else d for i, d in enumerate(inner))


def _unsqueeze_axes(graph: Graph, node: Node) -> list[int] | None:
    if len(node.inputs) > 1 and node.inputs[1]:
        return ints(graph, node.inputs[1])
    axes = node.attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


_BROADCASTING = ("Add", "Sub", "Mul", "Div")


def _broadcast(a: tuple[Dim, ...] | None, b: tuple[Dim, ...] | None) -> tuple[Dim, ...] | None:
    """The dims two operands broadcast to, as far as known: a size over 1 wins, then a name; None if a rank is
    unknown."""
    if a is None or b is None:
        return None
    rank = max(len(a), len(b))
    a, b = (None,) * (rank - len(a)) + tuple(a), (None,) * (rank - len(b)) + tuple(b)

    def one(x: Dim, y: Dim) -> Dim:
        for d in (x, y):
            if isinstance(d, int) and d > 1:
                return d
        for made_up in (False, True):  # the model's own names before the ones shape inference made up (unk__3)
            for d in (x, y):
                if isinstance(d, str) and d.startswith("unk__") == made_up:
                    return d
        return 1 if x == 1 and y == 1 else None

    return tuple(one(x, y) for x, y in zip(a, b))


def _target_dims(graph: Graph, tensor: str, depth: int) -> list[Dim] | None:
    """A computed Reshape target's entries: constants as ints, ``Unsqueeze(Gather(Shape(t), k))`` as t's dim k
    (``seq``, say), the rest None."""
    entries = shape_entries(graph, tensor)
    found = graph.producer(tensor)
    if entries is None or found is None or found[0].op_type != "Concat":
        return list(entries) if entries else None
    dims: list[Dim] = []
    for piece in found[0].inputs:
        part: list[Dim] = list(shape_entries(graph, piece) or [None])
        if part == [None] and (source := _shape_dim(graph, piece, depth)) is not None:
            part = [source]
        dims.extend(part)
    return dims if len(dims) == len(entries) else list(entries)


def _shape_dim(graph: Graph, piece: str, depth: int) -> Dim:
    """t's dim k where ``piece`` is ``Unsqueeze(Gather(Shape(t), k))``, else None."""
    chain = []
    tensor = piece
    for op in ("Unsqueeze", "Gather", "Shape"):
        found = graph.producer(tensor)
        if found is None or found[0].op_type != op:
            return None
        chain.append(found[0])
        tensor = found[0].inputs[0]
    at = ints(graph, chain[1].inputs[1]) if len(chain[1].inputs) > 1 else None
    source = dims_of(graph, tensor, depth + 1)
    if at is None or len(at) != 1 or source is None or not -len(source) <= at[0] < len(source):
        return None
    return source[at[0]]


_TYPE_KEEPING = (SAME_SHAPE - {"Cast", "IsNaN", "IsInf"}) | frozenset({
    "Reshape", "Transpose", "Slice", "Split", "Concat", "Unsqueeze", "Squeeze", "Expand", "Gather", "MatMul", "Add",
    "Sub", "Mul", "Div", "Softmax"})
"""Ops whose first output has their first input's element type (a Cast, a Shape, a comparison do not)."""


def is_last(axis: int | None, rank: int | None) -> bool:
    return axis is not None and (axis == -1 or (rank is not None and axis == rank - 1))


def dtype_of(graph: Graph, tensor: str, depth: int = 0) -> str | None:
    """The tensor's element type: its type's, else its first input's through ops that keep it (shape inference
    stops at the com.microsoft ops earlier fusions write, so the tensors after them have none)."""
    found = graph.tensor_type(tensor).dtype
    producer = graph.producer(tensor)
    if found is not None or producer is None or depth > 16:
        return found
    node = producer[0]
    if node.op_type == "Cast" and "to" in node.attrs:
        return dtype_name(int(node.attrs["to"]))
    if node.op_type not in _TYPE_KEEPING or not node.inputs:
        return None
    return dtype_of(graph, node.inputs[0], depth + 1)  # a Gather's is its table's


def matrix_dims(graph: Graph, tensor: str) -> tuple[Dim, ...]:
    """A MatMul's second input's dims (a weight's), () where unknown."""
    shape = graph.tensor_type(tensor).shape
    if shape is None and (value := graph.constant_value(tensor)) is not None:
        shape = tuple(value.shape)
    return shape or ()


def scaled(graph: Graph, node: Node) -> str | None:
    """x where ``node`` is x·k or x/k for a scalar constant k (a scaling such as LongRoPE's), else None."""
    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    shapes = [graph.tensor_type(t).shape for t in node.inputs]
    k = [t for t, shape in zip(node.inputs, shapes)
         if shape is not None and all(d == 1 for d in shape) and graph.constant_value(t) is not None]
    rest = [t for t in node.inputs if t not in k]
    return rest[0] if k and len(rest) == 1 and (node.op_type == "Mul" or rest[0] == node.inputs[0]) else None


def rank_of(graph: Graph, tensor: str) -> int | None:
    dims = dims_of(graph, tensor)
    return None if dims is None else len(dims)



# ---------------------------------------------------------------------------------- computed values
_UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Sqrt": np.sqrt, "Reciprocal": lambda x: 1.0 / x, "Neg": np.negative,
    "Identity": lambda x: x, "Cast": lambda x: x, "Squeeze": lambda x: x, "Unsqueeze": lambda x: x,
    "Reshape": lambda x: x, "Floor": np.floor, "Ceil": np.ceil, "Abs": np.abs,
}
_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Mul": np.multiply, "Div": np.divide, "Add": np.add, "Sub": np.subtract, "Pow": np.power,
}


def scalar_value(graph: Graph, tensor: str, known: dict[str, Dims]) -> float | None:
    """The single number ``tensor`` holds, evaluated from constants and the known dims of the
    tensors a ``Shape`` reads (``known`` first, then the graph's types); None if it cannot be."""
    with np.errstate(all="ignore"):
        value = evaluate(graph, tensor, known, 0)
    if value is None or value.size != 1 or not np.isfinite(value).all():
        return None
    return float(value.reshape(-1)[0])


def evaluate(graph: Graph, tensor: str, known: dict[str, Dims] | None = None, depth: int = 0) -> np.ndarray | None:
    """What ``tensor`` holds, computed from constants and the dims a ``Shape`` reads (``known`` first, then
    :func:`dims_of`): TorchScript's ``x.shape[-1] // 2`` and ``1 / √head_dim``. Unknown dims are NaN, so a result
    that needs one is not finite; None where an op is not one of the few evaluated here."""
    known = known or {}
    constant = graph.constant_value(tensor)
    if constant is not None:
        return np.asarray(constant, dtype=np.float64)
    found = graph.producer(tensor)
    if found is None or depth > 16 or found[0].domain not in ("", "ai.onnx"):
        return None
    node = found[0]
    op = node.op_type
    if op == "Shape":
        shape = known.get(node.inputs[0]) or dims_of(graph, node.inputs[0])
        if shape is None:
            return None
        values = np.array([float(d) if isinstance(d, int) and d >= 0 else np.nan for d in shape])
        start, end = node.attrs.get("start", 0), node.attrs.get("end")
        return values[start:end]
    args = [evaluate(graph, t, known, depth + 1) if t else None for t in node.inputs]
    if op == "CastLike":
        return args[0]
    if op in _UNARY and args and args[0] is not None:
        return _UNARY[op](args[0])
    if op in _BINARY and len(args) == 2 and args[0] is not None and args[1] is not None:
        return _BINARY[op](args[0], args[1])
    if op == "Gather" and len(args) == 2 and args[0] is not None and args[1] is not None:
        return np.take(args[0], args[1].astype(np.int64), axis=int(node.attrs.get("axis", 0)))
    if op == "Slice" and args and args[0] is not None and args[0].ndim == 1:
        return _slice_1d(node, args)
    return None


def _slice_1d(node: Node, args: list[np.ndarray | None]) -> np.ndarray | None:
    if "starts" in node.attrs:  # Slice-1
        starts, ends = node.attrs["starts"], node.attrs["ends"]
        steps = [1]
    elif len(args) >= 3 and args[1] is not None and args[2] is not None:
        starts, ends = _indices(args[1]), _indices(args[2])
        steps = _indices(args[4]) if len(args) > 4 and args[4] is not None else [1]
    else:
        return None
    if len(starts) != 1:
        return None
    data = args[0]
    assert data is not None
    return data[slice(int(starts[0]), int(ends[0]), int(steps[0]))]


def _indices(values: np.ndarray) -> list[int]:
    """Slice bounds held as floats here; INT64_MAX ("to the end") does not survive the trip back."""
    return [int(v) for v in np.clip(values.reshape(-1), -(2**62), 2**62)]
