"""The command line's report, the workspace's undo step and event, the sensitivity scan."""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from graphlens.cli import main
from graphlens.core.bundled import demo_model_path
from graphlens.core.task import Cancelled, Task
from graphlens.quantize import QuantConfig
from graphlens.workspace import Workspace

FIELDS = {"node", "tensor", "kind", "sqnr_db", "mse", "cosine", "max_abs", "sensitivity_db"}


def test_cli_writes_a_valid_model_and_the_report(tmp_path, capsys):
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--report", str(report), "--sensitivity"]) == 0
    printed = capsys.readouterr().out
    assert "fold-bn: applied 7 times" in printed and "output SQNR:" in printed
    assert "calibration: 8 samples random (seed 0: image 1×3×32×32 normal)" in printed  # what was drawn, shown
    assert "note: no calibration data" in printed  # a model from random samples is not one to use
    onnx.checker.check_model(onnx.load(out), full_check=True)
    data = json.loads(report.read_text())
    assert data["output_sqnr_db"] > 30
    assert data["calibration"]["source"] == "random (seed 0: image 1×3×32×32 normal)"
    assert data["calibration"]["random"] is True
    assert data["layers"] and all(set(row) >= FIELDS for row in data["layers"])
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
    plain = ws.quantization.quantize().output_sqnr_db
    ws.undo()
    result = ws.quantization.quantize(QuantConfig(target_sqnr_db=plain + 3))
    assert result.excluded_for_target and result.output_sqnr_db >= plain + 3
    assert not set(result.excluded_for_target) & set(result.per_node("sqnr_db"))


def test_workspace_quantize_is_one_undo_step_with_an_event():
    ws = Workspace()
    ws.open(demo_model_path())
    before = ws.model.to_proto().SerializeToString()
    seen = []
    ws.quantization.events.applied.connect(seen.append)
    result = ws.quantization.quantize(samples=2)
    assert seen == [result] and ws.quantization.applied is result
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
    with pytest.raises(Cancelled):
        ws.quantization.quantize(task=Task(progress=fractions.append, cancelled=lambda: len(fractions) >= 1))
    assert ws.model.to_proto().SerializeToString() == before and ws.quantization.applied is None


@pytest.mark.parametrize("batch", [1, None])  # a fixed batch of 1 (one run per sample) and a dynamic one (stacked)
def test_the_report_on_kept_calibration_runs_equals_running_both_models_again(batch, monkeypatch):
    """By default the report reuses the calibration's float runs; its numbers are those of running both afresh."""
    import graphlens.quantize.quantize as quantize_module
    from graphlens.core.model import Model
    from graphlens.quantize.calibrate import KeptRuns, random_calibration
    from graphlens.quantize.quantize import quantize_model
    from tests.quantize.quant_models import two_convs

    proto = two_convs()
    if batch is None:
        for value in (*proto.graph.input, *proto.graph.output):
            value.type.tensor_type.shape.dim[0].dim_param = "N"
    data = random_calibration(proto, 5, seed=1)

    def report(**options):
        model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
        result = quantize_model(model, QuantConfig(), data, **options)
        return result.output_sqnr_db, {(r.tensor, r.kind): (r.sqnr_db, r.local_sqnr_db, r.mse, r.max_abs)
                                       for r in result.layers}

    from graphlens.numerics.run import ModelRunner

    runs = []
    real_run = ModelRunner.run
    monkeypatch.setattr(ModelRunner, "run", lambda self, feed: runs.append(1) or real_run(self, feed))

    def counted(**options):
        runs.clear()
        return report(**options), len(runs)

    kept, kept_runs = counted()
    fresh, fresh_runs = counted(evaluation=data)  # other evaluation samples: nothing kept, both models run
    monkeypatch.setattr(quantize_module, "KeptRuns", lambda **options: KeptRuns(budget=1, **options))
    over_budget, over_budget_runs = counted()
    assert kept_runs < fresh_runs == over_budget_runs  # the float model ran once fewer per batch
    for other in (fresh, over_budget):
        assert other[0] == pytest.approx(kept[0], rel=1e-5)
        assert other[1].keys() == kept[1].keys()
        for key, numbers in kept[1].items():
            assert other[1][key] == pytest.approx(numbers, rel=1e-4, abs=1e-9), key


