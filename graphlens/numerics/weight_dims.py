"""Dynamic input dims that a weight fixes: the dims search takes them from the weight, never tries them.

A ``Conv`` reads ``weight.shape[1] · group`` channels and a ``MatMul`` by a constant ``[K, N]`` weight
reads ``K`` features on its last axis, so an input dim that reaches either unchanged (directly or through
a Cast) can only be that size: a ViT's ``num_channels`` is 3 because its patch Conv says so, and trying
32 only fails, slowly and at the memory the larger sizes cost. Only the dims of initializers and
Constants are read; external weights stay on disk.

onnxruntime's ``GroupQueryAttention`` fixes the head size of the KV cache it reads (``past_key [B, kv_heads,
past, head_size]``), which onnxruntime-genai's models leave symbolic (``kv_cache_dim``): it is the query
projection's width over the head count (over all heads of the packed Q, K, V when K and V are packed in it),
the width read off the projection's weight (a MatMul's, or MatMulNBits' ``N``).
"""

from __future__ import annotations

from collections.abc import Iterator

import onnx

from graphlens.core.model import Model
from graphlens.core.types import Dim, type_of_value_info
from graphlens.numerics.inputs import graph_inputs, input_origins, is_unnamed, structure, unnamed_label

_SHAPE_KEEPING = frozenset({"Cast", "Identity", "CastLike"})
"""Ops whose output has their input's shape: an input's axis reaches the weight's reader unchanged."""


def weight_fixed_dims(model: Model | onnx.ModelProto) -> dict[str, int]:
    """Dynamic input dim (its name, or ``input[axis]`` when unnamed) -> the one size a weight lets it have."""
    proto = structure(model)  # once: an edited model's structure is a copy
    graph = proto.graph
    weights = {t.name: tuple(int(d) for d in t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            weights[node.output[0]] = tuple(int(d) for d in node.attribute[0].t.dims)
    shapes = {v.name: type_of_value_info(v).shape or () for v in graph_inputs(proto)}
    fixed: dict[str, int] = {}
    origins = input_origins(proto, _SHAPE_KEEPING)
    reads = [*_weight_reads(graph, weights, origins, shapes), *_cache_reads(graph, weights, origins)]
    for source, axis, size in reads:
        dim = shapes[source][axis]
        if size <= 0 or (isinstance(dim, int) and dim >= 0):
            continue
        label = unnamed_label(source, axis) if is_unnamed(dim) else str(dim)
        fixed.setdefault(label, size)
    return fixed


def _weight_reads(graph: onnx.GraphProto, weights: dict[str, tuple[int, ...]], origin: dict[str, str],
                  shapes: dict[str, tuple[Dim, ...]]) -> Iterator[tuple[str, int, int]]:
    """(graph input, axis, size) for each axis of an input that a weight's shape fixes."""
    for node in graph.node:
        if len(node.input) < 2 or node.input[0] not in origin or node.input[1] not in weights:
            continue
        source, weight = origin[node.input[0]], weights[node.input[1]]
        rank = len(shapes[source])
        if node.op_type == "Conv" and len(weight) >= 3 and rank == len(weight):
            group = next((a.i for a in node.attribute if a.name == "group"), 1) or 1
            yield source, 1, weight[1] * group
        elif node.op_type == "MatMul" and len(weight) == 2 and rank >= 2:
            yield source, rank - 1, weight[0]
        elif node.op_type == "Gemm" and len(weight) == 2 and rank == 2:
            trans_a = next((a.i for a in node.attribute if a.name == "transA"), 0)
            trans_b = next((a.i for a in node.attribute if a.name == "transB"), 0)
            yield source, 0 if trans_a else 1, weight[1] if trans_b else weight[0]


def _cache_reads(graph: onnx.GraphProto, weights: dict[str, tuple[int, ...]],
                 origin: dict[str, str]) -> Iterator[tuple[str, int, int]]:
    """(past_key or past_value input, 3, head size) for each GroupQueryAttention whose head size is known."""
    producers = {out: node for node in graph.node for out in node.output}
    for node in graph.node:
        if node.op_type != "GroupQueryAttention" or len(node.input) < 5:
            continue
        attrs = {a.name: a.i for a in node.attribute if a.type == onnx.AttributeProto.INT}
        heads, kv_heads = attrs.get("num_heads", 0), attrs.get("kv_num_heads", 0)
        packed = len(node.input) < 2 or not node.input[1]
        width = _projection_width(producers, weights, node.input[0])
        total = heads + 2 * kv_heads if packed else heads
        if width is None or total <= 0 or width % total:  # normed per head (Qwen3): the output projection's rows
            width, total = _output_width(graph, weights, node.output[0]), heads
        if width is None or total <= 0 or width % total:
            continue
        for past in node.input[3:5]:
            if past in origin:
                yield origin[past], 3, width // total


def _output_width(graph: onnx.GraphProto, weights: dict[str, tuple[int, ...]], tensor: str) -> int | None:
    """The width the attention's output has: the rows of the projection that reads it (MatMulNBits' K)."""
    for node in graph.node:
        if not node.input or node.input[0] != tensor:
            continue
        if node.op_type == "MatMulNBits":
            return next((a.i for a in node.attribute if a.name == "K"), None)
        weight = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
        if weight is not None and len(weight) == 2:
            return weight[0]
    return None


def _projection_width(producers: dict[str, onnx.NodeProto], weights: dict[str, tuple[int, ...]],
                      tensor: str) -> int | None:
    """The last dim a projection writes: a MatMul by a constant [K, N] weight, or MatMulNBits' N (a bias Add after
    either keeps it)."""
    node = producers.get(tensor)
    if node is not None and node.op_type == "Add":
        node = next((producers[t] for t in node.input if t in producers
                     and producers[t].op_type in ("MatMul", "MatMulNBits")), None)
    if node is None:
        return None
    if node.op_type == "MatMulNBits":
        return next((a.i for a in node.attribute if a.name == "N"), None)
    weight = weights.get(node.input[1]) if node.op_type == "MatMul" and len(node.input) > 1 else None
    return weight[1] if weight is not None and len(weight) == 2 else None
