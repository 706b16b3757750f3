"""Random and file inputs: dtypes, shapes, symbolic dims, determinism, and one-line errors."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics import load_inputs, make_inputs, parse_dims
from graphlens.numerics.inputs import describe_random, is_batch_like, symbolic_dims
from tests.numerics import numeric_models as nm


@pytest.fixture
def model() -> Model:
    return Model(nm.mixed_inputs())


# ------------------------------------------------------------------ make_inputs
def test_random_inputs_have_declared_dtypes_and_default_shapes(model):
    arrays = make_inputs(model)
    assert list(arrays) == ["x", "ids", "mask", "h", "counts"]  # 'w' is an initializer
    assert {k: (v.dtype.name, v.shape) for k, v in arrays.items()} == {
        "x": ("float32", (1, 3, 16)),
        "ids": ("int64", (1, 16)),
        "mask": ("bool", (1, 4)),
        "h": ("float16", (2, 16)),
        "counts": ("int32", (3,)),
    }


def test_random_values_follow_their_distributions(model):
    arrays = make_inputs(model, dims={"seq": 4096})
    ids = arrays["ids"]
    assert ids.min() >= 0 and ids.max() <= 9 and len(np.unique(ids)) == 10
    x = arrays["x"].astype(np.float64)
    assert abs(x.mean()) < 0.05 and abs(x.std() - 1) < 0.05
    assert arrays["mask"].dtype == bool and set(np.unique(arrays["mask"])) <= {False, True}


def test_the_description_of_random_inputs_says_what_was_drawn(model):
    """A report names each input's shape and values: an integer input drawn in 0..9 (a sample rate, a length)
    is why a model's random calibration does not look like its data."""
    arrays = make_inputs(model)
    text = describe_random(model, arrays)
    assert text == "x 1×3×16 normal, ids 1×16 int64 0..9, mask 1×4 1s (a mask), h 2×16 normal and 1 more input"
    assert describe_random(model, {"counts": np.int32(3) * np.ones((), np.int32)}) == "counts scalar int32 0..9"


def test_same_seed_same_arrays_other_seed_other_arrays(model):
    first, again, other = make_inputs(model, seed=7), make_inputs(model, seed=7), make_inputs(model, seed=8)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])
        assert first[name].dtype == again[name].dtype
    assert not np.array_equal(first["x"], other["x"])


def test_dims_override_defaults(model):
    arrays = make_inputs(model, dims={"N": 2, "seq": 5, "hidden": 8})
    assert arrays["x"].shape == (2, 3, 5)
    assert arrays["ids"].shape == (1, 5)  # batch_size keeps its default
    assert arrays["h"].shape == (2, 8)


def test_a_proto_is_accepted_too():
    arrays = make_inputs(nm.mixed_inputs(), dims={"seq": 3})
    assert arrays["x"].shape == (1, 3, 3)


@pytest.mark.parametrize("name", ["N", "n", "B", "b", "batch", "batch_size", "BatchSize", "num_batches"])
def test_batch_like_names(name):
    assert is_batch_like(name)


@pytest.mark.parametrize("name", ["seq", "M", "Nx", "height", "bs"])
def test_not_batch_like_names(name):
    assert not is_batch_like(name)


def test_unknown_dim_name_lists_the_symbolic_dims(model):
    assert symbolic_dims(model) == ["N", "seq", "batch_size", "hidden"]
    with pytest.raises(GraphLensError) as err:
        make_inputs(model, dims={"sequence": 8})
    message = str(err.value)
    assert "'sequence'" in message and "N, seq, batch_size, hidden" in message
    assert "\n" not in message


# ------------------------------------------------------------------- parse_dims
def test_parse_dims():
    assert parse_dims(["N=2", "seq=128", " h = 4 "]) == {"N": 2, "seq": 128, "h": 4}
    assert parse_dims([]) == {}


@pytest.mark.parametrize(
    ("item", "fragment"),
    [
        ("N2", "--dim 'N2': expected NAME=VALUE"),
        ("=3", "--dim '=3': expected NAME=VALUE"),
        ("N=", "--dim 'N=': expected NAME=VALUE"),
        ("N=two", "--dim 'N=two': expected NAME=VALUE"),
        ("N=0", "--dim 'N=0': the value must be 1 or more"),
    ],
)
def test_parse_dims_errors(item, fragment):
    with pytest.raises(GraphLensError) as err:
        parse_dims([item])
    assert str(err.value).startswith(fragment)


def test_parse_dims_rejects_a_name_given_twice():
    with pytest.raises(GraphLensError, match="given more than once"):
        parse_dims(["N=1", "N=2"])


# ------------------------------------------------------------------ load_inputs
def _good_arrays() -> dict[str, np.ndarray]:
    return {
        "x": np.zeros((2, 3, 5), np.float32),
        "ids": np.ones((2, 5), np.int64),
        "mask": np.zeros((7, 4), bool),
        "h": np.zeros((2, 6), np.float16),
        "counts": np.arange(3, dtype=np.int32),
    }