def test_a_model_whose_layers_sit_in_branches_is_refused_naming_them(tmp_path, capsys):
    """As in Silero VAD: every Conv inside an If's branches. The refusal says where the layers are."""
    from tests.compare.models import if_model

    path = tmp_path / "branches.onnx"
    model = if_model()
    for body in model.graph.node[0].attribute:  # shapes the full check requires of every graph output
        body.g.output[0].CopyFrom(onnx.helper.make_tensor_value_info(body.g.output[0].name, 1, [1, 4, 8, 8]))
    model.graph.output[0].CopyFrom(onnx.helper.make_tensor_value_info("y", 1, [1, 4, 8, 8]))
    onnx.save(model, path)
    for command in ("quantize", "binarize"):
        assert main([command, str(path), "-o", str(tmp_path / "out.onnx")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1
        assert f"nothing to {command}" in err and "2 such layers sit inside the bodies of If 'branch'" in err
    assert not (tmp_path / "out.onnx").exists()


def test_a_layer_with_an_infinite_error_is_written_as_strict_json():
    # a NaN in the quantized model where the float model has a number: SQNR −inf, MSE and max abs +inf
    from graphlens.numerics.metrics import error_stats
    from graphlens.quantize.quantize import LayerError

    bad = error_stats(np.array([1.0, 2.0], np.float32), np.array([1.0, np.nan], np.float32), fast=True)
    layer = LayerError("conv", "x", "activation", bad.sqnr_db, bad.mse, bad.cosine, bad.max_abs,
                       bad.sqnr_db, bad.mse, bad.cosine, bad.max_abs, ["conv"], [0.1], [0], "uint8")
    data = json.loads(json.dumps(layer.to_dict(), allow_nan=False))
    assert data["sqnr_db"] is None and data["mse"] is None and data["max_abs"] is None
    assert data["local_mse"] is None and data["cosine"] == 1.0


def test_the_output_sqnr_of_several_outputs_is_the_worst_of_theirs():
    """A small output beside a large, more accurate one (a recurrent model's state): pooled into one signal over
    one noise the small one's error would vanish (silero-vad read 113 dB where its probability had 34 dB)."""
    from onnx import TensorProto, helper

    from graphlens.core.model import Model
    from graphlens.quantize import CalibrationData, quantize_model
    from tests import models
    from tests.quantize.quant_models import layer

    proto = layer("Conv")
    proto.graph.node.append(helper.make_node("Mul", ["x", "big"], ["state"], name="state"))
    proto.graph.initializer.append(models.init("big", np.array(1e4, np.float32)))
    proto.graph.output.append(models.tensor("state", TensorProto.FLOAT, [1, 4, 6, 6]))
    data = CalibrationData({"x": np.random.default_rng(0).normal(size=(4, 1, 4, 6, 6)).astype(np.float32)}, "test")
    result = quantize_model(Model(proto), QuantConfig(equalize="off", weight_bits=4), data)
    each = result.outputs_sqnr_db
    assert each["state"] > each["y"] + 3  # the large output is the better one: pooled, it would set the figure
    assert result.output_sqnr_db == each["y"] == min(each.values())


def test_the_report_computed_on_several_threads_equals_it_computed_on_one(monkeypatch):
    """Large activations' statistics are computed on every core; each tensor's still on one thread, in the
    same order, so every figure is the same to the bit."""
    import graphlens.quantize.evaluate as evaluate
    from graphlens.core.model import Model
    from graphlens.quantize.calibrate import random_calibration
    from graphlens.quantize.quantize import quantize_model
    from tests.quantize.quant_models import two_convs

    proto = two_convs()
    data = random_calibration(proto, 4, seed=3)
    threads: list[int] = []
    real_pool = evaluate.ThreadPoolExecutor
    monkeypatch.setattr(evaluate, "ThreadPoolExecutor", lambda n: threads.append(n) or real_pool(n))
    monkeypatch.setattr(evaluate.os, "cpu_count", lambda: 2)

    def layers(parallel_from: int) -> list[dict]:
        monkeypatch.setattr(evaluate, "PARALLEL_ELEMENTS", parallel_from)
        result = quantize_model(Model(onnx.ModelProto.FromString(proto.SerializeToString())), QuantConfig(), data)
        return [layer.to_dict() for layer in result.layers]

    alone = layers(1 << 60)
    assert threads == []
    assert layers(0) == alone and threads == [2]
