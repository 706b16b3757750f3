"""The graph as the tidy walk has rewritten it so far, and what it tells of dims and shape tensors.

A :class:`NodeView` is a node as tidy now sees it (inputs rerouted, or rewritten into a shorter
form with the same outputs); a :class:`ProofWalk` answers for the walk: producers as rewritten, types,
small constants. Dims are compared three ways, any of which proves two equal: the same dim of the
same tensor once ``Transpose`` and elementwise ops are seen through (``Shape(x)[2]`` is dim 0 of
``Transpose(x, [2, 1, 0, 3])``); the same number; the same named dim (``s16 + s62``), which ONNX
defines as the same size wherever the model names it. Shape tensors
(``Concat(Shape(x)[0], [1], Gather(Shape(y), 2))``) are read element by element: a number, or a
dim of a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import onnx

from graphlens.core.node import AttributeMap, Node
from graphlens.core.types import Dim, TensorType

STANDARD_DOMAINS = ("", "ai.onnx")
INT64_MAX = 2**63 - 1

ELEMENTWISE_UNARY = frozenset({
    "Abs", "Acos", "Acosh", "Asin", "Asinh", "Atan", "Atanh", "Cast", "Ceil", "Celu", "Cos", "Cosh", "Elu",
    "Erf", "Exp", "Floor", "Gelu", "HardSigmoid", "HardSwish", "Identity", "IsInf", "IsNaN", "LeakyRelu",
    "Log", "Mish", "Neg", "Not", "Reciprocal", "Relu", "Round", "Selu", "Sigmoid", "Sign", "Sin", "Sinh",
    "Softplus", "Softsign", "Sqrt", "Tan", "Tanh", "ThresholdedRelu",
})
"""Ops that compute each output element from the input element at the same place: output dims are
the input's, and a slice of the output is the op applied to that slice of the input."""


@dataclass(eq=False)
class NodeView:
    """A node as the tidy walk sees it: inputs rerouted, or rewritten into ``proto`` (same outputs)."""

    node: Node
    inputs: list[str]
    proto: onnx.NodeProto
    why: str = ""
    """What rewrote the node ('' when it is the file's own)."""
    inner: str = ""
    """The tensor the rewritten node stopped reading: the rewrite is undone if that tensor stays."""
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    passed: bool = False
    """Its output is another tensor under another name (readers read that one)."""
    _attrs: AttributeMap | None = None

    @property
    def op_type(self) -> str:
        return self.proto.op_type

    @property
    def domain(self) -> str:
        return self.proto.domain

    @property
    def outputs(self) -> list[str]:
        return self.node.outputs

    @property
    def rewritten(self) -> bool:
        return self.proto is not self.node.proto

    @property
    def attrs(self) -> Mapping[str, Any]:
        if self._attrs is None:
            self._attrs = self.node.attrs if not self.rewritten else AttributeMap(self.proto)
        return self._attrs

    def is_op(self, *op_types: str) -> bool:
        return self.domain in STANDARD_DOMAINS and self.op_type in op_types


class ProofWalk(Protocol):
    """What the proofs read of the walk: producers as rewritten so far, types, small constants."""

    opset: int

    def producer(self, tensor: str) -> NodeView | None: ...

    def tensor_type(self, tensor: str) -> TensorType: ...

    def small_const(self, tensor: str) -> np.ndarray | None: ...


# ----------------------------------------------------------------------------- dims
@dataclass(frozen=True)
class DimOf:
    """Dim ``axis`` (non-negative) of ``tensor``."""

    tensor: str
    axis: int


@dataclass
class DimFacts:
    """What is known of one dim: where it comes from once pass-through ops are seen through, its size, its names."""

    source: DimOf
    size: int | None
    names: frozenset[str]


FUSED_SAME_SHAPE = frozenset({
    "RotaryEmbedding", "LayerNormalization", "RMSNormalization", "SimplifiedLayerNormalization",
    "SkipLayerNormalization", "SkipSimplifiedLayerNormalization", "FastGelu", "BiasGelu", "Gelu",
    "MultiHeadAttention", "Attention", "GroupQueryAttention",
})
"""The fused ops (standard and com.microsoft) whose first output has their first input's shape (the skip norms'
sum, output 3, too; the attention ops' output has the query's, V's head size being Q's). Shape inference knows
none of the com.microsoft ones, so the tensors after a fusion have no shape unless it is read through them."""
_RANK_KEEPING = frozenset({*ELEMENTWISE_UNARY, "Transpose"})


def rank(scope: ProofWalk, tensor: str, depth: int = 0) -> int | None:
    """The tensor's rank: its type's, else through the ops that keep it (elementwise, Transpose, the fused ops),
    a Reshape's target length, a Where's widest input."""
    shape = scope.tensor_type(tensor).shape
    if shape is not None:
        return len(shape)
    view = scope.producer(tensor)
    if view is None or depth > 12 or not view.inputs:
        return None
    if view.op_type in _RANK_KEEPING or (view.op_type in FUSED_SAME_SHAPE and tensor == view.outputs[0]):
        return rank(scope, view.inputs[0], depth + 1)
    if view.is_op("Reshape") and len(view.inputs) > 1:
        target = elements(scope, view.inputs[1])
        return None if target is None else len(target)
    if view.is_op("Where"):
        ranks = [rank(scope, t, depth + 1) for t in view.inputs if t]
        known = [r for r in ranks if r is not None]
        return max(known) if known and len(known) == len(ranks) else None
    return None


