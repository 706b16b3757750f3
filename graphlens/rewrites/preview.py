"""What one rewrite would do, in numbers, before it is applied.

The edit is applied, the rewritten model captured, and the edit undone, so the model the user
sees never changes. The numeric diff compares the outputs and the tensors at the rewrite's
boundary (for fold-bn: the BN's output before against the folded layer's output after), exposed
as extra outputs. When onnxruntime cannot run the model the diff says why; the rewrite stands.
Without given inputs, the dynamic dims are sized as :mod:`graphlens.numerics.dims` describes,
and the working sizes are remembered on the model, so the next preview does not search again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.numerics import NumericDiff, check_models
from graphlens.rewrites.edit import EditHistory, GraphEdit


@dataclass
class Preview:
    edit: GraphEdit
    numeric: NumericDiff
    after: onnx.ModelProto


def preview_edit(
    model: Model,
    edit: GraphEdit,
    inputs: dict[str, np.ndarray] | None = None,
    *,
    dims: dict[str, int] | None = None,
    inputs_file: str | None = None,
    seed: int = 0,
) -> Preview:
    """Apply ``edit`` to a scratch session, diff before against after, and undo.

    ``inputs`` (from ``inputs_file`` when it names one) are used as they are; otherwise random
    inputs with ``dims`` kept and the other dynamic dims chosen.
    """
    before = onnx.ModelProto.FromString(model.to_proto().SerializeToString())
    session = EditHistory(model)
    modified = model.modified
    session.apply([edit])
    try:
        after = onnx.ModelProto.FromString(model.to_proto().SerializeToString())
    finally:
        session.undo()
        model.modified = modified
    boundary = edit.boundary if edit.graph == "main" else []  # onnxruntime can only expose main-graph tensors
    numeric = check_models(before, after, inputs=inputs, inputs_file=inputs_file, dims=dims, seed=seed,
                           boundary=boundary, remember=model)
    return Preview(edit, numeric, after)
