"""``graphlens compare`` as a user runs it: the summary, the JSON shape, exit codes."""

from __future__ import annotations

import json

from graphlens.core.model import Model
from tests.compare.models import chain
from tests.test_cli import graphlens


def test_the_summary_counts_and_names_what_changed(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    Model(chain(pads=1)).save(a)
    Model(chain(pads=0)).save(b)
    result = graphlens("compare", a, b, "--no-numeric")
    assert result.returncode == 0, result.stderr
    assert "pairs: 3 same, 1 changed, 0 added, 0 removed" in result.stdout
    assert "attribute pads: [1,1,1,1] → [0,0,0,0]" in result.stdout
    assert graphlens("compare", a, b, "--no-numeric", "--check").returncode == 1
    assert graphlens("compare", a, a, "--no-numeric", "--check").returncode == 0


def test_json_has_pairs_with_names_status_changes_and_error_and_counts(tmp_path):
    a, b = tmp_path / "a.onnx", tmp_path / "b.onnx"
    Model(chain()).save(a)
    Model(chain(extra_branch=True)).save(b)
    result = graphlens("compare", a, b, "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["counts"] == {"same": 4, "changed": 0, "added": 2, "removed": 0}
    first = data["pairs"][0]
    assert set(first) >= {"a", "b", "status", "changes", "error"}
    assert first["a"] == ["conv1"] and first["b"] == ["conv1"] and first["status"] == "same"
    assert first["error"]["max_abs"] == 0.0 and first["error"]["sqnr_db"] is None  # exact: infinite SQNR
    added = [p for p in data["pairs"] if p["status"] == "added"]
    assert [p["b"] for p in added] == [["side_conv"], ["side_tanh"]] and all(p["a"] == [] for p in added)


def test_a_missing_model_is_one_line_and_exit_2(tmp_path):
    a = tmp_path / "a.onnx"
    Model(chain()).save(a)
    result = graphlens("compare", a, tmp_path / "missing.onnx")
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "missing.onnx: no such file" in result.stderr
