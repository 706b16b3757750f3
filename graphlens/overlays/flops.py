"""FLOPs, parameters and output bytes per node, from tensor shapes alone (nothing is run).

FLOPs count a multiply-add as two: a Conv's output element costs ``2 · C_in/group · k_h · k_w``
(+1 for the bias), a MatMul/Gemm ``2 · K`` per output element (+1 for Gemm's C); element-wise
ops and activations one per output element; pooling one per window element read; BatchNormalization
two per element (scale and shift, as after folding), Layer/Instance/Group normalization five;
Softmax three. Shape ops (Reshape, Transpose, Concat, …) cost nothing and get no value.

Parameters are the elements of a node's constant inputs (weights, biases, BN statistics), counted
from their shapes without reading them. Output bytes are the sizes of its outputs from their
shapes and element types.

Models with dynamic input sizes are measured at concrete ones: those given, else those that last
ran (a profile or a numeric check), else batch-like dims 1, past lengths (KV caches) 4 and the
others 224, a dim written as an expression (``s16 + s62``) computed from its parts; the overlay's
notes say which. Shape inference runs on a copy with the inputs fixed; the model is not changed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import onnx

from graphlens.core.constants import PASS_THROUGH_OPS
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.types import TensorType, dims_nbytes, type_of_value_info
from graphlens.numerics.dims import default_sizes, dynamic_dims, remembered_dims
from graphlens.overlays.overlay import Overlay

METRICS = {
    "flops": ("Compute", "FLOPs"),
    "params": ("Parameters", ""),
    "bytes": ("Output bytes", "B"),
}
"""Metric name -> (overlay name, unit)."""

DEFAULT_SIZE = 224
"""The size of a non-batch dynamic dim nobody gave and no run found."""

ELEMENTWISE = frozenset({
    "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Abs", "Neg", "Sqrt", "Reciprocal", "Exp", "Log",
    "Relu", "LeakyRelu", "PRelu", "Sigmoid", "HardSigmoid", "HardSwish", "Tanh", "Elu", "Selu", "Celu", "Gelu",
    "Softplus", "Softsign", "Clip", "Erf", "Floor", "Ceil", "Round", "Sign", "Mod", "Equal", "Less", "Greater",
    "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Not", "Where", "Cos", "Sin", "Mish", "ThresholdedRelu",
    "QuantizeLinear", "DequantizeLinear", "Cast", "Resize", "Upsample",
})
NORM_COST = {"BatchNormalization": 2, "LayerNormalization": 5, "InstanceNormalization": 5, "GroupNormalization": 5,
             "Softmax": 3, "LogSoftmax": 3, "LpNormalization": 3}
POOLS = frozenset({"MaxPool", "AveragePool", "LpPool"})
GLOBAL_POOLS = frozenset({"GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool", "ReduceMean", "ReduceSum",
                          "ReduceMax", "ReduceMin", "ReduceL2", "ReduceL1", "ReduceProd", "ReduceSumSquare"})


@dataclass(frozen=True)
class NodeCost:
    """What one node costs; None where the shapes needed are unknown."""

    flops: float | None
    params: int
    output_bytes: int | None


Shapes = Callable[[str], TensorType]


def node_costs(model: Model, dims: dict[str, int] | None = None) -> tuple[dict[str, NodeCost], dict[str, int]]:
    """Every node's cost (nodes of subgraphs too), and the input sizes used for dynamic dims."""
    types, used = _concrete_types(model, dims or {})

    costs: dict[str, NodeCost] = {}
    counted: set[tuple[str, str]] = set()  # (graph, weight): a weight read by several nodes counts once
    for graph in model.graphs():
        def shape_of(tensor: str, g: Graph = graph) -> TensorType:
            found = types.get(tensor)
            return found if found is not None and found.shape is not None else g.tensor_type(tensor)

        for node in graph.nodes:
            costs[node.name] = NodeCost(node_flops(node, shape_of), node_params(graph, node, shape_of, counted),
                                        _output_bytes(node, shape_of))
    return costs, used


