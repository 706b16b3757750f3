"""A hostile value is refused where it is first read, in one line naming the file, the node or tensor, and what is
wrong: element types, attribute types, a Constant's data against its dims, producers, reading order, nesting, and
paths that are no model file."""

from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest
from onnx import helper

from graphlens.core.attributes import AttributeTypeError
from graphlens.core.errors import GraphLensError, ModelLoadError
from graphlens.core.model import Model, load_model
from graphlens.core.names import printable
from graphlens.rewrites.driver import fold_model, resolve_rules
from tests import hostile_models as hm
from tests import models
from tests.rewrites import transformer_attention_models as am


def _written(tmp_path, proto: onnx.ModelProto | bytes, name: str = "m.onnx"):
    path = tmp_path / name
    path.write_bytes(proto if isinstance(proto, bytes) else proto.SerializeToString())
    return path


@pytest.mark.parametrize(("build", "said"), [
    (hm.unknown_element_type_initializer, "initializer 'w' has element type 999, which ONNX does not define"),
    (hm.unknown_element_type_input, "graph input 'x' has element type 999, which ONNX does not define"),
])
def test_an_element_type_onnx_does_not_define_is_refused_on_loading(tmp_path, build, said):
    path = _written(tmp_path, build())
    with pytest.raises(ModelLoadError) as refused:
        load_model(path)
    assert str(refused.value) == f"{path}: {said}"


@pytest.mark.parametrize(("kind", "stored"), [("bytes", "a string (STRING)"), ("tensor", "a tensor (TENSOR)"),
                                              ("ints", "a list of ints (INTS)")])
def test_an_attribute_of_another_type_than_its_operator_takes_is_named_when_read(tmp_path, kind, stored):
    model = load_model(_written(tmp_path, hm.epsilon_as(kind)))
    said = (f"{model.path}: node BatchNormalization 'bn': attribute 'epsilon' is {stored}, "
            "where BatchNormalization takes a float (FLOAT)")
    with pytest.raises(AttributeTypeError) as refused:
        model.graph.node("bn").attrs["epsilon"]
    assert str(refused.value) == said
    with pytest.raises(GraphLensError) as folding:  # the rule reads it as the view does: the same line
        fold_model(model, resolve_rules(["fold-bn"]))
    assert str(folding.value) == said


def test_a_batch_norm_parameter_of_strings_is_named_by_the_fold(tmp_path):
    model = load_model(_written(tmp_path, hm.bn_scale_as_strings()))
    with pytest.raises(GraphLensError) as refused:
        fold_model(model, resolve_rules(["fold-bn"]))
    assert str(refused.value) == (f"{model.path}: node BatchNormalization 'bn': input 1 (scale) is a tensor of "
                                  "strings, where BatchNormalization takes floating-point numbers")


def test_a_softmax_axis_stored_as_a_string_is_named_by_the_attention_fusion():
    proto = am.build(am.variant())
    softmax = next(n for n in proto.graph.node if n.op_type == "Softmax")
    del softmax.attribute[:]
    softmax.attribute.append(helper.make_attribute("axis", "last"))
    with pytest.raises(GraphLensError, match=re.escape(
            f"node Softmax '{softmax.name}': attribute 'axis' is a string (STRING), where Softmax takes an int (INT)")):
        fold_model(Model(proto), resolve_rules(["transformers"]))


def test_a_constant_whose_data_does_not_fit_its_dims_is_named_when_read(tmp_path):
    model = load_model(_written(tmp_path, hm.constant_data_not_fitting_dims()))
    with pytest.raises(AttributeTypeError) as refused:
        model.graph.node("scale_const").attrs["value"]
    assert str(refused.value) == (f"{model.path}: node Constant 'scale_const': attribute 'value': tensor 's' holds "
                                  "4 values, where its dims [7] call for 7")


def test_attributes_of_the_declared_type_and_unknown_ops_read_as_stored():
    model = Model(models.conv_bn())
    assert model.graph.node("bn").attrs["epsilon"] == pytest.approx(1e-5)
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="r", note="free text"),  # not in Relu's schema
             helper.make_node("Thing", ["r"], ["y"], name="t", domain="my.ops", axis="any")]  # no schema at all
    graph = Model(models.make_model(nodes, [models.tensor("x", shape=[1])], [models.tensor("y", shape=[1])])).graph
    assert graph.node("r").attrs["note"] == "free text" and graph.node("t").attrs["axis"] == "any"


def test_a_tensor_produced_twice_is_named_with_both_producers(tmp_path):
    path = _written(tmp_path, hm.duplicate_producer())
    with pytest.raises(ModelLoadError) as refused:
        load_model(path)
    assert str(refused.value) == (f"{path}: tensor 'c' is produced twice, by node Conv 'conv' and again by node "
                                  "Relu 'second_writer'; each tensor must have one producer")


