"""Calibration methods on activations whose ranges are known, and the .npz format."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.quantize import QuantConfig, load_calibration, quantize_model, random_calibration
from graphlens.quantize.calibrate import CalibrationData, collect_ranges, mse_range, percentile_range
from graphlens.quantize.qdq import QType
from tests.quantize.quant_models import layer


def _samples(values: list[np.ndarray]) -> CalibrationData:
    return CalibrationData({"x": np.stack([v.reshape(3, 4).astype(np.float32) for v in values])}, "given")


def _x_range(method: str, values: list[np.ndarray], **kw):
    config = QuantConfig(method=method, batch_size=1, **kw)
    return collect_ranges(layer("MatMul"), ["x"], _samples(values), config)["x"]


def test_minmax_is_the_range_over_every_sample():
    r = _x_range("minmax", [np.full(12, 1.0), np.linspace(-2, 3, 12)])
    assert (r.low, r.high) == (-2.0, 3.0)


def test_ema_moves_a_thousandth_of_the_way_per_run():
    r = _x_range("ema", [np.linspace(-1, 1, 12), np.linspace(-3, 5, 12)])
    assert r.low == pytest.approx(0.999 * -1 + 0.001 * -3) and r.high == pytest.approx(0.999 * 1 + 0.001 * 5)


def test_percentile_drops_a_lone_outlier():
    rng = np.random.default_rng(0)
    values = [rng.uniform(-1, 1, 12) for _ in range(999)]
    values[0][0] = 100.0
    r = _x_range("percentile", values, percentile=99.9)
    assert r.high < 1.2 and r.low == pytest.approx(-1.0, abs=0.05)


def test_percentile_of_a_histogram():
    counts = np.ones(100)
    r = percentile_range(counts, np.linspace(0, 100, 101), 99.0)
    assert r.low == pytest.approx(1.0) and r.high == pytest.approx(99.0)


def test_mse_clips_a_long_tail_but_not_a_uniform_range():
    edges = np.linspace(0, 100, 2049)
    tail = np.zeros(2048)
    tail[:100] = 1e6  # almost everything below 5, a few far out
    tail[-1] = 1
    assert mse_range(tail, edges, QType(8, False), False).high < 50
    uniform = np.ones(2048)
    assert mse_range(uniform, edges, QType(8, False), False).high == pytest.approx(100.0)


@pytest.mark.parametrize("method", ["percentile", "mse", "entropy", "auto"])
def test_a_constant_tensor_gets_a_histogram_range_holding_it(method):
    """densenet-121's fc6_1 is 0.46095 everywhere: no room for 2048 float32 bins between its min and max."""
    constant = np.float32(0.46095)
    r = _x_range(method, [np.full(12, constant), np.full(12, constant)])
    assert r.low <= constant <= r.high <= constant + 1e-3


def test_every_method_quantizes_a_model(tmp_path):
    for method in ("ema", "percentile", "mse", "entropy", "auto"):
        result = quantize_model(Model(layer("Conv")), QuantConfig(method=method))
        assert result.output_sqnr_db > 20


def test_npz_calibration_is_checked_against_the_inputs(tmp_path):
    model = layer("Conv")  # x: [1, 4, 6, 6]
    good = tmp_path / "good.npz"
    np.savez(good, x=np.zeros((3, 1, 4, 6, 6), np.float32))
    assert load_calibration(good, model).samples == 3
    bad = tmp_path / "bad.npz"
    np.savez(bad, x=np.zeros((3, 1, 4, 7, 6), np.float32))
    with pytest.raises(GraphLensError, match="has 7 at axis 3 where the input has 6"):
        load_calibration(bad, model)
    flat = tmp_path / "flat.npz"
    np.savez(flat, x=np.zeros((4, 36), np.float32))
    with pytest.raises(GraphLensError, match=r"\(samples, \*input shape\) \(5 dims\)"):
        load_calibration(flat, model)
    other = tmp_path / "other.npz"
    np.savez(other, image=np.zeros((3, 1, 4, 6, 6), np.float32))
    with pytest.raises(GraphLensError, match="no array for input 'x'"):
        load_calibration(other, model)


