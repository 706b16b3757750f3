"""fold-constants (off by default; the first rule of ``--rules transformers``): constants become initializers.

Exporters compute many tensors from constants alone. PyTorch's dynamo exporter writes every weight
as a ``Constant`` node, wraps scalars as ``CastLike(0.5, x)`` and transposes weights at run time
(``MatMul(x, Transpose(W))``); TorchScript derives head sizes as ``Shape -> Gather -> Div``.
onnxruntime and onnxscript's ``optimize_for_ort`` fold all of that before fusing, so node counts
compare only after it. Per graph (the main graph and every If/Loop/Scan body), in one edit each:

- a ``Constant`` node becomes an initializer of the same name;
- a node whose inputs are all constant becomes an initializer holding its value, computed in numpy
  by onnx's reference implementation of the op at the model's opset;
- ``CastLike(c, x)`` becomes ``c`` in ``x``'s element type when that type is known, and ``Shape(x)``,
  or a ``Gather``/``Slice`` of it, becomes the dims it selects when all of them are numbers
  (symbolic dims such as ``seq_len`` stay computed).

Types and shapes come from ONNX's inference of one node at a time, in graph order, with the values
of small constants at hand; inferring the whole model instead would serialize every weight.
Only values that a remaining node, a subgraph or a graph output reads are stored: the inner links
of a folded chain leave nothing behind.

Left alone: ops with random results (RandomNormal…) or a training mode (Dropout), the quantize ops
(their pairs carry a quantized model's scales), control flow, other domains, and a fold that would
grow the model. Output sizes are inferred before anything is computed, and a value over
:data:`SMALL_BYTES` is stored only when the constant inputs that it alone reads, which then go, are
at least as large: ``Transpose(W)`` of a weight nothing else reads becomes the transposed weight,
while ``Expand``, ``Tile`` or ``ConstantOfShape`` into a big shape stays.

Memory: a model may hold a gigabyte of weights in Constant nodes. A Constant's tensor becomes the
initializer as it is when it already bears the output's name, else as a renamed copy (the dynamo
exporter leaves them unnamed, and renaming in place would change the node that undo restores).
Values are decoded only when a fold reads them and dropped once their last reader is handled. The
core's constant resolution (:mod:`graphlens.core.constants`) keeps each value it computes for the
graph's life, and the decoded tensor of each Constant it reads, so it is asked only for the small
values of scalar-attribute Constants.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from graphlens.core.graph import Graph, Node
from graphlens.core.model import Model
from graphlens.core.tensors import tensor_value
from graphlens.core.types import Dim, dims_nbytes
from graphlens.matching.matcher import Match
from graphlens.rewrites.edit import GraphEdit, without_orphans
from graphlens.rewrites.rule import Refusal, Rule

SMALL_BYTES = 16 * 2**10
"""A folded value up to this size is stored even when it frees nothing: shapes, scalars, small masks."""

DATA_ELEMENTS = 1024
"""Constant inputs up to this size reach shape inference with their values: Reshape's, Expand's... come out static."""

NEVER_FOLDED = frozenset({
    "RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial", "Bernoulli",
    "Dropout", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "Identity",
})
"""Random or training-mode results, quantization structure, and Identity (seen through; the cleanup bypasses it)."""

_ONNX_DOMAINS = ("", "ai.onnx")


@dataclass
class _Value:
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
        return _nbytes(self.shape, self.elem_type)

    def read(self) -> np.ndarray:
        """The value, decoded on each read (external data is mapped); ValueError/TypeError when malformed."""
        return self.array if self.array is not None else tensor_value(self.proto)

    def tensor(self, name: str) -> onnx.TensorProto:
        """The value as an initializer named ``name``: a Constant's own tensor when it already bears the name."""
        if self.array is not None:
            return numpy_helper.from_array(self.array, name)
        if self.proto.name == name:
            return self.proto
        renamed = onnx.TensorProto()
        renamed.CopyFrom(self.proto)
        renamed.name = name
        return renamed

    def type_proto(self) -> onnx.TypeProto:
        return helper.make_tensor_type_proto(self.elem_type, self.shape)

    def data(self, name: str) -> onnx.TensorProto:
        """The value as shape inference reads it: inline."""
        if self.proto is not None and self.proto.data_location != onnx.TensorProto.EXTERNAL:
            return self.proto
        return numpy_helper.from_array(self.read(), name)


