"""The shape of a constant tensor, worked out without computing its value.

A box's label shows a large constant by its shape (``W ⟨768×768⟩``). Transformer exports feed most
MatMul weights through an ``Identity`` or ``Transpose`` of an initializer; computing each value
to read its shape decoded and copied every weight of the model (a quarter of a second and a
copy of the weights kept in the constants cache, on an 85 MB BERT). The ops constants pass
through (:data:`graphlens.core.constants.PASS_THROUGH_OPS`, ``CastLike``, ``ConstantOfShape``)
each give their output's shape from their input's, reading only small inputs (a Reshape's
target, Unsqueeze's axes) as values. Anything unusual (a malformed perm, a Reshape that does not
fit) gives None, and the caller computes the value as before, with its reasons.
"""

from __future__ import annotations

import math
from typing import Any

from graphlens.core.constants import ConstantsGraph, ConstantsNode, resolve_constant, why_not_constant

MAX_LINKS = 64
"""Chains longer than this are left to value computation (which keeps its own stack)."""

Shape = tuple[int, ...]


def constant_shape(graph: ConstantsGraph, tensor: str) -> Shape | None:
    """The shape of the constant ``tensor`` when it follows cheaply from its source's; None if it is not
    constant, or its shape needs its value."""
    if not tensor or why_not_constant(graph, tensor) is not None:
        return None
    chain: list[tuple[ConstantsGraph, ConstantsNode]] = []
    owner = graph.owner_of(tensor)
    while owner is not None and len(chain) <= MAX_LINKS:
        if tensor in owner.initializers:
            shape: Shape | None = tuple(int(d) for d in owner.initializers[tensor].dims)
            break
        found = owner.producer(tensor)
        if found is None:
            return None
        node = found[0]
        if node.op_type == "Constant" or (node.op_type == "ConstantOfShape" and node.inputs[:1] != [""]):
            shape = _source_shape(owner, node)
            break
        chain.append((owner, node))
        tensor = node.inputs[0] if node.inputs else ""
        owner = owner.owner_of(tensor) if tensor else None
    else:
        return None
    for link_graph, node in reversed(chain):
        if shape is None:
            return None
        shape = _through(link_graph, node, shape)
    return shape


def _source_shape(graph: ConstantsGraph, node: ConstantsNode) -> Shape | None:
    if node.op_type == "ConstantOfShape":
        value = resolve_constant(graph, node.inputs[0])
        if value is None or value.ndim != 1 or value.size > MAX_LINKS:
            return None
        return tuple(int(d) for d in value.tolist())
    for attr in node.proto.attribute:
        if attr.name == "value" and attr.HasField("t"):
            return tuple(int(d) for d in attr.t.dims)
        if attr.name in ("value_float", "value_int", "value_string"):
            return ()
        if attr.name in ("value_floats", "value_ints", "value_strings"):
            return (len(getattr(attr, attr.name.removeprefix("value_"))),)
    return None


def _small_ints(graph: ConstantsGraph, tensor: str) -> list[int] | None:
    """The values of a small integer input (a Reshape's target, axes), or None."""
    value = resolve_constant(graph, tensor) if tensor else None
    if value is None or value.dtype.kind not in "iu" or value.ndim > 1 or value.size > MAX_LINKS:
        return None
    return [int(v) for v in value.reshape(-1).tolist()]


def _through(graph: ConstantsGraph, node: ConstantsNode, shape: Shape) -> Shape | None:
    """The shape ``node`` gives its output from an input 0 of ``shape``; None where that is not plain."""
    op, attrs = node.op_type, node.attrs
    if op in ("Identity", "Cast", "CastLike"):
        return shape
    if op == "Transpose":
        perm = attrs.get("perm")
        order = list(range(len(shape)))[::-1] if perm is None else [int(p) for p in perm]
        return tuple(shape[p] for p in order) if sorted(order) == list(range(len(shape))) else None
    if op == "Flatten":
        axis = int(attrs.get("axis", 1))
        axis = axis + len(shape) if axis < 0 else axis
        return (math.prod(shape[:axis]), math.prod(shape[axis:])) if 0 <= axis <= len(shape) else None
    if op == "Reshape":
        target = _small_ints(graph, node.inputs[1]) if len(node.inputs) > 1 else None
        return None if target is None else _reshaped(shape, target, bool(attrs.get("allowzero", 0)))
    if op in ("Unsqueeze", "Squeeze"):
        return _axes_op(graph, node, attrs, shape)
    return None


def _reshaped(shape: Shape, target: list[int], allowzero: bool) -> Shape | None:
    if not allowzero:
        if any(d == 0 and i >= len(shape) for i, d in enumerate(target)):
            return None
        target = [shape[i] if d == 0 else d for i, d in enumerate(target)]
    count = math.prod(shape)
    if target.count(-1) > 1 or any(d < -1 for d in target):
        return None
    if -1 in target:
        known = math.prod(d for d in target if d != -1)
        if known == 0 or count % known:
            return None
        target = [count // known if d == -1 else d for d in target]
    return tuple(target) if math.prod(target) == count else None


def _axes_op(graph: ConstantsGraph, node: ConstantsNode, attrs: Any, shape: Shape) -> Shape | None:
    axes = attrs.get("axes")
    if axes is None and len(node.inputs) > 1 and node.inputs[1]:
        axes = _small_ints(graph, node.inputs[1])
        if axes is None:
            return None
    if node.op_type == "Squeeze":
        if axes is None:
            return tuple(d for d in shape if d != 1)
        dropped = {a + len(shape) if a < 0 else a for a in (int(a) for a in axes)}
        if any(not 0 <= a < len(shape) or shape[a] != 1 for a in dropped):
            return None
        return tuple(d for i, d in enumerate(shape) if i not in dropped)
    if axes is None:
        return None
    rank = len(shape) + len(axes)
    added = sorted(a + rank if a < 0 else a for a in (int(a) for a in axes))
    if len(set(added)) != len(added) or any(not 0 <= a < rank for a in added):
        return None
    rest = iter(shape)
    return tuple(1 if i in added else next(rest) for i in range(rank))
