"""tidy: duplicates merged, pass-through nodes and cancelling pairs removed, each proven exact, and undone exactly."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.rewrites.driver import resolve_rules
from graphlens.rewrites.rules.tidy import Tidy
from tests.models import init, make_model, tensor
from tests.rewrites.checks import assert_rewrite_is_sound, count, op_types
from tests.rewrites.test_fold_bn import fold

RULES = ["tidy"]
INT64_MAX = np.iinfo(np.int64).max


def node(op: str, inputs: list[str], outputs: list[str], name: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, outputs, name=name, **attrs)


def ints(name: str, *values: int) -> onnx.TensorProto:
    return init(name, np.array(values, dtype=np.int64))


def tidy(proto: onnx.ModelProto):
    """Fold with tidy alone; the rewrite must be sound (checker, names, onnxruntime outputs, undo)."""
    original, model, session, report = fold(proto, RULES)
    kinds = op_types(model)
    assert_rewrite_is_sound(original, model, session)
    return kinds, report


def test_tidy_is_whole_model_and_runs_last_among_the_transformer_rules():
    rule = Tidy()
    assert rule.patterns() == [] and rule.kind == "tidy" and not rule.default
    assert resolve_rules(["transformers"])[-1].name == "tidy"


# ----------------------------------------------------------------------------- duplicates
def test_duplicate_nodes_merge_into_the_first_and_small_initializers_compare_by_value():
    """Two Reshapes of x by ``[-1]`` under two names, then the same Relu twice: one of each stays."""
    proto = make_model(
        [node("Reshape", ["x", "flat_a"], ["r1"], "reshape_a"), node("Reshape", ["x", "flat_b"], ["r2"], "reshape_b"),
         node("Relu", ["r1"], ["u1"], "relu_a"), node("Relu", ["r2"], ["u2"], "relu_b"),
         node("Add", ["u1", "u2"], ["y"], "add")],
        [tensor("x", shape=[2, 3])], [tensor("y", shape=[6])], [ints("flat_a", -1), ints("flat_b", -1)],
    )
    kinds, report = tidy(proto)
    assert kinds == ["Reshape", "Relu", "Add"] and report.applied["tidy"] == 1
    assert "2 duplicate nodes" in report.edits[-1].description


def test_nodes_with_different_attributes_or_random_results_stay_apart():
    proto = make_model(
        [node("LeakyRelu", ["x"], ["a"], "leaky_a", alpha=0.1), node("LeakyRelu", ["x"], ["b"], "leaky_b", alpha=0.2),
         node("Transpose", ["x"], ["c"], "t_a", perm=[1, 0]), node("Transpose", ["x"], ["d"], "t_b", perm=[1, 0]),
         node("Add", ["a", "b"], ["ab"], "add_ab"), node("Sub", ["c", "d"], ["y2"], "sub_cd"),
         node("Add", ["ab", "x"], ["y"], "add")],
        [tensor("x", shape=[3, 3])], [tensor("y", shape=[3, 3]), tensor("y2", shape=[3, 3])],
    )
    kinds, _ = tidy(proto)
    assert kinds.count("LeakyRelu") == 2 and kinds.count("Transpose") == 1

    random = make_model(
        [node("RandomUniformLike", ["x"], ["r1"], "rand_a", seed=1.0),
         node("RandomUniformLike", ["x"], ["r2"], "rand_b", seed=1.0),
         node("Add", ["r1", "r2"], ["y"], "add")],
        [tensor("x", shape=[2])], [tensor("y", shape=[2])],
    )
    _, model, _, report = fold(random, RULES)
    assert count(model, "RandomUniformLike") == 2 and report.applied["tidy"] == 0


def test_a_duplicate_that_writes_a_graph_output_stays_and_only_its_readers_move():
    proto = make_model(
        [node("Relu", ["x"], ["a"], "relu_a"), node("Relu", ["x"], ["y1"], "relu_b"),
         node("Neg", ["y1"], ["n"], "neg"), node("Add", ["a", "n"], ["y2"], "add")],
        [tensor("x", shape=[4])], [tensor("y1", shape=[4]), tensor("y2", shape=[4])],
    )
    original, model, session, _ = fold(proto, RULES)
    assert count(model, "Relu") == 2 and model.graph.by_name["neg"].inputs == ["a"]
    assert_rewrite_is_sound(original, model, session)


# ----------------------------------------------------------------------------- transposes
def test_transposes_that_cancel_go_and_readers_read_the_input():
    proto = make_model(
        [node("Transpose", ["x"], ["t1"], "t1", perm=[2, 1, 0, 3]),
         node("Transpose", ["t1"], ["t2"], "t2", perm=[2, 1, 0, 3]),
         node("Relu", ["t2"], ["y"], "relu")],
        [tensor("x", shape=[2, 3, 4, 5])], [tensor("y", shape=[2, 3, 4, 5])],
    )
    kinds, report = tidy(proto)
    assert kinds == ["Relu"] and "1 Transpose pair composed" in report.edits[-1].description


def test_transposes_that_do_not_cancel_compose_into_one():
    proto = make_model(
        [node("Transpose", ["x"], ["t1"], "t1", perm=[2, 1, 0, 3]),
         node("Transpose", ["t1"], ["t2"], "t2", perm=[1, 2, 0, 3]),
         node("Relu", ["t2"], ["y"], "relu")],
        [tensor("x", shape=[2, 3, 4, 5])], [tensor("y", shape=[3, 2, 4, 5])],
    )
    original, model, session, _ = fold(proto, RULES)
    assert op_types(model) == ["Transpose", "Relu"]
    assert list(model.graph.by_name["t2"].attrs["perm"]) == [1, 0, 2, 3] and model.graph.by_name["t2"].inputs == ["x"]
    assert_rewrite_is_sound(original, model, session)


def test_a_transpose_pair_whose_middle_has_another_reader_keeps_the_first():
    """Cancelling: the reader of the pair reads x, the first Transpose stays for its other reader.
    Not cancelling: nothing would be saved, so nothing changes."""
    def pair(second_perm, out_dims):
        return make_model(
            [node("Transpose", ["x"], ["t1"], "t1", perm=[1, 0, 2]),
             node("Transpose", ["t1"], ["t2"], "t2", perm=second_perm),
             node("Relu", ["t1"], ["y1"], "relu_middle"), node("Neg", ["t2"], ["y2"], "neg")],
            [tensor("x", shape=[2, 3, 4])], [tensor("y1", shape=[3, 2, 4]), tensor("y2", shape=out_dims)],
        )
    kinds, _ = tidy(pair([1, 0, 2], [2, 3, 4]))
    assert kinds == ["Transpose", "Relu", "Neg"]
    kinds, report = tidy(pair([0, 2, 1], [3, 4, 2]))
    assert report.applied["tidy"] == 0 and kinds == ["Transpose", "Transpose", "Relu", "Neg"]


def test_a_transpose_pair_ending_in_a_graph_output_keeps_the_output_name():
    proto = make_model(
        [node("Transpose", ["x"], ["t1"], "t1", perm=[1, 0]), node("Transpose", ["t1"], ["y"], "t2", perm=[1, 0])],
        [tensor("x", shape=[2, 3])], [tensor("y", shape=[2, 3])],
    )
    kinds, report = tidy(proto)
    assert kinds == ["Transpose", "Transpose"] and report.applied["tidy"] == 0


# ----------------------------------------------------------------------------- pass-through nodes
def test_pass_through_nodes_go_identity_perm_same_type_cast_same_shape_reshape():
    proto = make_model(
        [node("Transpose", ["x"], ["a"], "identity_perm", perm=[0, 1, 2]),
         node("Cast", ["a"], ["b"], "same_cast", to=TensorProto.FLOAT),
         node("Reshape", ["b", "same_shape"], ["c"], "same_reshape"),
         node("Shape", ["c"], ["c_shape"], "shape"), node("Reshape", ["c", "c_shape"], ["d"], "reshape_by_own_shape"),
         node("Expand", ["d", "ones"], ["e"], "expand_by_ones"), node("Relu", ["e"], ["y"], "relu")],
        [tensor("x", shape=[2, 3, 4])], [tensor("y", shape=[2, 3, 4])],
        [ints("same_shape", 2, 3, 4), ints("ones", 1, 1)],
    )
    kinds, report = tidy(proto)
    assert kinds == ["Relu"] and "4 nodes passing a tensor through" in report.edits[-1].description
    assert report.cleanup["identity nodes bypassed"] == 1  # the Cast, before any rule ran


def test_nodes_that_change_their_input_stay():
    proto = make_model(
        [node("Cast", ["x"], ["a"], "to_double", to=TensorProto.DOUBLE),
         node("Cast", ["a"], ["b"], "back", to=TensorProto.FLOAT),
         node("Reshape", ["b", "other_shape"], ["c"], "reshape"), node("Expand", ["c", "wider"], ["y"], "expand")],
        [tensor("x", shape=[1, 6])], [tensor("y", shape=[2, 3, 2])],
        [ints("other_shape", 3, 2), ints("wider", 2, 1, 1)],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds == ["Cast", "Cast", "Reshape", "Expand"]


def test_an_expand_against_dims_other_than_one_changes_nothing():
    """``Expand(mask, [1, q, 1])`` where the mask's dims there are 10: any valid q leaves them."""
    proto = make_model(
        [node("Shape", ["q"], ["q_shape"], "q_shape"), node("Gather", ["q_shape", "axis1"], ["q_dim"], "q_dim", axis=0),
         node("Add", ["q_dim", "zero"], ["q_len"], "q_len"),
         node("Concat", ["one", "q_len", "one"], ["target"], "target", axis=0),
         node("Expand", ["mask", "target"], ["expanded"], "expand"), node("Add", ["expanded", "mask"], ["y"], "add")],
        [tensor("mask", shape=[1, 10, 10]), tensor("q", shape=[1, 10, 4])], [tensor("y", shape=[1, 10, 10])],
        [ints("one", 1), ints("axis1", 1), ints("zero", 0)],
    )
    kinds, _ = tidy(proto)
    assert kinds == ["Add"]


