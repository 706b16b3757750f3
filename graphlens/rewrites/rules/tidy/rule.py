"""tidy (off by default; last in ``--rules transformers``): exact simplifications of what exports and fusions leave.

Once no rule applies any more, one walk per graph, in graph order, sees each node with its inputs
already rerouted and rewrites it when it can prove the shorter form computes the same tensor:

- a node that passes an input through: ``Identity``; ``Transpose`` by the identity perm; ``Cast``
  to the type it has; ``Reshape`` or ``Expand`` to the dims it has; a ``Slice`` of every element;
  ``ScatterND(data, Unsqueeze(Range(0, n, 1), -1), updates)`` writing every row of data (its
  result is ``updates``). Readers read that input instead (proofs: :mod:`.proofs`);
- ``Transpose(Transpose(x, p1), p2)`` is ``Transpose(x, q)`` with ``q[i] = p1[p2[i]]``, and x itself
  when q is the identity; ``Unsqueeze(Unsqueeze(x, a1), a2)`` is one Unsqueeze of x;
- a Slice picking exactly one input ``a`` of ``Concat(..., a, ...)`` is ``a``, and of ``f(Concat(...))``
  for an elementwise f (``Cos``), ``f(a)``;
- common subexpressions: a node with the same domain, op, inputs (small initializers compared by value)
  and attributes as an earlier one is that one; ops with random results, subgraphs or other domains stay;
- a graph output written by ``Identity(t)`` where t's only reader is that Identity: t's producer
  writes the output itself.

Rewrites that merely move work (a composed Transpose whose inner Transpose has other readers) are
undone. Nodes nobody reads any more go. Graph inputs and outputs keep their names: a node writing a
graph output (or a tensor a subgraph reads) stays, and only its readers in the graph are rerouted.
Results are bit for bit the same, except that an elementwise op on a slice may round its last bit
differently where the runtime vectorizes it.

Edits: per graph, one that reroutes readers and removes nodes, and one per rewritten node (a new
node takes the old one's place in the graph order, which keeps it topological). Nodes nothing read
before tidy ran are left to the driver's cleanup, and a graph where tidy would only bypass Identity
nodes is too.
"""

from __future__ import annotations

from collections import Counter
from typing import TypeAlias

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.types import TensorType, tensor_nbytes
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Plan, Refusal, Rule, clone_node, fresh_name
from graphlens.rewrites.rules.tidy.dims import STANDARD_DOMAINS, NodeView
from graphlens.rewrites.rules.tidy.proofs import (
    composed_transpose,
    composed_unsqueeze,
    passes_through,
    sliced_concat_part,
)

CONST_BYTES = 4096
"""Initializers up to this size are compared by value (exporters repeat ``[-1]`` and ``1`` under many names)."""

ATTRIBUTE_BYTES = 1 << 16
"""Nodes whose attributes are larger (a Constant holding a weight) are not compared."""

CSE_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "com.microsoft"})
RANDOM_OPS = frozenset({"Multinomial", "Bernoulli", "Sampling"})
"""Ops with random results, besides the Random* and *Dropout ones."""

CseKey: TypeAlias = tuple[str, str, tuple[object, ...], tuple[bytes, ...], tuple[bool, ...]]
"""What makes two nodes compute the same tensors: domain, op, inputs, serialized attributes, which outputs exist."""

_WHY = {
    "identity": "Identity node{s} bypassed",
    "pass": "node{s} passing a tensor through",
    "transpose": "Transpose pair{s} composed",
    "unsqueeze": "Unsqueeze pair{s} composed",
    "slice": "Slice{s} of a Concat input",
    "duplicate": "duplicate node{s}",
    "output": "graph output{s} written by its producer",
}


class Tidy(Rule):
    name = "tidy"
    description = "exact simplifications: duplicates merged, pass-through nodes and cancelling Transposes removed"
    default = False
    kind = "tidy"

    def plan(self, match: Match) -> Plan | Refusal:  # pragma: no cover - no patterns
        return self.refuse(match, "tidy works on the whole model, not on a match")

    def final_edits(self, model: Model) -> list[GraphEdit]:
        edits: list[GraphEdit] = []
        for graph in model.graphs():
            edits.extend(_GraphTidy(graph).run(self.name, self.kind))
        return edits


