"""What tidy proves about one node from the nodes before it (see :mod:`.dims` for how dims
compare): that it passes one of its inputs through unchanged, or computes what a shorter form computes.

Some proofs rest on the op's own contract, which a model that runs satisfies: ``ScatterND``'s
``updates`` has the shape of the rows it writes, ``Expand``'s target broadcasts with its input.
A Slice whose output the file declares with its input's very dims keeps every element (with
positive steps, a dim keeps its length only when sliced whole).
"""

from __future__ import annotations

import numpy as np

from graphlens.core.types import dtype_name
from graphlens.rewrites.rules.tidy.dims import (
    ELEMENTWISE_UNARY,
    INT64_MAX,
    STANDARD_DOMAINS,
    DimOf,
    Element,
    NodeView,
    ProofWalk,
    const_ints,
    dim_facts,
    element_is_dim,
    elements,
    normalized,
    rank,
    scalar_element,
    transpose_perm,
)


# ------------------------------------------------------------------- pass-throughs
def passes_through(scope: ProofWalk, view: NodeView) -> str | None:
    """The input ``view`` outputs unchanged (so readers may read it instead), or None."""
    if view.domain not in STANDARD_DOMAINS or len(view.outputs) != 1 or not view.inputs or not view.inputs[0]:
        return None
    check = _PASS_THROUGH.get(view.op_type)
    return None if check is None else check(scope, view)


def _identity(scope: ProofWalk, view: NodeView) -> str | None:
    return view.inputs[0] if len(view.inputs) == 1 else None


def _transpose(scope: ProofWalk, view: NodeView) -> str | None:
    perm = transpose_perm(scope, view)
    return view.inputs[0] if perm is not None and perm == list(range(len(perm))) else None


def _cast(scope: ProofWalk, view: NodeView) -> str | None:
    source = scope.tensor_type(view.inputs[0]).dtype
    to = view.attrs.get("to")
    return view.inputs[0] if source is not None and to is not None and dtype_name(int(to)) == source else None


def _reshape(scope: ProofWalk, view: NodeView) -> str | None:
    """``Reshape(x, s)`` where each element of ``s`` is x's dim there (or 0, copying it; or one -1 for the rest)."""
    if len(view.inputs) < 2:
        return None
    source = view.inputs[0]
    count = rank(scope, source)
    shape = elements(scope, view.inputs[1])
    if count is None or shape is None or len(shape) != count:
        return None
    copies_zero = not view.attrs.get("allowzero", 0)
    unproven = [axis for axis, element in enumerate(shape)
                if not (element == 0 and copies_zero) and not element_is_dim(scope, element, DimOf(source, axis))]
    if not unproven or (len(unproven) == 1 and shape[unproven[0]] == -1):
        return source
    return None


def _expand(scope: ProofWalk, view: NodeView) -> str | None:
    """``Expand(x, s)`` with s no longer than x's rank, each element 1, x's dim, or against a dim of x that is a
    number other than 1 (which any valid target leaves as it is)."""
    if len(view.inputs) < 2:
        return None
    source = view.inputs[0]
    count = rank(scope, source)
    shape = elements(scope, view.inputs[1])
    if count is None or shape is None or len(shape) > count:
        return None
    for offset, element in enumerate(shape):
        dim = DimOf(source, count - len(shape) + offset)
        if element == 1 or element_is_dim(scope, element, dim):
            continue
        size = dim_facts(scope, dim).size
        if size is None or size == 1:
            return None
    return source


def _scatter_nd(scope: ProofWalk, view: NodeView) -> str | None:
    """``ScatterND(data, indices, updates)`` whose indices are every row 0..n-1 of data in order: ``updates``."""
    if len(view.inputs) != 3 or view.attrs.get("reduction", "none") not in ("none", b"none"):
        return None
    data, indices, updates = view.inputs
    rows = DimOf(data, 0)
    value = scope.small_const(indices)
    if value is not None:
        size = dim_facts(scope, rows).size
        ok = size is not None and value.shape == (size, 1) and np.array_equal(value.reshape(-1), np.arange(size))
        return updates if ok else None
    limit = _row_range_limit(scope, indices)
    return updates if limit is not None and element_is_dim(scope, limit, rows) else None


