"""Small models for the built-in pattern tests: one builder per situation a pattern must accept or refuse.

Every node is named, since the tests assert which node each pattern label matched. A refusing
model differs from an accepted one in one respect only, so it fails for the reason it is about.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
from onnx import helper

from tests.models import (  # noqa: F401  (reused unchanged: every model the tests use is reachable from here)
    bn_params,
    conv_bn,
    conv_bn_mean_from_input,
    conv_bn_params_behind_constants,
    if_with_conv_bn,
    init,
    make_model,
    tensor,
)

C = 4
IMAGE = [1, 3, 8, 8]
FEATURES = [1, C, 8, 8]
rng = np.random.default_rng(2024)


def _weights(*shape: int) -> np.ndarray:
    return rng.normal(0, 0.5, shape).astype(np.float32)


def _per_channel(*shape: int) -> np.ndarray:
    return rng.uniform(0.5, 1.5, shape or (C, 1, 1)).astype(np.float32)


def _scalar(v: float) -> np.ndarray:
    return np.array(v, np.float32)


def _node(op: str, inputs: list[str], output: str, name: str, **attrs) -> onnx.NodeProto:
    return helper.make_node(op, inputs, [output], name=name, **attrs)


def _conv(name: str = "conv", x: str = "x", w: str = "w", out: str = "c") -> onnx.NodeProto:
    return _node("Conv", [x, w], out, name, pads=[1, 1, 1, 1])


def _bn(name: str, x: str, y: str, channels: int = C, **attrs) -> tuple[onnx.NodeProto, list[onnx.TensorProto]]:
    params = bn_params(channels, prefix=name)
    node = _node("BatchNormalization", [x, *params], y, name, **attrs)
    return node, [init(k, v) for k, v in params.items()]


def _model(nodes, initializers=(), *, inputs=None, outputs=None, opset: int = 17) -> onnx.ModelProto:
    """``x`` of shape ``IMAGE`` in, ``y`` of shape ``FEATURES`` out, unless told otherwise."""
    return make_model(
        nodes,
        inputs if inputs is not None else [tensor("x", shape=IMAGE)],
        outputs if outputs is not None else [tensor("y", shape=FEATURES)],
        initializers,
        opset=opset,
    )


# --------------------------------------------------------------------------------- conv-bn
def _conv_bn(*, bn_attrs=None, conv_consumers=(), conv_is_output=False, weight_input=False, weight_init=True):
    """Conv 'conv' -> BatchNormalization 'bn' -> y, varied in one respect."""
    bn, bn_inits = _bn("bn", "c", "y", **(bn_attrs or {}))
    nodes = [_conv(), bn, *conv_consumers]
    inits = ([init("w", _weights(C, 3, 3, 3))] if weight_init else []) + bn_inits
    inputs = [tensor("x", shape=IMAGE)] + ([tensor("w", shape=[C, 3, 3, 3])] if weight_input else [])
    outputs = [tensor("y", shape=FEATURES)]
    outputs += [tensor(n.output[0], shape=FEATURES) for n in conv_consumers]
    outputs += [tensor("c", shape=FEATURES)] if conv_is_output else []
    return _model(nodes, inits, inputs=inputs, outputs=outputs)


def conv_transpose_bn() -> onnx.ModelProto:
    bn, bn_inits = _bn("bn", "c", "y")
    deconv = _node("ConvTranspose", ["x", "w"], "c", "deconv", pads=[1, 1, 1, 1])
    return _model([deconv, bn], [init("w", _weights(3, C, 3, 3)), *bn_inits])


def _conv_add_bn(bias_shape: tuple[int, ...]) -> onnx.ModelProto:
    bn, bn_inits = _bn("bn", "cb", "y")
    bias_add = _node("Add", ["c", "add_b"], "cb", "bias_add")
    inits = [init("w", _weights(C, 3, 3, 3)), init("add_b", _per_channel(*bias_shape)), *bn_inits]
    return _model([_conv(), bias_add, bn], inits)


def conv_bias_add_bn() -> onnx.ModelProto:
    """Conv -> Add of a constant [C, 1, 1] bias -> BN, as exporters write a conv bias."""
    return _conv_add_bn((C, 1, 1))


def conv_full_add_bn() -> onnx.ModelProto:
    """The Add between Conv and BN adds a [C, 8, 8] constant: not a per-channel bias."""
    return _conv_add_bn((C, 8, 8))


def conv_bn_output_also_graph_output() -> onnx.ModelProto:
    """Conv -> BN 'bn' -> Relu; the BN output is a graph output as well as the Relu's input."""
    bn, bn_inits = _bn("bn", "c", "b")
    relu = _node("Relu", ["b"], "y", "relu")
    outputs = [tensor("y", shape=FEATURES), tensor("b", shape=FEATURES)]
    return _model([_conv(), bn, relu], [init("w", _weights(C, 3, 3, 3)), *bn_inits], outputs=outputs)


