"""Models for the numeric-diff tests, built on tests.models."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.models import conv_bn, init, make_model, tensor

__all__ = ["conv_bn", "custom_op", "mixed_inputs", "perturbed", "renamed_conv_output"]


def perturbed(model: onnx.ModelProto, initializer: str = "w", factor: float = 1.01) -> onnx.ModelProto:
    """A copy of ``model`` with one initializer scaled by ``factor``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for i, t in enumerate(copy.graph.initializer):
        if t.name == initializer:
            array = numpy_helper.to_array(t)
            scaled = (array.astype(np.float64) * factor).astype(array.dtype)
            copy.graph.initializer[i].CopyFrom(numpy_helper.from_array(scaled, initializer))
    return copy


def renamed_conv_output(model: onnx.ModelProto, new: str = "conv_out") -> onnx.ModelProto:
    """A copy of a conv_bn model whose conv output tensor 'c' is called ``new``."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    for node in copy.graph.node:
        node.output[:] = [new if t == "c" else t for t in node.output]
        node.input[:] = [new if t == "c" else t for t in node.input]
    return copy


def custom_op() -> onnx.ModelProto:
    """x -> com.example:Mystery -> y: valid ONNX, but no runtime knows the op."""
    node = helper.make_node("Mystery", ["x"], ["y"], name="mystery", domain="com.example")
    model = make_model([node], [tensor("x", shape=[1, 3, 8, 8])], [tensor("y", shape=[1, 3, 8, 8])])
    model.opset_import.append(helper.make_opsetid("com.example", 1))
    return model


def mixed_inputs() -> onnx.ModelProto:
    """Inputs of four dtypes with fixed, symbolic and unknown dims, plus an initializer listed as an input."""
    inputs = [
        tensor("x", TensorProto.FLOAT, ["N", 3, "seq"]),
        tensor("ids", TensorProto.INT64, ["batch_size", "seq"]),
        tensor("mask", TensorProto.BOOL, [None, 4]),
        tensor("h", TensorProto.FLOAT16, [2, "hidden"]),
        tensor("counts", TensorProto.INT32, [3]),
        tensor("w", TensorProto.FLOAT, [3]),
    ]
    names = ["x", "ids", "mask", "h", "counts", "w"]
    nodes = [helper.make_node("Identity", [n], [f"{n}_out"], name=f"id_{n}") for n in names]
    outputs = [tensor(f"{n}_out", v.type.tensor_type.elem_type, None) for n, v in zip(names, inputs)]
    return make_model(nodes, inputs, outputs, [init("w", np.ones(3, np.float32))])
