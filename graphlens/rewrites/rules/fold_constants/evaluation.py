"""What fold-constants computes with: constant values as a fold reads them, and ONNX's shape inference
and reference evaluation of one node at a time (see :mod:`fold_constants` for what is folded and when).

A value is either a computed array or the tensor holding it (a Constant's, an initializer's), read
only when a fold needs it: a model may hold a gigabyte of weights in Constant nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.tensors import tensor_value
from graphlens.core.types import Dim, dims_nbytes


@dataclass
class Value:
    """A constant tensor a fold can read: its type, its shape, and its value or the tensor holding it."""

    elem_type: int
    shape: tuple[int, ...]
    array: np.ndarray | None = None
    proto: onnx.TensorProto | None = None

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return nbytes_of(self.shape, self.elem_type)

    def read(self) -> np.ndarray:
        """The value, decoded on each read (external data is mapped); ValueError/TypeError when malformed."""
        return self.array if self.array is not None else tensor_value(self.held())

    def held(self) -> onnx.TensorProto:
        """The tensor holding a value that is not a computed array (:func:`value_of` and :func:`stored_value` give
        every value one of the two)."""
        assert self.proto is not None, "a constant value is either an array or a tensor"
        return self.proto

    def tensor(self, name: str) -> onnx.TensorProto:
        """The value as an initializer named ``name``: a Constant's own tensor when it already bears the name."""
        if self.array is not None:
            return numpy_helper.from_array(contiguous(self.array), name)
        held = self.held()
        if held.name == name:
            return held
        renamed = onnx.TensorProto()
        renamed.CopyFrom(held)
        renamed.name = name
        return renamed

    def type_proto(self) -> onnx.TypeProto:
        return helper.make_tensor_type_proto(self.elem_type, self.shape)

    def data(self, name: str) -> onnx.TensorProto:
        """The value as shape inference reads it: inline."""
        if self.proto is not None and self.proto.data_location != onnx.TensorProto.EXTERNAL:
            return self.proto
        return numpy_helper.from_array(self.read(), name)


BLOCK = 256
"""Rows and columns per block when a large transposed matrix is laid out (cache-sized tiles)."""


def contiguous(array: np.ndarray) -> np.ndarray:
    """``array`` in C order. A transposed weight (a 2-D view with swapped strides, as a folded
    ``Transpose(W)`` is) is copied tile by tile: about twice as fast as numpy's strided copy of a
    large matrix, which jumps a whole row ahead for every element."""
    if array.flags.c_contiguous:
        return array
    if array.ndim != 2 or array.nbytes < 64 * BLOCK * BLOCK:
        copied: np.ndarray = array.copy(order="C")  # keeps a 0-d array 0-d, as ascontiguousarray would not
        return copied
    out = np.empty(array.shape, array.dtype)
    rows, cols = array.shape
    for i in range(0, rows, BLOCK):
        for j in range(0, cols, BLOCK):
            out[i:i + BLOCK, j:j + BLOCK] = array[i:i + BLOCK, j:j + BLOCK]
    return out


def read_all(inputs: dict[str, Value | None]) -> dict[str, np.ndarray] | None:
    """The values of the known inputs, by name; None when one is malformed (the checker would refuse it)."""
    try:
        return {tensor: value.read() for tensor, value in inputs.items() if value is not None}
    except (ValueError, TypeError):
        return None


def nbytes_of(shape: tuple[int, ...], elem_type: int) -> int:
    """Bytes of a tensor; strings counted at 8 bytes each."""
    found = dims_nbytes(shape, elem_type)
    return math.prod(shape) * 8 if found is None else found


def value_of(array: np.ndarray) -> Value | None:
    """A computed value, or None when ONNX has no element type for it."""
    try:
        elem_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, TypeError, ValueError):
        return None
    return Value(elem_type, tuple(int(d) for d in array.shape), array=array)


def stored_value(tensor: onnx.TensorProto) -> Value:
    return Value(tensor.data_type, tuple(int(d) for d in tensor.dims), proto=tensor)


def dims_of(type_proto: onnx.TypeProto | None) -> tuple[Dim, ...] | None:
    """A tensor type's dims: numbers, symbolic names, or None; None when the rank is unknown."""
    if type_proto is None or type_proto.WhichOneof("value") != "tensor_type":
        return None
    tensor_type = type_proto.tensor_type
    if not tensor_type.HasField("shape"):
        return None
    return tuple(
        d.dim_value if d.HasField("dim_value") else d.dim_param if d.HasField("dim_param") else None
        for d in tensor_type.shape.dim
    )


def static_dims(dims: tuple[Dim, ...] | None) -> tuple[int, ...] | None:
    if dims is None:
        return None
    known = tuple(d for d in dims if isinstance(d, int) and d >= 0)
    return known if len(known) == len(dims) else None


class ModelFold:
    """What the graphs of one model share: its opsets, and each graph's types and stored values."""

    def __init__(self, model: Model) -> None:
        self.opset_imports = list(model.proto.opset_import)
        self.opsets = {("" if o.domain == "ai.onnx" else o.domain): int(o.version) for o in self.opset_imports}
        self.types: dict[str, dict[str, onnx.TypeProto]] = {}
        self.stored: dict[str, dict[str, onnx.TensorProto]] = {}
        self._schemas: dict[str, onnx.defs.OpSchema | None] = {}

    def schema(self, op_type: str) -> onnx.defs.OpSchema | None:
        if op_type not in self._schemas:
            try:
                self._schemas[op_type] = onnx.defs.get_schema(op_type, self.opsets.get("", 1), "")
            except onnx.defs.SchemaError:
                self._schemas[op_type] = None
        return self._schemas[op_type]

    def infer(self, node: Node, types: dict[str, onnx.TypeProto],
              data: dict[str, onnx.TensorProto]) -> dict[str, onnx.TypeProto]:
        """ONNX's shape inference of ``node`` alone; empty when it has no schema or inference fails."""
        schema = self.schema(node.op_type)
        if schema is None:
            return {}
        try:
            return onnx.shape_inference.infer_node_outputs(schema, node.proto, types, data,
                                                           opset_imports=self.opset_imports)
        except Exception:  # onnx raises InferenceError, ValidationError, RuntimeError... for nodes it cannot type
            return {}

    def evaluate(self, node: Node, feeds: dict[str, np.ndarray]) -> np.ndarray | None:
        """``node``'s first output by onnx's reference implementation; None if it fails."""
        from onnx.reference import ReferenceEvaluator  # 35 ms to import: only for a fold that computes a node

        try:
            with np.errstate(all="ignore"):
                result = ReferenceEvaluator(node.proto, opsets=self.opsets).run(None, feeds)
        except Exception:  # the reference ops raise whatever numpy raises for inputs they do not support
            return None
        out = result[0] if isinstance(result, list) and result else None  # a list unless intermediate=True
        return np.asarray(out) if isinstance(out, (np.ndarray, np.generic)) else None


def constant_node_value(graph: Graph, node: Node) -> Value | None:
    """A Constant node's value: its tensor attribute as it is, else (value_ints...) the core's small array."""
    for attr in node.proto.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return stored_value(attr.t)
        if attr.name == "sparse_value":
            return None  # dense, it may be far larger than the file holds
    array = graph.constant_value(node.outputs[0])
    return None if array is None else value_of(np.asarray(array))
