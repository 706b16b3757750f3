"""Text inside the boxes: key attributes and constant inputs, short enough to read at a glance.

Attributes are read from the protobuf directly rather than through ``Node.attrs``: a view of
10,000 nodes formats all of them at once, and the decoded-value cache would only cost memory.
Constant values are decoded only when they are tiny (a scalar, a short shape vector), because
those are the ones worth reading in a box; anything larger is summarised by its shape.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Iterable, Sequence

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.constant_shapes import constant_shape
from graphlens.core.constants import OVERRIDABLE_PHRASE
from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import TensorType, dtype_name
from graphlens.layout.fused_labels import CONTRIB_INPUTS, fused_lines

MAX_LINES = 4
WRAP = 34
"""Characters per attribute line before the next attribute starts a new one."""
SMALL_VALUE = 6
"""Integer constants with at most this many elements show their values instead of their shape."""

_A = onnx.AttributeProto
_GEOMETRY = (("kernel_shape", "k"), ("strides", "s"), ("pads", "p"), ("dilations", "d"), ("group", "g"))
_GEOMETRY_NAMES = frozenset(name for name, _ in _GEOMETRY)
_SYMBOLS = {
    "epsilon": "ε", "alpha": "α", "beta": "β", "gamma": "γ", "lambd": "λ",
    "coordinate_transformation_mode": "coords", "nearest_mode": "nearest", "cubic_coeff_a": "cubic a",
    "count_include_pad": "incl. pad", "exclude_outside": "excl. outside",
}
_DEFAULTS: dict[str, object] = {
    "training_mode": 0, "ceil_mode": 0, "count_include_pad": 0, "keepdims": 1, "allowzero": 0,
    "storage_order": 0, "transA": 0, "transB": 0, "noop_with_empty_axes": 0, "select_last_index": 0,
    "saturate": 1, "auto_pad": "NOTSET",
}
_SKIPPED = frozenset({"momentum"})
_UNSET = object()


# ------------------------------------------------------------------ shapes
def dims_text(dims: Iterable[object]) -> str:
    """``1×64×56×56``; unknown dimensions as ``?``, symbolic ones by name (the ``unk__3`` names ONNX shape
    inference makes up for dims it cannot tell are unknown too)."""
    return "×".join("?" if d is None or (isinstance(d, str) and d.startswith("unk__")) else str(d) for d in dims)


def shape_label(tensor_type: TensorType) -> str:
    """Edge label text: the shape, ``scalar`` for rank 0, ``""`` when unknown."""
    if tensor_type.shape is None:
        return ""
    return dims_text(tensor_type.shape) if tensor_type.shape else "scalar"


def type_text(tensor_type: TensorType) -> str:
    """``float32 1×3×224×224`` for the input and output boxes."""
    dtype = tensor_type.dtype or "?"
    if tensor_type.shape is None:
        return dtype
    return f"{dtype} {dims_text(tensor_type.shape) if tensor_type.shape else 'scalar'}"


# ------------------------------------------------------------- attributes
def _number(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _compact(values: Sequence[object], sep: str = "×") -> str:
    """One number when all are equal (``s 2``), else all of them."""
    if values and all(v == values[0] for v in values):
        return _number(values[0])
    return sep.join(_number(v) for v in values)


def _list_text(values: Sequence[object]) -> str:
    shown = ",".join(_number(v) for v in values[:8])
    return shown + ",…" if len(values) > 8 else shown


def _attr_value(attr: onnx.AttributeProto) -> object:
    kind = attr.type
    if kind == _A.INT:
        return int(attr.i)
    if kind == _A.FLOAT:
        return float(attr.f)
    if kind == _A.INTS:
        return list(attr.ints)
    if kind == _A.FLOATS:
        return [float(f) for f in attr.floats]
    if kind == _A.STRING:
        return attr.s.decode("utf-8", errors="replace")
    if kind == _A.STRINGS:
        return [s.decode("utf-8", errors="replace") for s in attr.strings]
    if kind == _A.TENSOR:
        return attr.t
    return None  # graphs and the rest are not shown as text


def _attr_part(name: str, value: object) -> str | None:
    if name in _SKIPPED or value is None or _DEFAULTS.get(name, _UNSET) == value:
        return None
    if name in ("transA", "transB"):
        return name
    if name == "to" and isinstance(value, int):
        return f"→ {dtype_name(value)}"
    if name == "ceil_mode":
        return "ceil"
    if isinstance(value, onnx.TensorProto):
        return _named(name, _tensor_text(value))
    if isinstance(value, str):
        text = value if len(value) <= 20 else value[:19] + "…"
        return f"{_SYMBOLS.get(name, name)} {text}"
    if isinstance(value, list):
        if value and isinstance(value[0], str):
            return f"{name} {','.join(value)[:24]}"
        return f"{_SYMBOLS.get(name, name)} {_list_text(value)}"
    return f"{_SYMBOLS.get(name, name)} {_number(value)}"


def attribute_lines(node: Node) -> list[str]:
    """Geometry on one line (``k 7×7  s 2  p 3  g 1``), the other attributes wrapped after it;
    fused transformer ops say what they do instead (:mod:`graphlens.layout.fused_labels`)."""
    fused = fused_lines(node, WRAP)
    if fused is not None:
        return fused
    values = {a.name: _attr_value(a) for a in node.proto.attribute}
    if not values:
        return []
    geometry = []
    for name, short in _GEOMETRY:
        value = values.get(name)
        if value is None:
            continue
        if name == "kernel_shape" and isinstance(value, list):
            geometry.append(f"k {dims_text(value)}")
        elif _is_default_geometry(name, value):
            continue
        elif isinstance(value, list):
            geometry.append(f"{short} {_compact(value, '×' if name != 'pads' else ',')}")
        else:
            geometry.append(f"{short} {value}")
    parts = [p for name, v in values.items() if name not in _GEOMETRY_NAMES and (p := _attr_part(name, v))]
    lines = ["  ".join(geometry)] if geometry else []
    return lines + _wrap(parts)


def _is_default_geometry(name: str, value: object) -> bool:
    """Zero pads and unit dilations say nothing, so the label leaves them out."""
    if not isinstance(value, list):
        return False
    return (name == "pads" and not any(value)) or (name == "dilations" and all(v == 1 for v in value))


def _wrap(parts: list[str]) -> list[str]:
    lines: list[str] = []
    current = ""
    for part in parts:
        if current and len(current) + 2 + len(part) > WRAP:
            lines.append(current)
            current = part
        else:
            current = f"{current}  {part}" if current else part
    if current:
        lines.append(current)
    return lines


# -------------------------------------------------------------- constants
@functools.cache
def input_names(op_type: str, domain: str) -> tuple[tuple[str, ...], bool]:
    """The schema's input names (``X, W, B``) and whether the last one is variadic; onnxruntime's
    operators, which ONNX has no schema for, by the names onnxruntime gives them."""
    try:
        schema = onnx.defs.get_schema(op_type, domain)
    except Exception:  # unknown op or domain: no schema to name the inputs by
        return CONTRIB_INPUTS.get(("" if domain == "ai.onnx" else domain, op_type), ()), False
    names = tuple(f.name.removeprefix("input_") for f in schema.inputs)
    variadic = bool(schema.inputs) and schema.inputs[-1].option == onnx.defs.OpSchema.FormalParameterOption.Variadic
    return names, variadic


def input_name(node: Node, slot: int) -> str:
    names, variadic = input_names(node.op_type, node.domain)
    if slot < len(names):
        return names[slot]
    if variadic and names:
        return names[-1]
    return f"in{slot}"


def _value_text(array: np.ndarray) -> str | None:
    """Values worth reading: a scalar, or a short integer vector such as a shape or axes."""
    if array.dtype.kind not in "biuf" or array.size > SMALL_VALUE:
        return None
    if array.size > 1 and array.dtype.kind == "f":
        return None
    if array.ndim == 0:
        return _number(array.item())
    return "[" + ", ".join(_number(v) for v in array.reshape(-1).tolist()) + "]"


def _tensor_text(tensor: onnx.TensorProto) -> str:
    count = math.prod(tensor.dims)
    if count <= SMALL_VALUE and tensor.data_location != onnx.TensorProto.EXTERNAL:
        try:
            value = _value_text(numpy_helper.to_array(tensor))
        except (ValueError, TypeError):
            value = None
        if value is not None:
            return value if tensor.dims else f"= {value}"
    return f"⟨{dims_text(tensor.dims)}⟩"


def constant_text(graph: Graph, tensor: str) -> str:
    """``⟨64×3×7×7⟩`` for a weight, ``= 1e-05`` or ``[1, -1]`` for tiny constants."""
    init = graph.initializers.get(tensor)
    if init is None:
        owner = graph.owner_of(tensor)  # a branch body reading a weight of its enclosing graph
        init = owner.initializers.get(tensor) if owner is not None else None
    if init is not None:
        return _tensor_text(init)
    found = graph.producer(tensor)
    if found is not None and found[0].op_type == "Constant":
        for attr in found[0].proto.attribute:
            if attr.name == "value" and attr.type == _A.TENSOR:
                return _tensor_text(attr.t)
    known = constant_shape(graph, tensor)
    if known is not None and math.prod(known) > SMALL_VALUE:  # shown by its shape: no need to compute it
        return f"⟨{dims_text(known)}⟩"
    value = graph.constant_value(tensor)
    if value is None:
        shape = graph.tensor_type(tensor).shape
        return f"⟨{dims_text(shape)}⟩" if shape is not None and all(isinstance(d, int) for d in shape) else "⟨?⟩"
    small = _value_text(value)
    if small is not None:
        return f"= {small}" if value.ndim == 0 else small
    return f"⟨{dims_text(value.shape)}⟩"


OVERRIDABLE_MARK = " · input"
"""Marks a weight that is also a graph input (IR >= 4): a default callers may override."""


def is_overridable(graph: Graph, tensor: str) -> bool:
    """Not constant only because it is, or is computed from, an initializer listed as a graph input."""
    reason = graph.why_not_constant(tensor)
    return reason is not None and OVERRIDABLE_PHRASE in reason


def constant_lines(graph: Graph, node: Node, slots: Sequence[int]) -> list[str]:
    """One line per constant input, neighbours of the same shape merged: ``scale, B, mean, var ⟨64⟩``."""
    entries: list[tuple[str, str]] = []
    for slot in slots:
        tensor = node.inputs[slot]
        name, text = input_name(node, slot), constant_text(graph, tensor)
        if is_overridable(graph, tensor):
            text += OVERRIDABLE_MARK
        if entries and text.startswith("⟨") and entries[-1][1] == text:
            entries[-1] = (f"{entries[-1][0]}, {name}", text)
        else:
            entries.append((name, text))
    return [_named(name, text) for name, text in entries]


def _named(name: str, text: str) -> str:
    """``W ⟨64×3⟩``, ``axis = 1``, ``shape = [1, -1]``."""
    return f"{name} {text}" if text.startswith(("⟨", "=")) else f"{name} = {text}"


def fit_lines(lines: list[str]) -> list[str]:
    """At most :data:`MAX_LINES`, the last one saying how many were left out."""
    if len(lines) <= MAX_LINES:
        return lines
    return [*lines[: MAX_LINES - 1], f"+{len(lines) - MAX_LINES + 1} more"]


def group_lines(op_counts: Counter[str]) -> list[str]:
    """The most frequent ops of a collapsed group: ``Conv ×25  Relu ×25``, at most two lines."""
    counts = op_counts.most_common()
    parts = [f"{op} ×{n}" for op, n in counts[:4]]
    if len(counts) > 4:
        parts.append(f"+{len(counts) - 4} ops")
    return _wrap(parts)[:2]
