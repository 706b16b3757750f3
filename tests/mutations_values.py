"""Mutations of values: dtypes, dims, attribute types and values, BN parameters, Constants (tests/mutations.py)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from tests.mutant_graphs import (
    NON_UTF8_BYTES,
    Draft,
    as_array,
    constant_sources,
    constant_tensors,
    node_label,
    nodes,
    real_inputs,
    replace_tensor,
)

BAD_DTYPES = [999, TensorProto.UNDEFINED, TensorProto.STRING, TensorProto.FLOAT16, TensorProto.BFLOAT16,
              TensorProto.COMPLEX64, TensorProto.FLOAT8E4M3FN, TensorProto.INT4]
BAD_DIMS = [0, -1, 2**40, -(2**40)]
ATTRIBUTE_TARGETS = {
    "BatchNormalization": ["epsilon", "momentum", "training_mode"],
    "Softmax": ["axis"],
    "Conv": ["strides", "pads", "group", "dilations"],
    "Gemm": ["transB", "alpha"],
}
"""Attributes the issue found misread, tried first; any other attribute of the model is fair game too."""



# ---------------------------------------------------------------------------------------- dtypes and dims
def init_dtype(draft: Draft, rng: random.Random) -> str | None:
    """An initializer or Constant value relabelled: an unknown dtype (999), float16 over float32 bytes..."""
    tensors = constant_tensors(draft.model)
    floats = [t for t in tensors if t[2].data_type == TensorProto.FLOAT]
    if not tensors:
        return None
    label, _, tensor = rng.choice(floats or tensors)
    old, tensor.data_type = tensor.data_type, rng.choice(BAD_DTYPES)
    return f"{label}: dtype {old} -> {tensor.data_type}"


def input_dtype(draft: Draft, rng: random.Random) -> str | None:
    inputs = real_inputs(draft.model)
    if not inputs:
        return None
    value = rng.choice(inputs)
    old = value.type.tensor_type.elem_type
    value.type.tensor_type.elem_type = rng.choice([999, TensorProto.UNDEFINED, TensorProto.STRING,
                                                   TensorProto.FLOAT16, TensorProto.INT64, TensorProto.BOOL])
    return f"graph input '{value.name}': dtype {old} -> {value.type.tensor_type.elem_type}"


def input_dims(draft: Draft, rng: random.Random) -> str | None:
    shaped = [v for v in real_inputs(draft.model) if v.type.tensor_type.shape.dim]
    if not shaped:
        return None
    value = rng.choice(shaped)
    dims = value.type.tensor_type.shape.dim
    axis = rng.randrange(len(dims))
    dims[axis].dim_value = rng.choice(BAD_DIMS)
    return f"graph input '{value.name}': dim {axis} = {dims[axis].dim_value}"


# ---------------------------------------------------------------------------------------- attributes
def _attribute_value(kind: str, rng: random.Random) -> object:
    makers: dict[str, Callable[[], object]] = {
        "INT": lambda: rng.choice([0, 1, 7]),
        "FLOAT": lambda: rng.choice([1.5, float("nan"), -1.0]),
        "STRING": lambda: rng.choice([b"1e-5", b"abc", b""]),
        "bytes": lambda: NON_UTF8_BYTES,
        "TENSOR": lambda: numpy_helper.from_array(np.array(rng.choice([[1e-5, 2e-5], [1.0]]), np.float32)),
        "INTS": lambda: [1, 2],
        "FLOATS": lambda: [0.5, 0.25],
    }
    return makers[kind]()


def attr_type(draft: Draft, rng: random.Random) -> str | None:
    """An attribute stored with another type: epsilon as bytes, a TENSOR or INTS, a Softmax axis as a string."""
    targets = [(n, name) for _, n in nodes(draft.model) for name in ATTRIBUTE_TARGETS.get(n.op_type, [])]
    others = [(n, a.name) for _, n in nodes(draft.model) for a in n.attribute
              if a.type not in (AttributeProto.GRAPH, AttributeProto.GRAPHS)]
    if not targets and not others:
        return None
    node, name = rng.choice(targets if targets and (rng.random() < 0.7 or not others) else others)
    old = next((a for a in node.attribute if a.name == name), None)
    old_type = AttributeProto.AttributeType.Name(old.type) if old is not None else "absent"
    kind = rng.choice([k for k in ("INT", "FLOAT", "STRING", "bytes", "TENSOR", "INTS", "FLOATS") if k != old_type])
    if old is not None:
        node.attribute.remove(old)
    node.attribute.append(helper.make_attribute(name, _attribute_value(kind, rng)))
    return f"{node_label(node)}: attribute {name} {old_type} -> {kind}"


def _bn_parameter(draft: Draft, rng: random.Random, *,
                  main_graph: bool = False) -> tuple[NodeProto, int, str, TensorProto] | None:
    sources = constant_sources(draft.model)
    found = [(n, k, *sources[n.input[k]]) for g, n in nodes(draft.model, "BatchNormalization")
             if not main_graph or g is draft.model.graph
             for k in range(1, min(5, len(n.input))) if n.input[k] in sources]
    return rng.choice(found) if found else None


def bn_length(draft: Draft, rng: random.Random) -> str | None:
    """A BN scale, bias, mean or variance with more or fewer values than the channels (7 for 16, 0, 1...)."""
    picked = _bn_parameter(draft, rng)
    if picked is None:
        return None
    node, k, label, tensor = picked
    array = as_array(tensor)
    if tensor.data_type == TensorProto.INT64 and array.ndim == 1 and array.size == 1:  # a ConstantOfShape's shape
        channels = int(array[0])
        new = rng.choice([max(channels - 1, 0), channels + 3, 1, 0, 7])
        replace_tensor(tensor, np.array([new], np.int64))
    else:
        channels = array.size
        new = rng.choice([max(channels - 1, 0), channels + 3, 1, 0, 7])
        replace_tensor(tensor, np.resize(array.reshape(-1), new).astype(array.dtype))
    return f"{node_label(node)} input {k} ({label}): {channels} -> {new} values"


def _strings(name: str, dims: list[int], values: list[bytes]) -> TensorProto:
    tensor = TensorProto(name=name, data_type=TensorProto.STRING, dims=dims)
    tensor.string_data.extend(values)
    return tensor


def bn_string(draft: Draft, rng: random.Random) -> str | None:
    """A BN parameter stored as a STRING tensor (numbers as text, or not numbers at all)."""
    picked = _bn_parameter(draft, rng)
    if picked is None:
        return None
    node, k, label, tensor = picked
    text = rng.choice([b"0.5", b"abc", NON_UTF8_BYTES])
    dims = list(tensor.dims)
    count = int(np.prod(dims)) if dims else 1
    if tensor.data_type == TensorProto.INT64:  # a ConstantOfShape's shape: make its value the string instead
        fill = next(n for _, n in nodes(draft.model, "ConstantOfShape") if n.output[0] == node.input[k])
        for a in fill.attribute:
            a.t.CopyFrom(_strings(a.t.name, [1], [text]))
    else:
        tensor.CopyFrom(_strings(tensor.name, dims, [text] * count))
    return f"{node_label(node)} input {k} ({label}) as STRING {text!r}"


def bn_nan(draft: Draft, rng: random.Random) -> str | None:
    """A BN parameter of the main graph holding NaN or Inf, or a negative variance: outputs that are NaN, which no
    check may pass (whether they are is for :func:`tests.fuzz_judge.outputs_not_finite` to say)."""
    picked = _bn_parameter(draft, rng, main_graph=True)
    if picked is None or picked[3].data_type != TensorProto.FLOAT:
        return None
    node, k, label, tensor = picked
    array = as_array(tensor).copy()
    value = rng.choice([float("nan"), float("inf"), *([-2.0] if k == 4 else [])])  # a negative variance: sqrt(-)
    array.reshape(-1)[rng.randrange(array.size)] = value
    replace_tensor(tensor, array)
    return f"{node_label(node)} input {k} ({label}): one value {value}"


def bn_training(draft: Draft, rng: random.Random) -> str | None:
    found = nodes(draft.model, "BatchNormalization")
    if not found:
        return None
    _, node = rng.choice(found)
    for a in [a for a in node.attribute if a.name == "training_mode"]:
        node.attribute.remove(a)
    node.attribute.append(helper.make_attribute("training_mode", 1))
    return f"{node_label(node)}: training_mode = 1"


def conv_values(draft: Draft, rng: random.Random) -> str | None:
    """strides 0, pads of 2^40 or -1, dilations 0, group 0 or one that does not divide the channels."""
    found = nodes(draft.model, "Conv", "ConvTranspose", "MaxPool", "AveragePool")
    if not found:
        return None
    _, node = rng.choice(found)
    rank = next((len(a.ints) for a in node.attribute if a.name in ("kernel_shape", "strides") and a.ints), 2)
    name, value = rng.choice([("strides", [0] * rank), ("pads", [2**40] * 2 * rank), ("pads", [-1] * 2 * rank),
                              ("dilations", [0] * rank), ("kernel_shape", [0] * rank), ("group", 0), ("group", 3)])
    for a in [a for a in node.attribute if a.name == name]:
        node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))
    return f"{node_label(node)}: {name} = {value}"


# ---------------------------------------------------------------------------------------- Constants
def constant_no_value(draft: Draft, rng: random.Random) -> str | None:
    """A Constant with no value attribute at all (an initializer becomes one when the model has none)."""
    found = nodes(draft.model, "Constant")
    if found:
        _, node = rng.choice(found)
        del node.attribute[:]
        return f"{node_label(node)}: no value"
    graph = draft.model.graph
    if not graph.initializer:
        return None
    tensor = rng.choice(list(graph.initializer))
    graph.initializer.remove(tensor)
    graph.node.insert(0, helper.make_node("Constant", [], [tensor.name], name="valueless"))
    return f"initializer '{tensor.name}' replaced by Constant 'valueless' with no value"


def constant_misfit(draft: Draft, rng: random.Random) -> str | None:
    """A Constant (or initializer) whose data does not fit its dims."""
    tensors = constant_tensors(draft.model)
    preferred = [t for t in tensors if t[0].startswith("Constant ")]
    if not tensors:
        return None
    label, _, tensor = rng.choice(preferred or tensors)
    old = list(tensor.dims)
    new = rng.choice([[*old, 2], [old[0] + 1, *old[1:]] if old else [3], [0, *old]])
    tensor.ClearField("dims")
    tensor.dims.extend(new)
    return f"{label}: dims {old} -> {new}, data unchanged"