def two_convs_sharing_weight() -> onnx.ModelProto:
    """conv_a and conv_b read the same weight initializer 'w', each feeding its own BN."""
    bn_a, inits_a = _bn("bn_a", "ca", "ya")
    bn_b, inits_b = _bn("bn_b", "cb", "yb")
    nodes = [_conv("conv_a", out="ca"), bn_a, _conv("conv_b", out="cb"), bn_b]
    outputs = [tensor("ya", shape=FEATURES), tensor("yb", shape=FEATURES)]
    return _model(nodes, [init("w", _weights(C, 3, 3, 3)), *inits_a, *inits_b], outputs=outputs)


def conv_bn_training_mode() -> onnx.ModelProto:
    """BN in training mode (it then also writes its running mean and variance)."""
    model = _conv_bn(bn_attrs={"training_mode": 1})
    bn = next(n for n in model.graph.node if n.name == "bn")
    bn.output.extend(["running_mean", "running_var"])
    return model


def conv_bn_training_mode_0() -> onnx.ModelProto:
    return _conv_bn(bn_attrs={"training_mode": 0})


def conv_with_bias_bn() -> onnx.ModelProto:
    """The Conv has its own constant bias input."""
    model = _conv_bn()
    model.graph.node[0].input.append("conv_b")
    model.graph.initializer.append(init("conv_b", _weights(C)))
    return model


def conv_bn_opset6(is_test: int) -> onnx.ModelProto:
    """Opset 6, where BatchNormalization says ``is_test`` instead of ``training_mode``."""
    model = _conv_bn(bn_attrs={"is_test": is_test})
    model.opset_import[0].version = 6
    return model


def conv_feeds_bn_and_relu() -> onnx.ModelProto:
    """The conv output has a second consumer, 'relu', outside the match."""
    return _conv_bn(conv_consumers=[_node("Relu", ["c"], "r", "relu")])


def conv_output_is_graph_output() -> onnx.ModelProto:
    return _conv_bn(conv_is_output=True)


def conv_weight_from_input() -> onnx.ModelProto:
    """The conv weight is a graph input with no initializer: set on each run."""
    return _conv_bn(weight_input=True, weight_init=False)


def conv_weight_overridable() -> onnx.ModelProto:
    """The conv weight is an initializer that is also a graph input, so callers may override it."""
    return _conv_bn(weight_input=True)


# --------------------------------------------------------------------------------- gemm-bn
def _gemm_bn(*, weight_input=False, gemm_consumers=()):
    """Gemm 'gemm' (transB=1, with a bias C) -> BN 'bn' over 2-D features."""
    bn, bn_inits = _bn("bn", "g", "y")
    gemm = _node("Gemm", ["x", "w", "b"], "g", "gemm", transB=1)
    inits = [init("b", _weights(C)), *bn_inits] + ([] if weight_input else [init("w", _weights(C, 8))])
    inputs = [tensor("x", shape=[2, 8])] + ([tensor("w", shape=[C, 8])] if weight_input else [])
    outputs = [tensor("y", shape=[2, C])] + [tensor(n.output[0], shape=[2, C]) for n in gemm_consumers]
    return _model([gemm, bn, *gemm_consumers], inits, inputs=inputs, outputs=outputs)


