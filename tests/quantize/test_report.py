"""The command line's report, the workspace's undo step and event, the sensitivity scan."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from graphlens.cli import main
from graphlens.core.bundled import demo_model_path
from graphlens.quantize import QuantConfig, QuantizeCancelled
from graphlens.workspace import Workspace

FIELDS = {"node", "tensor", "kind", "sqnr_db", "mse", "cosine", "max_abs", "sensitivity_db"}


def test_cli_writes_a_valid_model_and_the_report(tmp_path, capsys):
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--report", str(report), "--sensitivity"]) == 0
    printed = capsys.readouterr().out
    assert "fold-bn: applied 7 times" in printed and "output SQNR:" in printed
    onnx.checker.check_model(onnx.load(out), full_check=True)
    data = json.loads(report.read_text())
    assert data["output_sqnr_db"] > 30
    assert data["layers"] and all(FIELDS <= set(row) for row in data["layers"])
    assert {row["kind"] for row in data["layers"]} == {"weight", "activation"}
    assert all(row["sensitivity_db"] is not None for row in data["layers"])


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    out = tmp_path / "q.onnx"
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--exclude", "/nope"]) == 2
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--calibration", str(tmp_path / "no.npz")]) == 2
    assert len(capsys.readouterr().err.strip().splitlines()) == 2


def test_target_sqnr_leaves_the_worst_layers_float(tmp_path):
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantize().output_sqnr_db
    ws.undo()
    result = ws.quantize(QuantConfig(target_sqnr_db=plain + 3))
    assert result.excluded_for_target and result.output_sqnr_db >= plain + 3
    assert not set(result.excluded_for_target) & set(result.per_node("sqnr_db"))


def test_workspace_quantize_is_one_undo_step_with_an_event():
    ws = Workspace()
    ws.open(demo_model_path())
    before = ws.model.to_proto().SerializeToString()
    seen = []
    ws.events.quantized.connect(seen.append)
    result = ws.quantize(samples=2)
    assert seen == [result] and ws.quantization is result
    assert ws.model.op_counts()["DequantizeLinear"] > 0
    per_node = result.per_node("sqnr_db")
    assert set(per_node) == set(result.quantized_nodes) and all(np.isfinite(v) for v in per_node.values())
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before


def test_cancel_leaves_the_model_as_it_was():
    ws = Workspace()
    ws.open(demo_model_path())
    before = ws.model.to_proto().SerializeToString()
    fractions = []
    with pytest.raises(QuantizeCancelled):
        ws.quantize(progress=fractions.append, cancelled=lambda: len(fractions) >= 1)
    assert ws.model.to_proto().SerializeToString() == before and ws.quantization is None
