"""A node of the editable graph, and its attributes decoded on demand.

Node inputs and outputs are mirrored into Python lists because they are what matching and
rewriting read and change; everything else stays in the node's protobuf.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import onnx

from graphlens.core.attributes import AttributeTypeError, attribute_type_problem
from graphlens.core.errors import GraphLensError
from graphlens.core.names import name_text
from graphlens.core.tensors import tensor_value


class AttributeMap(Mapping[str, Any]):
    """A node's attributes as Python values, each decoded on first access.

    Decoding every attribute of a 100,000-node model up front costs more than loading it,
    and most views and patterns only ever read a few. Each is checked against the type its operator
    declares when first read (:mod:`graphlens.core.attributes`); ``owner``, the node, names the file and
    the opset in what is said of one that does not fit.
    """

    __slots__ = ("_proto", "_owner", "_index", "_values")

    def __init__(self, proto: onnx.NodeProto, owner: Node | None = None) -> None:
        self._proto = proto
        self._owner = owner
        self._index: dict[str, onnx.AttributeProto] | None = None
        self._values: dict[str, Any] | None = None  # made on first read: most nodes' attributes are never read

    def _protos(self) -> dict[str, onnx.AttributeProto]:
        if self._index is None:
            self._index = {a.name: a for a in self._proto.attribute}
        return self._index

    def __contains__(self, key: object) -> bool:
        return key in self._protos()

    def __getitem__(self, key: str) -> Any:
        values = self._values
        if values is None:
            values = self._values = {}
        if key not in values:
            values[key] = self._decoded(self._protos()[key])
        return values[key]

    def _decoded(self, attr: onnx.AttributeProto) -> Any:
        proto, owner = self._proto, self._owner
        graph = owner.graph if owner is not None else None
        model = getattr(graph, "model", None)
        opset = model.opset(proto.domain) if model is not None else None
        problem = attribute_type_problem(proto.op_type, proto.domain, opset, attr)
        try:
            if problem is None:
                return _attribute_value(attr)
        except GraphLensError as exc:  # a tensor whose data does not fit its dims
            problem = f"attribute '{attr.name}': {exc}"
        path = getattr(model, "path", None)
        label = owner.label if owner is not None else f"{proto.op_type} '{name_text(proto.name)}'"
        where = f" in {graph.path}" if graph is not None and graph.parent is not None else ""
        raise AttributeTypeError(f"{f'{path}: ' if path is not None else ''}node {label}{where}: {problem}")

    def get(self, key: str, default: Any = None) -> Any:
        return self[key] if key in self._protos() else default

    def __iter__(self) -> Iterator[str]:
        return iter(self._protos())

    def __len__(self) -> int:
        return len(self._protos())

    def __repr__(self) -> str:
        return f"AttributeMap({dict(self)!r})"


def _attribute_value(attr: onnx.AttributeProto) -> Any:
    value = onnx.helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    if attr.type == onnx.AttributeProto.TENSOR:
        return tensor_value(value)
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8", errors="replace") for v in value]
    return value


_NO_SUBGRAPHS: dict[str, list[Any]] = {}  # shared by the many nodes without any; never mutated


class Node:
    """One operator application. ``name`` is unique within its graph (generated if the file has none)."""

    __slots__ = ("proto", "name", "op_type", "domain", "inputs", "outputs", "graph", "_attrs", "subgraphs")

    def __init__(self, proto: onnx.NodeProto, name: str | bytes, graph: Any) -> None:
        self.proto = proto
        self.name = name if isinstance(name, str) else name_text(name)  # bytes: a name that is not UTF-8
        self.op_type: str = proto.op_type
        self.domain: str = proto.domain
        self.inputs: list[str] = proto.input[:]  # a slice of a repeated field is a new list, made faster than list()
        self.outputs: list[str] = proto.output[:]
        self.graph = graph
        self._attrs: AttributeMap | None = None
        self.subgraphs: dict[str, list[Any]] = _NO_SUBGRAPHS
        """Attribute name -> the :class:`~graphlens.core.graph.Graph` bodies it holds (If/Loop/Scan)."""

    @property
    def attrs(self) -> AttributeMap:
        if self._attrs is None:
            self._attrs = AttributeMap(self.proto, self)
        return self._attrs

    def __repr__(self) -> str:
        return f"<{self.op_type} {self.name!r}>"

    @property
    def label(self) -> str:
        """How messages name the node: ``Conv '/stem/conv'``."""
        return f"{self.op_type} '{self.name}'"

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def all_subgraphs(self) -> Iterator[Any]:
        for graphs in self.subgraphs.values():
            yield from graphs
