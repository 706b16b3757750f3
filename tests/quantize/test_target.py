"""The target search: the fewest layers left float for a target, and the best model found when it is out of reach."""

from __future__ import annotations

import json
import math

import pytest

from graphlens.cli import main
from graphlens.core.bundled import demo_model_path
from graphlens.quantize import QuantConfig
from graphlens.quantize.target import search
from graphlens.workspace import Workspace

ORDER = [f"layer{i}" for i in range(40)]


def _noise_model(bad: int):
    """An output SQNR where each of the first ``bad`` layers of ORDER costs a lot and the rest little."""
    calls: list[int] = []

    def value(excluded: list[str]) -> float:
        calls.append(len(excluded))
        noise = sum(1.0 if i < bad else 0.001 for i in range(len(excluded), len(ORDER)))
        return 30.0 - 10 * math.log10(noise)

    return value, calls


def test_search_finds_the_fewest_layers_in_a_few_runs():
    value, calls = _noise_model(bad=7)
    share = {name: 1.0 if i < 7 else 0.001 for i, name in enumerate(ORDER)}
    target = value(ORDER[:7]) - 0.01  # reached exactly when the 7 bad layers are float
    start = value([])
    calls.clear()
    found = search(ORDER, share, target, start, value, as_noise=True)
    assert found.met and found.excluded == ORDER[:7]
    assert len(calls) <= 6  # far fewer than one run per layer
    assert [k for k, _ in found.runs[1:]] == calls


def test_search_out_of_reach_keeps_the_best_and_a_quantized_layer():
    value, _ = _noise_model(bad=40)
    share = dict.fromkeys(ORDER, 1.0)
    found = search(ORDER, share, 1000.0, value([]), value, as_noise=True)
    assert not found.met
    assert len(found.excluded) == len(ORDER) - 1  # never every layer float
    assert found.reached == max(v for _, v in found.runs)


def test_a_reachable_target_is_met_with_the_search_figure_measured_again():
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantize(QuantConfig(bias_correction=False)).output_sqnr_db
    ws.undo()
    result = ws.quantize(QuantConfig(bias_correction=False, target_sqnr_db=plain + 6))
    assert result.target is not None and result.target.met
    assert result.output_sqnr_db >= plain + 6
    assert result.output_sqnr_db == pytest.approx(result.target.reached, abs=0.05)  # the gated runs are the model
    assert 0 < len(result.excluded_for_target) < len(result.estimated_db)
    assert not set(result.excluded_for_target) & set(result.quantized_nodes)


def test_an_unreachable_target_writes_the_best_model_and_exits_1(tmp_path, capsys):
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    code = main(["quantize", str(demo_model_path()), "-o", str(out), "--target-sqnr", "300", "--report", str(report)])
    assert code == 1
    assert out.exists()
    data = json.loads(report.read_text())
    assert data["target"]["met"] is False and data["target"]["target"] == 300
    layers = len(data["estimated_db"])
    assert len(data["target"]["left_float"]) == layers - 1  # the best found, with a layer still quantized
    assert data["counts"]["weight"] >= 1
    assert data["output_sqnr_db"] == pytest.approx(data["target"]["reached"], abs=0.05)
    assert "NOT reached" in capsys.readouterr().out
