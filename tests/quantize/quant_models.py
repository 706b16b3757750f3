"""Small float models with every layer kind the quantizer handles, built with onnx.helper."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests import models


def layer(kind: str, *, group: int = 1, trans_b: int = 0, opset: int = 17, seed: int = 0,
          relu: bool = True) -> onnx.ModelProto:
    """x -> one layer (constant weight and bias) -> [Relu] -> y."""
    rng = np.random.default_rng(seed)
    inits = []
    if kind in ("Conv", "ConvTranspose"):
        c_in, c_out = 4, 6
        w_shape = [c_out, c_in // group, 3, 3] if kind == "Conv" else [c_in, c_out // group, 3, 3]
        inits += [models.init("w", rng.normal(0, 0.5, w_shape).astype(np.float32)),
                  models.init("b", rng.normal(0, 0.3, [c_out]).astype(np.float32))]
        node = helper.make_node(kind, ["x", "w", "b"], ["lin"], name="layer", group=group, pads=[1, 1, 1, 1],
                                kernel_shape=[3, 3])
        x_shape, y_shape = [1, c_in, 6, 6], [1, c_out, 6, 6]
    elif kind == "Gemm":
        inits += [models.init("w", rng.normal(0, 0.5, [6, 4] if trans_b else [4, 6]).astype(np.float32)),
                  models.init("b", rng.normal(0, 0.3, [6]).astype(np.float32))]
        node = helper.make_node("Gemm", ["x", "w", "b"], ["lin"], name="layer", transB=trans_b)
        x_shape, y_shape = [3, 4], [3, 6]
    else:
        inits.append(models.init("w", rng.normal(0, 0.5, [4, 6]).astype(np.float32)))
        node = helper.make_node("MatMul", ["x", "w"], ["lin"], name="layer")
        x_shape, y_shape = [3, 4], [3, 6]
    nodes = [node]
    out = "lin"
    if relu:
        nodes.append(helper.make_node("Relu", ["lin"], ["y"], name="relu"))
        out = "y"
    return models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, x_shape)],
                             [models.tensor(out, TensorProto.FLOAT, y_shape)], inits, opset=opset)


def two_convs(opset: int = 17) -> onnx.ModelProto:
    """x -> Conv 'a' -> Relu -> Conv 'b' -> Softmax(axis 1) -> y: an activation between two layers."""
    rng = np.random.default_rng(3)
    inits = [models.init("wa", rng.normal(0, 0.5, [4, 3, 3, 3]).astype(np.float32)),
             models.init("wb", rng.normal(0, 0.5, [5, 4, 1, 1]).astype(np.float32))]
    nodes = [helper.make_node("Conv", ["x", "wa"], ["a"], name="a", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["a"], ["ar"], name="a_relu"),
             helper.make_node("Conv", ["ar", "wb"], ["b"], name="b"),
             helper.make_node("Softmax", ["b"], ["y"], name="softmax", axis=1)]
    return models.make_model(nodes, [models.tensor("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                             [models.tensor("y", TensorProto.FLOAT, [1, 5, 8, 8])], inits, opset=opset)


def conv_if_conv() -> onnx.ModelProto:
    """Conv → If (both branches read the Conv's output from outside) → Conv: a subgraph reading the outer graph."""
    from onnx import numpy_helper

    rng = np.random.default_rng(0)
    w1, w2 = (numpy_helper.from_array(rng.normal(size=(4, c, 3, 3)).astype(np.float32), n)
              for c, n in ((3, "w1"), (4, "w2")))
    cond = numpy_helper.from_array(np.array(True), "cond")
    then = helper.make_graph([helper.make_node("Relu", ["y"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 4, 8, 8])])
    other = helper.make_graph([helper.make_node("Neg", ["y"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 4, 8, 8])])
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w1"], ["y"], name="conv1", pads=[1, 1, 1, 1]),
         helper.make_node("If", ["cond"], ["branch"], name="if", then_branch=then, else_branch=other),
         helper.make_node("Conv", ["branch", "w2"], ["z"], name="conv2", pads=[1, 1, 1, 1])],
        "with_if", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], [w1, w2, cond])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