def dim_facts(scope: ProofWalk, dim: DimOf) -> DimFacts:
    """Follow ``dim`` back through Transposes and elementwise ops, gathering its size and names on the way."""
    size: int | None = None
    names: set[str] = set()
    current = dim
    for _ in range(64):
        declared = _declared_dim(scope, current)
        if isinstance(declared, int) and size is None:
            size = declared
        elif isinstance(declared, str) and declared:
            names.add(declared)
        view = scope.producer(current.tensor)
        if view is None or not view.inputs or not view.inputs[0] or current.tensor != view.outputs[0]:
            break
        if view.is_op("Transpose"):
            perm = transpose_perm(scope, view)
            if perm is None or current.axis >= len(perm):
                break
            current = DimOf(view.inputs[0], perm[current.axis])
        elif view.is_op(*ELEMENTWISE_UNARY) and len(view.inputs) == 1:
            current = DimOf(view.inputs[0], current.axis)
        else:
            break
    return DimFacts(current, size, frozenset(names))


def _declared_dim(scope: ProofWalk, dim: DimOf) -> Dim:
    shape = scope.tensor_type(dim.tensor).shape
    return shape[dim.axis] if shape is not None and dim.axis < len(shape) else None


def same_dim(scope: ProofWalk, a: DimOf, b: DimOf) -> bool:
    first, second = dim_facts(scope, a), dim_facts(scope, b)
    if first.source == second.source:
        return True
    if first.size is not None and first.size == second.size:
        return True
    return bool(first.names & second.names)


def transpose_perm(scope: ProofWalk, view: NodeView) -> list[int] | None:
    """The Transpose's perm; with none given, the reversed axes (when the input's rank is known)."""
    perm = view.attrs.get("perm")
    if perm is not None:
        return [int(p) for p in perm]
    found = rank(scope, view.inputs[0])
    return None if found is None else list(range(found))[::-1]


# ------------------------------------------------------------------- shape tensors
Element = int | DimOf | None
"""One element of a shape tensor: a number, a dim of a tensor, or unknown."""


def elements(scope: ProofWalk, tensor: str, depth: int = 0) -> list[Element] | None:
    """The elements of an integer tensor of at most one dim, read through shape arithmetic; None if unreadable."""
    if not tensor or depth > 32:
        return None
    value = scope.small_const(tensor)
    if value is not None:
        if value.ndim > 1 or value.dtype.kind not in "iu":
            return None
        return [int(v) for v in value.reshape(-1)]
    view = scope.producer(tensor)
    if view is None or view.domain not in STANDARD_DOMAINS or tensor != view.outputs[0]:
        return None
    op = view.op_type
    if op == "Shape":
        found = rank(scope, view.inputs[0])
        if found is None:
            return None
        start, end = view.attrs.get("start", 0), view.attrs.get("end", found)
        return [DimOf(view.inputs[0], axis) for axis in range(found)[slice(start, end)]]
    if op == "Concat":
        out: list[Element] = []
        for part in view.inputs:
            found_part = elements(scope, part, depth + 1)
            if found_part is None:  # unknown elements, but how many is known
                shape = scope.tensor_type(part).shape
                if shape is None or len(shape) != 1 or not isinstance(shape[0], int):
                    return None
                found_part = [None] * shape[0]
            out.extend(found_part)
        return out
    if op == "Gather" and view.attrs.get("axis", 0) == 0 and len(view.inputs) == 2:
        return _gathered(scope, view, depth)
    if op in ("Unsqueeze", "Squeeze", "Reshape", "Identity") or (op == "Cast" and view.attrs.get("to") in _INT_TYPES):
        found_source = elements(scope, view.inputs[0], depth + 1)
        return (found_source if found_source is not None and (op in ("Identity", "Cast") or len(found_source) == 1)
                else None)
    return None


_INT_TYPES = (onnx.TensorProto.INT64, onnx.TensorProto.INT32)


def _gathered(scope: ProofWalk, view: NodeView, depth: int) -> list[Element] | None:
    source = elements(scope, view.inputs[0], depth + 1)
    picks = scope.small_const(view.inputs[1])
    if source is None or picks is None or picks.ndim > 1 or picks.dtype.kind not in "iu":
        return None
    out: list[Element] = []
    for pick in picks.reshape(-1):
        index = int(pick) + (len(source) if pick < 0 else 0)
        if not 0 <= index < len(source):
            return None
        out.append(source[index])
    return out


def scalar_element(scope: ProofWalk, tensor: str) -> Element:
    found = elements(scope, tensor)
    return found[0] if found is not None and len(found) == 1 else None


def element_is_dim(scope: ProofWalk, element: Element, dim: DimOf) -> bool:
    """True when ``element`` is provably the size of ``dim``."""
    if isinstance(element, DimOf):
        return same_dim(scope, element, dim)
    if isinstance(element, int):
        return dim_facts(scope, dim).size == element
    return False


def const_ints(scope: ProofWalk, tensor: str) -> list[int] | None:
    value = scope.small_const(tensor) if tensor else None
    if value is None or value.ndim > 1 or value.dtype.kind not in "iu":
        return None
    return [int(v) for v in value.reshape(-1)]


def normalized(axes: list[int], count: int | None) -> list[int] | None:
    """Axes made non-negative (None when one is negative and the rank is unknown, or out of range)."""
    if any(a < 0 for a in axes) and count is None:
        return None
    out = [a + count if a < 0 and count is not None else a for a in axes]
    if count is not None and any(not 0 <= a < count for a in out):
        return None
    return out