class _GraphTidy:
    """One graph's walk: each node seen with its inputs rerouted, rewritten when a proof says so."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        model = graph.model
        self.opset = (model.opset("") if model is not None else None) or 1
        self.alias: dict[str, str] = {}
        self.views: list[NodeView] = []
        self.made: dict[str, NodeView] = {}
        self.seen: dict[CseKey, NodeView] = {}
        self.protected = set(graph.outputs) | set(graph.outer_reads())
        self.counts: Counter[str] = Counter()
        self.taken: set[str] = set()
        self._consts: dict[str, np.ndarray | None] = {}
        self._const_keys: dict[str, object] = {}
        self.unread_count = 0

    # ------------------------------------------------------------------ scope for the proofs
    def producer(self, tensor: str) -> NodeView | None:
        return self.made.get(tensor)

    def tensor_type(self, tensor: str) -> TensorType:
        return self.graph.tensor_type(tensor)

    def small_const(self, tensor: str) -> np.ndarray | None:
        """The value of a small constant (initializer or Constant node, here or in an enclosing graph)."""
        if tensor not in self._consts:
            self._consts[tensor] = self._read_const(tensor)
        return self._consts[tensor]

    def _read_const(self, tensor: str) -> np.ndarray | None:
        owner = self.graph.owner_of(tensor)
        if owner is None or owner.is_graph_input(tensor):
            return None
        init = owner.initializers.get(tensor)
        if init is not None:
            return None if tensor_nbytes(init) > CONST_BYTES else owner.constant_value(tensor)
        found = owner.local_producer(tensor)
        if found is None or found[0].op_type != "Constant" or found[0].domain not in STANDARD_DOMAINS:
            return None
        if any(a.type == onnx.AttributeProto.TENSOR and tensor_nbytes(a.t) > CONST_BYTES
               for a in found[0].proto.attribute):
            return None
        return owner.constant_value(tensor)

    # ------------------------------------------------------------------ the walk
    def run(self, rule: str, kind: str) -> list[GraphEdit]:
        unread = self._unread()
        for index, node in enumerate(self.graph.nodes):
            if index in unread:  # left to the cleanup, neither simplified nor counted
                self.views.append(NodeView(node, [self._resolve(t) for t in node.inputs], node.proto))
            else:
                self._visit(node)
        self.unread_count = len(unread)
        self._undo_moves()
        renamed = self._outputs_written_by_producers()
        if not any(n > 0 for why, n in self.counts.items() if why != "identity"):
            return []  # nothing the cleanup would not do as well
        return self._edits(rule, kind, renamed)

    def _resolve(self, tensor: str) -> str:
        return self.alias.get(tensor, tensor)

    def _visit(self, node: Node) -> None:
        view = NodeView(node, [self._resolve(t) for t in node.inputs], node.proto)
        if not node.subgraphs:
            view = self._simplify(view)
            if not view.passed:
                self._merge_duplicate(view)
        self.views.append(view)
        for tensor in view.outputs:
            if tensor:
                self.made[tensor] = view

    def _simplify(self, view: NodeView) -> NodeView:
        for _ in range(4):
            if view.is_op("Identity") and view.outputs and view.outputs[0] in self.graph.outputs:
                return view  # kept for the graph output; its producer may write that output instead
            source = passes_through(self, view)
            if source is not None:
                self._pass(view, source, "identity" if view.is_op("Identity") else "pass")
                return view
            rewritten = self._shorter(view)
            if rewritten is None or rewritten.passed:
                return rewritten or view
            view = rewritten
        return view

    def _pass(self, view: NodeView, source: str, why: str) -> None:
        self.alias[view.outputs[0]] = source
        view.passed = True
        self.counts[why] += 1

    def _shorter(self, view: NodeView) -> NodeView | None:
        """``view`` rewritten into a shorter form (or passed through, returned as it is); None when none applies."""
        composed = composed_transpose(self, view)
        if composed is not None:
            source, perm = composed
            if perm == list(range(len(perm))):
                self._pass(view, source, "transpose")
                return view
            return self._rewrite(view, clone_node(view_node(view), inputs=[source], outputs=view.outputs,
                                                  set_attrs={"perm": perm}), "transpose")
        unsqueezed = composed_unsqueeze(self, view)
        if unsqueezed is not None:
            return self._unsqueeze(view, *unsqueezed)
        picked = sliced_concat_part(self, view)
        if picked is not None:
            unary, part = picked
            if unary is None:
                self._pass(view, part, "slice")
                return view
            proto = clone_node(view_node(unary), inputs=[part], outputs=view.outputs, name=view.node.name)
            return self._rewrite(view, proto, "slice")
        return None

    def _unsqueeze(self, view: NodeView, source: str, axes: list[int]) -> NodeView:
        if self.opset >= 13:
            name = fresh_name(self.graph, f"{view.outputs[0]}_axes", self.taken)
            proto = clone_node(view_node(view), inputs=[source, name], outputs=view.outputs)
            rewritten = self._rewrite(view, proto, "unsqueeze")
            rewritten.initializers[name] = numpy_helper.from_array(np.array(axes, dtype=np.int64), name)
            return rewritten
        proto = clone_node(view_node(view), inputs=[source], outputs=view.outputs, set_attrs={"axes": axes})
        return self._rewrite(view, proto, "unsqueeze")

    def _rewrite(self, view: NodeView, proto: onnx.NodeProto, why: str) -> NodeView:
        inner = view.inputs[0] if not view.why else view.inner
        self.counts[why] += 1
        return NodeView(view.node, list(proto.input), proto, why=why, inner=inner)

    # ------------------------------------------------------------------ duplicates
    def _merge_duplicate(self, view: NodeView) -> None:
        key = self._key(view)
        if key is None:
            return
        first = self.seen.get(key)
        if first is None:
            self.seen[key] = view
            return
        for mine, theirs in zip(view.outputs, first.outputs):
            if mine:
                self.alias[mine] = theirs
        view.passed = True
        self.counts["duplicate"] += 1

    def _key(self, view: NodeView) -> CseKey | None:
        """What makes two nodes compute the same tensors; None for nodes never merged."""
        if view.domain not in CSE_DOMAINS or not view.outputs or not any(view.outputs):
            return None
        op = view.op_type
        if op in RANDOM_OPS or "Random" in op or "Dropout" in op:
            return None
        attributes = []
        size = 0
        for attr in sorted(view.proto.attribute, key=lambda a: a.name):
            if attr.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                return None
            size += attr.ByteSize()
            if size > ATTRIBUTE_BYTES:
                return None
            attributes.append(attr.SerializeToString())
        inputs = tuple(self._input_key(t) for t in view.inputs)
        return view.domain, op, inputs, tuple(attributes), tuple(bool(o) for o in view.outputs)

    def _input_key(self, tensor: str) -> object:
        """A small initializer stands for its value, so that ``[-1]`` under two names is one input."""
        if tensor not in self._const_keys:
            key: object = tensor
            init = self.graph.initializers.get(tensor)
            if init is not None and not self.graph.is_graph_input(tensor) and tensor_nbytes(init) <= CONST_BYTES:
                value = self.small_const(tensor)
                if value is not None:
                    key = ("value", init.data_type, value.shape, value.tobytes())
            self._const_keys[tensor] = key
        return self._const_keys[tensor]

    def _unread(self) -> set[int]:
        """Nodes of the file whose outputs nothing reads, even through other nodes."""
        reads: Counter[str] = Counter({t: 1 for t in self.protected})
        unread: set[int] = set()
        for index in range(len(self.graph.nodes) - 1, -1, -1):
            node = self.graph.nodes[index]
            if any(reads[o] > 0 for o in node.outputs if o):
                reads.update(t for t in node.inputs if t)
            else:
                unread.add(index)
        return unread

    # ------------------------------------------------------------------ afterwards
    def _reads(self) -> tuple[set[int], Counter[str]]:
        """Which views are still read (by index), and how often each tensor is read."""
        reads: Counter[str] = Counter({t: 1 for t in self.protected})
        live: set[int] = set()
        for index in range(len(self.views) - 1, -1, -1):
            view = self.views[index]
            if any(reads[o] > 0 for o in view.outputs if o):
                live.add(index)
                reads.update(t for t in view.inputs if t)
        return live, reads

    def _undo_moves(self) -> None:
        """A rewrite whose inner node stays read (by others) saves nothing: the node goes back to the file's form."""
        live, _ = self._reads()
        position = {id(view): index for index, view in enumerate(self.views)}
        for index in sorted(live):
            view = self.views[index]
            if not view.why or not view.inner:
                continue
            inner = self.made.get(view.inner)
            inner_read = view.inner in self.protected or (inner is not None and position[id(inner)] in live)
            if inner_read:
                self.counts[view.why] -= 1
                original = NodeView(view.node, [self._resolve(t) for t in view.node.inputs], view.node.proto)
                self.views[index] = original
                self.made.update({t: original for t in original.outputs if t})

    def _outputs_written_by_producers(self) -> dict[int, tuple[int, onnx.NodeProto]]:
        """Identity index -> (producer index, producer writing the graph output itself), where that is exact."""
        live, reads = self._reads()
        position = {id(view): index for index, view in enumerate(self.views)}
        out: dict[int, tuple[int, onnx.NodeProto]] = {}
        for index in sorted(live):
            view = self.views[index]
            if not view.is_op("Identity") or len(view.inputs) != 1 or view.outputs[0] not in self.graph.outputs:
                continue
            source = view.inputs[0]
            producer = self.made.get(source)
            if producer is None or source in self.protected or reads[source] != 1 or producer.node.subgraphs:
                continue
            at = position[id(producer)]
            if at not in live or at in out or any(
                    o and o != source and (reads[o] > 0) for o in producer.outputs):
                continue
            outputs = [view.outputs[0] if o == source else "" for o in producer.outputs]
            proto = clone_node(view_node(producer), inputs=list(producer.inputs), outputs=outputs)
            out[index] = (at, proto)
            self.counts["output"] += 1
        return out

    def _edits(self, rule: str, kind: str, renamed: dict[int, tuple[int, onnx.NodeProto]]) -> list[GraphEdit]:
        live, _ = self._reads()
        path = self.graph.path
        in_rename = {at for at, _ in renamed.values()} | set(renamed)
        removed = [view.node.name for index, view in enumerate(self.views) if index not in live]
        reroute = [
            (view.node.name, slot, tensor)
            for index, view in enumerate(self.views) if index in live and index not in in_rename and not view.rewritten
            for slot, tensor in enumerate(view.inputs) if tensor != view.node.inputs[slot]
        ]
        edits: list[GraphEdit] = []
        if removed or reroute:
            edits.append(GraphEdit(path, rule, "", remove=removed, reroute=reroute))
        for index, view in enumerate(self.views):
            if index in live and index not in in_rename and view.rewritten:
                edits.append(GraphEdit(path, rule, f"rewrite {view.node.label}", remove=[view.node.name],
                                       add=[view.proto], initializers=dict(view.initializers)))
        for index, (at, proto) in renamed.items():
            producer, identity = self.views[at], self.views[index]
            edits.append(GraphEdit(path, rule, f"{producer.node.label} writes graph output '{identity.outputs[0]}'",
                                   remove=[producer.node.name, identity.node.name], add=[proto],
                                   initializers=dict(producer.initializers)))
        if not edits:
            return []
        summary = self._summary(len(removed) - self.unread_count)
        edits[0].description = summary if not edits[0].description else f"{summary}; {edits[0].description}"
        edits[0].kind = kind
        return edits

    def _summary(self, removed: int) -> str:
        parts = [f"{n} {_WHY[why].format(s='' if n == 1 else 's')}" for why, n in self.counts.items() if n > 0]
        where = "" if self.graph.parent is None else f" in {self.graph.path}"
        return f"{', '.join(parts) or 'nothing simplified'}; {removed} node{'' if removed == 1 else 's'} removed{where}"


def view_node(view: NodeView) -> Node:
    """The view as a node :func:`clone_node` can copy (its rewritten protobuf when it has one)."""
    if not view.rewritten:
        return view.node
    return Node(view.proto, view.proto.name or view.node.name, view.node.graph)


__all__ = ["Tidy"]
