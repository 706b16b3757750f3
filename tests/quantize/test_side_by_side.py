"""The target search's estimate pass: sums of squares computed inside one graph of the float and quantized model
side by side equal those of the two models' exposed activations; the search runs on the first samples only."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import graphlens.quantize.target as target
from graphlens.core.bundled import demo_model_path
from graphlens.numerics.run import ModelRunner
from graphlens.quantize import QuantConfig
from graphlens.quantize.calibrate import CalibrationData
from graphlens.quantize.sensitivity import GatedModel, GatedRunner, open_gated
from graphlens.quantize.side_by_side import side_by_side
from graphlens.workspace import Workspace
from tests.quantize.quant_models import conv_if_conv


def _gated_of_search(monkeypatch: pytest.MonkeyPatch, path, target_db: float, samples: int) -> GatedModel:
    """The gated model a target search on ``path`` builds (caught where the estimate takes it)."""
    seen: dict[str, GatedModel] = {}
    real = target.side_by_side

    def spy(gated, shaped):
        seen["gated"] = gated
        return real(gated, shaped)

    monkeypatch.setattr(target, "side_by_side", spy)
    ws = Workspace()
    ws.open(path)
    ws.quantization.quantize(QuantConfig(target_sqnr_db=target_db), samples=samples)
    return seen["gated"]


def _captured_gated(monkeypatch: pytest.MonkeyPatch, samples: int = 4) -> tuple[GatedModel, CalibrationData]:
    gated = _gated_of_search(monkeypatch, demo_model_path(), 20, samples)
    x = np.random.default_rng(1).uniform(0, 1, (2, 1, 3, 32, 32)).astype(np.float32)
    return gated, CalibrationData({gated.proto.graph.input[0].name: x}, "uniform")


def test_the_sums_inside_the_graph_equal_those_of_the_exposed_activations(monkeypatch):
    gated, data = _captured_gated(monkeypatch)
    activations = [g for g in gated.gates if g.record.kind == "activation"]
    assert activations
    exposed = open_gated(gated, [t for g in activations for t in (g.source, g.record.dequantized)])
    off = GatedRunner(exposed, gated.gates, set())
    on = GatedRunner(exposed, gated.gates, {g.name for g in gated.gates})
    both = side_by_side(gated, [])
    combined = ModelRunner(both.proto)
    assert combined.error is None
    for i in range(data.samples):
        feed = data.sample(i)
        floats, quantized = off.run(feed).outputs, on.run(feed).outputs
        got = combined.run(feed).outputs
        assert floats is not None and quantized is not None and got is not None
        for g in activations:
            x, s, q = (np.asarray(a, np.float64)
                       for a in (floats[g.source], quantized[g.source], quantized[g.record.dequantized]))
            names = both.sums[g.name]
            assert float(got[names.x2]) == pytest.approx(np.sum(x * x), rel=1e-4)
            assert float(got[names.added2]) == pytest.approx(np.sum((q - s) ** 2), rel=1e-3, abs=1e-9)
            assert float(got[names.accumulated2]) == pytest.approx(np.sum((q - x) ** 2), rel=1e-3, abs=1e-9)
        for name, twin in both.outputs.items():  # the float copy is the float model, the other the quantized
            np.testing.assert_allclose(got[name], floats[name], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(got[twin], quantized[name], rtol=1e-5, atol=1e-6)


def test_the_float_copy_keeps_no_quantize_nodes_and_shapes_are_read_without_the_tensors(monkeypatch):
    gated, data = _captured_gated(monkeypatch)
    layer = next(n for n in gated.proto.graph.node if n.name in gated.layer_gates and n.op_type == "Conv")
    both = side_by_side(gated, [layer.output[0]])
    float_copy = [n for n in both.proto.graph.node
                  if not n.name.endswith("__quantized") and not n.name.startswith("__")]
    assert not [n for n in float_copy if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    got = ModelRunner(both.proto).run(data.sample(0)).outputs
    assert got is not None
    exposed = open_gated(gated, [layer.output[0]])
    value = GatedRunner(exposed, gated.gates, set()).run(data.sample(0)).outputs
    assert value is not None
    assert list(got[both.shapes[layer.output[0]]]) == list(np.shape(value[layer.output[0]]))


def test_the_search_runs_on_the_first_samples_and_says_so(monkeypatch):
    monkeypatch.setattr(target, "MEASURED_ELEMENTS", 1)  # one sample for the measured pass and the runs
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantization.quantize(QuantConfig(), samples=6).output_sqnr_db
    ws.undo()
    result = ws.quantization.quantize(QuantConfig(target_sqnr_db=plain + 6), samples=6)
    assert result.target is not None
    assert result.target.samples == 1 and result.target.given_samples == 6
    assert "on the first sample of the 6 random samples" in result.target.line()
    assert "the target search ran" in "\n".join(result.lines())


def test_activation_gates_branch_so_an_off_gate_rounds_nothing_and_passes_the_float_value(monkeypatch):
    gated, data = _captured_gated(monkeypatch)
    ifs = [n for n in gated.proto.graph.node if n.op_type == "If"]
    activations = [g for g in gated.gates if g.record.kind == "activation"]
    assert len(ifs) == len(activations)
    main_graph_rounding = [n for n in gated.proto.graph.node if n.op_type == "QuantizeLinear"]
    assert not main_graph_rounding  # every activation's QuantizeLinear runs only inside its gate's branch
    runner = open_gated(gated)
    off = GatedRunner(runner, gated.gates, set()).run(data.sample(0)).outputs
    plain = ModelRunner(demo_float_model()).run(data.sample(0)).outputs
    assert off is not None and plain is not None
    for name, value in plain.items():
        np.testing.assert_allclose(off[name], value, rtol=1e-5, atol=1e-6)


def demo_float_model():
    """The demo model folded as quantize folds it (the gated model's float twin)."""
    ws = Workspace()
    ws.open(demo_model_path())
    ws.fold(list(QuantConfig().fold_rules))
    return ws.model.to_proto()


def test_a_subgraph_reading_the_outer_graph_reads_its_own_copy(monkeypatch, tmp_path):
    path = tmp_path / "with_if.onnx"
    onnx.save(conv_if_conv(), path)
    gated = _gated_of_search(monkeypatch, path, 80, 2)
    both = side_by_side(gated, [])
    ifs = [n for n in both.proto.graph.node if n.op_type == "If" and n.name.startswith("if")]
    assert len(ifs) == 2  # the model's own If, in each copy
    quantized_if = next(n for n in ifs if n.name.endswith("__quantized"))
    reads = {i for a in quantized_if.attribute for n in a.g.node for i in n.input}
    assert reads and all(r.endswith("__quantized") for r in reads)
    x = {"x": np.random.default_rng(2).normal(size=(1, 3, 8, 8)).astype(np.float32)}
    got = ModelRunner(both.proto).run(x).outputs
    on = GatedRunner(open_gated(gated), gated.gates, {g.name for g in gated.gates}).run(x).outputs
    off = GatedRunner(open_gated(gated), gated.gates, set()).run(x).outputs
    assert got is not None and on is not None and off is not None
    np.testing.assert_allclose(got["z"], off["z"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got[both.outputs["z"]], on["z"], rtol=1e-5, atol=1e-5)
    assert not np.allclose(on["z"], off["z"])  # the quantized copy is quantized