def gemm_bn() -> onnx.ModelProto:
    return _gemm_bn()


def gemm_weight_from_input() -> onnx.ModelProto:
    return _gemm_bn(weight_input=True)


def gemm_feeds_bn_and_relu() -> onnx.ModelProto:
    return _gemm_bn(gemm_consumers=[_node("Relu", ["g"], "r", "relu")])


# ------------------------------------------------------------------------------- matmul-bn
def _matmul_bn(*, bias_add=False, weight_input=False, batched=False):
    """MatMul 'matmul' by a constant [8, C] weight (optionally + Add 'bias_add') -> BN 'bn'.

    ``batched``: a rank-3 weight [2, 8, C] on a [2, 5, 8] input; the BN's channels are then the 5.
    """
    if batched:
        x_shape, w_shape, y_shape, channels = [2, 5, 8], [2, 8, C], [2, 5, C], 5
    else:
        x_shape, w_shape, y_shape, channels = [2, 8], [8, C], [2, C], C
    nodes = [_node("MatMul", ["x", "w"], "m", "matmul")]
    inits = [] if weight_input else [init("w", _weights(*w_shape))]
    if bias_add:
        nodes.append(_node("Add", ["m", "add_b"], "mb", "bias_add"))
        inits.append(init("add_b", _weights(C)))
    bn, bn_inits = _bn("bn", nodes[-1].output[0], "y", channels)
    inputs = [tensor("x", shape=x_shape)] + ([tensor("w", shape=w_shape)] if weight_input else [])
    return _model([*nodes, bn], inits + bn_inits, inputs=inputs, outputs=[tensor("y", shape=y_shape)])


def matmul_bn() -> onnx.ModelProto:
    return _matmul_bn()


def matmul_bias_add_bn() -> onnx.ModelProto:
    return _matmul_bn(bias_add=True)


def matmul_rank3_weight_bn() -> onnx.ModelProto:
    return _matmul_bn(batched=True)


def matmul_weight_from_input() -> onnx.ModelProto:
    return _matmul_bn(weight_input=True)


# --------------------------------------------------------------------------- decomposed-bn
def _decomposed_bn(*, reciprocal=False, mean_input=False, gamma_shape=(C, 1, 1)):
    """(x - mean) / sqrt(var + eps) * gamma + beta on [1, C, 8, 8], parameters [C, 1, 1].

    ``reciprocal`` writes the division as Mul by Reciprocal; ``mean_input`` makes the mean a
    graph input; ``gamma_shape`` changes the shape of gamma alone.
    """
    nodes = [
        _node("Sub", ["x", "mean"], "centered", "sub"),
        _node("Add", ["var", "eps"], "var_eps", "add_eps"),
        _node("Sqrt", ["var_eps"], "std", "sqrt"),
    ]
    if reciprocal:
        nodes += [
            _node("Reciprocal", ["std"], "inv_std", "recip"),
            _node("Mul", ["centered", "inv_std"], "normalized", "mul_inv"),
        ]
    else:
        nodes.append(_node("Div", ["centered", "std"], "normalized", "div"))
    nodes += [
        _node("Mul", ["normalized", "gamma"], "scaled", "mul_gamma"),
        _node("Add", ["scaled", "beta"], "y", "add_beta"),
    ]
    inits = [
        init("var", _per_channel()),
        init("eps", _scalar(1e-5)),
        init("gamma", _per_channel(*gamma_shape)),
        init("beta", _per_channel()),
    ]
    inputs = [tensor("x", shape=FEATURES)]
    if mean_input:
        inputs.append(tensor("mean", shape=[C, 1, 1]))
    else:
        inits.append(init("mean", _per_channel()))
    return _model(nodes, inits, inputs=inputs)


