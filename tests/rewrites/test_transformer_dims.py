"""The dims fusions read off a graph where shape inference gives none: past onnxruntime's contrib ops, through a
heads split whose shape is computed, through the broadcasts of a rotation."""

from __future__ import annotations

import numpy as np
from onnx import helper

from graphlens.core.model import Model
from graphlens.rewrites.rules.transformers.graph_dims import dims_of, dtype_of
from tests.models import init, make_model, tensor


def _model(nodes, inits=(), x_shape=("batch", "seq", 64)):
    proto = make_model(nodes, [tensor("x", shape=list(x_shape))], [tensor("y", shape=None)], list(inits))
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return Model(proto).graph


def test_a_skip_norms_sum_output_has_its_input_s_dims():
    graph = _model([
        helper.make_node("SkipSimplifiedLayerNormalization", ["x", "x", "w"], ["normed", "", "", "sum"],
                         domain="com.microsoft", epsilon=1e-6),
        helper.make_node("MatMul", ["sum", "wq"], ["y"]),
    ], [init("w", np.ones(64, np.float32)), init("wq", np.ones((64, 32), np.float32))])
    assert dims_of(graph, "sum") == ("batch", "seq", 64) and dims_of(graph, "y") == ("batch", "seq", 32)


def test_the_heads_count_written_minus_one_is_worked_out_from_the_hidden_size():
    """view(*x.shape[:-1], -1, 16): the batch and seq entries copied from x's Shape cancel, 64 / 16 heads are left."""
    pieces = []
    nodes = []
    for axis in (0, 1):
        nodes += [helper.make_node("Shape", ["x"], [f"s{axis}"]),
                  helper.make_node("Gather", [f"s{axis}", f"at{axis}"], [f"g{axis}"], axis=0),
                  helper.make_node("Unsqueeze", [f"g{axis}", "zero"], [f"u{axis}"])]
        pieces.append(f"u{axis}")
    nodes += [helper.make_node("Concat", [*pieces, "minus_one", "size"], ["target"], axis=0),
              helper.make_node("Reshape", ["x", "target"], ["heads"]),
              helper.make_node("Transpose", ["heads"], ["y"], perm=[0, 2, 1, 3])]
    inits = [init("at0", np.array(0, np.int64)), init("at1", np.array(1, np.int64)), init("zero", np.array([0])),
             init("minus_one", np.array([-1], np.int64)), init("size", np.array([16], np.int64))]
    graph = _model(nodes, inits)
    assert dims_of(graph, "heads") == ("batch", "seq", 4, 16) and dims_of(graph, "y") == ("batch", 4, "seq", 16)


def test_a_rotation_has_the_dims_its_operands_broadcast_to():
    """x·cos + rotate_half(x)·sin with cos [1, 1, seq, 16]: the Slice halves lose their width, the Mul gets it back."""
    graph = _model([
        helper.make_node("Slice", ["x", "start", "end", "axis"], ["half"]),
        helper.make_node("Neg", ["half"], ["negated"]),
        helper.make_node("Concat", ["negated", "half"], ["rotated"], axis=-1),
        helper.make_node("Mul", ["rotated", "cos"], ["y"]),
    ], [init("start", np.array([8])), init("end", np.array([16])), init("axis", np.array([-1])),
        init("cos", np.ones((1, 1, 5, 16), np.float32))], x_shape=("batch", 4, 5, 16))
    assert dims_of(graph, "rotated")[:3] == ("batch", 4, 5) and dims_of(graph, "y") == ("batch", 4, 5, 16)


def test_optimum_s_positions_range_over_the_new_tokens_and_its_frequencies_broadcast_over_the_batch():
    """position_ids = Range(past, past + seq); freqs = Expand(inv_freq [1, h, 1]) @ positions [batch, 1, seq]."""
    proto = make_model([
        helper.make_node("Shape", ["past"], ["past_shape"]),
        helper.make_node("Gather", ["past_shape", "two"], ["past_len"], axis=0),
        helper.make_node("Shape", ["ids"], ["ids_shape"]),
        helper.make_node("Gather", ["ids_shape", "one"], ["seq_len"], axis=0),
        helper.make_node("Add", ["past_len", "seq_len"], ["end"]),
        helper.make_node("Range", ["past_len", "end", "step"], ["positions"]),
        helper.make_node("Unsqueeze", ["positions", "zero"], ["row"]),
        helper.make_node("Unsqueeze", ["row", "one_axis"], ["column"]),
        helper.make_node("Cast", ["column"], ["column_float"], to=1),
        helper.make_node("Shape", ["column"], ["batch_shape"]),
        helper.make_node("Expand", ["inv_freq", "batch_shape"], ["inv_expanded"]),
        helper.make_node("MatMul", ["inv_expanded", "column_float"], ["y"]),
    ], [tensor("ids", 7, ["batch", "seq"]), tensor("past", shape=["batch", 2, "past_len", 8])],
        [tensor("y", shape=None)],
        [init("two", np.array(2, np.int64)), init("one", np.array(1, np.int64)), init("step", np.array(1, np.int64)),
         init("zero", np.array([0])), init("one_axis", np.array([1])),
         init("inv_freq", np.ones((1, 4, 1), np.float32))])
    graph = Model(proto).graph
    assert dims_of(graph, "positions") == ("seq",)
    assert dims_of(graph, "y")[1:] == (4, "seq")


def test_a_split_of_packed_qkv_gives_each_part_its_width_and_types_carry_past_contrib_ops():
    """GPT-2's c_attn output Split in three; a per-head norm's input after a com.microsoft op has a type still."""
    graph = _model([
        helper.make_node("Split", ["x", "sizes"], ["q", "k", "v"], axis=2),
        helper.make_node("SkipSimplifiedLayerNormalization", ["q", "k", "w"], ["normed"], domain="com.microsoft"),
        helper.make_node("Reshape", ["normed", "heads"], ["y"]),
    ], [init("sizes", np.array([32, 16, 16], np.int64)), init("w", np.ones(32, np.float32)),
        init("heads", np.array([0, 0, 4, 8], np.int64))])
    assert dims_of(graph, "q") == ("batch", "seq", 32) and dims_of(graph, "v") == ("batch", "seq", 16)
    assert dims_of(graph, "y") == ("batch", "seq", 4, 8) and dtype_of(graph, "y") == "float32"


def test_dims_are_read_up_a_stack_of_fused_layers_of_any_depth():
    """Thirty residual norms in a row, where inference stops at the first: the last one's dims are still read
    (the chain is read from the top down and kept until the model changes), as on a 32-layer decoder."""
    nodes, x = [], "x"
    for layer in range(30):
        nodes += [helper.make_node("SkipSimplifiedLayerNormalization", [x, "x", "w"], [f"n{layer}"],
                                   domain="com.microsoft", epsilon=1e-6),
                  helper.make_node("MatMul", [f"n{layer}", "square"], [f"m{layer}"])]
        x = f"m{layer}"
    nodes.append(helper.make_node("MatMul", [x, "wide"], ["y"]))
    graph = _model(nodes, [init("w", np.ones(64, np.float32)), init("square", np.eye(64, dtype=np.float32)),
                           init("wide", np.ones((64, 96), np.float32))])
    assert dims_of(graph, "y") == ("batch", "seq", 96)
