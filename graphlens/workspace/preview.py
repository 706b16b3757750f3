"""Computing a rewrite preview from a :class:`PreviewRequest`, on a scratch copy of the model.

Nothing here reads the workspace or its live model, so a worker thread may run it while the
user goes on working; the workspace decides afterwards whether the result still applies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.matching.matcher import Match
from graphlens.rewrites.edit import without_orphans
from graphlens.rewrites.rule import Refusal
from graphlens.rewrites.rules import RULES
from graphlens.workspace.results import PreviewRequest, PreviewResult


class PreviewCancelled(GraphLensError):
    """The preview was cancelled before its numeric diff ran."""


def scratch_copy(model: Model) -> Model:
    """A copy of ``model`` to edit and run freely; external weights are shared, read-only."""
    return Model(onnx.ModelProto.FromString(model.to_proto().SerializeToString()), path=model.path,
                 external_data=model.external_data)


def compute_preview(request: PreviewRequest, cancelled: Callable[[], bool] | None = None) -> PreviewResult:
    """Plan the rule on the scratch copy, then diff before against after with onnxruntime.

    A match the rule refuses raises :class:`GraphLensError` with the rule's sentence.
    """
    from graphlens.numerics.dims import remember_dims
    from graphlens.rewrites.preview import preview_edit

    proto = onnx.ModelProto.FromString(request.model_bytes)
    scratch = Model(proto, path=request.model_path, external_data=bool(_has_external(proto)))
    if request.remembered:
        remember_dims(scratch, request.remembered)
    rule = RULES[request.rule]
    match = Match(request.pattern, scratch.graph_at(request.graph), dict(request.nodes), dict(request.values),
                  request.variant)
    planned = rule.plan(match)
    if isinstance(planned, Refusal):
        raise GraphLensError(planned.reason)
    planned = without_orphans(match.graph, planned)  # what Apply saves has no dead weights left behind
    details = rule.details(match)
    if cancelled is not None and cancelled():
        raise PreviewCancelled("preview cancelled")
    preview = preview_edit(scratch, planned, request.arrays, dims=request.dims, inputs_file=request.inputs_file)
    error = None
    if preview.numeric.boundary_values:  # the diff kept them: no second onnxruntime run
        a, b = preview.numeric.boundary_values[0]
        error = np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).reshape(-1)
    return PreviewResult(request.rule, request.match_index, request.revision, planned, preview.numeric,
                         preview.after, details.rows() if details is not None else [], error)


def _has_external(proto: onnx.ModelProto) -> bool:
    return any(t.data_location == onnx.TensorProto.EXTERNAL for t in proto.graph.initializer)
