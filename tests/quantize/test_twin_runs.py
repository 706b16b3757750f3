"""Calibration on two one-thread sessions at once gives what one session gives, in the samples' order."""

from __future__ import annotations

import numpy as np
import pytest

import graphlens.numerics.twin_runs as twin_runs
import graphlens.quantize.calibrate as calibrate
from graphlens.quantize import QuantConfig
from graphlens.quantize.calibrate import CalibrationData, KeptRuns, QuantizeCancelled, collect_ranges
from tests.quantize.quant_models import layer

SAMPLES = 7


def _data() -> CalibrationData:
    rng = np.random.default_rng(3)
    # each sample wider than the last, so a range or a moving average taken out of order would differ
    x = np.stack([rng.normal(0, 1 + k, (1, 4, 6, 6)) for k in range(SAMPLES)]).astype(np.float32)
    return CalibrationData({"x": x}, "given")


def _calibrate(monkeypatch, twins: bool, method: str, keep: KeptRuns | None = None, cancelled=None):
    monkeypatch.setattr(twin_runs, "usable_cores", lambda: 2)
    used = []
    real_map = twin_runs.TwinRunners.map

    def spy(self, jobs, cancelled=None):
        used.append(True)
        return real_map(self, jobs, cancelled)

    monkeypatch.setattr(twin_runs.TwinRunners, "map", spy)
    if not twins:
        monkeypatch.setattr(calibrate, "twins_worthwhile", lambda *args: False)
    model = layer("Conv")  # x: [1, 4, 6, 6], a fixed batch: the samples run one at a time
    tensors = [node.output[0] for node in model.graph.node] + ["x"]
    ranges = collect_ranges(model, tensors, _data(), QuantConfig(method=method), keep=keep, cancelled=cancelled)
    monkeypatch.undo()
    assert bool(used) == twins
    return ranges


@pytest.mark.parametrize("method", ["minmax", "ema"])
def test_twin_sessions_give_the_ranges_of_one(monkeypatch, method):
    one = _calibrate(monkeypatch, False, method)
    two = _calibrate(monkeypatch, True, method)
    assert one.keys() == two.keys()
    for name in one:
        assert (two[name].low, two[name].high) == pytest.approx((one[name].low, one[name].high), rel=1e-6)


def test_twin_sessions_keep_the_reports_runs_in_order(monkeypatch):
    one, two = KeptRuns(upto=3), KeptRuns(upto=3)
    _calibrate(monkeypatch, False, "minmax", one)
    _calibrate(monkeypatch, True, "minmax", two)
    assert [b.done for b in two.batches] == [b.done for b in one.batches] == [1, 2, 3]
    for a, b in zip(one.batches, two.batches):
        np.testing.assert_array_equal(a.feed["x"], b.feed["x"])
        assert a.outputs[0].keys() == b.outputs[0].keys()
        for name in a.outputs[0]:
            np.testing.assert_allclose(b.outputs[0][name], a.outputs[0][name], rtol=1e-6)


def test_a_cancel_stops_the_twins(monkeypatch):
    calls = []

    def cancelled() -> bool:
        calls.append(1)
        return len(calls) > 3

    with pytest.raises(QuantizeCancelled):
        _calibrate(monkeypatch, True, "minmax", cancelled=cancelled)
    assert len(calls) == 4  # three samples started, the fourth refused
