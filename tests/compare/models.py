"""Models for the comparison tests: each pair of models shows a difference a user looks for."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, make_model, tensor


def copy(proto: onnx.ModelProto) -> onnx.ModelProto:
    return onnx.ModelProto.FromString(proto.SerializeToString())


def rename_everything(proto: onnx.ModelProto, prefix: str = "r") -> onnx.ModelProto:
    """A copy with every node, initializer and intermediate tensor renamed (graph inputs and outputs kept),
    node order unchanged: what re-exporting a model often does."""
    out = copy(proto)
    kept = {v.name for v in out.graph.input} | {v.name for v in out.graph.output}
    names: dict[str, str] = {}

    def new(name: str) -> str:
        if not name or name in kept:
            return name
        return names.setdefault(name, f"{prefix}{len(names)}")

    def visit(graph: onnx.GraphProto) -> None:
        for t in graph.initializer:
            t.name = new(t.name)
        for v in graph.value_info:
            v.name = new(v.name)
        for k, node in enumerate(graph.node):
            node.name = f"{prefix}_node{id(graph) % 997}_{k}"
            for i, t in enumerate(node.input):
                node.input[i] = new(t)
            for i, t in enumerate(node.output):
                node.output[i] = new(t)
            for attr in node.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    visit(attr.g)
                for g in attr.graphs:
                    visit(g)
        for v in graph.input:
            v.name = new(v.name)
        for v in graph.output:
            v.name = new(v.name)

    visit(out.graph)
    return out


def chain(pads: int = 1, *, extra_branch: bool = False) -> onnx.ModelProto:
    """x -> Conv -> Relu -> Conv -> Sigmoid -> y; ``extra_branch`` adds x -> Conv -> Tanh -> z."""
    rng = np.random.default_rng(7)
    w1 = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
    w2 = rng.normal(0, 0.3, (4, 4, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("Conv", ["r1", "w2"], ["c2"], name="conv2", pads=[pads] * 4),
        helper.make_node("Sigmoid", ["c2"], ["y"], name="sig"),
    ]
    out_size = 8 + 2 * pads - 2
    outputs = [tensor("y", shape=[1, 4, out_size, out_size])]
    inits = [init("w1", w1), init("w2", w2)]
    if extra_branch:
        w3 = rng.normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)
        nodes += [helper.make_node("Conv", ["x", "w3"], ["c3"], name="side_conv", pads=[1, 1, 1, 1]),
                  helper.make_node("Tanh", ["c3"], ["z"], name="side_tanh")]
        outputs.append(tensor("z", shape=[1, 4, 8, 8]))
        inits.append(init("w3", w3))
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], outputs, inits)


def gelu_decomposed() -> onnx.ModelProto:
    """x -> MatMul -> GELU written out (x·0.5·(1+erf(x/√2))) -> Relu -> y."""
    w = np.random.default_rng(3).normal(0, 0.5, (8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Div", ["m", "sqrt2"], ["d"], name="g_div"),
        helper.make_node("Erf", ["d"], ["e"], name="g_erf"),
        helper.make_node("Add", ["e", "one"], ["a"], name="g_add"),
        helper.make_node("Mul", ["m", "a"], ["p"], name="g_mul"),
        helper.make_node("Mul", ["p", "half"], ["g"], name="g_half"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    inits = [init("w", w), init("sqrt2", np.array(np.sqrt(2), np.float32)), init("one", np.array(1, np.float32)),
             init("half", np.array(0.5, np.float32))]
    return make_model(nodes, [tensor("x", shape=[2, 8])], [tensor("y", shape=[2, 8])], inits)


def gelu_fused() -> onnx.ModelProto:
    """The same with one Gelu (opset 20), names of its own."""
    w = np.random.default_rng(3).normal(0, 0.5, (8, 8)).astype(np.float32)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["m"], name="mm"),
        helper.make_node("Gelu", ["m"], ["g"], name="gelu"),
        helper.make_node("Relu", ["g"], ["y"], name="relu"),
    ]
    return make_model(nodes, [tensor("x", shape=[2, 8])], [tensor("y", shape=[2, 8])], [init("w", w)], opset=20)


def if_model(then_pads: int = 1, *, then_extra: bool = False) -> onnx.ModelProto:
    """An If whose branches each hold a Conv -> Relu reading the outer x and w; ``then_extra`` adds a
    Sigmoid after the then-branch's Relu."""
    w = np.random.default_rng(5).normal(0, 0.3, (4, 3, 3, 3)).astype(np.float32)

    def branch(name: str, pads: int) -> onnx.GraphProto:
        nodes = [helper.make_node("Conv", ["x", "w"], [f"{name}_c"], name=f"{name}_conv", pads=[pads] * 4),
                 helper.make_node("Relu", [f"{name}_c"], [f"{name}_out"], name=f"{name}_relu")]
        if then_extra and name == "then":
            nodes[-1].output[0] = "then_r"
            nodes.append(helper.make_node("Sigmoid", ["then_r"], ["then_out"], name="then_sig"))
        return helper.make_graph(nodes, name, [], [tensor(f"{name}_out", shape=None)])

    nodes = [helper.make_node("If", ["cond"], ["y"], name="branch", then_branch=branch("then", then_pads),
                              else_branch=branch("else", 1))]
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8]), tensor("cond", TensorProto.BOOL, [])],
                      [tensor("y", shape=None)], [init("w", w)])


def quantized_chain() -> onnx.ModelProto:
    """:func:`chain` with QuantizeLinear/DequantizeLinear on the conv inputs and int8 weights, as a QDQ
    quantizer writes it (names of its own)."""
    base = chain()
    weights = {t.name: onnx.numpy_helper.to_array(t) for t in base.graph.initializer}
    nodes, inits = [], []
    for name, w in weights.items():
        scale = np.float32(np.abs(w).max() / 127)
        inits += [init(f"{name}_q", np.round(w / scale).astype(np.int8)), init(f"{name}_s", np.array(scale)),
                  init(f"{name}_z", np.array(0, np.int8))]
    inits += [init("act_s", np.array(0.02, np.float32)), init("act_z", np.array(0, np.int8))]

    def qdq(tensor: str, tag: str) -> str:
        nodes.append(helper.make_node("QuantizeLinear", [tensor, "act_s", "act_z"], [f"{tag}_q"], name=f"{tag}_Q"))
        nodes.append(helper.make_node("DequantizeLinear", [f"{tag}_q", "act_s", "act_z"], [f"{tag}_dq"],
                                      name=f"{tag}_DQ"))
        return f"{tag}_dq"

    for name in weights:
        nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s", f"{name}_z"], [f"{name}_deq"],
                                      name=f"{name}_DQ"))
    x = qdq("x", "x")
    nodes += [helper.make_node("Conv", [x, "w1_deq"], ["c1"], name="q_conv1", pads=[1, 1, 1, 1]),
              helper.make_node("Relu", ["c1"], ["r1"], name="q_relu1")]
    r = qdq("r1", "r1")
    nodes += [helper.make_node("Conv", [r, "w2_deq"], ["c2"], name="q_conv2", pads=[1, 1, 1, 1]),
              helper.make_node("Sigmoid", ["c2"], ["y"], name="q_sig")]
    return make_model(nodes, [tensor("x", shape=[1, 3, 8, 8])], [tensor("y", shape=[1, 4, 8, 8])], inits)