def metric_overlay(model: Model, metric: str, dims: dict[str, int] | None = None) -> Overlay:
    """``flops``, ``params`` or ``bytes`` per node as an overlay (nodes where it is 0 or unknown left out)."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric '{metric}'; metrics: {', '.join(METRICS)}")
    costs, used = node_costs(model, dims)
    pick: Callable[[NodeCost], float | None] = {
        "flops": lambda c: c.flops, "params": lambda c: c.params, "bytes": lambda c: c.output_bytes}[metric]
    values = {name: float(v) for name, c in costs.items() if (v := pick(c))}
    name, unit = METRICS[metric]
    notes = [f"computed from shapes at {' '.join(f'{k}={v}' for k, v in used.items())}"] if used else []
    unknown = [n for n, c in costs.items() if pick(c) is None]  # shapes not inferred (a loop's, a branch's)
    if unknown:
        inside = sum(1 for n in unknown if n not in model.graph.by_name)
        where = f", {inside} of them in subgraphs" if inside else ""
        notes.append(f"{len(unknown)} node{'s' if len(unknown) != 1 else ''} left out: their shapes are not "
                     f"known before a run{where} "
                     f"(such as '{unknown[0]}')")
    if metric == "flops":
        notes.append("a multiply-add counts as 2 FLOPs")
    if metric == "params":
        notes.append("a weight read by several nodes (or again through an Identity) counts once, at the first")
    return Overlay(name, unit, values, source=f"{name} from shapes", notes=notes)


# ------------------------------------------------------------------------------ shapes
def _concrete_types(model: Model, given: dict[str, int]) -> tuple[dict[str, TensorType], dict[str, int]]:
    """Types from shape inference on a copy whose dynamic input dims are fixed; {} when none are dynamic."""
    found = dynamic_dims(model)
    if not found:
        return {}, {}
    last = remembered_dims(model, given) or {}
    sizes = default_sizes(found, {**last, **given}, DEFAULT_SIZE)
    copy = model.weightless_proto()  # a fresh copy, without the weights shape inference does not read
    initializers = {t.name for t in copy.graph.initializer}
    for value in copy.graph.input:
        if value.name in initializers or not value.type.HasField("tensor_type"):
            continue
        for axis, dim in enumerate(value.type.tensor_type.shape.dim):
            if dim.HasField("dim_value") and dim.dim_value > 0:
                continue
            label = dim.dim_param if dim.dim_param and dim.dim_param in sizes else f"{value.name}[{axis}]"
            if label in sizes:
                dim.Clear()
                dim.dim_value = int(sizes[label])
    del copy.graph.value_info[:]  # declared intermediate shapes may carry the symbols; infer them afresh
    try:
        inferred = onnx.shape_inference.infer_shapes(copy, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - onnx raises many kinds; the declared shapes are the fallback
        return {}, sizes
    types: dict[str, TensorType] = {}
    _collect(inferred.graph, types)
    return types, sizes


def _collect(graph: onnx.GraphProto, types: dict[str, TensorType]) -> None:
    for value in (*graph.input, *graph.value_info, *graph.output):
        types[value.name] = type_of_value_info(value)
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                _collect(attribute.g, types)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    _collect(sub, types)


def _shape(tensor_type: TensorType) -> tuple[int, ...] | None:
    shape = tensor_type.shape
    if shape is None:
        return None
    dims = tuple(d for d in shape if isinstance(d, int) and d >= 0)
    return dims if len(dims) == len(shape) else None


def _count(shape: tuple[int, ...] | None) -> int | None:
    return None if shape is None else math.prod(shape)


# ------------------------------------------------------------------------------- costs
def linear_macs(op_type: str, x: Sequence[int] | None, w: Sequence[int] | None, out: Sequence[int] | None,
                trans_a: bool = False) -> float | None:
    """Multiply-accumulates of a Conv, ConvTranspose, Gemm or MatMul from its input, weight and output shapes
    (None when one it needs is unknown): a Conv's output elements × its kernel's elements per output channel
    (``C_in/group · k_h · k_w``), a ConvTranspose's input elements × its kernel's elements per input channel,
    a product's output elements × the axis it sums over (``K``)."""
    if op_type in ("Conv", "ConvInteger", "QLinearConv"):
        return None if out is None or w is None else float(math.prod(out) * math.prod(w[1:]))
    if op_type == "ConvTranspose":
        return None if x is None or w is None else float(math.prod(x) * math.prod(w[1:]))
    if out is None or not x:
        return None
    return float(math.prod(out) * (x[0] if trans_a else x[-1]))