@pytest.mark.parametrize(("values", "message"), [
    (np.where(np.arange(432).reshape(3, 4, 6, 6) == 200, np.nan, 0.0), "1 NaN or infinite values as float32 "
                                                                        r"\(the first in sample 1\)"),
    (np.full((3, 4, 6, 6), 1e300), "432 NaN or infinite values as float32"),  # float64 past float32's range
    (np.zeros((3, 4, 6, 6), bool), "holds bool values; the input takes float32"),
    (np.zeros((3, 4, 6, 6), complex), "holds complex128 values"),
    (np.zeros((3, 4, 0, 6), np.float32), "a sample with no values"),
])
def test_npz_values_that_would_make_a_garbage_model_are_refused(tmp_path, values, message):
    path = tmp_path / "bad.npz"
    np.savez(path, x=values)
    with pytest.raises(GraphLensError, match=message):
        load_calibration(path, _dynamic_conv())


def test_what_is_not_an_npz_is_named_in_one_line(tmp_path):
    model = layer("Conv")
    single = tmp_path / "single.npy"
    np.save(single, np.zeros((3, 1, 4, 6, 6), np.float32))
    with pytest.raises(GraphLensError, match=r"single\.npy: not an \.npz of one array per input .*a single array"):
        load_calibration(single, model)
    damaged = tmp_path / "damaged.npz"
    np.savez(damaged, x=np.zeros((3, 1, 4, 6, 6), np.float32))
    damaged.write_bytes(damaged.read_bytes()[:200])
    with pytest.raises(GraphLensError, match=r"damaged\.npz: cannot read calibration samples"):
        load_calibration(damaged, model)
    text = tmp_path / "notes.npz"
    text.write_text("hello")
    with pytest.raises(GraphLensError, match=r"notes\.npz: not an \.npz of one array per input \(numpy\.savez"):
        load_calibration(text, model)
    with pytest.raises(GraphLensError, match=r"nowhere: no such file or folder"):
        load_calibration(tmp_path / "nowhere", model, preprocess="scale=1")


def _dynamic_conv() -> onnx.ModelProto:
    """layer('Conv') with its input declared [?, 4, ?, ?], as exporters write an image model."""
    proto = layer("Conv")
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for axis, name in ((0, "batch"), (2, "height"), (3, "width")):
        dims[axis].dim_param = name
    return proto


def test_an_array_shaped_like_the_input_holds_samples_along_its_batch_axis(tmp_path):
    """(N, 4, H, W) for an input [?, 4, ?, ?] is N samples of batch 1, each fed as (1, 4, H, W)."""
    model = _dynamic_conv()
    values = np.random.default_rng(0).normal(size=(5, 4, 6, 6)).astype(np.float32)
    path = tmp_path / "batch.npz"
    np.savez(path, x=values)
    data = load_calibration(path, model)
    assert data.samples == 5 and data.arrays["x"].shape == (5, 1, 4, 6, 6)
    np.testing.assert_array_equal(data.sample(2)["x"], values[2:3])
    old = tmp_path / "old.npz"
    np.savez(old, x=values[:, None])  # the (samples, *input shape) layout still reads the same
    np.testing.assert_array_equal(load_calibration(old, model).arrays["x"], data.arrays["x"])
    result = quantize_model(Model(model), QuantConfig(), data)
    assert result.samples == 5 and result.output_sqnr_db > 20


def test_an_array_shaped_like_a_fixed_batch_input_is_one_sample_and_misfits_are_named(tmp_path):
    model = layer("Conv")  # the batch axis fixed at 1
    one = tmp_path / "one.npz"
    np.savez(one, x=np.zeros((1, 4, 6, 6), np.float32))
    assert load_calibration(one, model).arrays["x"].shape == (1, 1, 4, 6, 6)
    many = tmp_path / "many.npz"
    np.savez(many, x=np.zeros((3, 4, 6, 6), np.float32))
    with pytest.raises(GraphLensError, match="fixes at 1"):
        load_calibration(many, model)
    channels = tmp_path / "channels.npz"
    np.savez(channels, x=np.zeros((3, 3, 6, 6), np.float32))
    with pytest.raises(GraphLensError, match=r"channels.npz: array 'x' has 3 at axis 1 where the input has 4"):
        load_calibration(channels, _dynamic_conv())


