"""Which tensors are constant, why the others are not, and their values.

A tensor is constant when it is an initializer (and not also a graph input, which callers may
override), or the output of ``Constant``, of ``ConstantOfShape`` with a constant shape, or of a
shape/type-only op whose inputs are all constant. Exporters often put batch-norm parameters
behind such nodes, and tools that only look at initializers miss them.

Values are computed with numpy on demand and cached per graph; initializer values are not
cached, since their bytes already live in the model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.tensors import tensor_value

if TYPE_CHECKING:
    from graphlens.core.graph import Graph, Node

PASS_THROUGH_OPS = frozenset({"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Transpose", "Flatten"})
"""Ops that only change shape or element type: constant in, constant out."""

def why_not_constant(graph: Graph, tensor: str) -> str | None:
    """None if ``tensor`` is constant in ``graph``'s scope, else a phrase giving the reason.

    The phrase completes a sentence about the tensor, e.g. "comes from graph input 'bn_mean'".
    """
    if not tensor:
        return "is an omitted optional input"
    owner = graph.owner_of(tensor)
    if owner is None:
        return f"'{tensor}' is not defined"
    reasons = owner._constness
    if tensor in reasons:
        return reasons[tensor]
    reason = _reason(owner, tensor)
    reasons[tensor] = reason
    return reason


def _reason(graph: Graph, tensor: str) -> str | None:
    if tensor in graph.initializers:
        if graph.is_graph_input(tensor):
            return f"comes from graph input '{tensor}', whose initializer is only a default callers may override"
        return None
    if graph.is_graph_input(tensor):
        if graph.parent is not None:
            return f"is an input of the {graph.attr_name} body of {graph.parent.label}, set on each run"
        return f"comes from graph input '{tensor}'"
    found = graph.producer(tensor)
    if found is None:  # pragma: no cover - owner_of guarantees a definition
        return f"'{tensor}' is not defined"
    node, _ = found
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        return None
    if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx"):
        inner = why_not_constant(graph, node.inputs[0])
        return None if inner is None else f"is produced by {node.label}, whose shape input '{node.inputs[0]}' {inner}"
    if node.op_type in PASS_THROUGH_OPS and node.domain in ("", "ai.onnx"):
        for source in node.inputs:
            if source:
                inner = why_not_constant(graph, source)
                if inner is not None:
                    return f"is produced by {node.label}, whose input '{source}' {inner}"
        return None
    return f"is computed by {node.label}, not a constant"


def resolve_constant(graph: Graph, tensor: str) -> np.ndarray | None:
    """The value of a constant tensor, or None if it is not constant or cannot be evaluated."""
    if why_not_constant(graph, tensor) is not None:
        return None
    owner = graph.owner_of(tensor)
    assert owner is not None
    if tensor in owner.initializers:
        return tensor_value(owner.initializers[tensor])
    if tensor in owner._constants:
        return owner._constants[tensor]
    found = owner.producer(tensor)
    assert found is not None
    node, slot = found
    try:
        value: np.ndarray | None = _evaluate(owner, node)
    except (ValueError, TypeError, IndexError, KeyError):
        value = None  # malformed attributes: not something we can fold, but not fatal either
    owner._constants[tensor] = value
    return value


def _evaluate(graph: Graph, node: Node) -> np.ndarray | None:
    """Run one constant-producing node in numpy."""
    op = node.op_type
    if op == "Constant":
        return _constant_attribute(node)
    args = [resolve_constant(graph, t) if t else None for t in node.inputs]
    if any(a is None for a, t in zip(args, node.inputs) if t):
        return None
    x = args[0]
    if op == "ConstantOfShape":
        fill = node.attrs.get("value")
        fill = np.zeros(1, dtype=np.float32) if fill is None else np.asarray(fill)
        return np.full(tuple(int(d) for d in x.reshape(-1)), fill.reshape(-1)[0], dtype=fill.dtype)
    if op == "Identity":
        return x
    if op == "Cast":
        return x.astype(onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"])))
    if op == "Reshape":
        shape = [int(d) for d in args[1].reshape(-1)]
        if not node.attrs.get("allowzero", 0):
            shape = [x.shape[i] if d == 0 else d for i, d in enumerate(shape)]
        return x.reshape(shape)
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return np.transpose(x, None if perm is None else list(perm))
    if op == "Flatten":
        axis = int(node.attrs.get("axis", 1))
        axis = axis + x.ndim if axis < 0 else axis
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x.reshape(lead, -1) if x.size else x.reshape(lead, 0)
    if op in ("Unsqueeze", "Squeeze"):
        axes = node.attrs.get("axes")
        if axes is None and len(args) > 1 and args[1] is not None:
            axes = [int(a) for a in args[1].reshape(-1)]
        if op == "Squeeze":
            return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(axes))
        out_rank = x.ndim + len(axes)
        return np.expand_dims(x, axis=tuple(sorted(a + out_rank if a < 0 else a for a in axes)))
    return None


def _constant_attribute(node: Node) -> np.ndarray | None:
    attrs = node.attrs
    if "value" in attrs:
        return np.asarray(attrs["value"])
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_floats" in attrs:
        return np.array(attrs["value_floats"], dtype=np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_ints" in attrs:
        return np.array(attrs["value_ints"], dtype=np.int64)
    if "value_string" in attrs:
        return np.array(attrs["value_string"], dtype=object)
    if "value_strings" in attrs:
        return np.array(attrs["value_strings"], dtype=object)
    if "sparse_value" in attrs:
        sparse = attrs["sparse_value"]
        dense = np.zeros(tuple(sparse.dims), dtype=onnx.helper.tensor_dtype_to_np_dtype(sparse.values.data_type))
        values = numpy_helper.to_array(sparse.values)
        indices = numpy_helper.to_array(sparse.indices)
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
        return dense
    return None