def _read_all(inputs: dict[str, _Value | None]) -> dict[str, np.ndarray] | None:
    """The values of the known inputs, by name; None when one is malformed (the checker would refuse it)."""
    try:
        return {tensor: value.read() for tensor, value in inputs.items() if value is not None}
    except (ValueError, TypeError):
        return None


def _nbytes(shape: tuple[int, ...], elem_type: int) -> int:
    """Bytes of a tensor; strings counted at 8 bytes each."""
    found = dims_nbytes(shape, elem_type)
    return math.prod(shape) * 8 if found is None else found


def _value_of(array: np.ndarray) -> _Value | None:
    """A computed value, or None when ONNX has no element type for it."""
    try:
        elem_type = helper.np_dtype_to_tensor_dtype(array.dtype)
    except (KeyError, TypeError, ValueError):
        return None
    return _Value(elem_type, tuple(int(d) for d in array.shape), array=array)


def _stored(tensor: onnx.TensorProto) -> _Value:
    return _Value(tensor.data_type, tuple(int(d) for d in tensor.dims), proto=tensor)


def _dims(type_proto: onnx.TypeProto | None) -> tuple[Dim, ...] | None:
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


def _static(dims: tuple[Dim, ...] | None) -> tuple[int, ...] | None:
    if dims is None or not all(isinstance(d, int) and d >= 0 for d in dims):
        return None
    return tuple(int(d) for d in dims)  # type: ignore[arg-type]


class FoldConstants(Rule):
    name = "fold-constants"
    description = "store Constant nodes and nodes computed from constants alone as initializers"
    default = False
    kind = "constants"

    def plan(self, match: Match) -> Refusal:  # pragma: no cover - no patterns
        return self.refuse(match, "fold-constants works on the whole model, not on a match")

    def model_edits(self, model: Model) -> list[GraphEdit]:
        fold = _ModelFold(model)
        edits = []
        for graph in model.graphs():  # enclosing graphs first: their stored values are read by their bodies
            edit = _GraphFold(graph, fold).run(self.name, self.kind)
            if edit is not None:
                edits.append(edit)
        return edits


class _ModelFold:
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

    def infer(self, node: Node, types: dict[str, onnx.TypeProto], data: dict[str, onnx.TensorProto]) -> dict[str, onnx.TypeProto]:
        """ONNX's shape inference of ``node`` alone; empty when it has no schema or inference fails."""
        schema = self.schema(node.op_type)
        if schema is None:
            return {}
        try:
            return onnx.shape_inference.infer_node_outputs(schema, node.proto, types, data, opset_imports=self.opset_imports)
        except Exception:  # onnx raises InferenceError, ValidationError, RuntimeError... for nodes it cannot type
            return {}

    def evaluate(self, node: Node, feeds: dict[str, np.ndarray]) -> np.ndarray | None:
        """``node``'s first output by onnx's reference implementation; None if it fails."""
        try:
            with np.errstate(all="ignore"):
                result = ReferenceEvaluator(node.proto, opsets=self.opsets).run(None, feeds)
        except Exception:  # the reference ops raise whatever numpy raises for inputs they do not support
            return None
        out = result[0] if result else None
        return np.asarray(out) if isinstance(out, (np.ndarray, np.generic)) else None


def _is_identity(node: Node) -> bool:
    return (node.op_type == "Identity" and node.domain in _ONNX_DOMAINS and len(node.inputs) == 1
            and bool(node.inputs[0]) and len(node.outputs) == 1)


