"""What a loaded graph must be before anything reads it, each fault refused in one line naming the file and the
tensor or node: element types ONNX defines, one producer per tensor, every tensor read defined, before its reader
when an inner graph reads it from outside, and no cycle.

Later code relies on all of these: a dtype code no table knows fails wherever a value is first decoded, a
second producer silently replaces the first, and a reader of an undefined tensor has nothing to follow.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Protocol

import onnx

from graphlens.core.cycles import node_in_cycle
from graphlens.core.errors import ModelLoadError
from graphlens.core.names import quoted
from graphlens.core.node import Node


class CheckedGraph(Protocol):
    """What these checks read of a :class:`~graphlens.core.graph.Graph`, which calls them while it is built (so
    this module cannot import it)."""

    parent: Node | None
    outputs: list[str]
    nodes: list[Node]
    initializers: dict[str, onnx.TensorProto]

    @property
    def path(self) -> str: ...
    @property
    def parent_graph(self) -> CheckedGraph | None: ...
    @property
    def input_names(self) -> frozenset[str]: ...
    @property
    def producers(self) -> Mapping[str, tuple[Node, int]]: ...
    def is_defined(self, tensor: str) -> bool: ...


KNOWN_ELEMENT_TYPES = frozenset(v for v in onnx.TensorProto.DataType.values() if v != onnx.TensorProto.UNDEFINED)
"""The element types ONNX defines; any other code (a file's 999, or 0 on a tensor that holds data) is refused."""


CONSTANT_OPS = frozenset({"Constant", "ConstantOfShape"})


def check_element_types(proto: onnx.GraphProto, source: str, where: str) -> None:
    """Refuse an initializer, graph input or output, or a Constant's tensor, whose element type ONNX does not define
    (``where``: `` in main/If_3:then_branch`` for an inner graph, else empty)."""
    known = KNOWN_ELEMENT_TYPES
    for tensor in proto.initializer:
        if tensor.data_type not in known:
            raise ModelLoadError(f"{source}: initializer {quoted(tensor.name)}{where} {_undefined(tensor.data_type)}")
    for kind, values in (("graph input", proto.input), ("graph output", proto.output)):
        for value in values:
            elem_type = value.type.tensor_type.elem_type  # 0: not stated, which shape inference may fill in
            if elem_type and elem_type not in known:
                raise ModelLoadError(f"{source}: {kind} {quoted(value.name)}{where} {_undefined(elem_type)}")
    for node in proto.node:
        if node.op_type in CONSTANT_OPS:  # the ops whose values are tensors held in attributes
            for attribute in node.attribute:
                if attribute.type == onnx.AttributeProto.TENSOR and attribute.t.data_type not in known:
                    problem = _undefined(attribute.t.data_type)
                    raise ModelLoadError(f"{source}: node {node.op_type} {quoted(node.name)}{where}: attribute "
                                         f"{quoted(attribute.name)} holds a tensor that {problem}")


def _undefined(code: int) -> str:
    if code == onnx.TensorProto.UNDEFINED:
        return "has element type 0 (UNDEFINED); a tensor holding values must have a type"
    return f"has element type {code}, which ONNX does not define"


def check_single_producers(nodes: Sequence[Node], produced: int, source: str, where: str) -> None:
    """Refuse a tensor written by two nodes (``produced``: how many distinct tensors the nodes write). Counting
    every output is enough to know there is none; only then, or when outputs are left empty, are they walked."""
    if sum(map(len, (node.outputs for node in nodes))) == produced:
        return
    first: dict[str, Node] = {}
    for node in nodes:
        for tensor in node.outputs:
            if not tensor:
                continue
            earlier = first.setdefault(tensor, node)
            if earlier is not node:
                raise ModelLoadError(
                    f"{source}: tensor {quoted(tensor)}{where} is produced twice, by node {earlier.label} and again "
                    f"by node {node.label}; each tensor must have one producer")


def check_inputs_defined(graph: CheckedGraph, source: str, in_order: bool) -> None:
    """Refuse a graph whose node reads a tensor nothing defines, or defines only after it (an inner graph reading
    a tensor its enclosing graph produces later), or whose nodes form a cycle. ``in_order``: the nodes were seen
    to read only what came before them."""
    where = f" in {graph.path}" if graph.parent is not None else ""
    for tensor in graph.outputs:
        if not graph.is_defined(tensor):
            raise ModelLoadError(
                f"{source}: graph output {quoted(tensor)}{where} is not produced by any node, input or initializer")
    if in_order:
        return
    read = {t for node in graph.nodes for t in node.inputs}
    read.discard("")
    unknown = read.difference(graph.producers, graph.initializers, graph.input_names)
    outer = graph.parent_graph
    if outer is not None:
        unknown = {t for t in unknown if not outer.is_defined(t)}
    if unknown:
        node, tensor = next((n, t) for n in graph.nodes for t in n.inputs if t in unknown)
        later = _produced_later(graph, tensor)
        if later is not None:
            holder, producer = later
            raise ModelLoadError(
                f"{source}: node {node.label}{where} reads tensor {quoted(tensor)}, which {producer} produces only "
                f"after {holder}, the node holding this graph; a tensor must be produced before it is read")
        raise ModelLoadError(f"{source}: node {node.label}{where} reads tensor {quoted(tensor)}, "
                             "which no node, graph input or initializer produces")
    looped = node_in_cycle(graph.nodes)
    if looped is not None:
        raise ModelLoadError(
            f"{source}: node {looped.label}{where} is part of a cycle (it depends on its own output)")


def _produced_later(graph: CheckedGraph, tensor: str) -> tuple[str, str] | None:
    """For a tensor an inner graph reads from outside: the node holding the inner graph and, as messages name it,
    the node of an enclosing graph that writes ``tensor`` after it (that graph is still being read)."""
    while graph.parent is not None:
        holder = graph.parent
        outer = holder.graph
        writer = _writer(outer.proto.node, tensor)
        if writer is not None:
            return holder.label, writer
        graph = outer
    return None


def _writer(nodes: Iterable[onnx.NodeProto], tensor: str) -> str | None:
    for node in nodes:
        if tensor in node.output:
            return f"node {node.op_type} {quoted(node.name)}"
    return None
