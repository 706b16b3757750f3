"""quantize's equalization: applied where it raises the quantized output's SQNR, said in the report, undone as one."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics.run import run_model
from graphlens.quantize import QuantConfig, quantize_model
from graphlens.quantize.calibrate import CalibrationData, random_calibration
from graphlens.rewrites.edit import EditHistory
from tests.rewrites.test_equalize import SPREAD, chain


def _quantize(proto: onnx.ModelProto, data: CalibrationData, evaluation: CalibrationData | None = None, **config):
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    session = EditHistory(model)
    result = quantize_model(model, QuantConfig(**config), data, session, evaluation=evaluation)
    return model, session, result


def _uneven_first_layer() -> onnx.ModelProto:
    """A depthwise layer whose channels' weights are SPREAD apart, without a bias, then an even pointwise layer."""
    proto = chain(groups=(6, 1), channels=(6, 6, 5), spread=False)
    for init in proto.graph.initializer:
        value = onnx.numpy_helper.to_array(init)
        if init.name == "l1.w":
            value = value * SPREAD[:, None, None, None]
        elif init.name == "l1.b":
            value = np.zeros_like(value)
        init.CopyFrom(onnx.numpy_helper.from_array(value.astype(np.float32), init.name))
    return proto


def _uneven_inputs(proto: onnx.ModelProto) -> CalibrationData:
    """Input channel c divided by SPREAD[c]: the tensor between the layers is even, and every channel matters alike
    to the output; equalizing the weights would spread that tensor's channels three decades apart."""
    data = random_calibration(proto, 16, seed=1)
    x = data.arrays["x"] / SPREAD[None, None, :, None, None].astype(np.float32)
    return CalibrationData({"x": x.astype(np.float32)}, "uneven", data.dims)


def test_auto_equalizes_a_model_that_needs_it_and_says_so():
    proto = chain()  # channels three decades apart, the next layer making up for it
    data = random_calibration(proto, 16, seed=1)
    model, session, result = _quantize(proto, data, per_channel=False)
    eq = result.equalization
    assert eq is not None and eq.applied and eq.mode == "auto"
    assert len(eq.chains) == 1 and "Conv 'l1'" in eq.chains[0]
    assert eq.sqnr_with_db > eq.sqnr_without_db + 3.0
    line = next(text for text in result.lines() if text.startswith("equalize"))
    assert line.startswith("equalize applied: 1 chain; output SQNR on 16 calibration samples")
    assert result.to_dict()["equalization"]["applied"] is True
    _, _, off = _quantize(proto, data, per_channel=False, equalize="off")
    assert off.equalization is None and result.output_sqnr_db > off.output_sqnr_db + 3.0
    session.undo()  # one step: equalization and quantization together
    assert model.to_proto().SerializeToString() == proto.SerializeToString() or \
        [n.op_type for n in model.to_proto().graph.node] == [n.op_type for n in proto.graph.node]
    feed = {"x": data.arrays["x"][0]}
    np.testing.assert_array_equal(run_model(model, feed).outputs["y"], run_model(proto, feed).outputs["y"])


@pytest.mark.parametrize("kept", ["equalized", "as it is"])
def test_the_trials_arm_kept_is_written_as_inserting_the_pairs_would(monkeypatch, kept):
    """With nothing after the trial to change it, the arm the trial kept is the model written, in one edit, not
    quantized a second time: the same model to the byte and the same report as inserting the pairs again, whichever
    arm it is; one undo gives back the original, to the byte."""
    from graphlens.quantize import equalization

    proto = chain() if kept == "equalized" else _uneven_first_layer()
    data = random_calibration(proto, 16, seed=1) if kept == "equalized" else _uneven_inputs(proto)
    per_channel = kept != "equalized"
    model, session, adopted = _quantize(proto, data, per_channel=per_channel)
    written = model.to_proto().SerializeToString()
    session.undo()
    assert model.to_proto().SerializeToString() == proto.SerializeToString()
    trial = equalization._trial

    def without_the_arm(*args, **kwargs):
        better, calibrated = trial(*args, **kwargs)
        assert calibrated.arm is not None  # the default path writes the arm
        calibrated.arm = None
        return better, calibrated

    monkeypatch.setattr(equalization, "_trial", without_the_arm)
    again, _, inserted = _quantize(proto, data, per_channel=per_channel)
    assert adopted.equalization.applied == (kept == "equalized") == inserted.equalization.applied
    assert again.to_proto().SerializeToString() == written
    assert adopted.to_dict() == inserted.to_dict()


