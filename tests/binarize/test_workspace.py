"""Workspace.binarize: one undo step, the ``binarized`` event, the result kept."""

from __future__ import annotations

import numpy as np

from graphlens.binarize import BinarizeConfig
from graphlens.core.bundled import demo_model_path
from graphlens.workspace import Workspace


def test_workspace_binarize_is_one_undo_step_with_an_event():
    ws = Workspace()
    ws.open(demo_model_path())
    before = ws.model.to_proto().SerializeToString()
    seen = []
    ws.binarization.events.applied.connect(seen.append)
    result = ws.binarization.binarize(BinarizeConfig(bits=2, form="structured"), samples=2)
    assert seen == [result] and ws.binarization.applied is result and result.revision == ws.revision
    assert result.fold is not None and result.fold.applied["fold-bn"] == 7
    assert ws.model.op_counts()["ReduceSum"] == len(result.layers)
    per_node = result.per_node("sqnr_db")
    assert set(per_node) == {r.node for r in result.layers} and all(np.isfinite(v) for v in per_node.values())
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before
