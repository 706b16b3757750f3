"""Which tensors are constant, why the others are not, and their values.

A tensor is constant when it is an initializer (and not also a graph input, which callers may
override), or the output of ``Constant``, of ``ConstantOfShape`` with a constant shape, of a
shape/type-only op whose inputs are all constant, or of ``CastLike`` of a constant to a tensor whose
element type is known (dynamo exports wrap scalars that way: ``CastLike(0.5, x)``). Exporters
often put batch-norm parameters behind such nodes, and tools that only look at initializers miss them.

Values are computed with numpy on demand, only up to :data:`MAX_EVALUATED_BYTES`, and cached per
graph; initializer values are not cached, since their bytes already live in the model. Every walk
keeps its own stack: chains of shape-only nodes can be far deeper than Python's recursion limit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.tensors import tensor_value


class ConstantsNode(Protocol):
    """What constant resolution reads of a node (:class:`graphlens.core.graph.Node` is one).

    A protocol rather than an import: the graph calls into this module, never the other way.
    """

    op_type: str
    domain: str
    inputs: list[str]
    proto: onnx.NodeProto

    @property
    def attrs(self) -> Mapping[str, Any]: ...

    @property
    def label(self) -> str: ...


class ConstantsGraph(Protocol):
    """What constant resolution reads of a graph (:class:`graphlens.core.graph.Graph` is one)."""

    initializers: dict[str, onnx.TensorProto]
    parent: Any
    attr_name: str

    @property
    def constants_cache(self) -> ConstantsCache: ...

    def owner_of(self, tensor: str) -> ConstantsGraph | None: ...

    def producer(self, tensor: str) -> tuple[Any, int] | None: ...

    def is_graph_input(self, tensor: str) -> bool: ...

    def is_constant(self, tensor: str) -> bool: ...

    def tensor_type(self, tensor: str) -> Any: ...


class ConstantsCache:
    """One graph's answers, kept by that graph and emptied by it when its contents change.

    ``reasons``: tensor -> why it is not constant (None when it is); ``values``: tensor -> computed
    value (None when it has none); ``missing``: for a value cached as None, why.
    """

    __slots__ = ("reasons", "values", "missing")

    def __init__(self) -> None:
        self.reasons: dict[str, str | None] = {}
        self.values: dict[str, np.ndarray | None] = {}
        self.missing: dict[str, Unevaluated] = {}

    def clear(self) -> None:
        """Forget everything: the graph itself changed."""
        self.reasons.clear()
        self.values.clear()
        self.missing.clear()

    def clear_reasons(self) -> None:
        """Forget constness only: a nested graph changed, and constness may depend on its tensors."""
        self.reasons.clear()

PASS_THROUGH_OPS = frozenset({"Identity", "Cast", "Reshape", "Unsqueeze", "Squeeze", "Transpose", "Flatten"})
"""Ops that only change shape or element type: constant in, constant out."""

OVERRIDABLE_PHRASE = (
    "whose initializer is only a default callers may override (the freeze-inputs rewrite makes such "
    "initializers constants)"
)
"""How explain describes an initializer listed as a graph input (IR >= 4), naming the fix."""


MAX_EVALUATED_BYTES = 256 * 2**20
"""The largest constant GraphLens computes in numpy (from Constant, ConstantOfShape, Cast...): 256 MiB.

