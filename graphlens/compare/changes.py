"""What differs between two paired nodes, as short sentences: attributes, op type, weights.

Tensor names are not compared: folding and re-exporting rename weights, so a renamed weight with
the same value is the same. Weights are compared by value, by input slot.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node

_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
_TENSOR_TYPES = (onnx.AttributeProto.TENSOR, onnx.AttributeProto.SPARSE_TENSOR)

AttributeKey = tuple[tuple[Hashable, ...], ...]
"""A node's attributes, one (name, …) tuple each, sorted by name."""
ConstantShape = tuple[int, tuple[int, ...]] | tuple[str]
"""(dtype, dims) of a constant, or ("constant",) for a Constant node holding no tensor."""


def attribute_key(node: Node) -> AttributeKey:
    """The node's attributes as a hashable value: subgraphs by name only (their bodies are paired
    separately), tensors by dtype and shape (their values are compared, not matched on)."""
    parts: list[tuple[Hashable, ...]] = []
    for attr in node.proto.attribute:
        if attr.type in _GRAPH_TYPES:
            parts.append((attr.name, "graph"))
        elif attr.type == onnx.AttributeProto.TENSOR:
            parts.append((attr.name, attr.t.data_type, tuple(attr.t.dims)))
        else:
            parts.append((attr.name, attr.SerializeToString()))
    parts.sort()
    return tuple(parts)


def constant_shape(graph: Graph, tensor: str) -> ConstantShape | None:
    """(dtype, shape) of a constant input (an initializer or a Constant node's output), else None."""
    owner = graph.owner_of(tensor)
    if owner is None:
        return None
    init = owner.initializers.get(tensor)
    if init is not None:
        return None if owner.is_graph_input(tensor) else (init.data_type, tuple(init.dims))
    found = owner.local_producer(tensor)
    if found is not None and found[0].op_type == "Constant" and not found[0].inputs:
        for attr in found[0].proto.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                return (attr.t.data_type, tuple(attr.t.dims))
        return ("constant",)
    return None


def constant_value(graph: Graph, tensor: str) -> np.ndarray | None:
    """The value of a constant input (see :func:`constant_shape`), or None."""
    if not tensor or constant_shape(graph, tensor) is None:
        return None
    owner = graph.owner_of(tensor)
    assert owner is not None
    try:
        return owner.constant_value(tensor)
    except (ValueError, TypeError):
        return None


def _text(value: Any) -> str:
    if isinstance(value, np.ndarray):
        return f"tensor {list(value.shape)}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_text(v) for v in value) + "]"
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, str):
        return f"'{value}'"
    return str(value)


_CHUNK = 1 << 20
"""Elements compared at a time."""


