"""Names for the nodes a fusion adds: inside the exporter's name scope of the nodes they replace.

Exporters name nodes after the module that emitted them (``/encoder/layer.0/attention/MatMul``), and
the window groups nodes by those scopes, a run of identical layers drawn as one ``×N`` box
(:mod:`graphlens.layout.scopes`, :mod:`graphlens.layout.repeats`). A fused node named after one of
the nodes it replaced, or a helper named after a tensor, can land in another scope than the layer
it belongs to: the layer's group loses a node, and a run of layers no longer reads as one.

So each node a fusion adds is named ``SCOPE/OP`` (``/encoder/layer.0/attention/MultiHeadAttention``),
a helper ``SCOPE/ROLE``, unique in the graph. SCOPE is the scope of the replaced nodes nearest the
root: a residual Add in ``/layer.3`` and its norm in ``/layer.3/norm1`` fuse into ``/layer.3``; of
several scopes equally near, their deepest common one. This also places a fusion right where a
TorchScript export of a module called several times puts that call's own nodes (``/layer_3/Add``,
while its submodules are ``/layer/norm1_3/...``). Nodes with no scope keep the names the rule gave.
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx

from graphlens.core.graph import Graph
from graphlens.layout.scopes import scope_of


def replaced_scope(names: Iterable[str]) -> str:
    """The scope a node replacing the nodes ``names`` belongs in (see the module docstring); ``""`` for none."""
    scopes = {scope_of(name) for name in names} - {""}
    if not scopes:
        return ""
    depth = min(scope.count("/") for scope in scopes)
    nearest = [scope.split("/") for scope in scopes if scope.count("/") == depth]
    common: list[str] = []
    for parts in zip(*nearest):
        if len(set(parts)) > 1:
            break
        common.append(parts[0])
    return "/".join(common) if any(common) else ""


def place_in_scope(graph: Graph, added: list[onnx.NodeProto], replaced: list[str], main: onnx.NodeProto) -> None:
    """Rename ``main`` (the fused node) to ``SCOPE/OP`` and each other new node of ``added`` to ``SCOPE/ROLE``
    (the last part of the name the rule gave it), in place; nodes re-added under a replaced node's name keep it."""
    scope = replaced_scope(replaced)
    if not scope:
        return
    freed = set(replaced)
    taken: set[str] = set()
    for proto in added:
        if proto is not main and proto.name in freed:
            taken.add(proto.name)
    for proto in added:
        if proto is not main and proto.name in freed:
            continue
        role = main.op_type if proto is main else proto.name.rsplit("/", 1)[-1] or proto.op_type
        proto.name = _free_name(graph, f"{scope}/{role}", freed, taken)


def _free_name(graph: Graph, base: str, freed: set[str], taken: set[str]) -> str:
    """``base``, or ``base_2``, ``base_3``…: the first no node of ``graph`` keeps and no new node took."""
    name, k = base, 2
    while name in taken or (name in graph.by_name and name not in freed):
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def distinct_node_names(graph_of: dict[str, Graph], edits_added: Iterable[tuple[str, list[onnx.NodeProto]]]) -> None:
    """New nodes of several edits applied together, each named in its own edit's scope, may share a name (two
    sites in one scope): a later one takes the next free suffix. ``edits_added``: (graph path, added nodes)."""
    seen: dict[str, set[str]] = {}
    for path, added in edits_added:
        names = seen.setdefault(path, set())
        graph = graph_of[path]
        for proto in added:
            if proto.name in names:
                proto.name = _free_name(graph, proto.name, set(), names)
            else:
                names.add(proto.name)