def test_load_inputs_reads_and_casts(tmp_path, model):
    arrays = _good_arrays()
    arrays["x"] = np.full((2, 3, 5), 0.5, np.float64)  # float64 -> float32 is cast
    arrays["counts"] = np.array([1, 2, 3], np.int64)  # fits int32, cast
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    loaded = load_inputs(path, model)
    assert loaded["x"].dtype == np.float32 and float(loaded["x"][0, 0, 0]) == 0.5
    assert loaded["counts"].dtype == np.int32 and loaded["counts"].tolist() == [1, 2, 3]
    assert loaded["mask"].shape == (7, 4)


def _error(tmp_path, model, arrays=None, *, raw: bytes | None = None, name="inputs.npz") -> str:
    path = tmp_path / name
    if raw is not None:
        path.write_bytes(raw)
    elif arrays is not None:
        np.savez(path, **arrays)
    with pytest.raises(GraphLensError) as err:
        load_inputs(path, model)
    message = str(err.value)
    assert "\n" not in message and str(path) in message
    return message


def test_load_inputs_missing_file(tmp_path, model):
    assert _error(tmp_path, model).endswith("inputs.npz: no such file")


def test_load_inputs_not_an_npz(tmp_path, model):
    """Not numpy's guess, "contains pickled data ... allow_pickle", which points at loading it unsafely."""
    message = _error(tmp_path, model, raw=b"hello, not a zip")
    assert message.endswith("inputs.npz: not an .npz of one array per input (numpy.savez(path, INPUT_NAME=array))")
    assert "pickle" not in message


def test_load_inputs_a_single_npy_array(tmp_path, model):
    path = tmp_path / "inputs.npz"
    with open(path, "wb") as f:
        np.save(f, np.zeros(3))
    assert _error(tmp_path, model).endswith("not an .npz of one array per input (numpy.savez(path, "
                                            "INPUT_NAME=array)); it holds a single array")


def test_load_inputs_missing_array(tmp_path, model):
    arrays = _good_arrays()
    del arrays["ids"]
    assert _error(tmp_path, model, arrays).endswith("inputs.npz: has no array for input 'ids'")


def test_load_inputs_unknown_name(tmp_path, model):
    arrays = {**_good_arrays(), "foo": np.zeros(1)}
    message = _error(tmp_path, model, arrays)
    assert message.endswith("unknown input 'foo'; the model's inputs are: x, ids, mask, h, counts")


def test_load_inputs_dtype_that_cannot_be_cast(tmp_path, model):
    arrays = {**_good_arrays(), "ids": np.ones((2, 5), np.float32)}
    assert "input 'ids' is float32 in the file but the model expects int64" in _error(tmp_path, model, arrays)


def test_load_inputs_integers_that_do_not_fit(tmp_path, model):
    arrays = {**_good_arrays(), "counts": np.array([1, 2, 2**40], np.int64)}
    assert "input 'counts' has values that do not fit int32" in _error(tmp_path, model, arrays)


def test_load_inputs_rank_mismatch(tmp_path, model):
    arrays = {**_good_arrays(), "x": np.zeros((3, 5), np.float32)}
    message = _error(tmp_path, model, arrays)
    assert "input 'x' has shape [3, 5] in the file but the model expects [N, 3, seq]" in message


def test_load_inputs_fixed_dim_mismatch(tmp_path, model):
    arrays = {**_good_arrays(), "x": np.zeros((2, 4, 5), np.float32)}
    assert "input 'x' has shape [2, 4, 5]" in _error(tmp_path, model, arrays)


def test_load_inputs_may_override_an_initializer_input(tmp_path, model):
    path = tmp_path / "inputs.npz"
    np.savez(path, **_good_arrays(), w=np.full(3, 2.0, np.float32))
    assert load_inputs(path, model)["w"].tolist() == [2.0, 2.0, 2.0]


def test_scalar_inputs_are_arrays_onnxruntime_accepts():
    from graphlens.core.model import Model
    from graphlens.numerics import make_inputs, run_model
    from tests import models

    model = Model(models.if_with_conv_bn())
    inputs = make_inputs(model)
    assert isinstance(inputs["cond"], np.ndarray) and inputs["cond"].shape == () and inputs["cond"].dtype == np.bool_
    assert run_model(model, inputs).error is None


# ------------------------------------------------------- unnamed dims, as Paddle2ONNX writes them
def test_question_mark_and_negative_dims_are_unnamed_and_sized_by_label(tmp_path):
    from tests.numerics.dynamic_models import fpn

    model = fpn([-1, 3, "?", "?"])
    assert symbolic_dims(model) == []  # '?' is not a name shared by H and W
    assert make_inputs(model, {"x[2]": 64, "x[3]": 32})["x"].shape == (1, 3, 64, 32)
    path = tmp_path / "in.npz"
    np.savez(path, x=np.zeros((2, 3, 64, 96), np.float32))
    assert load_inputs(path, model)["x"].shape == (2, 3, 64, 96)  # -1 accepts any size
