"""A rewrite rule: a pattern, a check, and a plan (a :class:`GraphEdit`).

Like the onnxscript rewriter's rules, each is a short class; its math lives in its module's
docstring (or in :mod:`bn_math`). ``check`` returns None when the match can be rewritten and one
sentence when it cannot, naming the node and the reason, so refusals read like explain's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.constants import input_refusal
from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph, Node
from graphlens.matching.matcher import Match
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import get_pattern
from graphlens.patterns.syntax import parse_pattern
from graphlens.rewrites.edit import GraphEdit

FLOAT_TYPES = (np.float16, np.float32, np.float64)


class Rule:
    """Base class: subclasses set ``name``, ``description``, ``pattern_names`` and implement ``check``/``plan``."""

    name: str = ""
    description: str = ""
    pattern_names: tuple[str, ...] = ()
    pattern_texts: tuple[str, ...] = ()
    """Patterns private to the rule (text), for sites the public library does not name."""
    default: bool = True

    def patterns(self) -> list[Pattern]:
        return [get_pattern(n) for n in self.pattern_names] + [
            parse_pattern(t, name=f"{self.name}:{i}") for i, t in enumerate(self.pattern_texts)
        ]

    def check(self, match: Match) -> str | None:  # pragma: no cover - interface
        raise NotImplementedError

    def model_edits(self, model: Any) -> list[GraphEdit]:
        """Edits a rule makes to the model as a whole, before any matching (most rules make none)."""
        return []

    def plan(self, match: Match) -> GraphEdit:
        """The edit for ``match``; a match the rule refuses raises :class:`GraphLensError` with the reason."""
        result = self.try_plan(match)
        if isinstance(result, str):
            raise GraphLensError(result)
        return result

    def try_plan(self, match: Match) -> GraphEdit | str:
        """The plan, or the reason there is none.

        Rules override either this (those that read weights, to read them once for both answers)
        or :meth:`plan` together with :meth:`check`.
        """
        reason = self.check(match)
        return reason if reason is not None else self.plan(match)


# ------------------------------------------------------------------------------- helpers
class Site:
    """Convenient access to a match's nodes and constant values."""

    def __init__(self, match: Match) -> None:
        self.match = match
        self.graph: Graph = match.graph

    def node(self, label: str) -> Node | None:
        name = self.match.nodes.get(label)
        return None if name is None else self.graph.by_name[name]

    def tensor(self, label: str) -> str | None:
        return self.match.values.get(label)

    def const(self, label: str) -> np.ndarray | None:
        tensor = self.tensor(label)
        return None if tensor is None else self.graph.constant_value(tensor)

    def missing(self, node: Node | None, labels: tuple[str, ...]) -> str | None:
        """Why one of these constant inputs has no value (e.g. too large to evaluate), or None.

        The sentence names the input of ``node`` (by default, of the match's first node reading it).
        """
        for label in labels:
            tensor = self.tensor(label)
            if tensor is None or self.const(label) is not None:
                continue
            readers = [node] if node is not None else [self.graph.by_name[n] for n in self.match.nodes.values()]
            reader = next((r for r in readers if tensor in r.inputs), None)
            if reader is not None:
                return input_refusal(self.graph, reader, reader.inputs.index(tensor), label)
        return None

    def rank_of(self, tensor: str) -> int | None:
        shape = self.graph.tensor_type(tensor).shape
        return None if shape is None else len(shape)


def fresh_name(graph: Graph, base: str, taken: set[str]) -> str:
    """A tensor/initializer name not used in ``graph`` (or its parents) nor in ``taken``; added to ``taken``."""
    name, k = base, 2
    while name in taken or graph.is_defined(name):
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def initializer(name: str, value: np.ndarray, dtype: Any) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value).astype(dtype), name)


def clone_node(node: Node, *, inputs: list[str], outputs: list[str], op_type: str | None = None, name: str | None = None,
               set_attrs: dict[str, Any] | None = None, drop_attrs: tuple[str, ...] = ()) -> onnx.NodeProto:
    """A copy of ``node``'s protobuf (attributes, doc string, domain) with new inputs, outputs and attributes."""
    proto = onnx.NodeProto()
    proto.CopyFrom(node.proto)
    proto.ClearField("input")
    proto.input.extend(inputs)
    proto.ClearField("output")
    proto.output.extend(outputs)
    if op_type is not None:
        proto.op_type = op_type
    proto.name = name if name is not None else node.proto.name or node.name
    replace = set(drop_attrs) | set(set_attrs or ())
    if replace:  # attributes are copied once above; only rebuild their list when some change
        kept = [a for a in proto.attribute if a.name not in replace]
        proto.ClearField("attribute")
        proto.attribute.extend(kept)
        for key, value in (set_attrs or {}).items():
            proto.attribute.append(onnx.helper.make_attribute(key, value))
    return proto


def is_float(array: np.ndarray) -> bool:
    return array.dtype.type in FLOAT_TYPES


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"
