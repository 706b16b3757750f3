"""Quantize previews in the Workspace: computed on a scratch copy, dropped when stale, applied as one undo step."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from graphlens.core.bundled import demo_model_path
from graphlens.core.errors import GraphLensError
from graphlens.quantize import QuantConfig
from graphlens.workspace import Workspace


@pytest.fixture
def ws() -> Workspace:
    workspace = Workspace()
    workspace.open(demo_model_path())
    return workspace


def test_a_preview_leaves_the_model_alone_and_says_so_with_an_event(ws):
    before = ws.model.to_proto().SerializeToString()
    seen = []
    ws.quantization.events.previewed.connect(seen.append)
    preview = ws.quantization.preview(samples=2)
    assert ws.model.to_proto().SerializeToString() == before and not ws.model.modified
    assert seen == [preview] and ws.quantization.previewed is preview and ws.quantization.applied is None
    assert preview.result.layers and np.isfinite(preview.result.output_sqnr_db)
    ops = {n.op_type for n in preview.after.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert "QuantizeLinear" not in {n.op_type for n in preview.float_model.graph.node}
    assert "BatchNormalization" in {n.op_type for n in ws.model.graph.nodes}
    assert preview.result.fold is not None and preview.calibration.samples == 2


def test_apply_puts_in_exactly_the_preview_as_one_undo_step_and_undo_restores_the_model(ws):
    before = ws.model.to_proto().SerializeToString()
    preview = ws.quantization.preview(samples=2)
    quantized = []
    ws.quantization.events.applied.connect(quantized.append)
    result = ws.quantization.apply()
    assert quantized == [result] and ws.quantization.applied is result and ws.quantization.previewed is None
    live = ws.model.to_proto()
    assert list(live.graph.node) == list(preview.after.graph.node)
    assert {t.name for t in live.graph.initializer} == {t.name for t in preview.after.graph.initializer}
    assert len(ws.session.undo_stack) == 1 and ws.model.modified
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before and not ws.model.modified


def test_a_preview_computed_before_an_edit_is_dropped_and_apply_refuses_it(ws):
    request = ws.quantization.request(samples=2)
    from graphlens.workspace.quantize_preview import compute_quantize_preview

    ws.apply_all("fold-bn")  # the model changes while the preview is computed
    stale = compute_quantize_preview(request)
    assert ws.quantization.accept_preview(stale) is False and ws.quantization.previewed is None
    with pytest.raises(GraphLensError, match="no previewed quantization"):
        ws.quantization.apply()
    ws.quantization.preview(samples=2)
    ws.undo()  # an edit drops the current preview with its event
    assert ws.quantization.previewed is None


def test_int4_apply_raises_the_opset_and_undo_lowers_it(ws):
    assert ws.model.opset("") == 17
    ws.quantization.preview(QuantConfig(weight_bits=4), samples=2)
    ws.quantization.apply()
    assert ws.model.opset("") == 21
    onnx.checker.check_model(ws.model.to_proto())
    ws.undo()
    assert ws.model.opset("") == 17


def test_excluded_nodes_are_left_float(ws):
    preview = ws.quantization.preview(QuantConfig(exclude_nodes=("/head/fc",)), samples=2)
    assert "/head/fc" not in preview.result.quantized_nodes
    assert ("/head/fc", "excluded") in preview.result.skipped


def test_calibration_that_does_not_fit_is_refused_in_one_line_before_any_work(ws, tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=np.zeros((2, 3), np.float32))
    with pytest.raises(GraphLensError, match="has no array for input"):
        ws.quantization.request(calibration=bad)
