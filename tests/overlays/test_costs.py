"""FLOPs, parameters and output bytes per node, against hand computation."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model, load_model
from graphlens.overlays import metric_overlay, node_costs
from tests.models import conv_bn, init, make_model, tensor


def test_conv_flops_params_and_bytes_by_hand(write_model):
    model = load_model(write_model(conv_bn(channels=4)))  # x [1,3,8,8] -> Conv 3x3 pad 1 (4 out) -> BN -> y
    costs, dims = node_costs(model)
    assert dims == {}
    # every one of the 1·4·8·8 outputs: 3·3·3 multiply-adds, no bias
    assert costs["conv"].flops == 1 * 4 * 8 * 8 * (2 * 3 * 3 * 3)
    assert costs["conv"].params == 4 * 3 * 3 * 3
    assert costs["conv"].output_bytes == 1 * 4 * 8 * 8 * 4  # float32
    assert costs["bn"].flops == 2 * 4 * 8 * 8
    assert costs["bn"].params == 4 * 4  # scale, bias, mean, var


def test_gemm_with_bias_and_transposed_weight():
    w = np.ones((10, 6), np.float32)
    proto = make_model(
        [helper.make_node("Gemm", ["x", "w", "b"], ["y"], name="fc", transB=1)],
        [tensor("x", TensorProto.FLOAT, [2, 6])], [tensor("y", TensorProto.FLOAT, [2, 10])],
        [init("w", w), init("b", np.zeros(10, np.float32))],
    )
    costs, _ = node_costs(Model(proto))
    assert costs["fc"].flops == 2 * 10 * (2 * 6 + 1)  # M·N outputs, K multiply-adds and the bias each
    assert costs["fc"].params == 10 * 6 + 10
    assert costs["fc"].output_bytes == 2 * 10 * 4


def test_dynamic_inputs_are_measured_at_the_sizes_given_and_said_so():
    proto = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")],
        [tensor("x", TensorProto.FLOAT, ["N", "T", 8])], [tensor("y", TensorProto.FLOAT, ["N", "T", 5])],
        [init("w", np.ones((8, 5), np.float32))],
    )
    overlay = metric_overlay(Model(proto), "flops", dims={"T": 7})
    assert overlay.values == {"mm": 1 * 7 * 5 * 2 * 8}
    assert "N=1 T=7" in overlay.notes[0]


def test_metrics_on_the_demo_leave_out_shape_ops(demo_path):
    model = load_model(demo_path)
    flops = metric_overlay(model, "flops")
    assert flops.unit == "FLOPs" and flops.log_scale
    assert "/stem/conv" in flops.values
    assert not any(model.graph.by_name[n].op_type in ("Constant", "Flatten", "Concat") for n in flops.values)
    params = metric_overlay(model, "params")
    conv = model.graph.by_name["/stem/conv"]
    assert params.values["/stem/conv"] == sum(np.prod(model.graph.tensor_type(t).shape) for t in conv.inputs[1:])
    assert metric_overlay(model, "bytes").unit == "B"
    with pytest.raises(ValueError):
        metric_overlay(model, "joules")


def test_expression_dims_are_computed_from_their_parts_in_the_overlay():
    """``s16 + s62`` is the new tokens plus the past ones, not a size of its own; the past is short."""
    from graphlens.core.model import Model
    from graphlens.overlays.flops import metric_overlay, node_costs
    from tests.numerics.test_dims_expressions import cached_decoder

    model = Model(cached_decoder())
    _, used = node_costs(model, {"s16": 8})
    assert used == {"s34": 1, "s16": 8, "s62": 4, "s16 + s62": 12}
    overlay = metric_overlay(model, "bytes", {"s16": 8, "s62": 16})
    assert "s16 + s62=24" in overlay.notes[0]
    assert overlay.values["apply_mask"] == 1 * 2 * 24 * 4 * 4  # float32 [s34, 2, s16 + s62, 4]


def test_a_weight_read_again_through_identity_or_transpose_counts_once():
    """rxnmap reads each shared layer's weights through Identity nodes: its parameters summed to 300 M, its
    initializers hold 21.1 M. A weight counts at its first reader; the Identity and Transpose have none."""
    w = np.ones((6, 6), np.float32)
    proto = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"], name="first"),
         helper.make_node("Identity", ["w"], ["w_again"], name="alias"),
         helper.make_node("MatMul", ["h", "w_again"], ["h2"], name="second"),
         helper.make_node("Transpose", ["w"], ["w_t"], name="t", perm=[1, 0]),
         helper.make_node("MatMul", ["h2", "w_t"], ["y"], name="third")],
        [tensor("x", TensorProto.FLOAT, [2, 6])], [tensor("y", TensorProto.FLOAT, [2, 6])], [init("w", w)],
    )
    costs, _ = node_costs(Model(proto))
    assert costs["first"].params == 36 and costs["second"].params == costs["third"].params == 0
    assert costs["alias"].params == costs["t"].params == 0
    assert sum(metric_overlay(Model(proto), "params").values.values()) == 36


def test_nodes_whose_shapes_are_unknown_are_said_to_be_left_out():
    """A Reshape to a shape fed at run time: the MatMul after it has no FLOPs before a run (silero-vad's If branches:
    every Conv), and the overlay says so instead of a total that silently leaves them out."""
    proto = make_model(
        [helper.make_node("Reshape", ["x", "shape"], ["r"], name="reshape"),
         helper.make_node("MatMul", ["r", "w"], ["y"], name="mm")],
        [tensor("x", TensorProto.FLOAT, [2, 6]), tensor("shape", TensorProto.INT64, [2])],
        [tensor("y", TensorProto.FLOAT, None)], [init("w", np.ones((6, 3), np.float32))],
    )
    overlay = metric_overlay(Model(proto), "flops")
    assert "mm" not in overlay.values
    assert "1 node left out: their shapes are not known before a run (such as 'mm')" in overlay.notes


def test_weights_of_the_same_name_in_two_branches_count_in_each():
    """Then and else branches may each hold a weight called ``w``: they are two weights."""
    from onnx import TensorProto

    def branch(side: str) -> object:
        return helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name=f"mm_{side}")], side, [],
                                 [tensor("y", TensorProto.FLOAT, [2, 6])], [init("w", np.ones((6, 6), np.float32))])

    proto = make_model(
        [helper.make_node("If", ["c"], ["y"], name="if", then_branch=branch("then"), else_branch=branch("else"))],
        [tensor("c", TensorProto.BOOL, []), tensor("x", TensorProto.FLOAT, [2, 6])],
        [tensor("y", TensorProto.FLOAT, [2, 6])],
    )
    costs, _ = node_costs(Model(proto))
    assert [c.params for name, c in costs.items() if name.startswith("mm_")] == [36, 36]
