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


def test_a_target_out_of_reach_stops_at_the_floor_and_keeps_the_best_model_measured():
    value, calls = _noise_model(bad=40)
    gain = dict.fromkeys(ORDER, 1.0)
    start = value([])
    calls.clear()
    found = search(ORDER, gain, 1000.0, start, value, as_noise=True)
    assert calls == [len(ORDER) - 1, 1, 2, 4, 8, 16, 32]  # every layer float but one, then fewer, doubling
    assert found.floor == pytest.approx(value(ORDER[:-1]))
    # each layer float removes noise here, so the best measured is every layer float but one
    assert not found.met and found.excluded == ORDER[:-1] and found.reached == found.floor
    assert found.reached == max(v for _, v in found.runs)
    line = found.line()
    assert "out of reach" in line and f"kept the best model found, {found.reached:.4g} dB with 39 layers" in line


def test_out_of_reach_keeps_every_layer_quantized_when_nothing_measured_beats_it():
    """Leaving layers float can make the output worse (a quantized layer clips an earlier layer's rare errors)."""
    def value(excluded: list[str]) -> float:
        return 30.0 - 0.1 * len(excluded)

    found = search(ORDER, dict.fromkeys(ORDER, 1.0), 50.0, value([]), value, as_noise=True)
    assert not found.met and found.excluded == [] and found.reached == 30.0
    assert "kept every layer quantized, the best found: 30 dB" in found.line()


def test_a_target_missed_with_every_layer_float_but_one_is_still_found_with_fewer():
    """The layer left quantized last can hold the output below the target by itself (a classifier's input layer);
    leaving two others float reached it: the search must not call the target out of reach."""
    def value(excluded: list[str]) -> float:
        return 60.0 if len(excluded) == 2 else 30.0 + 0.1 * len(excluded)

    found = search(ORDER, dict.fromkeys(ORDER, 1.0), 50.0, value([]), value, as_noise=True)
    assert found.met and found.excluded == ORDER[:2] and found.reached == 60.0 and found.floor is None
    assert [k for k, _ in found.runs] == [0, len(ORDER) - 1, 1, 2]


def test_out_of_reach_keeps_the_best_the_probes_measured_below_every_layer_float_but_one():
    def value(excluded: list[str]) -> float:  # 2 float is the best there is, and still short of the target
        return 45.0 if len(excluded) == 2 else 30.0 + 0.1 * len(excluded)

    found = search(ORDER, dict.fromkeys(ORDER, 1.0), 50.0, value([]), value, as_noise=True)
    assert not found.met and found.excluded == ORDER[:2] and found.reached == 45.0
    assert found.floor == pytest.approx(33.9)
    assert "33.9 dB with every layer float but one; kept the best model found, 45 dB with 2 layers" in found.line()


def test_the_chosen_count_is_the_fewest_measured_to_reach_the_target_when_the_value_does_not_rise_steadily():
    def value(excluded: list[str]) -> float:  # leaving layer 3 float alone makes it worse, as on a recognizer
        return 10.0 + len(excluded) - (5.0 if len(excluded) == 4 else 0.0)

    found = search(ORDER, dict.fromkeys(ORDER, 1.0), 16.0, value([]), value, as_noise=True)
    assert found.met and found.reached >= 16.0
    assert len(found.excluded) == min(k for k, v in found.runs if v >= 16.0)


def test_a_reachable_target_is_met_with_the_search_figure_measured_again():
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantization.quantize(QuantConfig(bias_correction=False)).output_sqnr_db
    ws.undo()
    result = ws.quantization.quantize(QuantConfig(bias_correction=False, target_sqnr_db=plain + 6))
    assert result.target is not None and result.target.met
    assert result.output_sqnr_db >= plain + 6
    assert result.output_sqnr_db == pytest.approx(result.target.reached, abs=0.05)  # the gated runs are the model
    assert 0 < len(result.excluded_for_target) < len(result.estimated_db)
    assert not set(result.excluded_for_target) & set(result.quantized_nodes)


