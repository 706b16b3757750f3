"""The editable graph: its nodes (:mod:`graphlens.core.node`), tensors, producers and consumers,
nested subgraphs.

The ``onnx`` protobuf stays the source of truth for everything GraphLens does not edit
(attributes, doc strings, metadata), so an unedited model saves byte-for-byte the same.
Indexes over the nodes' inputs and outputs are built once per load.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from itertools import chain
from typing import Any

import numpy as np
import onnx

from graphlens.core import constants
from graphlens.core.names import name_text, names_as_text
from graphlens.core.node import Node
from graphlens.core.tensors import tensor_value
from graphlens.core.types import TensorType, dtype_name, type_of_initializer, type_of_value_info
from graphlens.core.wellformed import check_element_types, check_inputs_defined, check_single_producers

# Ops whose attributes may hold graphs. Nodes in custom domains are checked too.
_CONTROL_FLOW_OPS = frozenset({"If", "Loop", "Scan", "SequenceMap"})
_STANDARD_DOMAINS = frozenset({"", "ai.onnx", "ai.onnx.ml", "ai.onnx.preview.training"})
_GRAPH_ATTR_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


_UNKNOWN = object()


class Graph:
    """A graph (the model's main graph or an If/Loop/Scan body) with its tensor indexes.

    A subgraph knows the node that owns it, and reads tensors of enclosing graphs by name;
    :meth:`producer` and :meth:`constant_value` follow those outer-scope references.
    """

    def __init__(
        self,
        proto: onnx.GraphProto,
        *,
        model: Any = None,
        parent: Node | None = None,
        attr_name: str = "",
        source: str = "",
    ) -> None:
        self.proto = proto
        self.model = model
        self.parent = parent
        self.attr_name = attr_name
        self.name: str = proto.name
        check_element_types(proto, source, f" in {self.path}" if parent is not None else "")
        self.initializers: dict[str, onnx.TensorProto] = {t.name: t for t in proto.initializer}
        declared = [v.name for v in proto.input]
        self.initializers_are_inputs_constant = (
            parent is None and model is not None and 0 < int(model.proto.ir_version) < 4
        )
        """IR < 4 lists every initializer among the graph inputs, and runtimes treat them as constants."""
        if self.initializers_are_inputs_constant:
            declared = [n for n in declared if n not in self.initializers]
        self.inputs: list[str] = declared
        """The graph inputs: for IR < 4 only those a caller must feed; from IR 4 on, every declared one."""
        self.outputs: list[str] = [v.name for v in proto.output]
        self._input_set = frozenset(self.inputs)
        self._inputs_dirty = False
        self.nodes: list[Node] = []
        self.by_name: dict[str, Node] = {}
        self._producer: dict[str, tuple[Node, int]] = {}
        self._consumers: dict[str, list[tuple[Node, int]]] | None = None
        self._declared_types: dict[str, TensorType] | None = None
        self._inferred_types: dict[str, TensorType] = {}
        self._constants_cache = constants.ConstantsCache()
        self._networkx: Any = None
        self._outer_reads: frozenset[str] | None = None
        self._by_op: dict[str, list[str]] | None = None
        self._positions: dict[str, int] | None = None
        self._dirty = False
        self._initializers_dirty = False
        self._value_info_source: list[onnx.ValueInfoProto] | None = None
        self._input_source: list[onnx.ValueInfoProto] | None = None
        self._build_nodes(source)

    # ---------------------------------------------------------------- building
    def _build_nodes(self, source: str) -> None:
        by_name = self.by_name
        producer = self._producer
        initializers, graph_inputs = self.initializers, self._input_set
        nodes = self.nodes
        unnamed: list[tuple[int, Node]] = []
        in_order = True  # every input defined before it is read: nothing undefined, no cycle possible
        not_text = False  # a node name that is not UTF-8 (protobuf gives it as bytes)
        for proto in self.proto.node:
            raw_name = proto.name
            not_text = not_text or raw_name.__class__ is bytes
            node = Node(proto, raw_name, self)
            if in_order:
                for tensor in node.inputs:  # most inputs are produced: that test first
                    if tensor not in producer and tensor not in initializers and tensor and tensor not in graph_inputs:
                        in_order = False
                        break
            name = node.name
            if name and name not in by_name:
                by_name[name] = node
            else:
                unnamed.append((len(nodes), node))
            nodes.append(node)
            outputs = node.outputs
            if len(outputs) == 1:  # most nodes: no enumerate
                if outputs[0]:
                    producer[outputs[0]] = (node, 0)
            else:
                for slot, tensor in enumerate(outputs):
                    if tensor:
                        producer[tensor] = (node, slot)
            if node.op_type in _CONTROL_FLOW_OPS or node.domain not in _STANDARD_DOMAINS:
                self._build_subgraphs(node, source)
        for index, node in unnamed:
            node.name = self._fresh_name(node, index)
            by_name[node.name] = node
        where = f" in {self.path}" if self.parent is not None else ""
        check_single_producers(nodes, len(producer), source, where)
        if not_text or bytes in set(map(type, chain(producer, initializers, graph_inputs, self.outputs))):
            self._read_names_as_text()
        check_inputs_defined(self, source, in_order)

    def _read_names_as_text(self) -> None:
        """Tensor names that are not UTF-8 (protobuf gives them as bytes) as text, so that every index holds
        one kind of key and messages quote them as text (see :mod:`graphlens.core.names`)."""
        for node in self.nodes:
            node.inputs[:] = map(name_text, node.inputs)
            node.outputs[:] = map(name_text, node.outputs)
        self._producer = {name_text(t): found for t, found in self._producer.items()}
        self.initializers = {name_text(t): tensor for t, tensor in self.initializers.items()}
        self.inputs = [name_text(t) for t in self.inputs]
        self._input_set = frozenset(self.inputs)
        self.outputs = [name_text(t) for t in self.outputs]
        names_as_text(self.proto)  # the protos too: rules copy and write them

    def _fresh_name(self, node: Node, index: int) -> str:
        base = f"{node.op_type}_{index}" if not node.name else f"{node.name}_dup"
        name, k = base, 1
        while name in self.by_name:
            name, k = f"{base}_{k}", k + 1
        return name

    def node_from(self, proto: onnx.NodeProto) -> Node:
        """A new node of this graph for ``proto`` (an edit's), its subgraphs indexed as a loaded node's are:
        an If or Loop an edit rebuilds keeps its bodies, and what they read from here stays live."""
        node = Node(proto, proto.name, self)
        if node.op_type in _CONTROL_FLOW_OPS or node.domain not in _STANDARD_DOMAINS:
            self._build_subgraphs(node, self.path)
        return node

    def _build_subgraphs(self, node: Node, source: str) -> None:
        node.subgraphs = {}
        for attr in node.proto.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                node.subgraphs[attr.name] = [
                    Graph(attr.g, model=self.model, parent=node, attr_name=attr.name, source=source)
                ]
            elif attr.type == onnx.AttributeProto.GRAPHS:
                node.subgraphs[attr.name] = [
                    Graph(g, model=self.model, parent=node, attr_name=attr.name, source=source)
                    for g in attr.graphs
                ]

    # ---------------------------------------------------------------- editing
    def set_nodes(self, nodes: list[Node]) -> None:
        """Replace the node list (kept topological by the caller) and rebuild what depends on it."""
        self.nodes = nodes
        self.by_name = {n.name: n for n in nodes}
        producer: dict[str, tuple[Node, int]] = {}
        for node in nodes:
            node.graph = self
            for slot, tensor in enumerate(node.outputs):
                if tensor:
                    producer[tensor] = (node, slot)
        self._producer = producer
        self.changed()

    def set_input(self, node: Node, slot: int, tensor: str) -> None:
        """Point input ``slot`` of ``node`` at ``tensor`` (rerouting); call :meth:`changed` after a batch."""
        node.inputs[slot] = tensor
        node.proto.input[slot] = tensor

    def set_inputs(self, inputs: list[str]) -> None:
        """Replace the graph input list (e.g. when initializers stop being overridable inputs)."""
        self.inputs = list(inputs)
        self._input_set = frozenset(self.inputs)
        self._inputs_dirty = True
        self.changed()

    @property
    def overridable_initializers(self) -> list[str]:
        """Initializers also listed as graph inputs (IR >= 4): defaults a caller may replace at run time."""
        return [n for n in self.inputs if n in self.initializers]

    def set_initializers(self, initializers: dict[str, onnx.TensorProto]) -> None:
        self.initializers = initializers
        self._initializers_dirty = True
        self.changed()

    def changed(self) -> None:
        """Forget everything derived from the graph's contents; mark it (and its parents) for saving."""
        self._consumers = None
        self._networkx = None
        self._by_op = None
        self._positions = None
        self._outer_reads = None
        self._declared_types = None
        self._constants_cache.clear()
        graph: Graph | None = self
        while graph is not None:
            graph._dirty = True
            graph._outer_reads = None
            graph._constants_cache.clear_reasons()  # a subgraph's constness may depend on outer tensors
            graph = graph.parent_graph
        if self.model is not None:
            self.model.content_changed()

    def sync_proto(self) -> None:
        """Write nodes and initializers back into this graph's protobuf (subgraphs first)."""
        for sub in self.subgraphs():
            sub.sync_proto()
        if not self._dirty:
            return
        proto = self.proto
        proto.ClearField("node")
        proto.node.extend(n.proto for n in self.nodes)  # copies; our Node.proto stay the canonical ones
        live_info = self.live_value_info()
        proto.ClearField("value_info")
        proto.value_info.extend(live_info)
        if self._inputs_dirty or (self._initializers_dirty and self.initializers_are_inputs_constant):
            live_inputs = self.live_inputs()
            proto.ClearField("input")
            proto.input.extend(live_inputs)
            self._inputs_dirty = False
        if self._initializers_dirty:
            proto.ClearField("initializer")
            proto.initializer.extend(self.initializers.values())
            self.initializers = {t.name: t for t in proto.initializer}  # the copies are the ones to keep
            self._initializers_dirty = False
        self._dirty = False

    def live_inputs(self) -> list[onnx.ValueInfoProto]:
        """The graph's ``input`` entries as they must be saved.

        Inputs keep their declarations and order. For IR < 4, which requires every initializer to
        be listed as an input, initializers a rewrite removed are dropped and new ones appended.
        """
        if self._input_source is None:  # as loaded, so that undoing every edit restores the very same list
            self._input_source = [onnx.ValueInfoProto.FromString(v.SerializeToString()) for v in self.proto.input]
        declared = {v.name: v for v in self._input_source}
        names = list(self.inputs)
        if self.initializers_are_inputs_constant:
            names = [n for n in declared if n in self._input_set or n in self.initializers]
            names += [n for n in self.initializers if n not in declared]
        out = []
        for name in names:
            found = declared.get(name)
            init = self.initializers.get(name) if self.initializers_are_inputs_constant else None
            if init is not None and (found is None or type_of_value_info(found) != type_of_initializer(init)):
                found = onnx.helper.make_tensor_value_info(name, init.data_type, list(init.dims))  # new, or reused name
            assert found is not None, name  # every name listed is declared or an initializer
            out.append(found)
        return out

    def forget_value_info(self) -> None:
        """Drop the file's value_info (the types it states for inner tensors): for a file whose entries contradict
        shape inference, which the written model's check then recomputes."""
        self._value_info_source = []
        del self.proto.value_info[:]

    def live_value_info(self) -> list[onnx.ValueInfoProto]:
        """The file's value_info entries for tensors that still exist, in their original order."""
        if self._value_info_source is None:
            self._value_info_source = [onnx.ValueInfoProto.FromString(v.SerializeToString())
                                       for v in self.proto.value_info]
        live = set(self._producer) | self._input_set | set(self.initializers)
        return [v for v in self._value_info_source if v.name in live]

    # ----------------------------------------------------------------- scope
    @property
    def parent_graph(self) -> Graph | None:
        return self.parent.graph if self.parent is not None else None

    @property
    def path(self) -> str:
        """Where this graph sits: ``main``, or ``main/If_3:then_branch`` for a branch."""
        if self.parent is None:
            return "main"
        return f"{self.parent.graph.path}/{self.parent.name}:{self.attr_name}"

    @property
    def depth(self) -> int:
        return 0 if self.parent is None else self.parent.graph.depth + 1

    def is_defined(self, tensor: str) -> bool:
        graph: Graph | None = self
        while graph is not None:
            if tensor in graph._producer or tensor in graph.initializers or tensor in graph._input_set:
                return True
            graph = graph.parent_graph
        return False

    def owner_of(self, tensor: str) -> Graph | None:
        """The graph (this one or an enclosing one) where ``tensor`` is defined."""
        if tensor in self._producer or tensor in self.initializers or tensor in self._input_set:
            return self
        graph: Graph | None = self.parent_graph
        while graph is not None:
            if tensor in graph._producer or tensor in graph.initializers or tensor in graph._input_set:
                return graph
            graph = graph.parent_graph
        return None

    # ---------------------------------------------------------------- queries
    def node(self, name: str) -> Node:
        return self.by_name[name]

    def producer(self, tensor: str) -> tuple[Node, int] | None:
        """The node and output slot producing ``tensor`` in this graph or an enclosing one."""
        owner = self.owner_of(tensor)
        return None if owner is None else owner._producer.get(tensor)

    def consumers(self, tensor: str) -> list[tuple[Node, int]]:
        """Nodes of this graph reading ``tensor``, with the input slot; subgraph reads excluded."""
        if self._consumers is None:
            consumers: dict[str, list[tuple[Node, int]]] = {}
            for node in self.nodes:
                for slot, name in enumerate(node.inputs):
                    bucket = consumers.get(name)
                    if bucket is None:
                        consumers[name] = [(node, slot)]
                    else:
                        bucket.append((node, slot))
            consumers.pop("", None)
            self._consumers = consumers
        return self._consumers.get(tensor, [])

    def positions(self) -> dict[str, int]:
        """Node name -> index in the node list (which is topological), built once."""
        if self._positions is None:
            self._positions = {n.name: i for i, n in enumerate(self.nodes)}
        return self._positions

    def nodes_by_op(self) -> dict[str, list[str]]:
        """Op type -> names of the nodes of that type, in graph order (built once)."""
        if self._by_op is None:
            by_op: dict[str, list[str]] = {}
            for node in self.nodes:
                by_op.setdefault(node.op_type, []).append(node.name)
            self._by_op = by_op
        return self._by_op

    def outer_reads(self) -> frozenset[str]:
        """Tensors of this graph that nodes inside its subgraphs read (implicit subgraph inputs)."""
        if self._outer_reads is None:
            self._outer_reads = frozenset(
                t for sub in self.subgraphs() for g in sub.walk() for n in g.nodes for t in n.inputs
                if t and g.owner_of(t) is self
            )
        return self._outer_reads

    def is_graph_input(self, tensor: str) -> bool:
        return tensor in self._input_set

    @property
    def input_names(self) -> frozenset[str]:
        """The graph inputs as a set, for callers testing many tensors."""
        return self._input_set

    @property
    def producers(self) -> Mapping[str, tuple[Node, int]]:
        """Tensor -> (node, output slot) for tensors produced in this graph (not enclosing ones).

        The live index itself, read-only by its type: bulk builds (the networkx view, the matcher)
        look up every node input here, and a copy or a wrapper would cost them.
        """
        return self._producer

    def local_producer(self, tensor: str) -> tuple[Node, int] | None:
        """The node and output slot producing ``tensor`` in this graph only; None for outer tensors."""
        return self._producer.get(tensor)

    @property
    def is_dirty(self) -> bool:
        """True when edits have not yet been written back to the protobuf (see :meth:`sync_proto`)."""
        return self._dirty

    @property
    def constants_cache(self) -> constants.ConstantsCache:
        """This graph's cache of constness and constant values, which :mod:`constants` fills."""
        return self._constants_cache

    def set_inferred_types(self, types: dict[str, TensorType]) -> None:
        """Types shape inference found, used where the file declares none (see :meth:`tensor_type`)."""
        self._inferred_types = types

    def inferred_types(self) -> dict[str, TensorType]:
        """The types :meth:`set_inferred_types` was given (a copy)."""
        return dict(self._inferred_types)

    def is_graph_output(self, tensor: str) -> bool:
        return tensor in self.outputs

    def subgraphs(self) -> Iterator[Graph]:
        """Direct subgraphs of this graph's nodes."""
        for node in self.nodes:
            if node.subgraphs:
                yield from node.all_subgraphs()

    def walk(self) -> Iterator[Graph]:
        """This graph and every graph nested in it, depth first."""
        yield self
        for sub in self.subgraphs():
            yield from sub.walk()

    def known_dtype(self, tensor: str) -> str | None:
        """The element type as far as it is known without running shape inference: declared (value_info,
        inputs, outputs, initializers), a Constant's value, or found by an inference that already ran."""
        found = self._declared(tensor)
        if found is None or found.dtype is None:
            found = self._inferred_types.get(tensor)
        if found is not None and found.dtype is not None:
            return found.dtype
        producer = self._producer.get(tensor)
        if producer is not None and producer[0].op_type == "Constant":
            for attribute in producer[0].proto.attribute:
                if attribute.name == "value" and attribute.type == onnx.AttributeProto.TENSOR:
                    return dtype_name(attribute.t.data_type)
        owner = self.owner_of(tensor)
        if owner is not None and owner is not self:
            return owner.known_dtype(tensor)
        return None

    def _declared(self, tensor: str) -> TensorType | None:
        """The tensor's type as the file states it: an initializer's, else its value_info, input or output entry.
        Initializers are read when asked for (a table of all of them cost 25 ms per 15,000 on opening a model)."""
        init = self.initializers.get(tensor)
        if init is not None:
            return type_of_initializer(init)
        if self._declared_types is None:
            self._declared_types = {vi.name: type_of_value_info(vi)
                                    for vi in (*self.proto.value_info, *self.proto.input, *self.proto.output)}
        return self._declared_types.get(tensor)

    def tensor_type(self, tensor: str) -> TensorType:
        """Declared type, else the one shape inference found, else unknown."""
        found = self._declared(tensor)
        if found is not None and found.dtype is not None and found.shape is not None:
            return found
        if self.model is not None:
            self.model.infer_shapes()
        inferred = self._inferred_types.get(tensor)
        if inferred is not None:
            return inferred
        if found is not None:
            return found
        owner = self.owner_of(tensor)
        if owner is not None and owner is not self:
            return owner.tensor_type(tensor)
        return TensorType()

    def to_networkx(self) -> Any:
        """This graph as a ``networkx.DiGraph`` (see :mod:`graphlens.core.nxview`), built once."""
        if self._networkx is None:
            from graphlens.core.nxview import to_networkx  # networkx only for the commands that use it

            self._networkx = to_networkx(self)
        return self._networkx

    # -------------------------------------------------------------- constants
    def constant_value(self, tensor: str) -> np.ndarray | None:
        """The tensor's value if it is constant (see :mod:`graphlens.core.constants`), else None."""
        found = self.initializers.get(tensor)
        if found is not None and tensor not in self._input_set:
            try:
                return tensor_value(found)
            except (ValueError, TypeError):  # data that does not fit its dims: constants says why
                pass
        return constants.resolve_constant(self, tensor)

    def is_constant(self, tensor: str) -> bool:
        return self.why_not_constant(tensor) is None

    def why_not_constant(self, tensor: str) -> str | None:
        """None when constant, else a phrase saying why, e.g. ``comes from graph input 'x'``."""
        cached = self._constants_cache.reasons.get(tensor, _UNKNOWN)
        if cached is not _UNKNOWN:
            return cached  # type: ignore[return-value]
        return constants.why_not_constant(self, tensor)

    def __repr__(self) -> str:
        return f"<Graph {self.path} with {len(self.nodes)} nodes>"