It holds every batch-norm, bias and per-channel parameter, and a 64-million-parameter float32
weight behind a Constant node, while folding's float64 copies of such a value stay far below a
laptop's memory. A hostile ``ConstantOfShape`` asking for 10^12 elements is refused before anything
is allocated. Such a tensor is still constant (for matching); only its value is missing, and
:func:`unevaluated` says why. Initializers are not limited: their bytes are already in the model.
"""


@dataclass(frozen=True)
class Unevaluated:
    """Why a constant tensor has no value: over :data:`MAX_EVALUATED_BYTES`, or malformed."""

    reason: str
    """Completes a sentence about the tensor: ``is a constant of 1,000,000 elements, too large ...``."""
    shape: tuple[int, ...] | None = None
    """The shape the value would have, when it is known without computing it."""


class _Pending(Exception):
    """Raised while working out one tensor when another must be worked out first.

    Chains of 20,000 Identity nodes are real (and hostile files longer still), so the walk keeps
    its own stack instead of recursing into Python's recursion limit.
    """

    def __init__(self, graph: ConstantsGraph, tensor: str) -> None:
        super().__init__(tensor)
        self.graph = graph
        self.tensor = tensor


def _settle(graph: ConstantsGraph, tensor: str, cache_of: Callable[[ConstantsGraph], dict[str, Any]],
            compute: Callable[[ConstantsGraph, str], Any], in_cycle: Any) -> None:
    """Fill ``cache_of(graph)[tensor]`` with ``compute``, first computing whatever it raises :class:`_Pending` for.

    A tensor that turns out to depend on itself (a cycle, which ONNX forbids) gets ``in_cycle``.
    """
    stack = [(graph, tensor)]
    on_stack = {(id(graph), tensor)}
    while stack:
        g, t = stack[-1]
        cache = cache_of(g)
        if t not in cache:
            try:
                cache[t] = compute(g, t)
            except _Pending as need:
                key = (id(need.graph), need.tensor)
                if key in on_stack:
                    cache_of(need.graph)[need.tensor] = in_cycle
                else:
                    stack.append((need.graph, need.tensor))
                    on_stack.add(key)
                continue
        stack.pop()
        on_stack.discard((id(g), t))


def _reasons_of(graph: ConstantsGraph) -> dict[str, Any]:
    return graph.constants_cache.reasons


def _values_of(graph: ConstantsGraph) -> dict[str, Any]:
    return graph.constants_cache.values


# ---------------------------------------------------------------------------- constness
_IN_CYCLE = "is computed in a cycle of nodes, which ONNX forbids"


def why_not_constant(graph: ConstantsGraph, tensor: str) -> str | None:
    """None if ``tensor`` is constant in ``graph``'s scope, else a phrase giving the reason.

    The phrase completes a sentence about the tensor, e.g. "comes from graph input 'bn_mean'".
    """
    try:
        return _known(graph, tensor)
    except _Pending as need:
        _settle(need.graph, need.tensor, _reasons_of, _reason, _IN_CYCLE)
        return need.graph.constants_cache.reasons[need.tensor]


def _known(graph: ConstantsGraph, tensor: str) -> str | None:
    """:func:`why_not_constant` for a tensor already worked out; :class:`_Pending` otherwise."""
    if not tensor:
        return "is an omitted optional input"
    owner = graph.owner_of(tensor)
    if owner is None:
        return f"'{tensor}' is not defined"
    reasons = owner.constants_cache.reasons
    if tensor in reasons:
        return reasons[tensor]
    raise _Pending(owner, tensor)


class _Chain(str):
    """A reason that passes through shape-only nodes, remembering where the chain started.

    Spelling out every link of a 20,000-node chain would make each reason as long as the chain
    (and their total quadratic); past :data:`_SHOWN_LINKS` links only the start is named.
    """

    links: int
    root: tuple[str, str]


_SHOWN_LINKS = 3


def _through(node: ConstantsNode, kind: str, source: str, inner: str) -> str:
    """The reason for a tensor that ``node`` produces from ``source``, whose reason is ``inner``."""
    links = getattr(inner, "links", 0) + 1
    root: tuple[str, str] = getattr(inner, "root", (source, inner))
    if links <= _SHOWN_LINKS:
        text = _Chain(f"is produced by {node.label}, whose {kind} '{source}' {inner}")
    else:
        text = _Chain(
            f"is produced by {node.label}, whose {kind} '{source}' is at the end of a chain of {links - 1:,} "
            f"shape-only nodes starting from '{root[0]}', which {root[1]}"
        )
    text.links, text.root = links, root
    return text


def _reason(graph: ConstantsGraph, tensor: str) -> str | None:
    if tensor in graph.initializers:
        if graph.is_graph_input(tensor):
            return f"comes from graph input '{tensor}', {OVERRIDABLE_PHRASE}"
        return None
    if graph.is_graph_input(tensor):
        if graph.parent is not None:
            return f"is an input of the {graph.attr_name} body of {graph.parent.label}, set on each run"
        return f"comes from graph input '{tensor}'"
    found = graph.producer(tensor)
    if found is None:  # pragma: no cover - owner_of guarantees a definition
        return f"'{tensor}' is not defined"
    node, _ = found
    if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
        return None
    if node.op_type == "ConstantOfShape" and node.domain in ("", "ai.onnx"):
        inner = _known(graph, node.inputs[0])
        return None if inner is None else _through(node, "shape input", node.inputs[0], inner)
    if node.op_type == "CastLike" and node.domain in ("", "ai.onnx") and len(node.inputs) == 2 and node.inputs[1]:
        inner = _known(graph, node.inputs[0])
        if inner is not None:
            return _through(node, "input", node.inputs[0], inner)
        if graph.tensor_type(node.inputs[1]).dtype is None:
            return f"is produced by {node.label}, whose target type (that of '{node.inputs[1]}') is unknown"
        return None
    if node.op_type in PASS_THROUGH_OPS and node.domain in ("", "ai.onnx"):
        for source in node.inputs:
            if source:
                inner = _known(graph, source)
                if inner is not None:
                    return _through(node, "input", source, inner)
        return None
    return f"is computed by {node.label}, not a constant"


# -------------------------------------------------------------------------------- values
def resolve_constant(graph: ConstantsGraph, tensor: str) -> np.ndarray | None:
    """The value of a constant tensor; None if it is not constant, or has no value (see :func:`unevaluated`)."""
    if why_not_constant(graph, tensor) is not None:
        return None
    owner = graph.owner_of(tensor)
    assert owner is not None
    if tensor in owner.initializers:
        return _initializer_value(owner, tensor)
    values = owner.constants_cache.values
    if tensor not in values:
        _settle(owner, tensor, _values_of, _compute, None)
    return values[tensor]


def unevaluated(graph: ConstantsGraph, tensor: str) -> Unevaluated | None:
    """Why the constant ``tensor`` has no value; None when it has one, or is not constant at all."""
    if why_not_constant(graph, tensor) is not None or resolve_constant(graph, tensor) is not None:
        return None
    owner = graph.owner_of(tensor)
    found = owner.constants_cache.missing.get(tensor) if owner is not None else None
    return found or Unevaluated("is constant but could not be evaluated")


def input_refusal(graph: ConstantsGraph, node: ConstantsNode, slot: int, label: str | None = None) -> str:
    """Why input ``slot`` of ``node`` gives no value, as a sentence rules and explain both use:

    ``input 1 (scale) of BatchNormalization 'bn' is a constant of 1,000,000,000,000 elements, ...``.
    """
    tensor = node.inputs[slot] if slot < len(node.inputs) else ""
    label = label or _schema_input_name(node, slot)
    named = f" ({label})" if label else ""
    why = why_not_constant(graph, tensor)
    if why is None:
        missing = unevaluated(graph, tensor)
        why = missing.reason if missing is not None else "is constant"
    return f"input {slot}{named} of {node.label} {why}"


def value_refusals(graph: ConstantsGraph, node: ConstantsNode) -> list[str]:
    """:func:`input_refusal` for each computed constant input of ``node`` that has no value."""
    return [
        input_refusal(graph, node, slot)
        for slot, tensor in enumerate(node.inputs)
        if tensor and tensor not in graph.initializers and graph.is_constant(tensor) and unevaluated(graph, tensor)
    ]


def _schema_input_name(node: ConstantsNode, slot: int) -> str | None:
    """The operator schema's name for input ``slot`` (``scale`` for BatchNormalization's input 1)."""
    try:
        inputs = onnx.defs.get_schema(node.op_type, domain=node.domain).inputs
    except Exception:  # unknown or custom op: onnx raises its own SchemaError
        return None
    if not inputs:
        return None
    return inputs[min(slot, len(inputs) - 1)].name


def _initializer_value(owner: ConstantsGraph, tensor: str) -> np.ndarray | None:
    try:
        return tensor_value(owner.initializers[tensor])
    except (ValueError, TypeError) as exc:  # dims that do not match the data: the checker would refuse it
        owner.constants_cache.missing[tensor] = Unevaluated(f"is an initializer whose data is malformed ({exc})")
        return None


def _known_value(graph: ConstantsGraph, tensor: str) -> np.ndarray | Unevaluated:
    """A constant input's value, or why it has none; :class:`_Pending` if not worked out yet."""
    owner = graph.owner_of(tensor)
    assert owner is not None
    if tensor in owner.initializers:
        value = _initializer_value(owner, tensor)
    elif tensor in owner.constants_cache.values:
        value = owner.constants_cache.values[tensor]
    else:
        raise _Pending(owner, tensor)
    if value is None:
        return owner.constants_cache.missing.get(tensor) or Unevaluated("is constant but could not be evaluated")
    return value