def _row_range_limit(scope: ProofWalk, indices: str) -> Element:
    """For indices ``Unsqueeze(Range(0, n, 1), [-1])`` (or a Reshape to [-1, 1]), the element n."""
    view = scope.producer(indices)
    if view is None or len(view.inputs) < 1:
        return None
    if view.is_op("Unsqueeze"):
        axes = const_ints(scope, view.inputs[1]) if len(view.inputs) > 1 else view.attrs.get("axes")
        if axes is None or [int(a) for a in axes] not in ([1], [-1]):
            return None
    elif view.is_op("Reshape"):
        if len(view.inputs) < 2 or const_ints(scope, view.inputs[1]) not in ([-1, 1],):
            return None
    else:
        return None
    ranged = scope.producer(view.inputs[0])
    if ranged is None or not ranged.is_op("Range") or len(ranged.inputs) != 3:
        return None
    start, limit, delta = ranged.inputs
    if const_ints(scope, start) != [0] or const_ints(scope, delta) != [1]:
        return None
    return scalar_element(scope, limit)


def _slice(scope: ProofWalk, view: NodeView) -> str | None:
    """A Slice that keeps every element: on each axis it names, from 0 to at least the dim, step 1;
    or whose output is declared with the input's very dims (a positive step can keep a dim only whole)."""
    parts = slice_parts(scope, view)
    if parts is None:
        return None
    source, starts, ends, axes, steps = parts
    if steps is None:
        return None
    count = rank(scope, source)
    if axes is not None and all(s == 1 for s in steps) and all(s == 0 for s in starts):
        full = normalized(axes, count)
        if full is not None and all(_reaches_end(scope, end, DimOf(source, a)) for end, a in zip(ends, full)):
            return source
    if all(isinstance(s, int) and s > 0 for s in steps) and _declared_same(scope, source, view.outputs[0]):
        return source
    return None


def _reaches_end(scope: ProofWalk, end: Element, dim: DimOf) -> bool:
    if isinstance(end, int):
        size = dim_facts(scope, dim).size
        return end >= INT64_MAX // 2 or (size is not None and end >= size)
    return element_is_dim(scope, end, dim)


def _declared_same(scope: ProofWalk, a: str, b: str) -> bool:
    """Both tensors' declared (or inferred) shapes are known dim by dim and equal: numbers, or the same names."""
    first, second = scope.tensor_type(a).shape, scope.tensor_type(b).shape
    if first is None or second is None or len(first) != len(second):
        return False
    return all((isinstance(x, int) or (isinstance(x, str) and x)) and x == y for x, y in zip(first, second))


def slice_parts(scope: ProofWalk, view: NodeView) -> tuple[str, list[Element], list[Element], list[int] | None,
                                                      list[int] | None] | None:
    """A Slice's data, starts, ends (as elements), axes and steps (numbers; None when not constant)."""
    if not view.is_op("Slice") or not view.inputs:
        return None
    source = view.inputs[0]
    if len(view.inputs) == 1:  # opset < 10: attributes
        starts, ends = view.attrs.get("starts"), view.attrs.get("ends")
        if starts is None or ends is None:
            return None
        axes = view.attrs.get("axes")
        return (source, [int(s) for s in starts], [int(e) for e in ends],
                list(range(len(starts))) if axes is None else [int(a) for a in axes], [1] * len(starts))
    starts_found = elements(scope, view.inputs[1])
    ends_found = elements(scope, view.inputs[2]) if len(view.inputs) > 2 else None
    if starts_found is None:
        return None
    count = len(starts_found)
    if ends_found is None or len(ends_found) != count:  # e.g. an end computed by Add: unknown, one per start
        ends_found = [None] * count
    axes = (const_ints(scope, view.inputs[3]) if len(view.inputs) > 3 and view.inputs[3]
            else list(range(count)))
    steps = (const_ints(scope, view.inputs[4]) if len(view.inputs) > 4 and view.inputs[4] else [1] * count)
    if axes is not None and len(axes) != count:
        axes = None
    if steps is not None and len(steps) != count:
        steps = None
    return source, starts_found, ends_found, axes, steps


_PASS_THROUGH = {
    "Identity": _identity, "Transpose": _transpose, "Cast": _cast, "Reshape": _reshape, "Expand": _expand,
    "ScatterND": _scatter_nd, "Slice": _slice,
}


