"""graphlens binarize: a valid model, the report, one line and exit 2 on bad input."""

from __future__ import annotations

import json

import onnx
import onnxruntime as ort
import pytest

from graphlens.cli import main
from graphlens.core.bundled import demo_model_path


@pytest.mark.parametrize("form", ["emulated", "structured"])
def test_cli_writes_a_valid_model_and_the_report(tmp_path, capsys, form):
    out, report = tmp_path / "b.onnx", tmp_path / "r.json"
    args = ["binarize", str(demo_model_path()), "-o", str(out), "--bits", "2", "--form", form, "--report", str(report)]
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "fold-bn: applied 7 times" in printed and "binarized 9 layers" in printed and "output SQNR:" in printed
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    data = json.loads(report.read_text())
    assert data["form"] == form and data["output_sqnr_db"] is not None
    assert len(data["layers"]) == 9
    for row in data["layers"]:
        assert {"node", "bits", "sqnr_db", "distinct_values"} <= set(row)
        assert row["bits"] == 2 and row["distinct_values"] <= 4


def test_cli_per_tensor_layers_and_exclusions(tmp_path):
    out, report = tmp_path / "b.onnx", tmp_path / "r.json"
    assert main(["binarize", str(demo_model_path()), "-o", str(out), "--per-tensor", "--layers",
                 "/stem/conv=3,/head/fc",
                 "--report", str(report)]) == 0
    layers = {row["node"]: row for row in json.loads(report.read_text())["layers"]}
    assert set(layers) == {"/stem/conv", "/head/fc"}
    assert layers["/stem/conv"]["bits"] == 3 and layers["/head/fc"]["bits"] == 1
    assert not layers["/stem/conv"]["per_kernel"]
    assert main(["binarize", str(demo_model_path()), "-o", str(out), "--exclude", "/stem/conv", "--report",
                 str(report)]) == 0
    assert "/stem/conv" not in {row["node"] for row in json.loads(report.read_text())["layers"]}


@pytest.mark.parametrize("extra", [["--bits", "0"], ["--exclude", "/nope"], ["--layer-bits", "/stem/conv"],
                                   ["--mean-bits", "3"], ["--calibration", "missing.npz"], ["--samples", "0"]])
def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys, extra):
    assert main(["binarize", str(demo_model_path()), "-o", str(tmp_path / "b.onnx"), *extra]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("graphlens")