def _compute(graph: ConstantsGraph, tensor: str) -> np.ndarray | None:
    """Evaluate the node producing ``tensor``; on failure, record why in the graph's :class:`ConstantsCache`."""
    found = graph.producer(tensor)
    assert found is not None
    node, _ = found
    try:
        value = _evaluate(graph, node)
    except (ValueError, TypeError, IndexError, KeyError, OverflowError) as exc:
        # malformed attributes: not something we can fold, but not fatal either
        value = Unevaluated(f"is produced by {node.label}, which could not be evaluated ({_first_line(exc)})")
    if isinstance(value, Unevaluated):
        graph.constants_cache.missing[tensor] = value
        return None
    return value


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def _size_text(nbytes: int) -> str:
    size = float(nbytes)
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{nbytes} bytes" if unit == "bytes" else f"{size:.3g} {unit}"
        size /= 1024
    return f"{nbytes} bytes"  # pragma: no cover


def _too_large(shape: Sequence[int], itemsize: int) -> Unevaluated | None:
    """An :class:`Unevaluated` if a value of this shape would exceed :data:`MAX_EVALUATED_BYTES`."""
    dims = tuple(int(d) for d in shape)
    if any(d < 0 for d in dims):
        raise ValueError(f"negative dimension in shape {list(dims)}")
    count = math.prod(dims)
    nbytes = count * max(itemsize, 1)
    if nbytes <= MAX_EVALUATED_BYTES:
        return None
    return Unevaluated(
        f"is a constant of {count:,} elements ({_size_text(nbytes)}), too large to evaluate "
        f"(the limit is {_size_text(MAX_EVALUATED_BYTES)})",
        dims,
    )


