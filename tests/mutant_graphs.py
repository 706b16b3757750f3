"""The pieces mutations are made of: a mutant before it is written (:class:`Draft`), and walks over a model's
graphs, nodes and constant tensors, subgraphs included (see tests/mutations.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, NodeProto, TensorProto, numpy_helper

NON_UTF8_MARKER = "~NON-UTF8~"
NON_UTF8_BYTES = b"\xf3(\xa0\xfe\xffname!"  # as long as the marker, so protobuf's length prefixes stay right
HOSTILE_NAME_PARTS = ["\u202eevil\u202c", "\x1b[31mred\x1b[0m", "two\nlines", "\u200f\u2066rtl\u2069", "tab\there"]


@dataclass
class Draft:
    """A mutant before it is written: the model, files beside it (relative to its folder; ``../`` reaches
    out of it) and what the file is (``file``, or ``directory``, ``dev-zero``, ``fifo`` in its place)."""

    model: onnx.ModelProto
    files: dict[str, bytes] = field(default_factory=dict)
    truncate: float | None = None
    kind: str = "file"


Mutation = Callable[[Draft, random.Random], "str | None"]


# ---------------------------------------------------------------------------------------- walking a model
def graphs(model: onnx.ModelProto) -> list[GraphProto]:
    """The main graph and every subgraph (If branches, Loop and Scan bodies), outermost first."""
    found, pending = [], [model.graph]
    while pending:
        graph = pending.pop(0)
        found.append(graph)
        pending += [sub for node in graph.node for sub in subgraphs(node)]
    return found


def subgraphs(node: NodeProto) -> list[GraphProto]:
    return [a.g for a in node.attribute if a.type == AttributeProto.GRAPH] + \
        [g for a in node.attribute if a.type == AttributeProto.GRAPHS for g in a.graphs]


def nodes(model: onnx.ModelProto, *ops: str) -> list[tuple[GraphProto, NodeProto]]:
    return [(g, n) for g in graphs(model) for n in g.node if not ops or n.op_type in ops]


def constant_tensors(model: onnx.ModelProto) -> list[tuple[str, str, TensorProto]]:
    """(label, tensor name, tensor) of every initializer and every Constant/ConstantOfShape value."""
    found = []
    for graph in graphs(model):
        found += [(f"initializer '{t.name}'", t.name, t) for t in graph.initializer]
        for node in graph.node:
            for a in node.attribute:
                if node.op_type in ("Constant", "ConstantOfShape") and a.type == AttributeProto.TENSOR:
                    found.append((f"{node_label(node)} value", node.output[0], a.t))
    return found


def node_label(node: NodeProto) -> str:
    """``Conv 'name'``, or for an unnamed node (paddle's Constants) ``Constant -> 'output'``."""
    if node.name or not node.output:
        return f"{node.op_type} '{node.name}'"
    return f"{node.op_type} -> '{node.output[0]}'"


def real_inputs(model: onnx.ModelProto) -> list[onnx.ValueInfoProto]:
    """Graph inputs that are not initializers (IR 3 files list their weights as inputs too)."""
    weights = {t.name for t in model.graph.initializer}
    return [v for v in model.graph.input if v.name not in weights]


def replace_tensor(tensor: TensorProto, array: np.ndarray) -> None:
    """``tensor`` holds ``array`` instead, under its own name."""
    tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))


def as_array(tensor: TensorProto) -> np.ndarray:
    return np.asarray(numpy_helper.to_array(tensor))


def constant_sources(model: onnx.ModelProto) -> dict[str, tuple[str, TensorProto]]:
    """Tensor name -> (label, the constant tensor behind it): an initializer or a Constant's value, or for a
    ConstantOfShape's output its shape."""
    tensors = {tensor_name: (label, t) for label, tensor_name, t in constant_tensors(model)}
    for _graph, node in nodes(model, "ConstantOfShape"):
        if node.input and node.input[0] in tensors:
            tensors[node.output[0]] = tensors[node.input[0]]
    return tensors


def rename_tensor(graph: GraphProto, old: str, new: str) -> None:
    """Every use of tensor ``old`` in ``graph`` (and the subgraphs that read it from outside) becomes ``new``."""
    for node in graph.node:
        node.input[:] = [new if x == old else x for x in node.input]
        node.output[:] = [new if x == old else x for x in node.output]
        for sub in subgraphs(node):
            rename_tensor(sub, old, new)
    for value in [*graph.output, *graph.value_info]:
        if value.name == old:
            value.name = new