def test_a_scalar_input_is_fed_as_an_array_and_large_activations_do_not_overflow():
    """A voice model's sample-rate input is a 0-d int64; weights that blow activations up to 1e25
    must still give finite error sums."""
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.full((4, 3, 3, 3), 1e6, np.float32), "w")
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Cast", ["rate"], ["rate_f"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["c", "rate_f"], ["y"], name="scale"),
    ]
    graph = helper.make_graph(nodes, "scalar", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8]),
                                                helper.make_tensor_value_info("rate", TensorProto.INT64, [])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 8, 8])], [w])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    proto.ir_version = 8
    data = CalibrationData({"x": np.random.default_rng(0).normal(size=(4, 1, 3, 8, 8)).astype(np.float32) * 1e7,
                            "rate": np.full(4, 16000, np.int64)}, "test")
    result = quantize_model(Model(proto), QuantConfig(), data)
    assert np.isfinite(result.output_sqnr_db) and result.output_sqnr_db > 20


def test_small_samples_run_stacked_and_large_ones_one_at_a_time(monkeypatch):
    """Samples stack into one run only while their inputs are small (BATCH_ELEMENTS): a batch of large ones
    runs slower than the same samples one by one; either way every sample's outputs are the same."""
    from graphlens.numerics import samples
    from graphlens.numerics.run import ModelRunner
    from tests.quantize.quant_models import two_convs

    proto = two_convs()
    for value in (proto.graph.input[0], proto.graph.output[0]):
        value.type.tensor_type.shape.dim[0].dim_param = "N"
    x = np.random.default_rng(0).normal(size=(6, 1, 3, 8, 8)).astype(np.float32)
    data = CalibrationData({"x": x}, "normal")
    runner = ModelRunner(proto)

    def runs() -> tuple[list[int], np.ndarray]:
        batches = list(samples.run_batches([runner], proto, data, 8))
        return [len(b.feed["x"]) for b in batches], np.concatenate([b.outputs[0]["y"] for b in batches])

    sizes, stacked = runs()
    assert sizes == [1, 5]  # the first run sizes the batches
    monkeypatch.setattr(samples, "BATCH_ELEMENTS", 2 * x[0].size)
    assert runs()[0] == [1, 2, 2, 1]
    monkeypatch.setattr(samples, "BATCH_ELEMENTS", x[0].size - 1)
    sizes, alone = runs()
    assert sizes == [1] * 6
    np.testing.assert_allclose(alone, stacked, rtol=1e-5, atol=1e-6)


def test_inputs_with_different_sample_counts_are_refused(tmp_path):
    from onnx import TensorProto, helper

    from tests import models

    node = helper.make_node("Add", ["a", "b"], ["y"], name="add")
    proto = models.make_model([node], [models.tensor("a", TensorProto.FLOAT, [1, 4]),
                                       models.tensor("b", TensorProto.FLOAT, [1, 4])],
                              [models.tensor("y", TensorProto.FLOAT, [1, 4])], [])
    path = tmp_path / "two.npz"
    np.savez(path, a=np.zeros((8, 1, 4), np.float32), b=np.zeros((5, 1, 4), np.float32))
    with pytest.raises(GraphLensError, match=r"different numbers of samples \(a: 8 from \[8, 1, 4\], b: 5 from "
                                             r"\[5, 1, 4\]\); an array is read along its input's batch axis"):
        load_calibration(path, proto)


