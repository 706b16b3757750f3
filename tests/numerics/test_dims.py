"""Choosing sizes for dynamic dims: batch 1, one size for tied dims, the ladder, given dims kept, remembered."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.numerics import check_models, make_inputs, run_model
from graphlens.numerics.dims import LADDER, dynamic_dims, remembered_dims, search_dims
from graphlens.numerics.run import ModelRunner
from tests.models import make_model, tensor
from tests.numerics import dynamic_models as dm
from tests.numerics import numeric_models as nm


class CountingRunner(ModelRunner):
    """A runner that counts its runs, to see what a search costs."""

    runs = 0

    def run(self, inputs):
        self.runs += 1
        return super().run(inputs)


def test_the_fpn_model_reproduces_the_problem():
    model = dm.fpn()
    assert run_model(model, make_inputs(model)).error is not None  # the old defaults: H = W = 16
    assert run_model(model, make_inputs(model, {"H": 32, "W": 64})).error is None


def test_dynamic_dims_classify_batch_and_unnamed_dims():
    found = {d.label: d.batch_like for d in dynamic_dims(dm.fpn([None, 3, "?", -1]))}
    assert found == {"x[0]": True, "x[2]": False, "x[3]": False}
    found = {d.label: d.batch_like for d in dynamic_dims(dm.fpn(["p2o.DynamicDimension.0", 3, "h", "w"]))}
    assert found == {"p2o.DynamicDimension.0": True, "h": False, "w": False}
    found = {d.label: d.batch_like for d in dynamic_dims(dm.shared_seq())}
    assert found == {"batch": True, "seq": False}


def test_a_leading_name_used_elsewhere_is_not_a_batch():
    nodes = []
    model = make_model(nodes, [tensor("a", shape=["L", 3, 8, 8]), tensor("b", shape=[2, "L"])],
                       [tensor("a", shape=["L", 3, 8, 8])])
    assert [(d.label, d.batch_like) for d in dynamic_dims(model)] == [("L", False)]


@pytest.mark.parametrize("shape", [["N", 3, "H", "W"], [None, 3, None, None], ["?", 3, "?", "?"], [-1, 3, "?", "?"]])
def test_the_fpn_gets_a_verdict_whatever_its_dims_are_called(shape):
    model = dm.fpn(shape)
    diff = check_models(model, model)
    assert diff.available and diff.passed, diff.reason
    sizes = list(diff.inputs.dims.values.values())
    assert sizes == [1, 32, 32]
    assert diff.inputs.dims.tries == 1


def test_the_ladder_is_climbed_until_the_model_runs():
    model = dm.fpn(levels=6)  # H and W must be multiples of 64
    runner = CountingRunner(model)
    search = search_dims(model, runner)
    assert search.ran and search.choice.values == {"N": 1, "H": 64, "W": 64}
    assert search.choice.tries == runner.runs == 2
    assert search.inputs["x"].shape == (1, 3, 64, 64)
    assert LADDER[:2] == (32, 64)


def test_a_name_shared_by_two_inputs_gets_one_size():
    model = dm.shared_seq()
    diff = check_models(model, model)
    assert diff.passed
    assert diff.inputs.dims.values == {"batch": 1, "seq": 32}
    search = search_dims(model, ModelRunner(model))
    assert search.inputs["a"].shape == (1, 32, 8) and search.inputs["b"].shape == (32, 8)


def test_dims_the_model_ties_together_get_the_same_size():
    model = dm.tied_by_the_model()
    diff = check_models(model, model)
    assert diff.passed and diff.inputs.dims.values == {"len_p": 32, "len_q": 32}


def test_given_dims_are_never_changed():
    model = dm.fpn()
    diff = check_models(model, model, dims={"H": 64})
    assert diff.passed and diff.inputs.dims.values == {"N": 1, "H": 64, "W": 32}
    assert diff.inputs.dims.chosen == ("N", "W")
    refused = check_models(model, model, dims={"H": 48})  # no W makes 48 work
    assert not refused.available and "H=48" in refused.reason and refused.inputs.dims.values["H"] == 48


def test_an_unnamed_dim_can_be_given_by_its_label():
    model = dm.fpn([None, 3, None, None])
    diff = check_models(model, model, dims={"x[2]": 64, "x[3]": 96})
    assert diff.passed and diff.inputs.dims.values == {"x[0]": 1, "x[2]": 64, "x[3]": 96}


def test_an_unknown_dim_name_is_one_clear_error():
    model = dm.fpn()
    with pytest.raises(GraphLensError) as err:
        check_models(model, model, dims={"height": 64})
    assert str(err.value) == ("dimension 'height' is not a dynamic dimension of the model's inputs; "
                              "its dynamic dimensions are: N, H, W")


def test_the_working_choice_is_remembered_per_model():
    model = Model(dm.fpn(levels=6))
    first = CountingRunner(model)
    assert search_dims(model, first).choice.tries == 2
    assert remembered_dims(model) == {"N": 1, "H": 64, "W": 64}
    again = CountingRunner(model)
    search = search_dims(model, again)
    assert search.ran and again.runs == 1 and search.choice.remembered
    assert search.choice.values == {"N": 1, "H": 64, "W": 64}
    assert remembered_dims(Model(dm.fpn(levels=6))) is None  # another model object searches afresh


def test_remembering_on_another_model_object():
    """The preview and fold --check diff copies of a model: they remember on the model the user has."""
    model = Model(dm.fpn(levels=6))
    proto = dm.fpn(levels=6)
    check_models(proto, proto, remember=model)
    assert remembered_dims(model) == {"N": 1, "H": 64, "W": 64}
    assert check_models(proto, proto, remember=model).inputs.dims.remembered


def test_a_model_that_runs_at_no_size_says_so_in_one_line():
    model = dm.runs_at_no_size()
    diff = check_models(model, model)
    assert not diff.available
    assert diff.summary_lines() == [f"numeric diff not available: {diff.reason}"]
    assert (f"{3 * len(LADDER) + 1} tries: H, W at 32, 64, 128, 224, 256, 320, 640, then each at 1 with the others "
            "at those sizes, then the defaults") in diff.reason
    assert "cannot be reshaped" in diff.reason and "\n" not in diff.reason


def test_a_model_onnxruntime_cannot_load_is_not_retried():
    model = nm.custom_op()
    runner = CountingRunner(model)
    search = search_dims(model, runner)
    assert not search.ran and runner.runs == 0
    assert "not registered with onnxruntime" in search.result.error


def test_static_models_run_once_and_report_no_dims():
    model = nm.conv_bn()
    diff = check_models(model, model)
    assert diff.passed and diff.inputs.dims.values == {} and diff.inputs.line() == "inputs: random (seed 0)"


def test_report_line_and_json_say_which_dims_were_used():
    model = dm.fpn(levels=6)
    diff = check_models(model, model, dims={"N": 2})
    assert diff.inputs.line() == "inputs: random (seed 0); dims N=2 H=64 W=64 (H, W chosen automatically, 2 tries)"
    assert diff.to_json()["inputs"] == {
        "file": None, "seed": 0,
        "dims": {"values": {"N": 2, "H": 64, "W": 64}, "chosen": ["H", "W"], "tries": 2, "remembered": False},
    }


def test_given_arrays_report_their_dims():
    model = dm.fpn()
    arrays = {"x": np.zeros((2, 3, 64, 96), np.float32)}
    diff = check_models(model, model, inputs=arrays, inputs_file="in.npz")
    assert diff.passed and diff.inputs.line() == "inputs: from in.npz; dims N=2 H=64 W=96"


def test_a_remembered_choice_helps_when_the_user_then_sets_a_dim():
    model = Model(dm.fpn(levels=6))
    search_dims(model, ModelRunner(model))  # two tries: 32 fails, 64 runs
    runner = CountingRunner(model)
    search = search_dims(model, runner, given={"H": 128})
    assert runner.runs == 1 and search.choice.values == {"N": 1, "H": 128, "W": 64}


def test_a_failed_try_reads_as_one_line_without_onnxruntime_source_paths():
    model = dm.fpn()
    error = run_model(model, make_inputs(model, {"H": 48, "W": 48})).error
    assert error.startswith("Non-zero status code returned while running Add node. Name:'merge")
    assert "Status Message: axis == 1" in error and "onnxruntime_src" not in error and "\n" not in error


def test_a_state_dim_tied_to_the_batch_is_found_by_setting_it_to_one():
    model = dm.recurrent_state()
    diff = check_models(model, model)
    assert diff.available and diff.passed, diff.reason
    assert diff.inputs.dims.values["state[1]"] == 1 and diff.inputs.dims.values["T"] == 32
