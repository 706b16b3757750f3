"""An attribute's stored type checked against the one its operator's schema declares, when it is first read.

A file may store ``epsilon`` as a list of ints, a string or a tensor, or a Softmax ``axis`` as a string; ONNX's
schema for the op says which type each attribute has (``onnx.defs.get_schema(op).attributes[name].type``).
Every attribute a view, a pattern or a rule reads is decoded once, by :class:`~graphlens.core.node.AttributeMap`,
which asks :func:`attribute_type_problem` first: a mismatch is one :class:`AttributeTypeError` naming the node,
the attribute, what it holds and what its operator expects, instead of a ``float()`` failing deep in a rule.
Ops without a schema (custom domains) and attributes their schema does not list are read as stored.
"""

from __future__ import annotations

from functools import lru_cache
from typing import cast

import onnx
import onnx.defs

from graphlens.core.errors import MalformedValueError

_KINDS: dict[int, str] = {
    onnx.AttributeProto.FLOAT: "a float", onnx.AttributeProto.INT: "an int", onnx.AttributeProto.STRING: "a string",
    onnx.AttributeProto.TENSOR: "a tensor", onnx.AttributeProto.GRAPH: "a graph",
    onnx.AttributeProto.SPARSE_TENSOR: "a sparse tensor", onnx.AttributeProto.TYPE_PROTO: "a type",
    onnx.AttributeProto.FLOATS: "a list of floats", onnx.AttributeProto.INTS: "a list of ints",
    onnx.AttributeProto.STRINGS: "a list of strings", onnx.AttributeProto.TENSORS: "a list of tensors",
    onnx.AttributeProto.GRAPHS: "a list of graphs", onnx.AttributeProto.SPARSE_TENSORS: "a list of sparse tensors",
    onnx.AttributeProto.TYPE_PROTOS: "a list of types",
}


class AttributeTypeError(MalformedValueError):
    """An attribute stored as another type than its operator declares, or a tensor attribute that cannot be read."""


def kind_of(attribute_type: int) -> str:
    """``a list of ints (INTS)``: an attribute type as messages name it."""
    try:
        name = onnx.AttributeProto.AttributeType.Name(attribute_type)
    except ValueError:
        return f"of unknown type {attribute_type}"
    return f"{_KINDS.get(attribute_type, 'undefined')} ({name})"


@lru_cache(maxsize=4096)
def declared_types(op_type: str, domain: str, opset: int | None) -> dict[str, int] | None:
    """Attribute name -> the type ``op_type``'s schema declares at ``opset`` (None: the newest); None when ONNX
    knows no such op."""
    try:
        schema = (onnx.defs.get_schema(op_type, opset, domain) if opset is not None
                  else onnx.defs.get_schema(op_type, domain))
    except onnx.defs.SchemaError:
        return None
    return {name: int(cast(int, attribute.type)) for name, attribute in schema.attributes.items()}  # an IntEnum


def attribute_type_problem(op_type: str, domain: str, opset: int | None, attribute: onnx.AttributeProto) -> str | None:
    """What is wrong with the type ``attribute`` is stored as, for a node of ``op_type``: ``attribute 'epsilon'
    is a list of ints (INTS), where BatchNormalization takes a float (FLOAT)``; None when it fits or nothing
    declares it."""
    declared = declared_types(op_type, "" if domain == "ai.onnx" else domain, opset)
    expected = None if declared is None else declared.get(attribute.name)
    if expected is None or expected == attribute.type:
        return None
    return f"attribute '{attribute.name}' is {kind_of(attribute.type)}, where {op_type} takes {kind_of(expected)}"
