"""Dims written as expressions (``seq + past``), past lengths, and the memory limit of the dims search."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.errors import GraphLensError
from graphlens.numerics import check_models, make_inputs
from graphlens.numerics.dim_expressions import parse_dim_expression
from graphlens.numerics.dims import PAST_DEFAULT, dynamic_dims, search_dims
from graphlens.numerics.inputs import symbolic_dims
from graphlens.numerics.memory import MEMORY_LIMIT_VARIABLE, RunEstimate, run_bytes, run_tensors
from graphlens.numerics.run import ModelRunner
from tests.models import init, make_model, tensor
from tests.numerics import dynamic_models as dm


def cached_decoder() -> onnx.ModelProto:
    """A decoder step as dynamo exports it: ids [b, seq], mask [b, "seq + past"], past keys [b, 2, past, 4].

    The new tokens' keys are appended to the past ones and masked: it runs only when the mask's
    length is the new tokens plus the past ones.
    """
    table = np.arange(10 * 8, dtype=np.float32).reshape(10, 8) / 80
    nodes = [
        helper.make_node("Gather", ["table", "input_ids"], ["embedded"], name="embed"),
        helper.make_node("Reshape", ["embedded", "heads"], ["split"], name="split_heads"),
        helper.make_node("Transpose", ["split"], ["keys"], name="heads_first", perm=[0, 2, 1, 3]),
        helper.make_node("Concat", ["past_key_values_key_cache_0", "keys"], ["all_keys"], name="cat", axis=2),
        helper.make_node("Unsqueeze", ["attention_mask", "mask_axes"], ["mask4"], name="mask_axes"),
        helper.make_node("Mul", ["all_keys", "mask4"], ["masked"], name="apply_mask"),
    ]
    inputs = [tensor("input_ids", TensorProto.INT64, ["s34", "s16"]),
              tensor("attention_mask", TensorProto.FLOAT, ["s34", "s16 + s62"]),
              tensor("past_key_values_key_cache_0", TensorProto.FLOAT, ["s34", 2, "s62", 4])]
    inits = [init("table", table), init("heads", np.array([0, 0, 2, 4], np.int64)),
             init("mask_axes", np.array([1, 3], np.int64))]
    return make_model(nodes, inputs, [tensor("masked", TensorProto.FLOAT, ["s34", 2, "s16 + s62", 4])], inits)


def doubled() -> onnx.ModelProto:
    """``b`` is ``a`` twice over: its length is written ``2*len``."""
    nodes = [helper.make_node("Concat", ["a", "a"], ["aa"], name="twice", axis=0),
             helper.make_node("Add", ["aa", "b"], ["y"], name="add")]
    return make_model(nodes, [tensor("a", shape=["len"]), tensor("b", shape=["2*len"])],
                      [tensor("y", shape=["2*len"])])


def test_expressions_parse_to_linear_forms():
    assert parse_dim_expression("s16 + s62").terms == (("s16", 1), ("s62", 1))
    assert parse_dim_expression("2*s").terms == (("s", 2),)
    form = parse_dim_expression("(a + 1)*2 - b")
    assert form.terms == (("a", 2), ("b", -1)) and form.constant == 2
    assert form.value({"a": 3, "b": 1}) == 7
    for plain in ("seq", "p2o.DynamicDimension.0", "a*b", "floor(s/2)", "(a + 1"):
        assert parse_dim_expression(plain) is None


def test_an_expression_dim_is_computed_from_its_parts_and_the_model_runs():
    model = cached_decoder()
    found = {d.label: d for d in dynamic_dims(model)}
    assert list(found) == ["s34", "s16", "s62", "s16 + s62"]
    assert found["s16 + s62"].expression is not None and not found["s16 + s62"].searched
    diff = check_models(model, model)
    assert diff.available and diff.passed, diff.reason
    assert diff.inputs.dims.values == {"s34": 1, "s16": 32, "s62": PAST_DEFAULT, "s16 + s62": 32 + PAST_DEFAULT}
    assert diff.inputs.line() == ("inputs: random (seed 0); dims s34=1 s16=32 s62=4, s16 + s62=36 "
                                  "(chosen automatically, 1 try)")


def test_random_inputs_compute_expressions_from_the_dims_given():
    arrays = make_inputs(cached_decoder(), {"s34": 1, "s16": 5, "s62": 3})
    assert arrays["attention_mask"].shape == (1, 8)
    assert make_inputs(cached_decoder(), {"s34": 1})["attention_mask"].shape == (1, 32)  # 16 + 16 by default


def test_a_name_used_elsewhere_only_inside_an_expression_is_one_dim():
    model = doubled()
    assert symbolic_dims(model) == ["len", "2*len"]
    diff = check_models(model, model)
    assert diff.passed and diff.inputs.dims.values == {"len": 32, "2*len": 64}
    assert check_models(model, model, dims={"2*len": 10}).inputs.dims.values == {"len": 5, "2*len": 10}
    with pytest.raises(GraphLensError, match="cannot be 9 with them"):
        check_models(model, model, dims={"2*len": 9})


def test_a_name_used_only_inside_an_expression_is_a_dim_of_its_own():
    nodes = [helper.make_node("Add", ["b", "b"], ["y"], name="add")]
    model = make_model(nodes, [tensor("b", shape=["2*m + 1"])], [tensor("y", shape=["2*m + 1"])])
    assert symbolic_dims(model) == ["2*m + 1", "m"]
    diff = check_models(model, model)
    assert diff.passed and diff.inputs.dims.values == {"m": 32, "2*m + 1": 65}
    assert check_models(model, model, dims={"m": 3}).inputs.dims.values == {"m": 3, "2*m + 1": 7}


def test_an_expression_of_two_unknown_sizes_asks_for_one_of_them():
    model = make_model([helper.make_node("Concat", ["a", "b"], ["y"], name="cat", axis=0)],
                       [tensor("a", shape=["p"]), tensor("b", shape=["q"]), tensor("c", shape=["p + q"])],
                       [tensor("y", shape=["p + q"])])
    with pytest.raises(GraphLensError, match="^dimension 'p \\+ q' adds up p, q; give all but one of them"):
        check_models(model, model, dims={"p + q": 10})
    assert check_models(model, model, dims={"p + q": 10, "q": 3}).inputs.dims.values == {"p": 7, "q": 3, "p + q": 10}


def test_static_tensors_do_not_count_towards_a_try():
    model = cached_decoder()
    sizes = {"s34": 1, "s16": 8, "s62": 4, "s16 + s62": 12}
    # ids 8 int64, mask 12 and past 2·4·4 floats; the largest activation, 'masked' [1, 2, 12, 4], three times
    assert run_bytes(run_tensors(model), sizes.get) == 8 * 8 + 12 * 4 + 32 * 4 + 3 * 96 * 4


def test_a_given_expression_fixes_the_part_left_unknown():
    model = cached_decoder()
    diff = check_models(model, model, dims={"s16+s62": 10})  # spelled without the spaces
    assert diff.passed, diff.reason
    assert diff.inputs.dims.values == {"s34": 1, "s16": 6, "s62": PAST_DEFAULT, "s16 + s62": 10}
    assert diff.inputs.dims.chosen == ("s34", "s16", "s62")
    consistent = check_models(model, model, dims={"s16": 8, "s62": 4, "s16 + s62": 12})
    assert consistent.passed and consistent.inputs.dims.values["s16 + s62"] == 12


def test_a_contradicting_expression_dim_is_refused_in_one_line():
    model = cached_decoder()
    with pytest.raises(GraphLensError) as err:
        check_models(model, model, dims={"s16": 8, "s62": 4, "s16 + s62": 10})
    message = str(err.value)
    assert message.startswith("--dim 's16 + s62=10' contradicts s16=8 s62=4")
    assert "\n" not in message
    with pytest.raises(GraphLensError, match="cannot be 1 with them"):
        check_models(model, model, dims={"s62": 4, "s16 + s62": 1})  # s16 would have to be -3


def test_a_past_length_gets_the_small_default_and_is_not_searched():
    found = {d.label: d for d in dynamic_dims(cached_decoder())}
    assert found["s62"].past and found["s62"].default == PAST_DEFAULT and not found["s62"].searched
    assert not found["s16"].past and found["s16"].searched
    assert not found["s34"].past and found["s34"].batch_like
    search = search_dims(cached_decoder(), ModelRunner(cached_decoder()))
    assert search.searched == ("s16",)
    assert search.inputs["past_key_values_key_cache_0"].shape == (1, 2, PAST_DEFAULT, 4)


def _bytes_at(model: onnx.ModelProto, size: int) -> int:
    return RunEstimate(model).need({"N": 1, "H": size, "W": size}.get)


def test_the_search_stops_at_the_memory_limit_and_says_why(monkeypatch):
    model = dm.runs_at_no_size()  # 32 fits the limit, 64 does not
    need_64 = _bytes_at(model, 64)
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, str(need_64 - 1))
    search = search_dims(model, ModelRunner(model))
    assert not search.ran and search.sizes_tried == [32]
    assert search.too_big is not None and search.too_big[0].values == {"N": 1, "H": 64, "W": 64}
    diff = check_models(model, model)
    assert not diff.available and "\n" not in diff.reason
    assert ("stopped because the next size (N=1 H=64 W=64) would need "
            f"{need_64:,} bytes of memory, over the limit of {need_64 - 1:,} bytes") in diff.reason


def test_no_try_is_made_when_even_the_smallest_sizes_are_over_the_limit(monkeypatch):
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "100")
    model = cached_decoder()
    search = search_dims(model, ModelRunner(model))
    assert not search.ran and search.choice.tries == 0
    diff = check_models(model, model)
    assert not diff.available
    assert "stopped before any try: the first sizes (s34=1 s16=32 s62=4, s16 + s62=36) would need" in diff.reason


def test_diff_on_the_command_line_chooses_consistent_dims_and_refuses_contradicting_ones(write_model):
    from tests.test_cli import graphlens

    path = write_model(cached_decoder(), "decoder.onnx")
    result = graphlens("diff", path, path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "dims s34=1 s16=32 s62=4, s16 + s62=36 (chosen automatically, 1 try)" in result.stdout
    result = graphlens("diff", path, path, "--dim", "s16=8", "--dim", "s16 + s62=3")
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        "graphlens: --dim 's16 + s62=3' contradicts s16=8: 's16 + s62' is computed from s16, s62 and cannot be 3 "
        "with them"]


def test_inputs_given_that_would_not_fit_are_refused_before_a_run(write_model, tmp_path, monkeypatch):
    """An .npz of long sequences is not run when its activations would be over the limit: one line, exit 2."""
    from tests.test_cli import graphlens

    path = write_model(cached_decoder(), "decoder.onnx")
    feeds = make_inputs(cached_decoder(), {"s34": 1, "s16": 64, "s62": 16, "s16 + s62": 80}, seed=0)
    npz = tmp_path / "long.npz"
    np.savez(npz, **feeds)
    assert graphlens("diff", path, path, "--inputs", npz).returncode == 0
    monkeypatch.setenv(MEMORY_LIMIT_VARIABLE, "1000")  # the commands run as child processes, which inherit it
    for command in (("diff", path, path), ("compare", path, path)):
        result = graphlens(*command, "--inputs", npz)
        lines = (result.stdout + result.stderr).strip().splitlines()
        assert "Traceback" not in result.stderr
        assert any("the inputs given (s34=1 s16=64 s62=16, s16 + s62=80) would need" in line
                   and "over the limit of 1 KB" in line for line in lines), lines
        assert result.returncode == 2