def test_an_expand_of_a_dim_of_one_stays():
    proto = make_model(
        [node("Shape", ["q"], ["q_shape"], "q_shape"), node("Gather", ["q_shape", "axis1"], ["q_len"], "q_len", axis=0),
         node("Concat", ["one", "q_len", "one"], ["target"], "target", axis=0),
         node("Expand", ["mask", "target"], ["y"], "expand")],
        [tensor("mask", shape=[1, 1, 10]), tensor("q", shape=[1, 10, 4])], [tensor("y", shape=[1, 10, 10])],
        [ints("one", 1), ints("axis1", 1)],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds.count("Expand") == 1


def test_unsqueezes_in_a_row_become_one():
    proto = make_model(
        [node("Unsqueeze", ["x", "axis1"], ["a"], "first"), node("Unsqueeze", ["a", "axis2"], ["b"], "second"),
         node("Relu", ["b"], ["y"], "relu")],
        [tensor("x", shape=[1, 10])], [tensor("y", shape=[1, 1, 1, 10])], [ints("axis1", 1), ints("axis2", 2)],
    )
    original, model, session, _ = fold(proto, RULES)
    assert op_types(model) == ["Unsqueeze", "Relu"]
    second = model.graph.by_name["second"]
    assert second.inputs[0] == "x" and model.graph.constant_value(second.inputs[1]).tolist() == [1, 2]
    assert_rewrite_is_sound(original, model, session)


def test_unsqueezes_with_attribute_axes_before_opset_13():
    proto = make_model(
        [node("Unsqueeze", ["x"], ["a"], "first", axes=[0]), node("Unsqueeze", ["a"], ["b"], "second", axes=[-1]),
         node("Relu", ["b"], ["y"], "relu")],
        [tensor("x", shape=[3])], [tensor("y", shape=[1, 3, 1])], opset=11,
    )
    original, model, session, _ = fold(proto, RULES)
    assert op_types(model) == ["Unsqueeze", "Relu"] and list(model.graph.by_name["second"].attrs["axes"]) == [0, 2]
    assert_rewrite_is_sound(original, model, session)


# ----------------------------------------------------------------------------- full slices
def test_slices_of_every_element_go():
    proto = make_model(
        [node("Shape", ["x"], ["x_shape"], "shape"), node("Gather", ["x_shape", "two"], ["x_len"], "len", axis=0),
         node("Unsqueeze", ["x_len", "zero"], ["x_end"], "end"),
         node("Slice", ["x", "zero", "x_end", "axis2"], ["a"], "to_own_length"),
         node("Slice", ["a", "zero", "huge", "axis1", "one"], ["b"], "to_int64_max"),
         node("Slice", ["b", "zero", "four", "axis1"], ["c"], "past_the_end"), node("Relu", ["c"], ["y"], "relu")],
        [tensor("x", shape=["batch", 3, "seq"])], [tensor("y", shape=["batch", 3, "seq"])],
        [ints("zero", 0), ints("one", 1), ints("axis1", 1), ints("axis2", 2), ints("huge", INT64_MAX), ints("four", 4),
         init("two", np.array(2, np.int64))],
    )
    kinds, _ = tidy(proto)
    assert kinds == ["Relu"]


@pytest.mark.parametrize(("start", "end", "step"), [(0, 3, 1), (1, INT64_MAX, 1), (0, INT64_MAX, 2)])
def test_slices_that_drop_elements_stay(start, end, step):
    proto = make_model(
        [node("Slice", ["x", "start", "end", "axis", "step"], ["a"], "slice"), node("Relu", ["a"], ["y"], "relu")],
        [tensor("x", shape=[2, 4])], [tensor("y", shape=[2, None])],
        [ints("start", start), ints("end", end), ints("axis", 1), ints("step", step)],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds.count("Slice") == 1


def _slice_with_computed_end(out_dims: list) -> onnx.ModelProto:
    """A Slice whose end is ``past + seq`` (as dynamo writes it); its output declared with ``out_dims``."""
    out = helper.make_tensor_value_info("a", TensorProto.FLOAT, out_dims)
    return make_model(
        [node("Shape", ["past"], ["past_len"], "past_len", start=1, end=2),
         node("Shape", ["x"], ["seq"], "seq", start=0, end=1),
         node("Add", ["past_len", "seq"], ["total"], "total"),
         node("Slice", ["mask", "zero", "total", "axis1"], ["a"], "slice"), node("Relu", ["a"], ["y"], "relu")],
        [tensor("mask", shape=["seq", "seq + past"]), tensor("x", shape=["seq", 4]), tensor("past", shape=[1, "past"])],
        [tensor("y", shape=["seq", "seq + past"])], [ints("zero", 0), ints("axis1", 1)], value_info=[out],
    )


def test_a_slice_declared_with_its_inputs_dims_goes():
    kinds, _ = tidy(_slice_with_computed_end(["seq", "seq + past"]))
    assert kinds == ["Relu"]


def test_a_slice_declared_with_other_dims_stays():
    kinds, _ = tidy(_slice_with_computed_end(["seq", "total"]))
    assert kinds.count("Slice") == 1


# ----------------------------------------------------------------------------- ScatterND writing every row
def _scatter_chain(axes: tuple[int, int, int]) -> onnx.ModelProto:
    """torch's ``x[:, :, :] = upd`` as dynamo exports it: per axis, Range over that dim, ScatterND of transposed
    data."""
    first, second, third = axes
    nodes = [node("Neg", ["x"], ["upd"], "updates")]

    def rows(k: int, axis: int) -> str:
        nodes.extend([
            node("Shape", ["x"], [f"shape{k}"], f"shape{k}"),
            node("Gather", [f"shape{k}", f"axis{axis}"], [f"dim{k}"], f"dim{k}", axis=0),
            node("Range", ["zero", f"dim{k}", "one"], [f"range{k}"], f"range{k}"),
            node("Unsqueeze", [f"range{k}", "minus1"], [f"rows{k}"], f"rows{k}"),
        ])
        return f"rows{k}"

    nodes += [node("Transpose", ["upd"], ["upd_t"], "upd_t", perm=[2, 1, 0, 3]),
              node("Transpose", ["x"], ["x_t"], "x_t", perm=[2, 1, 0, 3]),
              node("ScatterND", ["x_t", rows(0, first), "upd_t"], ["s0"], "scatter0"),
              node("Transpose", ["s0"], ["s0_t"], "s0_t", perm=[1, 2, 0, 3]),
              node("Transpose", ["x"], ["x_t1"], "x_t1", perm=[1, 0, 2, 3]),
              node("ScatterND", ["x_t1", rows(1, second), "s0_t"], ["s1"], "scatter1"),
              node("Transpose", ["s1"], ["s1_t"], "s1_t", perm=[1, 0, 2, 3]),
              node("ScatterND", ["x", rows(2, third), "s1_t"], ["s2"], "scatter2"),
              node("Add", ["s2", "x"], ["y"], "add")]
    inits = [ints("zero", 0), ints("one", 1), ints("minus1", -1)] + [
        init(f"axis{a}", np.array(a, np.int64)) for a in sorted(set(axes))]
    dims = ["batch", "rows", "cols", 5]
    return make_model(nodes, [tensor("x", shape=dims)], [tensor("y", shape=dims)], inits)


def test_scatternd_over_every_row_of_each_axis_is_its_updates():
    kinds, report = tidy(_scatter_chain((2, 1, 0)))
    assert kinds == ["Neg", "Add"]
    assert "3 nodes passing a tensor through" in report.edits[-1].description


def test_scatternd_over_the_rows_of_another_axis_stays():
    """The first Range runs over dim 1 where the rows are dim 2 (as long as it in the run, but not provably)."""
    kinds, _ = tidy(_scatter_chain((1, 1, 0)))
    assert kinds.count("ScatterND") == 1


def test_scatternd_with_constant_rows():
    def build(rows: list[int]) -> onnx.ModelProto:
        return make_model(
            [node("ScatterND", ["x", "rows", "upd"], ["s"], "scatter"), node("Relu", ["s"], ["y"], "relu")],
            [tensor("x", shape=[3, 2]), tensor("upd", shape=[len(rows), 2])], [tensor("y", shape=[3, 2])],
            [init("rows", np.array(rows, np.int64).reshape(-1, 1))],
        )
    kinds, _ = tidy(build([0, 1, 2]))
    assert kinds == ["Relu"]
    kinds, _ = tidy(build([0, 1]))
    assert kinds == ["ScatterND", "Relu"]


# ----------------------------------------------------------------------------- slices of a concatenation
def _rotary_tables(reader: bool) -> onnx.ModelProto:
    """``Slice(Cos(Concat(f, f)), 0, half)`` as rotary caches are cut; ``reader``: Cos's output read elsewhere too."""
    nodes = [node("Concat", ["f", "f"], ["cat"], "cat", axis=-1), node("Cos", ["cat"], ["cos"], "cos"),
             node("Slice", ["cos", "zero", "half", "last"], ["cos_half"], "cos_half"),
             node("Slice", ["cat", "half", "huge", "last"], ["second"], "second_half"),
             node("Add", ["cos_half", "second"], ["y"], "add")]
    outputs = [tensor("y", shape=[10, 4])]
    if reader:
        nodes.append(node("Neg", ["cos"], ["y2"], "neg"))
        outputs.append(tensor("y2", shape=[10, 8]))
    return make_model(nodes, [tensor("f", shape=[10, 4])], outputs,
                      [ints("zero", 0), ints("half", 4), ints("last", -1), ints("huge", INT64_MAX)])


def test_a_slice_of_one_concat_input_is_that_input_under_the_elementwise_op():
    original, model, session, _ = fold(_rotary_tables(reader=False), RULES)
    assert op_types(model) == ["Cos", "Add"]
    assert model.graph.by_name["cos_half"].inputs == ["f"] and model.graph.by_name["add"].inputs == ["cos_half", "f"]
    assert_rewrite_is_sound(original, model, session)


def test_a_slice_of_an_elementwise_op_read_elsewhere_stays():
    kinds, _ = tidy(_rotary_tables(reader=True))
    assert kinds.count("Slice") == 1 and kinds.count("Cos") == 1 and "Concat" in kinds


def test_a_slice_across_two_concat_inputs_stays():
    proto = make_model(
        [node("Concat", ["a", "b"], ["cat"], "cat", axis=0), node("Slice", ["cat", "one", "three"], ["s"], "slice"),
         node("Relu", ["s"], ["y"], "relu")],
        [tensor("a", shape=[2]), tensor("b", shape=[2])], [tensor("y", shape=[2])], [ints("one", 1), ints("three", 3)],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds == ["Concat", "Slice", "Relu"]


# ----------------------------------------------------------------------------- graph outputs and subgraphs
def test_a_graph_output_copied_by_identity_is_written_by_its_producer():
    proto = make_model(
        [node("MatMul", ["x", "w"], ["m"], "matmul"), node("Identity", ["m"], ["y"], "copy")],
        [tensor("x", shape=[2, 3])], [tensor("y", shape=[2, 4])],
        [init("w", np.arange(12, dtype=np.float32).reshape(3, 4))],
    )
    original, model, session, _ = fold(proto, RULES)
    assert op_types(model) == ["MatMul"] and model.graph.nodes[0].outputs == ["y"]
    assert_rewrite_is_sound(original, model, session)


def test_an_identity_output_whose_source_is_read_elsewhere_stays():
    proto = make_model(
        [node("Relu", ["x"], ["r"], "relu"), node("Identity", ["r"], ["y"], "copy"), node("Neg", ["r"], ["y2"], "neg")],
        [tensor("x", shape=[2])], [tensor("y", shape=[2]), tensor("y2", shape=[2])],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds.count("Identity") == 1


def test_a_tensor_a_branch_reads_keeps_its_producer():
    branch = helper.make_graph([node("Relu", ["t2"], ["z"], "inner_relu")], "then", [], [tensor("z", shape=[2, 3])])
    other = helper.make_graph([node("Neg", ["x"], ["z2"], "inner_neg")], "else", [], [tensor("z2", shape=[2, 3])])
    proto = make_model(
        [node("Transpose", ["x"], ["t1"], "t1", perm=[1, 0]), node("Transpose", ["t1"], ["t2"], "t2", perm=[1, 0]),
         node("If", ["cond"], ["y"], "if", then_branch=branch, else_branch=other),
         node("Relu", ["t2"], ["y2"], "relu")],
        [tensor("x", shape=[2, 3]), tensor("cond", TensorProto.BOOL, [])],
        [tensor("y", shape=[2, 3]), tensor("y2", shape=[2, 3])],
    )
    original, model, session, _ = fold(proto, RULES)
    assert count(model, "Transpose") == 2 and model.graph.by_name["relu"].inputs == ["x"]
    assert_rewrite_is_sound(original, model, session)


def test_a_branch_is_tidied_in_its_own_graph():
    then_branch = helper.make_graph(
        [node("Transpose", ["x"], ["t1"], "inner_t1", perm=[1, 0]),
         node("Transpose", ["t1"], ["t2"], "inner_t2", perm=[1, 0]),
         node("Relu", ["t2"], ["z"], "inner_relu")], "then", [], [tensor("z", shape=[2, 3])])
    else_branch = helper.make_graph([node("Neg", ["x"], ["z2"], "inner_neg")], "else", [], [tensor("z2", shape=[2, 3])])
    proto = make_model(
        [node("If", ["cond"], ["y"], "if", then_branch=then_branch, else_branch=else_branch)],
        [tensor("x", shape=[2, 3]), tensor("cond", TensorProto.BOOL, [])], [tensor("y", shape=[2, 3])],
    )
    kinds, report = tidy(proto)
    assert sorted(kinds) == ["If", "Neg", "Relu"] and "in main/if:then_branch" in report.edits[0].description


def test_only_identity_nodes_are_left_to_the_cleanup():
    proto = make_model(
        [node("Identity", ["x"], ["a"], "copy"), node("Relu", ["a"], ["y"], "relu"),
         node("Neg", ["x"], ["unread"], "unread")],
        [tensor("x", shape=[2])], [tensor("y", shape=[2])],
    )
    kinds, report = tidy(proto)
    assert report.applied["tidy"] == 0 and kinds == ["Relu"] and report.cleanup["identity nodes bypassed"] == 1


def test_a_reshape_to_its_own_dims_after_a_fused_op_goes_where_inference_knows_no_rank():
    """After onnxruntime's fused ops shape inference stops; their output keeps their input's rank, so a Reshape to
    the dims of its own input, gathered one by one as exporters compute them, still passes it through."""
    nodes = [node("SkipSimplifiedLayerNormalization", ["x", "x", "gamma"], ["normed"], "norm", domain="com.microsoft",
                  epsilon=1e-6),
             node("Shape", ["normed"], ["dims"], "shape"),
             node("Gather", ["dims", "zero"], ["d0"], "d0", axis=0),
             node("Gather", ["dims", "one"], ["d1"], "d1", axis=0),
             node("Gather", ["dims", "two"], ["d2"], "d2", axis=0),
             node("Unsqueeze", ["d0", "axes"], ["u0"], "u0"), node("Unsqueeze", ["d1", "axes"], ["u1"], "u1"),
             node("Unsqueeze", ["d2", "axes"], ["u2"], "u2"),
             node("Concat", ["u0", "u1", "u2"], ["target"], "target", axis=0),
             node("Reshape", ["normed", "target"], ["same"], "reshape"), node("Relu", ["same"], ["y"], "relu")]
    proto = make_model(nodes, [tensor("x", shape=["batch", "seq", 8])], [tensor("y", shape=["batch", "seq", 8])],
                       [init("gamma", np.ones(8, np.float32)), init("zero", np.array(0, np.int64)),
                        init("one", np.array(1, np.int64)), init("two", np.array(2, np.int64)),
                        init("axes", np.array([0], np.int64))])
    proto.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    kinds, _ = tidy(proto)
    assert "Reshape" not in kinds and kinds[-1] == "Relu"
