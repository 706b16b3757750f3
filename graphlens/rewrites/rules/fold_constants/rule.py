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

import contextlib
from collections import Counter

import numpy as np
import onnx
from onnx import helper

from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.types import Dim
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit, without_orphans
from graphlens.rewrites.rule import Refusal, Rule, passes_through
from graphlens.rewrites.rules.fold_constants.evaluation import (
    ModelFold,
    Value,
    constant_node_value,
    dims_of,
    nbytes_of,
    read_all,
    static_dims,
    stored_value,
    value_of,
)

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


class FoldConstants(Rule):
    name = "fold-constants"
    description = "store Constant nodes and nodes computed from constants alone as initializers"
    default = False
    kind = "constants"

    def plan(self, match: Match) -> Refusal:  # pragma: no cover - no patterns
        return self.refuse(match, "fold-constants works on the whole model, not on a match")

    def model_edits(self, model: Model) -> list[GraphEdit]:
        fold = ModelFold(model)
        edits = []
        for graph in model.graphs():  # enclosing graphs first: their stored values are read by their bodies
            edit = _GraphFold(graph, fold).run(self.name, self.kind)
            if edit is not None:
                edits.append(edit)
        return edits




def _counted(count: int, noun: str) -> str:
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


class _GraphFold:
    """One graph's fold: nodes visited in graph order, values kept only while a reader is still to come.

    Identity nodes, and Casts to the type their input already has, are seen through (the driver's
    cleanup bypasses them): a tensor and the outputs copying it share one *root*, under which its
    readers are counted and its value kept.
    """

    def __init__(self, graph: Graph, fold: ModelFold) -> None:
        self.graph = graph
        self.fold = fold
        self.types = fold.types.setdefault(graph.path, {})
        self.stored = fold.stored.setdefault(graph.path, {})
        self.values: dict[str, Value] = {}  # constants of this graph a node still to visit reads, by root
        self.removed: set[str] = set()  # outputs of the nodes folded away: the only tensors that may be stored
        self.shapes: dict[str, tuple[Dim, ...]] = {}  # Shape outputs with symbolic dims, for Gather/Slice of them
        self.folded: list[str] = []
        self.constants = 0
        self.left: list[str] = []  # nodes whose value would grow the model
        self.root: dict[str, str] = {}
        self.through: set[str] = set()  # nodes whose output is their input (see passes_through)
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
            if passes_through(node, self.graph):
                self.through.add(node.name)
                self.root[node.outputs[0]] = self._root(node.inputs[0])
        for node in self.graph.nodes:
            if node.name not in self.through:
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
        bypassed, reroute = self._bypass()
        if not self.folded and not bypassed:
            return None
        text = (f"{_counted(self.constants, 'Constant node')} and "
                f"{_counted(len(self.folded) - self.constants, 'node')} computed from constants "
                f"stored as {_counted(len(self.stored), 'initializer')}")
        if bypassed:
            text += f"; read through {_counted(len(bypassed), 'Identity or same-type Cast')}"
        if self.left:
            more = "…" if len(self.left) > 3 else ""
            text += (f"; {_counted(len(self.left), 'node')} left whose value would grow the model "
                     f"({', '.join(self.left[:3])}{more})")
        edit = GraphEdit(self.graph.path, rule, text, remove=[*self.folded, *bypassed], initializers=self.stored,
                         reroute=reroute, kind=kind)
        return without_orphans(self.graph, edit)

    def _bypass(self) -> tuple[list[str], list[tuple[str, int, str]]]:
        """Identity nodes and same-type Casts whose readers can read their input: those readers, rerouted.

        Done here rather than left to the cleanup: dynamo's ``CastLike(constant, x)`` reads x only for its
        type, and until it goes x looks read outside every pattern match.
        """
        keep = set(self.graph.outputs) | self.graph.outer_reads()
        gone = set(self.folded)
        bypassed = [n.name for n in self.graph.nodes if n.name in self.through and n.outputs[0] not in keep]
        gone.update(bypassed)
        reroute = [
            (reader.name, slot, self._root(node_out))
            for name in bypassed
            for node_out in self.graph.by_name[name].outputs
            for reader, slot in self.graph.consumers(node_out)
            if reader.name not in gone
        ]
        return bypassed, reroute

    def _visit(self, node: Node) -> None:
        if node.name in self.through:
            found = self._type(node.inputs[0])
            if found is not None:
                self.types[node.outputs[0]] = found
            return
        out = node.outputs[0] if len(node.outputs) == 1 else ""
        inferred: dict[str, onnx.TypeProto] = {}
        if node.op_type == "Constant" and node.domain in _ONNX_DOMAINS and out:
            value = constant_node_value(self.graph, node)
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

    def _produced(self, node: Node, value: Value, removable: bool) -> None:
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

    def _store(self, tensor: str, value: Value) -> None:
        if tensor in self.removed and tensor not in self.stored:
            self.stored[tensor] = value.tensor(tensor)

    # ------------------------------------------------------------------ knowledge
    def _known(self, tensor: str) -> Value | None:
        """The constant ``tensor`` is, from this graph or an enclosing one; None when it is not one."""
        root = self._root(tensor)
        found = self.values.get(root)
        if found is not None:
            return found
        owner = self.graph.owner_of(root)
        if owner is None:
            return None
        if root in owner.initializers:
            return None if owner.is_graph_input(root) else stored_value(owner.initializers[root])
        if owner is self.graph:
            return None
        stored = self.fold.stored.get(owner.path, {}).get(root)
        if stored is not None:
            return stored_value(stored)
        producer = owner.local_producer(root)
        if producer is not None and producer[0].op_type == "Constant" and producer[0].domain in _ONNX_DOMAINS:
            return constant_node_value(owner, producer[0])
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
                with contextlib.suppress(ValueError, TypeError):  # malformed: inferred without its value
                    data[tensor] = known.data(tensor)
        return self.fold.infer(node, types, data)

    # ------------------------------------------------------------------ folding
    def _foldable(self, node: Node) -> bool:
        return (node.domain in _ONNX_DOMAINS and node.op_type not in NEVER_FOLDED and not node.subgraphs
                and bool(node.inputs) and len(node.outputs) == 1 and bool(node.outputs[0])
                and node.outputs[0] not in self.outputs)

    def _fold(self, node: Node, inferred: dict[str, onnx.TypeProto]) -> Value | None:
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
        shape = static_dims(dims_of(expected))
        if expected is None or shape is None:
            return None
        if self._grows(node, inputs, nbytes_of(shape, expected.tensor_type.elem_type)):
            return None
        feeds = read_all(inputs)
        array = None if feeds is None else self.fold.evaluate(node, feeds)
        value = None if array is None else value_of(array)
        if value is None or value.shape != shape or value.elem_type != expected.tensor_type.elem_type:
            return None
        return value

    def _grows(self, node: Node, inputs: dict[str, Value | None], nbytes: int) -> bool:
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

    def _shape(self, node: Node) -> Value | None:
        """``Shape(x)`` when the dims it selects are all numbers; otherwise its dims are noted for Gather/Slice."""
        source = node.inputs[0]
        known = self._known(source)
        dims = known.shape if known is not None else dims_of(self._type(source))
        if dims is None:
            return None
        picked = dims[slice(node.attrs.get("start", 0), node.attrs.get("end", len(dims)))]  # clamps as ONNX does
        static = static_dims(picked)
        if static is None:
            self.shapes[node.outputs[0]] = picked
            return None
        return value_of(np.array(static, dtype=np.int64))

    def _picked_dims(self, node: Node, inputs: dict[str, Value | None]) -> Value | None:
        """``Gather``/``Slice`` of a shape with symbolic dims, when the dims it picks are all numbers.

        The op runs on the positions 0..rank-1 instead of the dims, which tells which dims it picks.
        """
        dims = self.shapes[node.inputs[0]]
        feeds = read_all(inputs)
        if feeds is None:
            return None
        feeds[node.inputs[0]] = np.arange(len(dims), dtype=np.int64)
        positions = self.fold.evaluate(node, feeds)
        if positions is None:
            return None
        static = static_dims(tuple(dims[int(p)] for p in positions.reshape(-1)))
        if static is None:
            return None
        return value_of(np.array(static, dtype=np.int64).reshape(positions.shape))

    def _cast_like(self, node: Node, source: Value | None) -> Value | None:
        """``CastLike(c, x)``: ``c`` in ``x``'s element type, known from the declared or inferred types."""
        like = self._type(node.inputs[1])
        if (source is None or like is None or like.WhichOneof("value") != "tensor_type"
                or not like.tensor_type.elem_type):
            return None
        try:
            dtype = np.dtype(helper.tensor_dtype_to_np_dtype(like.tensor_type.elem_type))
        except (KeyError, TypeError, ValueError):
            return None
        if dtype.kind not in "biufc":  # strings, and the 8- and 4-bit floats numpy does not have
            return None
        if self._grows(node, {node.inputs[0]: source}, source.size * dtype.itemsize):
            return None
        feeds = read_all({node.inputs[0]: source})
        return None if feeds is None else value_of(feeds[node.inputs[0]].astype(dtype))