def test_an_unreachable_target_writes_the_best_model_found_says_why_and_exits_1(tmp_path, capsys):
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    code = main(["quantize", str(demo_model_path()), "-o", str(out), "--target-sqnr", "300", "--report", str(report)])
    assert code == 1
    assert out.exists()
    data = json.loads(report.read_text())
    assert data["target"]["met"] is False and data["target"]["target"] == 300
    assert data["target"]["floor"] < 300
    assert data["target"]["input_db"] is not None  # how much the input's own quantization costs
    runs = data["target"]["runs"]
    best = max(v for _, v in runs)
    assert data["target"]["reached"] == best and len(data["target"]["left_float"]) == min(
        k for k, v in runs if v == best)  # the best model measured is the one written
    assert data["output_sqnr_db"] == pytest.approx(best, abs=0.05)
    assert data["counts"]["weight"] >= 1 and not {r["node"] for r in data["layers"]} & set(data["target"]["left_float"])
    out = capsys.readouterr().out
    assert "out of reach on the" in out and "random samples" in out and "kept the best model found" in out


def test_the_report_quotes_the_search_figure_on_the_samples_it_ran_and_the_int8_share(tmp_path):
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantization.quantize(QuantConfig(bias_correction=False)).output_sqnr_db
    ws.undo()
    result = ws.quantization.quantize(QuantConfig(bias_correction=False, target_sqnr_db=plain + 6))
    assert result.target is not None and result.target.samples == result.samples
    assert result.output_sqnr_db == result.target.reached  # one figure, the search's
    assert f"on the {result.samples} random samples" in result.target.line()
    assert 0 < result.target.int8_macs < 1 and "% of the MACs int8" in result.target.line()


@pytest.mark.parametrize("target", [12.0, 13.0, 14.0, 16.0])
def test_a_dip_below_the_best_value_measured_does_not_steer_the_search(target):
    """f need not rise with k: a probe can read lower than fewer layers float did (a recognizer: 9.4 dB at 7 layers
    float, 15.6 at 5). The search goes on from the best value measured, as if that probe had read it, instead of
    following the dip's slope far up the list (there, past the recognizer's 23 layers to 32)."""
    order = [f"layer{i}" for i in range(40)]
    gain = {name: 10.0 if i < 10 else 1.0 for i, name in enumerate(order)}

    def clean(k: int) -> float:
        return 10.0 + 10 * math.log10(40 / max(40 - k, 0.5))

    def probes(low: float) -> list[int]:
        first: list[int] = []

        def value(excluded: list[str]) -> float:
            k = len(excluded)
            if k not in (39, 4) and not first and clean(k) < target:  # the first probe below the answer
                first.append(k)
                return low
            return clean(k)

        found = search(order, gain, target, 10.0, value, as_noise=True, steady=4)
        assert len(found.excluded) == min(k for k in range(40) if clean(k) >= target)
        return [k for k, _ in found.runs]

    assert probes(5.0) == probes(clean(4))


def test_a_target_search_that_would_not_fit_is_refused_in_one_line_and_writes_nothing(tmp_path, capsys,
                                                                                       monkeypatch):
    """The search holds copies of the weights and runs two models at once, beside what the quantization holds:
    past the memory limit it is refused before anything is built for it (a plain quantization under the same limit
    still runs)."""
    from graphlens.quantize import quantize, tuning

    model, out = demo_model_path(), tmp_path / "q.onnx"
    needs: list[int] = []
    real_search, real_quantize = tuning.search_need, quantize.quantize_need
    monkeypatch.setattr(tuning, "search_need", lambda *args: needs.append(real_search(*args)) or needs[-1])
    monkeypatch.setattr(quantize, "quantize_need", lambda *args: needs.append(real_quantize(*args)) or needs[-1])
    assert main(["quantize", str(model), "-o", str(out), "--target-sqnr", "60"]) in (0, 1) and out.exists()
    out.unlink()
    capsys.readouterr()
    assert len(needs) == 2  # the quantization's own, then the search's on top
    monkeypatch.setenv("GRAPHLENS_MEMORY_LIMIT", str(sum(needs) - 1))
    assert main(["quantize", str(model), "-o", str(out), "--target-sqnr", "60"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphlens: target search not run: it would need") and "GRAPHLENS_MEMORY_LIMIT" in err
    assert "\n" not in err and not out.exists()
    assert main(["quantize", str(model), "-o", str(out)]) == 0  # without the search it fits