def test_an_inner_graph_reading_a_tensor_produced_after_it_is_told_so(tmp_path):
    path = _written(tmp_path, hm.if_reading_a_later_tensor())
    with pytest.raises(ModelLoadError) as refused:
        load_model(path)
    assert str(refused.value) == (
        f"{path}: node Relu 'reads_late' in main/the_if:then_branch reads tensor 'late', which node Abs 'late_abs' "
        "produces only after If 'the_if', the node holding this graph; a tensor must be produced before it is read")


def test_graphs_nested_past_protobufs_limit_are_named_as_too_deep(tmp_path):
    assert load_model(_written(tmp_path, hm.nested_if_bytes(20), "twenty.onnx")).node_count() == 21
    path = _written(tmp_path, hm.nested_if_bytes(300))
    with pytest.raises(ModelLoadError) as refused:
        load_model(path)
    assert str(refused.value) == (f"{path}: nests graphs too deeply to be read (subgraphs inside subgraphs beyond "
                                  "protobuf's limit of 100 levels)")


@pytest.mark.skipif(not os.path.exists("/dev/zero") or not hasattr(os, "mkfifo"), reason="needs /dev/zero and FIFOs")
def test_a_device_or_a_pipe_is_refused_before_it_is_read(tmp_path):
    fifo = tmp_path / "pipe.onnx"
    os.mkfifo(fifo)
    for path in ("/dev/zero", fifo):
        with pytest.raises(ModelLoadError) as refused:
            load_model(path)
        assert str(refused.value) == (f"{path}: is not a regular file (a device, a pipe or a socket), "
                                      "not an ONNX model file")


def test_a_file_larger_than_the_memory_available_is_refused_before_it_is_read(tmp_path, monkeypatch):
    from graphlens.core import reading

    path = _written(tmp_path, models.conv_bn())
    monkeypatch.setattr(reading, "available_memory", lambda: 100)
    monkeypatch.setattr(reading, "ALWAYS_READ", 0)
    with pytest.raises(ModelLoadError) as refused:
        load_model(path)
    size = path.stat().st_size
    assert str(refused.value) == f"{path}: is {size:,} bytes, more than the 100 bytes of memory available; not read"
    huge = tmp_path / "huge.onnx"
    with open(huge, "wb") as f:  # sparse: 2 TB long, no block written
        f.truncate(2 << 40)
    monkeypatch.undo()
    with pytest.raises(ModelLoadError, match=r"huge\.onnx: is 2,199\.0 GB, more than the .* of memory available"):
        load_model(huge)


def test_a_name_that_is_not_utf8_reads_as_text_with_its_stray_byte_escaped(tmp_path):
    model = load_model(_written(tmp_path, hm.node_name_not_utf8()))
    assert [n.name for n in model.graph.nodes] == ["conv", "bn\\xf3("]
    assert model.graph.node("bn\\xf3(").label == "BatchNormalization 'bn\\xf3('"


def test_printable_escapes_bidi_and_control_characters_and_keeps_the_rest():
    assert printable("node '\u202eevil\u202c' \x1b[31m\x07 \u200b\ufeff \udcf3") == (
        "node '\\u202eevil\\u202c' \\x1b[31m\\x07 \\u200b\\ufeff \\udcf3")
    kept = "Conv '/stem/conv' → ⟨16×3⟩ שלום é\tnext\n"
    assert printable(kept) == kept
    assert all(printable(c) != c for c in "\u061c\u200e\u200f\u202a\u202b\u202d\u2066\u2067\u2068\u2069\u2028\x85")


def test_values_are_read_as_before_when_nothing_is_wrong():
    model = Model(models.conv_bn_params_behind_constants())
    value = model.graph.node("scale_const").attrs["value"]
    assert isinstance(value, np.ndarray) and value.shape == (4,)


def test_a_constant_holding_a_tensor_of_an_undefined_element_type_is_refused_where_read(tmp_path):
    """A Constant's value of element type 999 was a KeyError in render and a ValueError in fold, quantize and
    binarize; it is refused when the model is read, naming the node and its attribute."""
    import onnx
    from onnx import TensorProto, helper

    from graphlens.core.errors import GraphLensError

    value = helper.make_tensor("v", TensorProto.FLOAT, [2], [1.0, 2.0])
    value.data_type = 999
    graph = helper.make_graph([helper.make_node("Constant", [], ["c"], name="k", value=value)], "g", [],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [2])])
    path = tmp_path / "k.onnx"
    path.write_bytes(helper.make_model(graph).SerializeToString())
    with pytest.raises(GraphLensError, match=r"node Constant 'k': attribute 'value' holds a tensor that has element "
                                             r"type 999, which ONNX does not define"):
        load_model(path)
    assert onnx.load(str(path)).graph.node[0].attribute[0].t.data_type == 999  # the file is as it was
