"""Dynamic input dims that a weight fixes: the dims search takes them from the weight, never tries them.

A ``Conv`` reads ``weight.shape[1] · group`` channels and a ``MatMul`` by a constant ``[K, N]`` weight
reads ``K`` features on its last axis, so an input dim that reaches either unchanged (directly or through
a Cast) can only be that size: a ViT's ``num_channels`` is 3 because its patch Conv says so, and trying
32 only fails, slowly and at the memory the larger sizes cost. Only the dims of initializers and
Constants are read; external weights stay on disk.
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
    graph = structure(model).graph
    weights = {t.name: tuple(int(d) for d in t.dims) for t in graph.initializer}
    for node in graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].type == onnx.AttributeProto.TENSOR:
            weights[node.output[0]] = tuple(int(d) for d in node.attribute[0].t.dims)
    shapes = {v.name: type_of_value_info(v).shape or () for v in graph_inputs(model)}
    fixed: dict[str, int] = {}
    for source, axis, size in _weight_reads(graph, weights, input_origins(model, _SHAPE_KEEPING), shapes):
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