def test_auto_leaves_it_off_where_it_widens_the_activations():
    proto = _uneven_first_layer()
    data = _uneven_inputs(proto)
    _, _, result = _quantize(proto, data)
    eq = result.equalization
    assert eq is not None and not eq.applied and len(eq.chains) == 1
    assert eq.sqnr_with_db < eq.sqnr_without_db
    assert any(text.startswith("equalize not applied") for text in result.lines())
    _, _, forced = _quantize(proto, data, equalize="on")
    assert forced.equalization.applied and forced.output_sqnr_db < result.output_sqnr_db


def test_an_evaluate_score_decides_instead_of_the_sqnr():
    proto = chain()
    data = random_calibration(proto, 8, seed=1)
    scored: list[bool] = []

    def prefers_the_original(path: str) -> float:  # a task score at odds with the SQNR
        equalized = any(".equalized" in init.name for init in onnx.load(path).graph.initializer)
        scored.append(equalized)
        return 0.0 if equalized else 1.0

    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    result = quantize_model(model, QuantConfig(per_channel=False), data, evaluate=prefers_the_original)
    eq = result.equalization
    assert eq.sqnr_with_db > eq.sqnr_without_db and not eq.applied
    assert (eq.score_without, eq.score_with) == (1.0, 0.0) and scored[:2] == [False, True]
    assert "score 1 without, 0 with" in eq.line()


def test_a_model_without_chains_reports_none_and_a_bad_mode_is_one_line():
    from tests.quantize.quant_models import layer

    proto = layer("Conv")
    _, _, result = _quantize(proto, random_calibration(proto, 4))
    assert result.equalization is not None and not result.equalization.applied
    assert "equalize: no chain of layers to equalize" in result.lines()
    with pytest.raises(GraphLensError, match="unknown equalize mode 'maybe'; modes: auto, on, off"):
        QuantConfig(equalize="maybe")


def test_trials_run_on_the_first_samples_within_the_budget():
    data = CalibrationData({"x": np.zeros((10, 1, 3, 100, 100), np.float32)}, "zeros")
    assert data.first(30_000 * 3).samples == 3
    assert data.first(1).samples == 1
    assert data.first(10**9) is data


def test_large_calibration_sets_are_measured_on_their_first_samples_and_the_report_says_so(monkeypatch):
    import graphlens.quantize.equalization as equalization
    from tests.quantize.quant_models import two_convs

    proto = two_convs()
    data = random_calibration(proto, 5, seed=1)
    per_sample = sum(int(a[0].size) for a in data.arrays.values())
    monkeypatch.setattr(equalization, "TRIAL_ELEMENTS", 2 * per_sample)
    _, _, result = _quantize(proto, data)
    assert result.measured_samples == 2 and result.samples == 5
    assert "(errors on the first 2 of the 5 calibration samples)" in next(
        line for line in result.lines() if line.startswith("output SQNR"))
    _, _, separate = _quantize(proto, data, evaluation=data.take(range(2)))
    assert separate.measured_samples == 0
    assert result.output_sqnr_db == pytest.approx(separate.output_sqnr_db, rel=1e-5)