def test_an_input_whose_batch_axis_is_not_the_first_takes_its_samples_along_that_axis(tmp_path):
    """silero-vad's recurrent state is [2, batch, 128] beside an audio input [batch, sequence]: an array shaped like
    the state with N along its batch axis is N samples, as the audio's (N, sequence) is."""
    from onnx import TensorProto, helper

    from tests import models

    node = helper.make_node("ReduceSum", ["state"], ["y"], name="sum", keepdims=0)
    proto = models.make_model([node, helper.make_node("Identity", ["audio"], ["a"], name="keep")],
                              [models.tensor("audio", TensorProto.FLOAT, ["batch", "sequence"]),
                               models.tensor("state", TensorProto.FLOAT, [2, "batch", 3])],
                              [models.tensor("y", TensorProto.FLOAT, []), models.tensor("a", TensorProto.FLOAT,
                                                                                    ["batch", "sequence"])], [])
    state = np.arange(2 * 5 * 3, dtype=np.float32).reshape(2, 5, 3)
    path = tmp_path / "vad.npz"
    np.savez(path, audio=np.zeros((5, 16), np.float32), state=state)
    data = load_calibration(path, proto)
    assert data.samples == 5 and data.arrays["audio"].shape == (5, 1, 16)
    assert data.arrays["state"].shape == (5, 2, 1, 3)
    np.testing.assert_array_equal(data.arrays["state"][4, :, 0], state[:, 4])  # sample 4 is state[:, 4]
    stacked = tmp_path / "stacked.npz"  # the (samples, *input shape) layout still reads as it did
    np.savez(stacked, audio=np.zeros((5, 1, 16), np.float32), state=data.arrays["state"])
    np.testing.assert_array_equal(load_calibration(stacked, proto).arrays["state"], data.arrays["state"])


def test_a_model_random_inputs_cannot_run_asks_for_calibration_samples():
    """A decoder's RotaryEmbedding refuses standard-normal position ids; here a Gather whose index is always out of
    range: the line says the random inputs failed and what to give instead, not that the model cannot run."""
    from onnx import TensorProto, helper

    from tests import models

    inits = [models.init("table", np.arange(8, dtype=np.float32).reshape(2, 4)), models.init("w", np.ones((4, 4),
             np.float32)), models.init("zero", np.array(0, np.int64)), models.init("five", np.array(5, np.int64))]
    nodes = [helper.make_node("Cast", ["x"], ["i"], to=TensorProto.INT64),
             helper.make_node("Mul", ["i", "zero"], ["j"]), helper.make_node("Add", ["j", "five"], ["k"]),
             helper.make_node("Gather", ["table", "k"], ["g"], axis=0), helper.make_node("MatMul", ["g", "w"], ["y"])]
    proto = models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [3])],
                              [models.tensor("y", TensorProto.FLOAT, [3, 4])], inits)
    with pytest.raises(GraphLensError, match=r"on random inputs \(.*out of data bounds.*\); give calibration samples"):
        quantize_model(Model(proto), QuantConfig())


def test_samples_made_up_are_flagged_as_such_and_samples_given_are_not(tmp_path):
    proto = layer("Conv")
    made = random_calibration(proto, 4, seed=0)
    assert made.random and made.take(range(2)).random and made.first(1).random
    path = tmp_path / "random.npz"  # a file's name says nothing about where its samples came from
    np.savez(path, **{name: array for name, array in made.arrays.items()})
    given = load_calibration(path, proto)
    assert not given.random and not given.take([0, 2]).random
    result = quantize_model(Model(proto), QuantConfig(), given)
    assert not result.random_samples and not any(line.startswith("note: no calibration") for line in result.lines())


def test_fractional_values_for_an_integer_input_are_refused_not_truncated(tmp_path):
    """rxnmap's ``atoms`` is int64: 0.5 would reach it as 0. Whole numbers stored as floats are fine."""
    from onnx import TensorProto, helper

    from tests import models

    graph = [helper.make_node("Cast", ["ids"], ["f"], name="cast", to=TensorProto.FLOAT),
             helper.make_node("MatMul", ["f", "w"], ["y"], name="mm")]
    model = Model(models.make_model(graph, [models.tensor("ids", TensorProto.INT64, ["n", 3])],
                                    [models.tensor("y", TensorProto.FLOAT, ["n", 2])],
                                    [models.init("w", np.ones((3, 2), np.float32))]))
    path = tmp_path / "ids.npz"
    np.savez(path, ids=np.array([[1.0, 2.0, 0.5]], np.float32))
    with pytest.raises(GraphLensError, match=r"has fractional values \(such as 0\.5\); the input is int64"):
        load_calibration(path, model)
    np.savez(path, ids=np.array([[1.0, 2.0, 3.0]], np.float32))
    assert load_calibration(path, model).sample(0)["ids"].tolist() == [[1, 2, 3]]
