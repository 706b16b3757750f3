"""What one rewrite would do, in numbers, before it is applied.

The edit is applied, the rewritten model captured, and the edit undone, so the model the user
sees never changes. The numeric diff compares the outputs and the tensors at the rewrite's
boundary (for fold-bn: the BN's output before against the folded layer's output after), exposed
as extra outputs. When onnxruntime cannot run the model the diff says why; the rewrite stands.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.numerics import NumericDiff, diff_models, make_inputs
from graphlens.rewrites.edit import GraphEdit, RewriteSession


@dataclass
class Preview:
    edit: GraphEdit
    numeric: NumericDiff
    after: onnx.ModelProto


def preview_edit(model: Model, edit: GraphEdit, inputs: dict[str, np.ndarray] | None = None) -> Preview:
    """Apply ``edit`` to a scratch session, diff before against after, and undo."""
    before = onnx.ModelProto.FromString(model.to_proto().SerializeToString())
    session = RewriteSession(model)
    modified = model.modified
    session.apply([edit])
    try:
        after = onnx.ModelProto.FromString(model.to_proto().SerializeToString())
    finally:
        session.undo()
        model.modified = modified
    boundary = edit.boundary if edit.graph == "main" else []  # onnxruntime can only expose main-graph tensors
    numeric = diff_models(before, after, inputs if inputs is not None else make_inputs(before, seed=0), boundary=boundary)
    return Preview(edit, numeric, after)
