"""Q, K and V projected from one input packed into one weight: onnxruntime's ``Attention`` (com.microsoft).

BERT-like encoders project the same hidden states three times, ``x·Wq + bq``, ``x·Wk + bk``, ``x·Wv + bv``.
onnxruntime's contrib ``Attention`` takes that as one GEMM, ``x · [Wq | Wk | Wv] + [bq | bk | bv]``, inside the
attention kernel, as its transformers optimizer fuses encoders: three MatMuls and three Adds fewer per layer.
Below opset 23 fuse-attention writes it where the three projections have constant weights, one input, and one
head count; otherwise MultiHeadAttention reads the projections as they are.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.graph import Graph
from graphlens.rewrites.rules.transformers.attention import edits as edits


@dataclass(frozen=True)
class Projection:
    """``x · weight (+ bias)``, weight and bias constants."""

    x: str
    weight: np.ndarray
    bias: np.ndarray | None


@dataclass(frozen=True)
class Packed:
    """The packed op's first three inputs, and the widths of Q, K and V (``qkv_hidden_sizes``)."""

    x: str
    weight: str
    bias: str
    widths: tuple[int, int, int]


def projection(graph: Graph, tensor: str) -> Projection | None:
    """``tensor`` as ``MatMul(x, W)``, ``Add(MatMul(x, W), b)`` or ``Add(b, MatMul(x, W))``; None otherwise."""
    found = graph.producer(tensor)
    if found is None or found[0].domain not in ("", "ai.onnx"):
        return None
    node, bias = found[0], None
    if node.op_type == "Add" and len(node.inputs) == 2:
        constants = [t for t in node.inputs if graph.constant_value(t) is not None]
        others = [t for t in node.inputs if t not in constants]
        if len(constants) != 1 or len(others) != 1:
            return None
        bias = graph.constant_value(constants[0])
        inner = graph.producer(others[0])
        if inner is None or bias is None or bias.ndim != 1:
            return None
        node = inner[0]
    if node.op_type != "MatMul" or len(node.inputs) != 2 or node.domain not in ("", "ai.onnx"):
        return None
    weight = graph.constant_value(node.inputs[1])
    if weight is None or weight.ndim != 2 or (bias is not None and bias.shape[0] != weight.shape[1]):
        return None
    return Projection(node.inputs[0], weight, bias)


def packed(graph: Graph, emitted: edits.Emitted, tensors: tuple[str, str, str]) -> Packed | None:
    """Q, K and V packed, where all three are projections of one 3-D input by weights of one type; else None."""
    parts = [projection(graph, tensor) for tensor in tensors]
    if any(part is None for part in parts):
        return None
    found = [part for part in parts if part is not None]
    x_dims = graph.tensor_type(found[0].x).shape
    if len({part.x for part in found}) != 1 or (x_dims is not None and len(x_dims) != 3):
        return None
    weights = [part.weight for part in found]
    if len({w.shape[0] for w in weights}) != 1 or len({w.dtype for w in weights}) != 1:
        return None
    biases = [part.bias if part.bias is not None else np.zeros(part.weight.shape[1], part.weight.dtype)
              for part in found]
    if weights[0].dtype not in (np.float32, np.float16) or len({b.dtype for b in biases}) != 1:
        return None
    widths = (weights[0].shape[1], weights[1].shape[1], weights[2].shape[1])
    weight = emitted.const(np.concatenate(weights, axis=1), "qkv_weight")
    bias = emitted.const(np.concatenate(biases).astype(weights[0].dtype), "qkv_bias")
    return Packed(found[0].x, weight, bias, widths)