def decomposed_bn_div() -> onnx.ModelProto:
    return _decomposed_bn()


def decomposed_bn_reciprocal() -> onnx.ModelProto:
    return _decomposed_bn(reciprocal=True)


def decomposed_bn_mean_from_input() -> onnx.ModelProto:
    return _decomposed_bn(mean_input=True)


def decomposed_bn_gamma_not_per_channel() -> onnx.ModelProto:
    """gamma has shape [C, 8, 8]: more than one axis longer than 1, so not one value per channel."""
    return _decomposed_bn(gamma_shape=(C, 8, 8))


# ---------------------------------------------------------------------------- conv-mul-add
def _conv_then(*ops: tuple[str, str, str]) -> onnx.ModelProto:
    """Conv 'conv' followed by a chain of (op, node name, second input) nodes, the last writing y."""
    nodes, inits, inputs, previous = [_conv()], [init("w", _weights(C, 3, 3, 3))], [tensor("x", shape=IMAGE)], "c"
    for k, (op, name, operand) in enumerate(ops):
        out = "y" if k == len(ops) - 1 else f"{name}_out"
        nodes.append(_node(op, [previous, operand], out, name))
        previous = out
        if operand.startswith("input_"):
            inputs.append(tensor(operand, shape=[C, 1, 1]))
        else:
            inits.append(init(operand, _per_channel()))
    return _model(nodes, inits, inputs=inputs)


def conv_mul_add() -> onnx.ModelProto:
    return _conv_then(("Mul", "mul", "scale"), ("Add", "add", "shift"))


def conv_mul() -> onnx.ModelProto:
    return _conv_then(("Mul", "mul", "scale"))


def conv_add() -> onnx.ModelProto:
    return _conv_then(("Add", "add", "shift"))


def conv_mul_by_input() -> onnx.ModelProto:
    """Conv -> Mul by a graph input: not a constant scale."""
    return _conv_then(("Mul", "mul", "input_scale"))


# ------------------------------------------------------------------------------------ silu
def _sigmoid_mul(mul_inputs: list[str], extra_inputs=()) -> onnx.ModelProto:
    nodes = [_node("Sigmoid", ["x"], "s", "sigmoid"), _node("Mul", mul_inputs, "y", "mul")]
    inputs = [tensor(n, shape=FEATURES) for n in ("x", *extra_inputs)]
    return _model(nodes, inputs=inputs)


def silu_x_first() -> onnx.ModelProto:
    return _sigmoid_mul(["x", "s"])


def silu_sigmoid_first() -> onnx.ModelProto:
    return _sigmoid_mul(["s", "x"])


def sigmoid_times_other() -> onnx.ModelProto:
    """Mul(z, Sigmoid(x)) with z another input: not SiLU."""
    return _sigmoid_mul(["z", "s"], extra_inputs=["z"])


# ------------------------------------------------------------------------------ hard-swish
def _hard_sigmoid_mul(**attrs) -> onnx.ModelProto:
    nodes = [_node("HardSigmoid", ["x"], "h", "hard_sigmoid", **attrs), _node("Mul", ["x", "h"], "y", "mul")]
    return _model(nodes, inputs=[tensor("x", shape=FEATURES)])


def hard_swish_hard_sigmoid() -> onnx.ModelProto:
    return _hard_sigmoid_mul(alpha=1 / 6, beta=0.5)


def hard_swish_hard_sigmoid_default_beta() -> onnx.ModelProto:
    """HardSigmoid(alpha=1/6) with beta left at its default 0.5, as torch.onnx exports hardswish."""
    return _hard_sigmoid_mul(alpha=1 / 6)


def hard_sigmoid_default_alpha() -> onnx.ModelProto:
    """alpha left at its default 0.2: x * HardSigmoid(x) is then not hard swish."""
    return _hard_sigmoid_mul(beta=0.5)