def _itemsize(data_type: int) -> int:
    dtype = onnx.helper.tensor_dtype_to_np_dtype(data_type)
    return 8 if dtype == np.dtype(object) else dtype.itemsize


def _evaluate(graph: ConstantsGraph, node: ConstantsNode) -> np.ndarray | Unevaluated | None:
    """Run one constant-producing node in numpy, checking the size of its output first."""
    op = node.op_type
    if op == "Constant":
        try:
            return _constant_attribute(node)
        except (ValueError, TypeError, IndexError) as exc:  # data that does not fit its dims: the checker refuses it
            return Unevaluated(f"is produced by {node.label}, whose tensor is malformed ({exc})")
    if op == "CastLike":
        return _cast_like(graph, node)
    args: list[np.ndarray | None] = []
    for t in node.inputs:
        value = _known_value(graph, t) if t else None
        if isinstance(value, Unevaluated):
            return Unevaluated(value.reason)  # same element count through every op below
        args.append(value)
    x = args[0]
    if x is None:
        return None
    if op == "ConstantOfShape":
        fill = node.attrs.get("value")
        fill = np.zeros(1, dtype=np.float32) if fill is None else np.asarray(fill)
        shape = tuple(int(d) for d in x.reshape(-1))
        return _too_large(shape, fill.dtype.itemsize) or np.full(shape, fill.reshape(-1)[0], dtype=fill.dtype)
    if op == "Identity":
        return x
    if op == "Cast":
        dtype = onnx.helper.tensor_dtype_to_np_dtype(int(node.attrs["to"]))
        return _too_large(x.shape, dtype.itemsize) or x.astype(dtype)
    if op == "Reshape":
        assert args[1] is not None
        target = [int(d) for d in args[1].reshape(-1)]
        if not node.attrs.get("allowzero", 0):
            target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
        return x.reshape(target)
    if op == "Transpose":
        perm = node.attrs.get("perm")
        return np.transpose(x, None if perm is None else list(perm))
    if op == "Flatten":
        axis = int(node.attrs.get("axis", 1))
        axis = axis + x.ndim if axis < 0 else axis
        lead = int(np.prod(x.shape[:axis], dtype=np.int64))
        return x.reshape(lead, -1) if x.size else x.reshape(lead, 0)
    if op in ("Unsqueeze", "Squeeze"):
        axes = node.attrs.get("axes")
        if axes is None and len(args) > 1 and args[1] is not None:
            axes = [int(a) for a in args[1].reshape(-1)]
        if op == "Squeeze":
            return np.squeeze(x) if axes is None else np.squeeze(x, axis=tuple(axes))
        if axes is None:  # an Unsqueeze without axes is malformed: leave it to the checker
            return None
        out_rank = x.ndim + len(axes)
        return np.expand_dims(x, axis=tuple(sorted(a + out_rank if a < 0 else a for a in axes)))
    return None