def _max_diff(x: np.ndarray, y: np.ndarray) -> float | None:
    """max |x - y| when shapes agree and both are numeric, else None."""
    if x.shape != y.shape or x.dtype.kind not in "biufc" or y.dtype.kind not in "biufc":
        return None
    if not x.size:
        return 0.0
    flat_x, flat_y = x.reshape(-1), y.reshape(-1)
    largest = -np.inf
    with np.errstate(invalid="ignore", over="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN slice: nanmax says so, the answer is NaN
        for start in range(0, flat_x.size, _CHUNK):  # a slice at a time: float64 copies of a 500 MB weight are 3 GB
            part = np.abs(flat_x[start:start + _CHUNK].astype(np.float64)
                          - flat_y[start:start + _CHUNK].astype(np.float64))
            largest = np.nanmax([largest, np.nanmax(part)])
    return float(largest) if not np.isneginf(largest) else float("nan")


def attribute_changes(na: Node, nb: Node) -> list[str]:
    """``attribute pads: [0,0,0,0] → [1,1,1,1]`` for each attribute that differs (subgraphs aside)."""
    pa = {a.name: a for a in na.proto.attribute if a.type not in _GRAPH_TYPES}
    pb = {a.name: a for a in nb.proto.attribute if a.type not in _GRAPH_TYPES}
    changes = []
    for name in sorted(set(pa) | set(pb)):
        if name in pa and name in pb and pa[name].SerializeToString() == pb[name].SerializeToString():
            continue
        va = na.attrs[name] if name in pa else None
        vb = nb.attrs[name] if name in pb else None
        if pa.get(name) is not None and pa[name].type in _TENSOR_TYPES and isinstance(va, np.ndarray) \
                and isinstance(vb, np.ndarray):
            delta = _max_diff(va, vb)
            if delta == 0.0:
                continue
            if delta is not None:
                changes.append(f"attribute {name}: max |Δ| {delta:.3g}")
                continue
        before = "(none)" if name not in pa else _text(va)
        after = "(none)" if name not in pb else _text(vb)
        changes.append(f"attribute {name}: {before} → {after}")
    return changes


def weight_changes(na: Node, nb: Node) -> list[str]:
    """A sentence for each constant input whose value differs, and for inputs only one side has."""
    ga, gb = na.graph, nb.graph
    changes = []
    for slot in range(max(len(na.inputs), len(nb.inputs))):
        ta = na.inputs[slot] if slot < len(na.inputs) else ""
        tb = nb.inputs[slot] if slot < len(nb.inputs) else ""
        if not ta and not tb:
            continue
        ca = constant_shape(ga, ta) if ta else None
        cb = constant_shape(gb, tb) if tb else None
        if ca is None and cb is None:
            if bool(ta) != bool(tb):
                changes.append(f"input {slot} {'added' if tb else 'removed'}: '{tb or ta}'")
            continue
        if not ta or not tb:
            changes.append(f"input {slot} {'added' if tb else 'removed'}: weight '{tb or ta}'")
            continue
        if ca is None or cb is None:
            graph, tensor, weight = (gb, tb, ta) if cb is None else (ga, ta, tb)
            found = graph.local_producer(tensor)
            if found is not None and found[0].op_type == "DequantizeLinear":
                side = "now" if cb is None else "was"
                changes.append(f"weight '{weight}' {side} quantized ({found[0].label})")
            else:
                changes.append(f"input {slot}: weight '{weight}' on one side only")
            continue
        va, vb = constant_value(ga, ta), constant_value(gb, tb)
        if va is None or vb is None:
            continue
        if va.shape != vb.shape:
            changes.append(f"weight '{ta}' shape {list(va.shape)} → {list(vb.shape)}")
            continue
        delta = _max_diff(va, vb)
        if delta is None:
            if not np.array_equal(va, vb):
                changes.append(f"weight '{ta}' values differ")
        elif delta != 0.0 or va.dtype != vb.dtype:
            dtype = f" ({va.dtype.name} → {vb.dtype.name})" if va.dtype != vb.dtype else ""
            changes.append(f"weight '{ta}' max |Δ| {delta:.3g}{dtype}")
    return changes


def node_changes(na: Node, nb: Node) -> list[str]:
    """Everything that differs between two paired nodes (their subgraphs' contents aside)."""
    changes = []
    if (na.domain or "") != (nb.domain or "") or na.op_type != nb.op_type:
        da = f"{na.domain}." if na.domain else ""
        db = f"{nb.domain}." if nb.domain else ""
        changes.append(f"op type {da}{na.op_type} → {db}{nb.op_type}")
    changes += attribute_changes(na, nb)
    changes += weight_changes(na, nb)
    live_a, live_b = sum(1 for t in na.outputs if t), sum(1 for t in nb.outputs if t)
    if live_a != live_b:
        changes.append(f"outputs {live_a} → {live_b}")
    return changes


class ChangeCache:
    """:func:`node_changes` per (A node, B node), computed once: pairing asks whether a pair changed
    before folding a region into it, and the summary asks again for the group it became."""

    def __init__(self) -> None:
        self._found: dict[tuple[Node, Node], list[str]] = {}

    def __call__(self, na: Node, nb: Node) -> list[str]:
        found = self._found.get((na, nb))
        if found is None:
            found = self._found[(na, nb)] = node_changes(na, nb)
        return list(found)


def group_changes(nodes_a: list[Node], nodes_b: list[Node],
                  changes_of: Callable[[Node, Node], list[str]] = node_changes) -> list[str]:
    """Sentences for a group pair: the core node's own changes, then what was folded in or added.

    The core is the one node whose op type both sides share once (the Conv of Conv+BN ↔ Conv);
    without one, the op types of each side are listed (a decomposed GELU ↔ Gelu).
    """
    ops_a = [n.op_type for n in nodes_a]
    ops_b = [n.op_type for n in nodes_b]
    shared = [op for op in dict.fromkeys(ops_a) if ops_a.count(op) == 1 and ops_b.count(op) == 1]
    if not shared:
        return [f"{' + '.join(ops_a)} → {' + '.join(ops_b)}"]
    core = shared[0]
    ca = next(n for n in nodes_a if n.op_type == core)
    cb = next(n for n in nodes_b if n.op_type == core)
    return _listed("folded {} into it", [n for n in nodes_a if n is not ca]) + \
        _listed("added {}", [n for n in nodes_b if n is not cb]) + changes_of(ca, cb)


def _listed(sentence: str, nodes: list[Node]) -> list[str]:
    """One sentence per node; Constant nodes beside other nodes (an exporter's BN parameters) in one."""
    constants = [n for n in nodes if n.op_type == "Constant"]
    others = [n for n in nodes if n.op_type != "Constant"]
    if not others or len(constants) < 2:
        return [sentence.format(n.label) for n in nodes]
    return ([sentence.format(n.label) for n in others]
            + [sentence.format(f"{len(constants)} Constant nodes (their parameters)")])

