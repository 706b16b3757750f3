"""Computing a rewrite preview from a :class:`RewritePreviewRequest`, on a scratch copy of the model.

Nothing here reads the workspace or its live model, so a worker thread may run it while the
user goes on working; the workspace decides afterwards whether the result still applies.
"""

from __future__ import annotations

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.model import scratch_from_bytes
from graphlens.core.task import Task
from graphlens.matching.match import Match
from graphlens.rewrites.edit import without_orphans
from graphlens.rewrites.rule import Refusal
from graphlens.workspace.results import RewritePreview, RewritePreviewRequest


def compute_rewrite_preview(request: RewritePreviewRequest, task: Task | None = None) -> RewritePreview:
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
    return RewritePreview(request.rule, request.match_index, request.revision, planned, preview.numeric,
                         preview.after, details.rows() if details is not None else [], error)
