"""Computing a rewrite preview from a :class:`PreviewRequest`, on a scratch copy of the model.

Nothing here reads the workspace or its live model, so a worker thread may run it while the
user goes on working; the workspace decides afterwards whether the result still applies.
"""

from __future__ import annotations

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, scratch_from_bytes
from graphlens.core.task import Task
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit, without_orphans
from graphlens.rewrites.rule import Refusal
from graphlens.workspace.results import PreviewRequest, PreviewResult


def replace_main_graph(model: Model, after: onnx.ModelProto, label: str) -> GraphEdit:
    """One edit making the live main graph ``after``'s: its nodes, and its initializers where they differ."""
    graph = model.graph
    live = graph.initializers
    wanted = {t.name: t for t in after.graph.initializer}
    changed = {name: t for name, t in wanted.items() if name not in live or live[name] != t}
    return GraphEdit(graph.path, label, label, remove=[n.name for n in graph.nodes],
                     add=_named_nodes(after), initializers=changed,
                     drop_initializers=[name for name in live if name not in wanted])


def _named_nodes(after: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Copies of ``after``'s main-graph nodes, each under the name the graph gives it: a node a file left
    unnamed gets the generated name the live graph shows (nodes named alike would refuse to go in)."""
    nodes = []
    for node in Model(after).graph.nodes:
        copied = _copy(node.proto)
        copied.name = node.name
        nodes.append(copied)
    return nodes


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copied = onnx.NodeProto()
    copied.CopyFrom(node)  # the live graph owns its nodes; the preview keeps its own
    return copied


def compute_preview(request: PreviewRequest, task: Task | None = None) -> PreviewResult:
    """Plan the rule on the scratch copy, then diff before against after with onnxruntime.

    A match the rule refuses raises :class:`GraphLensError` with the rule's sentence.
    """
    from graphlens.numerics.dims import remember_dims
    from graphlens.rewrites.preview import preview_edit

    scratch = scratch_from_bytes(request.model_bytes, request.model_path)
    if request.remembered:
        remember_dims(scratch, request.remembered)
    from graphlens.rewrites.rules import RULES  # every rule module: imported when a preview is computed

    rule = RULES[request.rule]
    match = Match(request.pattern, scratch.graph_at(request.graph), dict(request.nodes), dict(request.values),
                  request.variant)
    planned = rule.plan(match)
    if isinstance(planned, Refusal):
        raise GraphLensError(planned.reason)
    planned = without_orphans(match.graph, planned)  # what Apply saves has no dead weights left behind
    details = rule.details(match)
    if task is not None:
        task.check("the preview")
    preview = preview_edit(scratch, planned, request.arrays, dims=request.dims, inputs_file=request.inputs_file)
    error = None
    if preview.numeric.boundary_values:  # the diff kept them: no second onnxruntime run
        a, b = preview.numeric.boundary_values[0]
        error = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).reshape(-1)
    return PreviewResult(request.rule, request.match_index, request.revision, planned, preview.numeric,
                         preview.after, details.rows() if details is not None else [], error)
