"""Random inputs that hold what the model reads them as: masks of 1s, positions in order, dims a weight fixes."""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.numerics import check_models, make_inputs
from graphlens.numerics.dims import dynamic_dims
from graphlens.numerics.inputs import input_roles, mask_values
from graphlens.numerics.weight_dims import weight_fixed_dims
from tests.models import init, make_model, tensor


def t5_style_mask() -> Model:
    """scores + (1 - mask) · finfo.min, softmax: a random mask of 0..9 overflows it into NaN on both sides."""
    lowest = np.finfo(np.float32).min
    nodes = [
        helper.make_node("Cast", ["attention_mask"], ["m"], to=TensorProto.FLOAT),
        helper.make_node("Sub", ["one", "m"], ["inverted"]),
        helper.make_node("Mul", ["inverted", "lowest"], ["bias"]),
        helper.make_node("Add", ["scores", "bias"], ["masked"]),
        helper.make_node("Softmax", ["masked"], ["y"], axis=-1),
    ]
    inputs = [tensor("scores", shape=["batch", "seq"]), tensor("attention_mask", TensorProto.INT64, ["batch", "seq"])]
    inits = [init("one", np.array(1.0, np.float32)), init("lowest", np.array(lowest, np.float32))]
    return Model(make_model(nodes, inputs, [tensor("y", shape=["batch", "seq"])], inits))


def test_a_mask_is_drawn_as_ones_and_the_check_passes_on_finite_outputs():
    model = t5_style_mask()
    assert input_roles(model).masks == {"attention_mask"}
    drawn = make_inputs(model, {"batch": 1, "seq": 8})
    assert np.array_equal(drawn["attention_mask"], np.ones((1, 8), np.int64))
    result = check_models(model, model)
    assert result.passed and all(np.isfinite(d.max_abs) for d in result.outputs)


def test_a_mask_read_by_sub_from_one_is_a_mask_whatever_its_name():
    proto = t5_style_mask().to_proto()
    for node in proto.graph.node:
        node.input[:] = ["keep" if name == "attention_mask" else name for name in node.input]
    proto.graph.input[1].name = "keep"
    assert input_roles(Model(proto)).masks == {"keep"}


def test_padded_rows_keep_at_least_half_their_positions():
    values = mask_values(np.random.default_rng(0), (6, 10), np.dtype(np.int64))
    assert values[0].all()
    assert all(row.sum() >= 5 and np.all(np.diff(row) <= 0) for row in values)  # 1s, then trailing 0s


def test_position_ids_count_up_and_stay_inside_the_table_they_index():
    nodes = [helper.make_node("Gather", ["table", "position_ids"], ["y"], axis=0)]
    model = make_model(nodes, [tensor("position_ids", TensorProto.INT64, ["batch", "seq"])],
                       [tensor("y", shape=["batch", "seq", 4])], [init("table", np.ones((6, 4), np.float32))])
    drawn = make_inputs(model, {"batch": 2, "seq": 8})["position_ids"]
    assert drawn.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1]] * 2


def vit_patches() -> Model:
    """pixel_values [batch, num_channels, height, width] into a patch Conv that reads 3 channels."""
    nodes = [helper.make_node("Conv", ["pixel_values", "w"], ["y"], strides=[4, 4])]
    inputs = [tensor("pixel_values", shape=["batch", "num_channels", "height", "width"])]
    weight = init("w", np.ones((8, 3, 4, 4), np.float32))
    return Model(make_model(nodes, inputs, [tensor("y", shape=None)], [weight]))


def test_a_conv_fixes_the_channels_so_the_search_never_tries_other_sizes():
    model = vit_patches()
    assert weight_fixed_dims(model) == {"num_channels": 3}
    assert {d.label: d.searched for d in dynamic_dims(model)} == {
        "batch": False, "num_channels": False, "height": True, "width": True}
    result = check_models(model, model)
    assert result.passed and result.inputs is not None
    assert result.inputs.dims.values["num_channels"] == 3 and result.inputs.dims.tries == 1


def test_a_matmul_weight_fixes_the_features_of_an_unnamed_last_axis():
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"])]
    model = make_model(nodes, [tensor("x", shape=["batch", "seq", None])], [tensor("y", shape=None)],
                       [init("w", np.ones((12, 5), np.float32))])
    assert weight_fixed_dims(model) == {"x[2]": 12}
    assert make_inputs(model, {"batch": 1, "seq": 4, "x[2]": 12})["x"].shape == (1, 4, 12)
