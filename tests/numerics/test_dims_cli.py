"""``graphlens fold --check`` and ``graphlens diff`` on models with dynamic dims, run as a user runs them."""

from __future__ import annotations

import json

import numpy as np

from tests.numerics import dynamic_models as dm
from tests.test_cli import graphlens


def test_fold_check_gives_a_verdict_on_an_fpn_and_says_which_dims(write_model, tmp_path):
    path = write_model(dm.fpn(levels=6), "fpn.onnx")
    out, report = tmp_path / "folded.onnx", tmp_path / "report.json"
    result = graphlens("fold", path, "-o", out, "--check", "--report", report)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "fold-bn: applied 1 time" in result.stdout
    assert "inputs: random (seed 0); dims N=1 H=64 W=64 (chosen automatically, 2 tries)" in result.stdout
    assert "PASS" in result.stdout and "not available" not in result.stdout
    numeric = json.loads(report.read_text())["numeric"]
    assert numeric["passed"] is True
    assert numeric["inputs"]["dims"] == {"values": {"N": 1, "H": 64, "W": 64}, "chosen": ["N", "H", "W"],
                                         "tries": 2, "remembered": False}


def test_fold_check_on_unnamed_dims_and_dims_given_by_label(write_model, tmp_path):
    path = write_model(dm.fpn([-1, 3, "?", "?"]), "paddle_style.onnx")
    result = graphlens("fold", path, "-o", tmp_path / "o.onnx", "--check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dims x[0]=1 x[2]=32 x[3]=32 (chosen automatically, 1 try)" in result.stdout
    result = graphlens("fold", path, "-o", tmp_path / "o.onnx", "--check", "--dim", "x[3]=96")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dims x[0]=1 x[2]=32 x[3]=96 (x[0], x[2] chosen automatically, 1 try)" in result.stdout


def test_fold_check_on_a_model_that_runs_at_no_size(write_model, tmp_path):
    path = write_model(dm.runs_at_no_size(), "stubborn.onnx")
    result = graphlens("fold", path, "-o", tmp_path / "o.onnx", "--check")  # the check could not run: as diff, 2
    assert result.returncode == 2 and "Traceback" not in result.stderr
    line = [text for text in result.stdout.splitlines() if "not available" in text]
    assert len(line) == 1 and line[0].startswith("numeric diff not available: onnxruntime cannot run stubborn: ")
    assert "no size tried runs" in line[0]


def test_a_bad_dim_name_exits_2_with_one_line(write_model, tmp_path):
    path = write_model(dm.fpn(), "fpn.onnx")
    result = graphlens("fold", path, "-o", tmp_path / "o.onnx", "--check", "--dim", "height=32")
    assert result.returncode == 2
    assert result.stderr.strip() == ("graphlens: dimension 'height' is not a dynamic dimension of the model's "
                                     "inputs; its dynamic dimensions are: N, H, W")


def test_diff_with_shared_dims_and_with_an_npz(write_model, tmp_path):
    path = write_model(dm.shared_seq(), "seq.onnx")
    result = graphlens("diff", path, path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == "inputs: random (seed 0); dims batch=1 seq=32 (chosen automatically, 1 try)"
    arrays = tmp_path / "in.npz"
    np.savez(arrays, a=np.ones((2, 5, 8), np.float32), b=np.ones((5, 8), np.float32))
    result = graphlens("diff", path, path, "--inputs", arrays, "--json")
    assert result.returncode == 0, result.stderr
    inputs = json.loads(result.stdout)["inputs"]
    assert inputs["file"] == str(arrays) and inputs["dims"]["values"] == {"batch": 2, "seq": 5}