def _clip_form(high: float) -> onnx.ModelProto:
    """x * Clip(x + 3, 0, high) / 6."""
    nodes = [
        _node("Add", ["x", "three"], "plus3", "add3"),
        _node("Clip", ["plus3", "low", "high"], "clipped", "clip"),
        _node("Mul", ["x", "clipped"], "m", "mul"),
        _node("Div", ["m", "six"], "y", "div6"),
    ]
    inits = [init("three", _scalar(3)), init("low", _scalar(0)), init("high", _scalar(high)), init("six", _scalar(6))]
    return _model(nodes, inits, inputs=[tensor("x", shape=FEATURES)])


def hard_swish_clip() -> onnx.ModelProto:
    return _clip_form(6.0)


def hard_swish_clip_max_5() -> onnx.ModelProto:
    return _clip_form(5.0)


# ------------------------------------------------------------------------------------ gelu
SQRT2 = math.sqrt(2)


def _gelu_erf(*, half_first: bool = False, divisor: float = SQRT2) -> onnx.ModelProto:
    """0.5 * x * (1 + erf(x / divisor)); ``half_first`` multiplies 0.5 * x before the (1 + erf) factor."""
    nodes = [
        _node("Div", ["x", "sqrt2"], "scaled_x", "div"),
        _node("Erf", ["scaled_x"], "erf_out", "erf"),
        _node("Add", ["erf_out", "one"], "plus1", "add1"),
    ]
    if half_first:
        nodes += [_node("Mul", ["x", "half"], "half_x", "mul_half"), _node("Mul", ["half_x", "plus1"], "y", "mul_x")]
    else:
        nodes += [_node("Mul", ["x", "plus1"], "x_plus", "mul_x"), _node("Mul", ["x_plus", "half"], "y", "mul_half")]
    inits = [init("sqrt2", _scalar(divisor)), init("one", _scalar(1)), init("half", _scalar(0.5))]
    return _model(nodes, inits, inputs=[tensor("x", shape=FEATURES)])


def gelu_erf() -> onnx.ModelProto:
    return _gelu_erf()


def gelu_erf_half_first() -> onnx.ModelProto:
    return _gelu_erf(half_first=True)


def gelu_erf_div_by_2() -> onnx.ModelProto:
    return _gelu_erf(divisor=2.0)


def gelu_tanh() -> onnx.ModelProto:
    """0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x^3)))."""
    nodes = [
        _node("Pow", ["x", "three"], "cube", "pow"),
        _node("Mul", ["cube", "coef"], "cube_term", "mul_coef"),
        _node("Add", ["x", "cube_term"], "inner", "add_inner"),
        _node("Mul", ["inner", "k"], "scaled", "mul_k"),
        _node("Tanh", ["scaled"], "t", "tanh"),
        _node("Add", ["t", "one"], "plus1", "add1"),
        _node("Mul", ["x", "plus1"], "x_plus", "mul_x"),
        _node("Mul", ["x_plus", "half"], "y", "mul_half"),
    ]
    inits = [
        init("three", _scalar(3)),
        init("coef", _scalar(0.044715)),
        init("k", _scalar(float(np.sqrt(2 / np.pi)))),
        init("one", _scalar(1)),
        init("half", _scalar(0.5)),
    ]
    return _model(nodes, inits, inputs=[tensor("x", shape=FEATURES)])