def _constant_value(graph: Graph, node: Node) -> _Value | None:
    """A Constant node's value: its tensor attribute as it is, else (value_ints...) the core's small array."""
    for attr in node.proto.attribute:
        if attr.name == "value" and attr.type == onnx.AttributeProto.TENSOR:
            return _stored(attr.t)
        if attr.name == "sparse_value":
            return None  # dense, it may be far larger than the file holds
    array = graph.constant_value(node.outputs[0])
    return None if array is None else _value_of(np.asarray(array))


def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


class _GraphFold:
    """One graph's fold: nodes visited in graph order, values kept only while a reader is still to come.

    Identity nodes are seen through (the driver's cleanup bypasses them): a tensor and the Identity
    outputs copying it share one *root*, under which its readers are counted and its value kept.
    """

    def __init__(self, graph: Graph, fold: _ModelFold) -> None:
        self.graph = graph
        self.fold = fold
        self.types = fold.types.setdefault(graph.path, {})
        self.stored = fold.stored.setdefault(graph.path, {})
        self.values: dict[str, _Value] = {}  # constants of this graph a node still to visit reads, by root
        self.removed: set[str] = set()  # outputs of the nodes folded away: the only tensors that may be stored
        self.shapes: dict[str, tuple[Dim, ...]] = {}  # Shape outputs with symbolic dims, for Gather/Slice of them
        self.folded: list[str] = []
        self.constants = 0
        self.left: list[str] = []  # nodes whose value would grow the model
        self.root: dict[str, str] = {}
        self.pending: Counter[str] = Counter()  # readers still to visit, by root
        self.needed: set[str] = set()  # roots a node that stays reads
        self._count_readers()
        self.outputs = set(graph.outputs)
        self.kept = {self._root(t) for t in (*graph.outputs, *graph.outer_reads())}  # stored if folded
        self.need_types = not {"CastLike", "Shape"}.isdisjoint(graph.nodes_by_op())
        self._declare_types()

    def _root(self, tensor: str) -> str:
        return self.root.get(tensor, tensor)

    def _count_readers(self) -> None:
        for node in self.graph.nodes:
            if _is_identity(node):
                self.root[node.outputs[0]] = self._root(node.inputs[0])
        for node in self.graph.nodes:
            if not _is_identity(node):
                self.pending.update({self._root(t) for t in node.inputs if t})

    def _declare_types(self) -> None:
        """Declared types first (inputs, value_info, outputs, initializers); inference overrides them."""
        proto = self.graph.proto
        for info in (*proto.input, *proto.value_info, *proto.output):
            if info.type.WhichOneof("value") == "tensor_type":
                self.types[info.name] = info.type
        for name, tensor in self.graph.initializers.items():
            self.types[name] = helper.make_tensor_type_proto(tensor.data_type, list(tensor.dims))

    # ------------------------------------------------------------------ the walk
    def run(self, rule: str, kind: str) -> GraphEdit | None:
        for node in self.graph.nodes:
            self._visit(node)
        if not self.folded:
            return None
        text = (f"store {_counted(self.constants, 'Constant node')} and "
                f"{_counted(len(self.folded) - self.constants, 'node')} computed from constants "
                f"as {_counted(len(self.stored), 'initializer')}")
        if self.left:
            more = "…" if len(self.left) > 3 else ""
            text += (f"; {_counted(len(self.left), 'node')} left whose value would grow the model "
                     f"({', '.join(self.left[:3])}{more})")
        edit = GraphEdit(self.graph.path, rule, text, remove=self.folded, initializers=self.stored, kind=kind)
        return without_orphans(self.graph, edit)

    def _visit(self, node: Node) -> None:
        if _is_identity(node):
            found = self._type(node.inputs[0])
            if found is not None:
                self.types[node.outputs[0]] = found
            return
        out = node.outputs[0] if len(node.outputs) == 1 else ""
        inferred: dict[str, onnx.TypeProto] = {}
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS and out:
            value = _constant_value(self.graph, node)
            removable = out not in self.outputs
        else:
            if self.need_types or all(self._known(t) is not None for t in node.inputs if t):
                inferred = self._infer(node)
            value = self._fold(node, inferred) if self._foldable(node) else None
            removable = True
        self._read(node, folded=value is not None and removable)
        if value is None:
            for tensor, found in inferred.items():
                if found.WhichOneof("value") is not None:
                    self.types[tensor] = found
            return
        self._produced(node, value, removable)

    def _read(self, node: Node, *, folded: bool) -> None:
        """Count ``node``'s reads done; a constant a remaining node reads is stored."""
        for tensor in dict.fromkeys(self._root(t) for t in node.inputs if t):
            if not folded:
                self.needed.add(tensor)
                if tensor in self.values:
                    self._store(tensor, self.values[tensor])
            self.pending[tensor] -= 1
            if self.pending[tensor] <= 0:
                self.values.pop(tensor, None)

    def _produced(self, node: Node, value: _Value, removable: bool) -> None:
        out = node.outputs[0]
        self.types[out] = value.type_proto()
        if removable:
            self.folded.append(node.name)
            self.removed.add(out)
            self.constants += node.op_type == "Constant"
        if out in self.kept:
            self._store(out, value)
        if self.pending[out] > 0:
            self.values[out] = value

    def _store(self, tensor: str, value: _Value) -> None:
        if tensor in self.removed and tensor not in self.stored:
            self.stored[tensor] = value.tensor(tensor)

    # ------------------------------------------------------------------ knowledge
    def _known(self, tensor: str) -> _Value | None:
        """The constant ``tensor`` is, from this graph or an enclosing one; None when it is not one."""
        root = self._root(tensor)
        found = self.values.get(root)
        if found is not None:
            return found
        owner = self.graph.owner_of(root)
        if owner is None:
            return None
        if root in owner.initializers:
            return None if owner.is_graph_input(root) else _stored(owner.initializers[root])
        if owner is self.graph:
            return None
        stored = self.fold.stored.get(owner.path, {}).get(root)
        if stored is not None:
            return _stored(stored)
        producer = owner.local_producer(root)
        if producer is not None and producer[0].op_type == "Constant" and producer[0].domain in _ONNX_DOMAINS:
            return _constant_value(owner, producer[0])
        return None

    def _type(self, tensor: str) -> onnx.TypeProto | None:
        known = self._known(tensor)
        if known is not None:
            return known.type_proto()
        found = self.types.get(tensor)
        if found is not None:
            return found
        owner = self.graph.owner_of(tensor)
        if owner is not None and owner is not self.graph:
            return self.fold.types.get(owner.path, {}).get(tensor)
        return None

    def _infer(self, node: Node) -> dict[str, onnx.TypeProto]:
        """Output types of a node of the default domain, with small constant inputs' values at hand."""
        if node.domain not in _ONNX_DOMAINS or node.subgraphs:
            return {}
        types: dict[str, onnx.TypeProto] = {}
        data: dict[str, onnx.TensorProto] = {}
        for tensor in node.inputs:
            if not tensor or tensor in types:
                continue
            found = self._type(tensor)
            if found is None:
                return {}
            types[tensor] = found
            known = self._known(tensor)
            if known is not None and known.size <= DATA_ELEMENTS:
                try:
                    data[tensor] = known.data(tensor)
                except (ValueError, TypeError):  # malformed: inferred without its value
                    pass
        return self.fold.infer(node, types, data)

    # ------------------------------------------------------------------ folding
    def _foldable(self, node: Node) -> bool:
        return (node.domain in _ONNX_DOMAINS and node.op_type not in NEVER_FOLDED and not node.subgraphs
                and bool(node.inputs) and len(node.outputs) == 1 and bool(node.outputs[0])
                and node.outputs[0] not in self.outputs)

    def _fold(self, node: Node, inferred: dict[str, onnx.TypeProto]) -> _Value | None:
        """``node``'s value when it is computed from constants alone and storing it does not grow the model."""
        if node.op_type == "Shape":
            return self._shape(node)
        inputs = {tensor: self._known(tensor) for tensor in node.inputs if tensor}
        unknown = [tensor for tensor, value in inputs.items() if value is None]
        if node.op_type == "CastLike" and unknown == node.inputs[1:]:
            return self._cast_like(node, inputs[node.inputs[0]])
        if node.op_type in ("Gather", "Slice") and unknown == node.inputs[:1] and unknown[0] in self.shapes:
            return self._picked_dims(node, inputs)
        if unknown:
            return None
        expected = inferred.get(node.outputs[0])
        shape = _static(_dims(expected))
        if expected is None or shape is None:
            return None
        if self._grows(node, inputs, _nbytes(shape, expected.tensor_type.elem_type)):
            return None
        feeds = _read_all(inputs)
        array = None if feeds is None else self.fold.evaluate(node, feeds)
        value = None if array is None else _value_of(array)
        if value is None or value.shape != shape or value.elem_type != expected.tensor_type.elem_type:
            return None
        return value

    def _grows(self, node: Node, inputs: dict[str, _Value | None], nbytes: int) -> bool:
        """True (and ``node`` noted as left) when storing ``nbytes`` would grow the model.

        A value up to :data:`SMALL_BYTES` never counts; a larger one must free as many bytes of the
        constant inputs only this node reads.
        """
        if nbytes <= SMALL_BYTES:
            return False
        freed = {self._root(t): value.nbytes for t, value in inputs.items() if value is not None and self._alone(t)}
        if nbytes <= sum(freed.values()):
            return False
        self.left.append(node.label)
        return True

    def _alone(self, tensor: str) -> bool:
        """True when the node being visited is the last reader of constant ``tensor``, which then goes."""
        root = self._root(tensor)
        if root in self.kept or root in self.needed or self.pending[root] != 1:
            return False
        if root in self.values:
            return root in self.removed
        return root in self.graph.initializers and not self.graph.is_graph_input(root)

    def _shape(self, node: Node) -> _Value | None:
        """``Shape(x)`` when the dims it selects are all numbers; otherwise its dims are noted for Gather/Slice."""
        source = node.inputs[0]
        known = self._known(source)
        dims = known.shape if known is not None else _dims(self._type(source))
        if dims is None:
            return None
        picked = dims[slice(node.attrs.get("start", 0), node.attrs.get("end", len(dims)))]  # clamps as ONNX does
        static = _static(picked)
        if static is None:
            self.shapes[node.outputs[0]] = picked
            return None
        return _value_of(np.array(static, dtype=np.int64))

    def _picked_dims(self, node: Node, inputs: dict[str, _Value | None]) -> _Value | None:
        """``Gather``/``Slice`` of a shape with symbolic dims, when the dims it picks are all numbers.

        The op runs on the positions 0..rank-1 instead of the dims, which tells which dims it picks.
        """
        dims = self.shapes[node.inputs[0]]
        feeds = _read_all(inputs)
        if feeds is None:
            return None
        feeds[node.inputs[0]] = np.arange(len(dims), dtype=np.int64)
        positions = self.fold.evaluate(node, feeds)
        if positions is None:
            return None
        static = _static(tuple(dims[int(p)] for p in positions.reshape(-1)))
        if static is None:
            return None
        return _value_of(np.array(static, dtype=np.int64).reshape(positions.shape))

    def _cast_like(self, node: Node, source: _Value | None) -> _Value | None:
        """``CastLike(c, x)``: ``c`` in ``x``'s element type, known from the declared or inferred types."""
        like = self._type(node.inputs[1])
        if source is None or like is None or like.WhichOneof("value") != "tensor_type" or not like.tensor_type.elem_type:
            return None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(like.tensor_type.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        if dtype.kind not in "biufc":  # strings, and the 8- and 4-bit floats numpy does not have
            return None
        if self._grows(node, {node.inputs[0]: source}, source.size * dtype.itemsize):
            return None
        feeds = _read_all({node.inputs[0]: source})
        return None if feeds is None else _value_of(feeds[node.inputs[0]].astype(dtype))