def _cast_like(graph: ConstantsGraph, node: ConstantsNode) -> np.ndarray | Unevaluated:
    """``CastLike(x, like)``: only ``x``'s value is read (``like`` is usually computed at run time), cast to
    ``like``'s element type when that is known and numpy has it (not bfloat16, the float8 types)."""
    x = _known_value(graph, node.inputs[0])
    if isinstance(x, Unevaluated):
        return Unevaluated(x.reason)
    target = graph.tensor_type(node.inputs[1]).dtype
    try:
        dtype = None if target is None else np.dtype(target)
    except TypeError:
        dtype = None
    if dtype is None:
        return Unevaluated(f"is produced by {node.label}, which casts to {target}, a type numpy cannot hold")
    return _too_large(x.shape, dtype.itemsize) or x.astype(dtype)


def _constant_attribute(node: ConstantsNode) -> np.ndarray | Unevaluated | None:
    """A Constant node's value, after checking the size its attribute declares (decoding it allocates)."""
    protos = {a.name: a for a in node.proto.attribute}
    if "value" in protos:
        declared = protos["value"].t
        return _too_large(declared.dims, _itemsize(declared.data_type)) or np.asarray(node.attrs["value"])
    if "sparse_value" in protos:
        declared = protos["sparse_value"].sparse_tensor
        if (too_large := _too_large(declared.dims, _itemsize(declared.values.data_type))) is not None:
            return too_large
    attrs = node.attrs
    for key, field, dtype in (
        ("value_floats", "floats", np.float32), ("value_ints", "ints", np.int64), ("value_strings", "strings", object)
    ):
        if key in protos:
            count = len(getattr(protos[key], field))
            return _too_large((count,), np.dtype(dtype).itemsize) or np.array(attrs[key], dtype=dtype)
    if "value_float" in attrs:
        return np.array(attrs["value_float"], dtype=np.float32)
    if "value_int" in attrs:
        return np.array(attrs["value_int"], dtype=np.int64)
    if "value_string" in attrs:
        return np.array(attrs["value_string"], dtype=object)
    if "sparse_value" in attrs:
        sparse = attrs["sparse_value"]
        dense = np.zeros(tuple(sparse.dims), dtype=onnx.helper.tensor_dtype_to_np_dtype(sparse.values.data_type))
        values = numpy_helper.to_array(sparse.values)
        indices = numpy_helper.to_array(sparse.indices)
        if indices.ndim == 1:
            dense.reshape(-1)[indices] = values
        else:
            dense[tuple(indices.T)] = values
        return dense
    return None