# ------------------------------------------------------------------------------ layer-norm
def _layer_norm(*, opset: int, with_eps=True, exponent: float = 2) -> onnx.ModelProto:
    """Layer norm over the last axis of [2, 5, 16]; opset 18 passes ReduceMean's axes as an input."""
    shape = [2, 5, 16]
    inits = [init("two", _scalar(exponent)), init("gamma", _per_channel(16)), init("beta", _per_channel(16))]
    if opset >= 18:
        inits.append(init("axes", np.array([-1], np.int64)))

    def reduce_mean(x: str, out: str, name: str) -> onnx.NodeProto:
        if opset >= 18:
            return _node("ReduceMean", [x, "axes"], out, name, keepdims=1)
        return _node("ReduceMean", [x], out, name, axes=[-1], keepdims=1)

    nodes = [
        reduce_mean("x", "mu", "mean"),
        _node("Sub", ["x", "mu"], "centered", "sub"),
        _node("Pow", ["centered", "two"], "squared", "pow"),
        reduce_mean("squared", "variance", "var"),
    ]
    if with_eps:
        nodes.append(_node("Add", ["variance", "eps"], "var_eps", "add_eps"))
        inits.append(init("eps", _scalar(1e-5)))
    nodes += [
        _node("Sqrt", ["var_eps" if with_eps else "variance"], "std", "sqrt"),
        _node("Div", ["centered", "std"], "normalized", "div"),
        _node("Mul", ["normalized", "gamma"], "scaled", "mul_gamma"),
        _node("Add", ["scaled", "beta"], "y", "add_beta"),
    ]
    return _model(nodes, inits, inputs=[tensor("x", shape=shape)], outputs=[tensor("y", shape=shape)], opset=opset)


def layer_norm_opset17() -> onnx.ModelProto:
    return _layer_norm(opset=17)


def layer_norm_opset18() -> onnx.ModelProto:
    return _layer_norm(opset=18)


def layer_norm_without_eps() -> onnx.ModelProto:
    """Sqrt reads the variance directly: no Add(eps)."""
    return _layer_norm(opset=17, with_eps=False)


def layer_norm_cubed() -> onnx.ModelProto:
    """The centred value raised to 3, not squared: not a variance."""
    return _layer_norm(opset=17, exponent=3)


# ------------------------------------------------------------------------------ leaky-relu
def leaky_relu_where() -> onnx.ModelProto:
    nodes = [
        _node("Greater", ["x", "zero"], "positive", "greater"),
        _node("Mul", ["x", "alpha"], "negative", "mul"),
        _node("Where", ["positive", "x", "negative"], "y", "where"),
    ]
    return _model(nodes, [init("zero", _scalar(0)), init("alpha", _scalar(0.01))], inputs=[tensor("x", shape=FEATURES)])


def _max_form(scaled: str, extra_inputs=(), alpha: float = 0.01) -> onnx.ModelProto:
    nodes = [_node("Mul", [scaled, "alpha"], "negative", "mul"), _node("Max", ["x", "negative"], "y", "max")]
    inputs = [tensor(n, shape=FEATURES) for n in ("x", *extra_inputs)]
    return _model(nodes, [init("alpha", _scalar(alpha))], inputs=inputs)


def leaky_relu_max() -> onnx.ModelProto:
    return _max_form("x")


def max_of_x_and_2x() -> onnx.ModelProto:
    """Max(x, 2 * x) is 2x for x > 0: Max(x, a * x) is a leaky ReLU only for a <= 1."""
    return _max_form("x", alpha=2.0)


def max_of_other_times_alpha() -> onnx.ModelProto:
    """Max(x, z * a) with z another input: not leaky ReLU of x."""
    return _max_form("z", extra_inputs=["z"])


# ------------------------------------------------------------------------------ ordering
def conv_bn_chain_named_out_of_order() -> onnx.ModelProto:
    """Three Conv->BN blocks in a chain, named so that name order (a, m, z) is not file order (z, m, a)."""
    nodes, inits, previous, in_channels = [], [], "x", 3
    for block in ("z", "m", "a"):
        out = "y" if block == "a" else f"{block}_y"
        bn, bn_inits = _bn(f"{block}_bn", f"{block}_c", out)
        nodes += [_conv(f"{block}_conv", x=previous, w=f"{block}_w", out=f"{block}_c"), bn]
        inits += [init(f"{block}_w", _weights(C, in_channels, 3, 3)), *bn_inits]
        previous, in_channels = out, C
    return _model(nodes, inits)

