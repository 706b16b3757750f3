"""Small ONNX models built in code for the tests: each shows one situation a user meets."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
rng = np.random.default_rng(1234)


def make_model(nodes, inputs, outputs, initializers=(), *, name="test", opset=OPSET, **kwargs) -> onnx.ModelProto:
    graph = helper.make_graph(list(nodes), name, list(inputs), list(outputs), list(initializers), **kwargs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="graphlens-tests")
    model.ir_version = IR_VERSION
    return model


def tensor(name: str, dtype=TensorProto.FLOAT, shape=None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def init(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def bn_params(channels: int, prefix: str = "bn", dtype=np.float32) -> dict[str, np.ndarray]:
    """Non-trivial batch-norm statistics, the kind a trained network has."""
    return {
        f"{prefix}_scale": rng.uniform(0.5, 1.5, channels).astype(dtype),
        f"{prefix}_bias": rng.normal(0, 0.2, channels).astype(dtype),
        f"{prefix}_mean": rng.normal(0, 0.5, channels).astype(dtype),
        f"{prefix}_var": rng.uniform(0.5, 2.0, channels).astype(dtype),
    }


def conv_bn(channels: int = 4, *, dtype=TensorProto.FLOAT) -> onnx.ModelProto:
    """x -> Conv 'conv' -> BatchNormalization 'bn' -> y, all parameters initializers."""
    np_dtype = onnx.helper.tensor_dtype_to_np_dtype(dtype)
    params = bn_params(channels, dtype=np_dtype)
    w = rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np_dtype)
    nodes = [
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", *params], ["y"], name="bn", epsilon=1e-5),
    ]
    inits = [init("w", w)] + [init(k, v) for k, v in params.items()]
    return make_model(nodes, [tensor("x", dtype, [1, 3, 8, 8])], [tensor("y", dtype, [1, channels, 8, 8])], inits)


def conv_bn_params_behind_constants(channels: int = 4) -> onnx.ModelProto:
    """BN parameters from Constant, ConstantOfShape and Identity-of-initializer, as exporters write them."""
    params = bn_params(channels)
    w = rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["scale"], name="scale_const", value=init("s", params["bn_scale"])),
        helper.make_node("Constant", [], ["shape"], name="shape_const", value_ints=[channels]),
        helper.make_node(
            "ConstantOfShape", ["shape"], ["bias"], name="bias_fill", value=init("v", np.array([0.25], np.float32))
        ),
        helper.make_node("Identity", ["mean_init"], ["mean"], name="mean_id"),
        helper.make_node("Cast", ["var_init64"], ["var"], name="var_cast", to=TensorProto.FLOAT),
        helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["y"], name="bn"),
    ]
    inits = [init("w", w), init("mean_init", params["bn_mean"]),
             init("var_init64", params["bn_var"].astype(np.float64))]
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("y", shape=[1, channels, 8, 8])], inits)


def conv_bn_mean_from_input(channels: int = 4) -> onnx.ModelProto:
    """A BN whose mean is a graph input: not foldable."""
    model = conv_bn(channels)
    graph = model.graph
    mean = next(t for t in graph.initializer if t.name == "bn_mean")
    graph.initializer.remove(mean)
    graph.input.append(tensor("bn_mean", shape=[channels]))
    return model


def if_with_conv_bn(channels: int = 4) -> onnx.ModelProto:
    """An If whose then-branch holds a Conv->BN reading the outer 'x' and outer weights."""
    params = bn_params(channels, prefix="tbn")
    w = rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np.float32)
    then_graph = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["tc"], name="then_conv", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["tc", *params], ["then_out"], name="then_bn"),
        ],
        "then_branch",
        [],
        [tensor("then_out", shape=[1, channels, 8, 8])],
        [init(k, v) for k, v in params.items()],
    )
    else_graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["else_out"], name="else_conv", pads=[1, 1, 1, 1])],
        "else_branch",
        [],
        [tensor("else_out", shape=[1, channels, 8, 8])],
    )
    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=then_graph, else_branch=else_graph)]
    return make_model(
        nodes,
        [tensor("x", shape=[1, 3, 8, 8]), tensor("cond", TensorProto.BOOL, [])],
        [tensor("y", shape=[1, channels, 8, 8])],
        [init("w", w)],
    )


def undefined_input() -> onnx.ModelProto:
    """A node reads 'ghost', which nothing produces."""
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")]
    return make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])