def test_the_command_takes_equalize_and_reports_it(tmp_path, capsys):
    import json

    from graphlens.cli import main

    source, out, report = tmp_path / "chain.onnx", tmp_path / "q.onnx", tmp_path / "r.json"
    onnx.save(chain(), source)
    assert main(["quantize", str(source), "-o", str(out), "--no-per-channel", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["equalization"]["applied"] is True
    assert "equalize applied: 1 chain" in capsys.readouterr().out
    assert main(["quantize", str(source), "-o", str(out), "--equalize", "off", "--report", str(report)]) == 0
    assert json.loads(report.read_text())["equalization"] is None
    assert main(["quantize", str(source), "-o", str(out), "--equalize", "maybe"]) == 2
    assert "argument --equalize: invalid choice: 'maybe'" in capsys.readouterr().err


def _plain_and_equalized(kinds=("Conv", "Conv", "Conv"), acts=("Relu", "LeakyRelu"), opset: int | None = None):
    from graphlens.quantize.equalization import _equalized, rescaled_tensors

    n = len(kinds)
    proto = chain(kinds=kinds, acts=acts, channels=(4, 6, 5, 3)[:n + 1], groups=(1,) * n, trans_b=(0,) * n)
    if opset is not None:
        proto.opset_import[0].version = opset
    model = Model(onnx.ModelProto.FromString(proto.SerializeToString()))
    model.infer_shapes()
    plain = model.to_proto()
    equal, edits = _equalized(onnx.ModelProto.FromString(plain.SerializeToString()))
    return plain, equal, rescaled_tensors(edits)


@pytest.mark.parametrize("method", ["minmax", "ema", "percentile", "entropy"])
@pytest.mark.parametrize("opset", [13, 18])
def test_equalized_ranges_derived_from_the_model_as_it_is_match_calibrating_the_equalized_model(method, opset):
    """The trial calibrates the model as it is once: the ranges it derives for the equalized chain's tensors (from
    their sources' per-channel bounds, or values) are those of calibrating the equalized model on its own."""
    from graphlens.quantize.calibrate import collect_ranges
    from graphlens.quantize.place import find_sites

    plain, equal, rescaled = _plain_and_equalized(opset=opset)
    scratch = Model(equal)
    scratch.infer_shapes()
    tensors = find_sites(scratch.graph, QuantConfig()).activations
    derived = {t: r for t, r in rescaled.items() if t in tensors}
    assert len(derived) >= 2 and all(t not in {o for n in plain.graph.node for o in n.output} for t in derived)
    data = random_calibration(plain, 5, seed=2)
    config = QuantConfig(method=method)
    alone = collect_ranges(equal, tensors, data, config)
    derived_ranges = collect_ranges(plain, tensors, data, config, derived=derived)
    assert set(alone) == set(derived_ranges)
    for name, r in alone.items():
        assert (derived_ranges[name].low, derived_ranges[name].high) == pytest.approx((r.low, r.high), rel=1e-5,
                                                                                        abs=1e-6), name


@pytest.mark.parametrize("opset", [13, 18])
def test_reductions_in_two_steps_give_the_bounds_of_one_reduction(monkeypatch, opset):
    """Tensors large on a sample are reduced along the rows of [N, C, rest] first, then over the rows' results: the
    ranges, those derived from the sources' per-channel bounds included, are those one reduction over each tensor
    gives, to the bit."""
    from graphlens.quantize import calibrate
    from graphlens.quantize.place import find_sites
    from graphlens.quantize.reductions import TWO_STEP_BYTES

    plain, equal, rescaled = _plain_and_equalized(opset=opset)
    model, scratch = Model(plain), Model(equal)
    model.infer_shapes()
    scratch.infer_shapes()
    tensors = list(dict.fromkeys([*find_sites(model.graph, QuantConfig()).activations,
                                  *find_sites(scratch.graph, QuantConfig()).activations]))
    derived = {t: r for t, r in rescaled.items() if t in tensors}
    data = random_calibration(plain, 4, seed=3)
    config = QuantConfig(batch_size=2)
    made: list[onnx.NodeProto] = []
    real = calibrate.reductions
    monkeypatch.setattr(calibrate, "reductions", lambda *a, **k: made.extend(real(*a, **k)[0]) or real(*a, **k))
    one = calibrate.collect_ranges(model, tensors, data, config, derived=derived)
    assert not any(n.output[0].endswith("_rows") for n in made)
    large = dict.fromkeys(tensors + [r.source for r in derived.values()], TWO_STEP_BYTES)
    by_rows = calibrate.collect_ranges(model, tensors, data, config, derived=derived, sizes=large)
    rows = [n for n in made if n.output[0].endswith("_rows")]
    assert len(rows) == 2 * len({*tensors, *(r.source for r in derived.values())} - set(derived))
    assert by_rows == one


def test_the_equalized_arm_takes_the_models_types_as_inference_gives_them():
    """The trial's arms and the model equalized take the model's inferred types, each renamed tensor its source's,
    instead of inferring their own: the same types for every tensor; an edit voids them."""
    from graphlens.quantize.equalization import _equalized, equalized_types

    plain, equal, rescaled = _plain_and_equalized()
    model = Model(plain)
    model.infer_shapes()
    types = model.inferred_types()
    assert types is not None
    inferred, adopted = Model(equal), Model(onnx.ModelProto.FromString(equal.SerializeToString()))
    inferred.infer_shapes()
    adopted.adopt_types(equalized_types(types, rescaled))
    tensors = {t for node in equal.graph.node for t in [*node.input, *node.output] if t}
    assert set(rescaled) <= tensors
    assert all(adopted.graph.tensor_type(t) == inferred.graph.tensor_type(t) for t in tensors)
    assert all(adopted.graph.tensor_type(t).shape is not None for t in rescaled)
    _, edits = _equalized(onnx.ModelProto.FromString(plain.SerializeToString()))
    EditHistory(model).apply(edits[:1])
    assert model.inferred_types() is None


def test_kept_runs_rescaled_hold_the_equalized_models_activations():
    """The float runs kept for the report, made of the model as it is, stand for the equalized model's once
    rescaled: each derived tensor equals the equalized model's own, to float32 rounding, and the sources go."""
    from graphlens.quantize.calibrate import KeptRuns, collect_ranges

    plain, equal, rescaled = _plain_and_equalized()
    data = random_calibration(plain, 3, seed=4)
    sources = sorted({r.source for r in rescaled.values()})
    kept = KeptRuns()
    collect_ranges(plain, sources, data, QuantConfig(), keep=kept)
    kept.rescale(rescaled)
    assert kept.batches
    for batch in kept.batches:
        outputs = batch.outputs[0]
        assert not set(sources) & set(outputs)
        runs = run_model(equal, batch.feed, list(rescaled)).outputs
        for name in rescaled:
            # float32 convolutions with the rescaled weights round differently: to 1e-6 of the tensor's largest value
            np.testing.assert_allclose(outputs[name], runs[name], rtol=1e-5, atol=1e-6 * np.abs(runs[name]).max())


def test_a_tensor_with_infinities_keeps_its_finite_range_when_derived():
    """A source whose reductions are not finite is run whole and its finite values give each channel's bounds."""
    from graphlens.quantize.calibrate import collect_ranges

    plain, equal, rescaled = _plain_and_equalized(kinds=("Conv", "Conv"), acts=("Relu",))
    data = random_calibration(plain, 3, seed=1)
    x = data.arrays["x"].copy()
    x[1, 0, 0, 0] = np.inf
    data = CalibrationData({"x": x}, source="test")
    scratch = Model(equal)
    scratch.infer_shapes()
    derived = dict(rescaled)
    alone = collect_ranges(equal, list(derived), data, QuantConfig())
    got = collect_ranges(plain, list(derived), data, QuantConfig(), derived=derived)
    for name, r in alone.items():
        assert np.isfinite([got[name].low, got[name].high]).all()
        assert (got[name].low, got[name].high) == pytest.approx((r.low, r.high), rel=1e-5, abs=1e-6)


@pytest.fixture
def reruns(monkeypatch) -> list[int]:
    """One entry per run of a quantized model on the kept calibration batches (:meth:`KeptRuns.rerun`)."""
    from graphlens.quantize.calibrate import KeptRuns

    calls: list[int] = []
    rerun = KeptRuns.rerun

    def counted(self, runner, *args, **kwargs):
        calls.append(1)
        return rerun(self, runner, *args, **kwargs)

    monkeypatch.setattr(KeptRuns, "rerun", counted)
    return calls


def test_the_report_reuses_the_trials_run_of_the_model_it_writes(reruns):
    """With the defaults the model written is the equalized arm the trial ran: the report reads that run
    instead of running the model again, and its figures are those of a report that runs both models afresh."""
    proto = chain()
    data = random_calibration(proto, 16, seed=1)
    _, _, result = _quantize(proto, data, per_channel=False)
    assert result.equalization.applied and len(reruns) == 2  # the trial's two arms, and nothing for the report
    _, _, fresh = _quantize(proto, data, evaluation=data, per_channel=False)  # runs float and quantized anew
    assert fresh.equalization.applied
    assert result.output_sqnr_db == pytest.approx(fresh.output_sqnr_db, abs=1e-3)
    assert [e.tensor for e in result.layers] == [e.tensor for e in fresh.layers]
    assert [(e.sqnr_db, e.local_sqnr_db) for e in result.layers] == [
        (pytest.approx(e.sqnr_db, abs=1e-3), pytest.approx(e.local_sqnr_db, abs=1e-3)) for e in fresh.layers]
    reruns.clear()
    _, _, corrected = _quantize(proto, data, per_channel=False, bias_correction=True)
    assert corrected.equalization.applied and len(reruns) == 3  # another model: the report runs it itself


def test_the_report_reuses_the_run_of_the_arm_without_equalization_when_it_wins(reruns, monkeypatch):
    """Small activations: both arms' runs expose them, so the arm kept (here the one without equalization) is the
    report's run too; the figures are those of a report that runs both models afresh."""
    proto = _uneven_first_layer()
    data = _uneven_inputs(proto)
    _, _, result = _quantize(proto, data)
    assert not result.equalization.applied and len(reruns) == 2  # the two arms; the report reads the first's
    _, _, fresh = _quantize(proto, data, evaluation=data)
    assert result.output_sqnr_db == pytest.approx(fresh.output_sqnr_db, abs=1e-3)
    assert [(e.tensor, e.sqnr_db) for e in result.layers] == [
        (e.tensor, pytest.approx(e.sqnr_db, abs=1e-3)) for e in fresh.layers]
    monkeypatch.setattr("graphlens.quantize.equalization.BOTH_EXPOSE_BYTES", 0)
    reruns.clear()
    _quantize(proto, data)
    assert len(reruns) == 3  # large activations: only the equalized arm exposes them, the report runs its own


@pytest.mark.parametrize("make", [chain, _uneven_first_layer])
def test_each_weight_is_quantized_once_and_the_model_written_is_the_same_as_without_reuse(monkeypatch, make):
    """The trial's two arms and the model written share the weights the trial does not rescale: each weight is
    quantized once per quantization, whichever arm wins, and the model written is byte for byte the one quantized
    afresh."""
    from graphlens.quantize import place

    proto = make()
    data = _uneven_inputs(proto) if make is _uneven_first_layer else random_calibration(proto, 16, seed=1)
    quantized: list[str] = []
    real = place.quantize_stored

    def counted(x, params):
        quantized.append(str(np.asarray(x).shape))
        return real(x, params)

    monkeypatch.setattr(place, "quantize_stored", counted)
    model, _, result = _quantize(proto, data)
    weights = {i.name for i in proto.graph.initializer if i.name.endswith(".w")}
    rescaled = 2 * len(result.equalization.chains)  # a chain's two weights, again under their new names
    assert len(quantized) == len(weights) + rescaled
    shared = place._stored
    monkeypatch.setattr(place, "_stored", lambda value, site, config, memo: shared(value, site, config, None))
    fresh, _, again = _quantize(proto, data)
    assert again.equalization.applied == result.equalization.applied
    assert model.to_proto().SerializeToString() == fresh.to_proto().SerializeToString()
