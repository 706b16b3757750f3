"""A transformer's feed-forward block, x·W + b then GELU, as exporters write it, and the SiLU-gated MLP.

Each builder rebuilds one exporter's form with ``onnx.helper``: TorchScript (torch.onnx, opsets 13-18)
writes constants as Constant nodes, the bias Add as ``Add(bias, MatMul)``, x / √2 with Div, and
(x·(1 + erf))·0.5; the dynamo exporter writes initializers, ``Add(MatMul, bias)`` and x·(0.5·(1 + erf));
tf2onnx multiplies by 1/√2 and writes (0.5·x)·(1 + erf). The tanh forms follow the same exporters
(TorchScript's x³ is x·(x·x), dynamo's Pow(x, 3)), and phi-2's ``NewGELU`` through dynamo is
(x·0.5)·(1 + tanh). The SiLU-gated MLP is SmolLM's and LLaMA's: dynamo transposes each [out, in]
weight before its MatMul.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import helper

from tests.models import init, make_model, tensor

SQRT2 = 1.4142135381698608
INV_SQRT2 = 0.7071067690849304
SQRT_2_OVER_PI = 0.7978845834732056
COEF = 0.044714998453855515
BATCH, SEQ, HIDDEN, INNER = 2, 3, 8, 16

SEED = 11
"""Every model draws its weights from a generator of its own, so a test sees the same weights whatever ran before."""


@dataclass
class Net:
    """Nodes named after their op and position; constants as Constant nodes or as initializers."""

    constant_nodes: bool = True
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(SEED))

    def const(self, value, name: str | None = None) -> str:
        array = np.asarray(value, np.float32)
        name = name or f"k{len(self.nodes) + len(self.inits)}"
        if self.constant_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const", value=init(name, array)))
        else:
            self.inits.append(init(name, array))
        return name

    def const_ints(self, values) -> str:
        name = f"k{len(self.nodes) + len(self.inits)}"
        self.inits.append(init(name, np.asarray(values, np.int64)))
        return name

    def weight(self, name: str, shape) -> str:
        self.inits.append(init(name, self.rng.normal(0, 0.5, shape).astype(np.float32)))
        return name

    def op(self, op_type: str, *inputs: str, domain: str | None = None, **attrs) -> str:
        name = f"n{len(self.nodes)}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, domain=domain, **attrs))
        return name

    def model(self, out: str, out_dim: int = INNER, *, opset: int = 17) -> onnx.ModelProto:
        """The model from x to ``out`` (the last node's output), renamed y."""
        assert self.nodes[-1].output[0] == out
        self.nodes[-1].output[0] = "y"
        return make_model(self.nodes, [tensor("x", shape=[BATCH, SEQ, HIDDEN])],
                          [tensor("y", shape=[BATCH, SEQ, out_dim])], self.inits, opset=opset)


def linear(net: Net, *, bias_first: bool, bias_shape=(INNER,)) -> str:
    """x·W + b: TorchScript writes Add(bias, MatMul), the dynamo exporter Add(MatMul, bias)."""
    mm = net.op("MatMul", "x", net.weight("fc1_w", (HIDDEN, INNER)))
    bias = net.weight("fc1_b", bias_shape)
    return net.op("Add", bias, mm) if bias_first else net.op("Add", mm, bias)


def erf_gelu(net: Net, x: str, grouping: str, *, inv_sqrt2: bool = False) -> str:
    """0.5·x·(1 + erf(x/√2)) grouped as ``x_bracket_half``, ``x_halfbracket`` or ``halfx_bracket``."""
    scaled = net.op("Mul", x, net.const(INV_SQRT2)) if inv_sqrt2 else net.op("Div", x, net.const(SQRT2))
    plus1 = net.op("Add", net.op("Erf", scaled), net.const(1.0))
    return _halve(net, x, plus1, grouping)


def tanh_gelu(net: Net, x: str, grouping: str, *, cube: str) -> str:
    """0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), x³ as ``pow`` or ``mul`` (x·(x·x))."""
    x3 = net.op("Pow", x, net.const(3.0)) if cube == "pow" else net.op("Mul", x, net.op("Mul", x, x))
    inner = net.op("Add", x, net.op("Mul", net.const(COEF), x3))
    th = net.op("Tanh", net.op("Mul", net.const(SQRT_2_OVER_PI), inner))
    return _halve(net, x, net.op("Add", th, net.const(1.0)), grouping)


def _halve(net: Net, x: str, plus1: str, grouping: str) -> str:
    if grouping == "x_bracket_half":
        return net.op("Mul", net.op("Mul", x, plus1), net.const(0.5))
    if grouping == "x_halfbracket":
        return net.op("Mul", x, net.op("Mul", net.const(0.5), plus1))
    assert grouping == "halfx_bracket"
    return net.op("Mul", net.op("Mul", x, net.const(0.5)), plus1)


# ----------------------------------------------------------------------------------- erf GELU
def bias_gelu_torchscript(opset: int = 17, bias_shape=(INNER,)) -> onnx.ModelProto:
    """BERT's intermediate dense + nn.GELU() through TorchScript (rxnmap): Add(bias, MatMul), Div, (x·(1 + erf))·0.5."""
    net = Net()
    return net.model(erf_gelu(net, linear(net, bias_first=True, bias_shape=bias_shape), "x_bracket_half"), opset=opset)


def bias_gelu_dynamo(opset: int = 18) -> onnx.ModelProto:
    """The same through the dynamo exporter (whisper's fc1): Add(MatMul, bias), x·(0.5·(1 + erf))."""
    net = Net(constant_nodes=False)
    return net.model(erf_gelu(net, linear(net, bias_first=False), "x_halfbracket"), opset=opset)


def bias_gelu_tf2onnx(opset: int = 13) -> onnx.ModelProto:
    """Keras' Dense + exact GELU through tf2onnx: x·(1/√2), (0.5·x)·(1 + erf)."""
    net = Net()
    return net.model(erf_gelu(net, linear(net, bias_first=False), "halfx_bracket", inv_sqrt2=True), opset=opset)


def bias_then_gelu_op(opset: int = 20, domain: str | None = None, approximate: str | None = None) -> onnx.ModelProto:
    """Add then an already fused Gelu: ONNX's (opset 20, BART through dynamo) or onnxruntime's."""
    net = Net(constant_nodes=False)
    attrs = {} if approximate is None else {"approximate": approximate}
    model = net.model(net.op("Gelu", linear(net, bias_first=False), domain=domain, **attrs), opset=opset)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model


def gelu_without_bias(opset: int = 17) -> onnx.ModelProto:
    """Whisper's conv stem: a GELU whose input is not a bias Add (the Conv holds its bias)."""
    net = Net()
    return net.model(erf_gelu(net, net.op("MatMul", "x", net.weight("fc1_w", (HIDDEN, INNER))), "x_bracket_half"),
                     opset=opset)


# ---------------------------------------------------------------------------------- tanh GELU
def fast_gelu_torchscript(opset: int = 17, *, bias: bool = True, bias_shape=(INNER,)) -> onnx.ModelProto:
    """nn.GELU(approximate='tanh') after a Linear through TorchScript: x·(x·x), (x·(1 + tanh))·0.5."""
    net = Net()
    x = (linear(net, bias_first=True, bias_shape=bias_shape) if bias
         else net.op("MatMul", "x", net.weight("fc1_w", (HIDDEN, INNER))))
    return net.model(tanh_gelu(net, x, "x_bracket_half", cube="mul"), opset=opset)


def fast_gelu_dynamo(opset: int = 18, *, bias: bool = True) -> onnx.ModelProto:
    """The same through dynamo: Pow(x, 3), x·(0.5·(1 + tanh))."""
    net = Net(constant_nodes=False)
    x = linear(net, bias_first=False) if bias else net.op("MatMul", "x", net.weight("fc1_w", (HIDDEN, INNER)))
    return net.model(tanh_gelu(net, x, "x_halfbracket", cube="pow"), opset=opset)


def fast_gelu_phi2(opset: int = 18) -> onnx.ModelProto:
    """phi-2's NewGELU after fc1 through dynamo: Pow(x, 3), (x·0.5)·(1 + tanh)."""
    net = Net(constant_nodes=False)
    return net.model(tanh_gelu(net, linear(net, bias_first=False), "halfx_bracket", cube="pow"), opset=opset)


# ------------------------------------------------------------------------------ SiLU-gated MLP
def silu_mlp(*, transposed: bool = True, swish: bool = False, opset: int = 18, up_first: bool = False,
             flattened: bool = False) -> onnx.ModelProto:
    """down(silu(gate(h)) · up(h)); ``transposed``: dynamo's Transpose(weight, perm=[1, 0]) before each
    MatMul (SmolLM), else weights stored [in, out]; ``swish``: the SiLU already fused (opset 24);
    ``flattened``: each MatMul between Reshapes to [tokens, features] and back, as dynamo writes
    Linear layers with static shapes (SmolLM's second test decoder)."""
    net = Net(constant_nodes=False)

    def project(name: str, x: str, d_in: int, d_out: int) -> str:
        weight = net.weight(name, (d_out, d_in) if transposed else (d_in, d_out))
        if transposed:
            weight = net.op("Transpose", weight, perm=[1, 0])
        if not flattened:
            return net.op("MatMul", x, weight)
        rows = net.op("Reshape", x, net.const_ints([BATCH * SEQ, d_in]))
        return net.op("Reshape", net.op("MatMul", rows, weight), net.const_ints([BATCH, SEQ, d_out]))

    gate = project("gate_w", "x", HIDDEN, INNER)
    act = net.op("Swish", gate) if swish else net.op("Mul", gate, net.op("Sigmoid", gate))
    up = project("up_w", "x", HIDDEN, INNER)
    prod = net.op("Mul", up, act) if up_first else net.op("Mul", act, up)
    return net.model(project("down_w", prod, INNER, HIDDEN), HIDDEN, opset=opset)