# ------------------------------------------------------------------- shorter forms
def composed_transpose(scope: ProofWalk, view: NodeView) -> tuple[str, list[int]] | None:
    """``Transpose(Transpose(x, p1), p2)`` is ``Transpose(x, q)`` with q[i] = p1[p2[i]]: (x, q)."""
    if not view.is_op("Transpose") or len(view.inputs) != 1:
        return None
    inner = scope.producer(view.inputs[0])
    if inner is None or not inner.is_op("Transpose") or len(inner.inputs) != 1 or not inner.inputs[0]:
        return None
    outer_perm, inner_perm = transpose_perm(scope, view), transpose_perm(scope, inner)
    if outer_perm is None or inner_perm is None or len(outer_perm) != len(inner_perm):
        return None
    return inner.inputs[0], [inner_perm[p] for p in outer_perm]


def composed_unsqueeze(scope: ProofWalk, view: NodeView) -> tuple[str, list[int]] | None:
    """``Unsqueeze(Unsqueeze(x, a1), a2)`` is one Unsqueeze of x: a2's axes stay where they are, and a1's
    new axes land, in order, on the output axes a2 does not take. (x, axes) or None."""
    if not view.is_op("Unsqueeze") or not view.inputs:
        return None
    inner = scope.producer(view.inputs[0])
    if inner is None or not inner.is_op("Unsqueeze") or not inner.inputs or not inner.inputs[0]:
        return None
    outer_axes, inner_axes = _unsqueeze_axes(scope, view), _unsqueeze_axes(scope, inner)
    if outer_axes is None or inner_axes is None:
        return None
    source_rank = rank(scope, inner.inputs[0])
    middle = None if source_rank is None else source_rank + len(inner_axes)
    inner_axes = normalized(inner_axes, middle)
    outer_axes = normalized(outer_axes, None if middle is None else middle + len(outer_axes))
    if inner_axes is None or outer_axes is None or len(set(outer_axes)) != len(outer_axes):
        return None
    free = _free_axes(set(outer_axes), max(inner_axes) + 1 if inner_axes else 0)
    return inner.inputs[0], sorted([*outer_axes, *(free[a] for a in inner_axes)])


def _free_axes(taken: set[int], count: int) -> list[int]:
    """The first ``count`` non-negative axes not in ``taken``."""
    out: list[int] = []
    axis = 0
    while len(out) < count:
        if axis not in taken:
            out.append(axis)
        axis += 1
    return out


def _unsqueeze_axes(scope: ProofWalk, view: NodeView) -> list[int] | None:
    if len(view.inputs) > 1:
        return const_ints(scope, view.inputs[1])
    axes = view.attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


def sliced_concat_part(scope: ProofWalk, view: NodeView) -> tuple[NodeView | None, str] | None:
    """A Slice that picks exactly one input of a Concat, or of an elementwise op of one:
    (that op or None, the input)."""
    parts = slice_parts(scope, view)
    if parts is None:
        return None
    source, starts, ends, axes, steps = parts
    if (axes is None or steps != [1] or len(starts) != 1
            or not isinstance(starts[0], int) or not isinstance(ends[0], int)):
        return None
    unary = scope.producer(source)
    if unary is None:
        return None
    concat: NodeView | None = unary
    if unary.is_op(*ELEMENTWISE_UNARY) and len(unary.inputs) == 1 and len(unary.outputs) == 1 and unary.inputs[0]:
        concat = scope.producer(unary.inputs[0])
    else:
        unary = None
    if concat is None or not concat.is_op("Concat") or len(concat.outputs) != 1:
        return None
    count = rank(scope, source) or rank(scope, concat.outputs[0])
    found = normalized([axes[0], int(concat.attrs.get("axis", 0))], count)
    if found is None or found[0] != found[1]:
        return None
    picked = _part_at(scope, concat.inputs, found[0], starts[0], ends[0])
    return None if picked is None else (unary, picked)


def _part_at(scope: ProofWalk, parts: list[str], axis: int, start: int, end: int) -> str | None:
    """The part that spans [start, end) of the concatenation along ``axis``, from the parts' numeric dims."""
    sizes: list[int] = []
    for part in parts:
        shape = scope.tensor_type(part).shape
        size = shape[axis] if shape is not None and axis < len(shape) else None
        sizes.append(size if isinstance(size, int) else -1)
    total = sum(sizes) if all(s >= 0 for s in sizes) else None
    if start < 0 or end < 0:
        if total is None:
            return None
        start, end = start + total if start < 0 else start, end + total if end < 0 else end
    offset = 0
    for part, size in zip(parts, sizes):
        if size < 0:
            return None
        if offset == start and size > 0 and (offset + size == end or (total is not None and offset + size == total
                                                                       and end >= total)):
            return part
        offset += size
    return None

