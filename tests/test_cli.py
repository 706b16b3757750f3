"""The command line, run as a user runs it: in a separate process."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from onnx import TensorProto

from tests import models
from tests.bad_files import KINDS, make_bad_file


def graphlens(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "graphlens", *map(str, args)], capture_output=True, text=True, timeout=120
    )


def test_info_text(demo_path):
    result = graphlens("info", demo_path)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "demo.onnx" in out and "ir version" in out and "ai.onnx 17" in out
    assert "image  float32 [1, 3, 32, 32]" in out
    assert "BatchNormalization" in out and "initializers" in out


def test_info_json_on_models_with_subgraphs_constants_and_float16(write_model):
    cases = {
        "if.onnx": (models.if_with_conv_bn(), {"If": 1, "Conv": 2, "BatchNormalization": 1}),
        "consts.onnx": (
            models.conv_bn_params_behind_constants(),
            {"Constant": 2, "ConstantOfShape": 1, "Identity": 1, "Cast": 1, "Conv": 1, "BatchNormalization": 1},
        ),
        "half.onnx": (models.conv_bn(dtype=TensorProto.FLOAT16), {"Conv": 1, "BatchNormalization": 1}),
    }
    for name, (proto, expected) in cases.items():
        result = graphlens("info", write_model(proto, name), "--json")
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["op_counts"] == expected, name
        assert info["opsets"] == {"ai.onnx": 17}
        assert [i["name"] for i in info["inputs"]] == [i.name for i in proto.graph.input]
        assert [o["name"] for o in info["outputs"]] == [o.name for o in proto.graph.output]
    assert info["inputs"][0]["dtype"] == "float16"


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_prints_one_line_and_exits_2(tmp_path, kind):
    path, _ = make_bad_file(tmp_path, kind)
    result = graphlens("info", path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_debug_shows_the_traceback(tmp_path):
    path, _ = make_bad_file(tmp_path, "empty")
    result = graphlens("info", path, "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_gui_entry_rejects_a_bad_model_before_opening_a_window(tmp_path):
    path, _ = make_bad_file(tmp_path, "text")
    result = graphlens(path)
    assert result.returncode == 2 and str(path) in result.stderr


def test_unknown_command_line_option_is_a_usage_error():
    result = graphlens("info", "--no-such-flag")
    assert result.returncode == 2 and "usage" in result.stderr