def node_flops(node: Node, shape_of: Shapes) -> float | None:
    """FLOPs of one node (see the module docstring); 0 for shape ops, None when shapes are unknown."""
    op = node.op_type
    out = _shape(shape_of(node.outputs[0])) if node.outputs and node.outputs[0] else None
    inputs = [(_shape(shape_of(t)) if t else None) for t in node.inputs]
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    if op in ("Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "Gemm", "MatMul", "MatMulInteger",
              "QLinearMatMul"):
        weight = inputs[3] if op == "QLinearConv" else inputs[1] if len(inputs) > 1 else None
        macs = linear_macs(op, inputs[0], weight, out, op == "Gemm" and bool(node.attr("transA", 0)))
        if macs is None:
            return None
        biased = has_bias and op in ("Conv", "ConvTranspose", "Gemm") and out is not None
        return 2 * macs + (math.prod(out) if biased and out is not None else 0)  # a multiply-add is two
    if op in POOLS:
        kernel = node.attr("kernel_shape")
        return None if out is None or not kernel else float(math.prod(out) * math.prod(kernel))
    if op in GLOBAL_POOLS:
        return None if inputs[0] is None else float(math.prod(inputs[0]))
    if op in NORM_COST:
        return None if out is None else float(NORM_COST[op] * math.prod(out))
    if op in ELEMENTWISE:
        return None if out is None else float(math.prod(out))
    return 0.0


def node_params(graph: Graph, node: Node, shape_of: Shapes, counted: set[tuple[str, str]] | None = None) -> int:
    """Elements of the node's constant inputs (initializers and constants computed from them), each weight counted
    once over the model: ``counted`` holds (graph path, tensor) of those counted already (two branches may name
    theirs alike), so a weight read again through an Identity or a Transpose counts at its first reader only. A
    node that only computes a constant has none: its output counts at the node that reads it."""
    counted = set() if counted is None else counted
    if node.outputs and all(graph.is_constant(out) for out in node.outputs if out):
        return 0
    total = 0
    for tensor in node.inputs:
        if not tensor:
            continue
        initializer = graph.initializers.get(tensor)
        if initializer is None and (graph.local_producer(tensor) is None or not graph.is_constant(tensor)):
            continue
        root = (graph.path, _constant_root(graph, tensor))
        if root in counted:
            continue
        counted.add(root)
        if initializer is not None:
            total += math.prod(int(d) for d in initializer.dims)
        else:
            total += _count(_shape(shape_of(tensor))) or 0
    return total


def _constant_root(graph: Graph, tensor: str) -> str:
    """The tensor a constant is a view of: followed through Identity, Transpose, Cast, Reshape and the like (their
    data input), else itself (an initializer, a Constant's output, or a tensor computed some other way)."""
    seen = {tensor}
    while True:
        found = graph.local_producer(tensor)
        node = None if found is None else found[0]
        if node is None or node.op_type not in PASS_THROUGH_OPS or not node.inputs or node.inputs[0] in seen:
            return tensor
        tensor = node.inputs[0]
        seen.add(tensor)


def _output_bytes(node: Node, shape_of: Shapes) -> int | None:
    total, known = 0, False
    for tensor in node.outputs:
        if not tensor:
            continue
        found = shape_of(tensor)
        shape = _shape(found)
        if shape is None or found.dtype is None:
            continue
        elem_type = _ELEM_TYPES.get(found.dtype)
        size = dims_nbytes(shape, elem_type) if elem_type is not None else None
        if size is not None:
            total, known = total + size, True
    return total if known else None


_ELEM_TYPES = {
    onnx.helper.tensor_dtype_to_np_dtype(t).name if t != onnx.TensorProto.BFLOAT16 else "bfloat16": t
    for t in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE,
              onnx.TensorProto.INT8, onnx.TensorProto.UINT8, onnx.TensorProto.INT16, onnx.TensorProto.UINT16,
              onnx.TensorProto.INT32, onnx.TensorProto.UINT32, onnx.TensorProto.INT64, onnx.TensorProto.UINT64,
              onnx.TensorProto.BOOL)
}
"""Our dtype names (``float32``) -> ONNX element types."""
