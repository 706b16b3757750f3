"""The exact structures current exporters write for the activations and norms the library knows.

Each builder rebuilds, with ``onnx.helper``, what one exporter wrote for one module: op types,
input order (which side each constant is on), Constant nodes versus initializers, attributes and
Casts. The torch.onnx forms were read off real exports (TorchScript exporter at opsets 13, 17, 18
and 20, dynamo exporter at 18 and 20; ``tests/matching/generate_exporter_forms.py`` prints them
again where torch is installed); the tf2onnx and paddle2onnx forms follow their converters' source.
No exporter is needed to run the tests.

Every builder returns a :class:`Form`: the model and the names of the nodes the pattern must cover
(Constant nodes and Casts outside the activation are not part of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, make_model, tensor

SQRT2 = 1.4142135381698608
SQRT_2_OVER_PI = 0.7978845834732056
COEF = 0.044714998453855515


@dataclass
class Form:
    """A model as one exporter writes it, and the nodes a built-in pattern must match there."""

    pattern: str
    model: onnx.ModelProto
    covered: list[str]
    out: str


@dataclass
class _Builder:
    """Nodes named n0, n1, ... in order; constants as Constant nodes (TorchScript, tf2onnx, paddle2onnx)
    or initializers (dynamo), as the exporter being imitated writes them."""

    initializers: bool = False
    dtype: type = np.float32
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    covered: list[str] = field(default_factory=list)

    def const(self, value, dtype=None) -> str:
        array = np.asarray(value, dtype or self.dtype)
        name = f"k{len(self.nodes) + len(self.inits)}"
        if self.initializers:
            self.inits.append(init(name, array))
        else:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const", value=init(name, array)))
        return name

    def weight(self, value, dtype=None) -> str:
        """A parameter (gamma, mean, ...): an initializer for every exporter."""
        name = f"w{len(self.inits)}"
        self.inits.append(init(name, np.asarray(value, dtype or self.dtype)))
        return name

    def op(self, op_type: str, *inputs: str, inside: bool = True, **attrs) -> str:
        name = f"n{sum(1 for n in self.nodes if n.op_type != 'Constant')}_{op_type.lower()}"
        self.nodes.append(helper.make_node(op_type, list(inputs), [name], name=name, **attrs))
        if inside:
            self.covered.append(name)
        return name

    def form(self, pattern: str, out: str, shape, *, opset: int, elem=TensorProto.FLOAT, out_elem=None) -> Form:
        last = self.nodes[-1].output[0]
        model = make_model(
            self.nodes, [tensor("x", elem, shape)], [tensor(last, out_elem or elem, shape)], self.inits, opset=opset
        )
        return Form(pattern, model, self.covered, out)


rng = np.random.default_rng(7)
ROW = [2, 3, 8]
IMAGE = [1, 4, 6, 6]


# ------------------------------------------------------------------------------------- GELU
def gelu_erf_torchscript() -> Form:
    """nn.GELU(), TorchScript exporter at opsets 13-18 (paddle2onnx writes the same): (x * (1 + erf)) * 0.5."""
    b = _Builder()
    d = b.op("Div", "x", b.const(SQRT2))
    e = b.op("Erf", d)
    p = b.op("Add", e, b.const(1.0))
    m = b.op("Mul", "x", p)
    return b.form("gelu", b.op("Mul", m, b.const(0.5)), ROW, opset=13)


def gelu_erf_dynamo() -> Form:
    """nn.GELU(), dynamo exporter at opsets 18-19: x * (0.5 * (1 + erf))."""
    b = _Builder(initializers=True)
    d = b.op("Div", "x", b.const(SQRT2))
    e = b.op("Erf", d)
    p = b.op("Add", e, b.const(1.0))
    h = b.op("Mul", b.const(0.5), p)
    return b.form("gelu", b.op("Mul", "x", h), ROW, opset=18)


def gelu_erf_halved_first() -> Form:
    """``0.5 * x * (1 + erf(x / sqrt 2))`` as tf2onnx writes TensorFlow's and Keras' exact GELU, and
    torch.onnx a hand-written one: (0.5 * x) * (1 + erf), constants on the left."""
    b = _Builder()
    h = b.op("Mul", b.const(0.5), "x")
    d = b.op("Div", "x", b.const(SQRT2))
    e = b.op("Erf", d)
    p = b.op("Add", b.const(1.0), e)
    return b.form("gelu", b.op("Mul", h, p), ROW, opset=13)


def _tanh_bracket(b: _Builder, cube: str, *, one_left: bool) -> str:
    t = b.op("Mul", b.const(COEF), cube)
    a = b.op("Add", "x", t)
    s = b.op("Mul", b.const(SQRT_2_OVER_PI), a)
    th = b.op("Tanh", s)
    return b.op("Add", b.const(1.0), th) if one_left else b.op("Add", th, b.const(1.0))


def gelu_tanh_torchscript() -> Form:
    """nn.GELU(approximate='tanh'), TorchScript exporter at opsets 13-18: x³ as x * (x * x), constants on
    the left of each Mul, (x * (1 + tanh)) scaled by 0.5 last."""
    b = _Builder()
    sq = b.op("Mul", "x", "x")
    cube = b.op("Mul", "x", sq)
    p = _tanh_bracket(b, cube, one_left=True)
    m = b.op("Mul", "x", p)
    return b.form("gelu", b.op("Mul", b.const(0.5), m), ROW, opset=13)


def gelu_tanh_dynamo() -> Form:
    """nn.GELU(approximate='tanh'), dynamo exporter at opsets 18-19: Pow(x, 3), x * (0.5 * (1 + tanh))."""
    b = _Builder(initializers=True)
    cube = b.op("Pow", "x", b.const(3.0))
    p = _tanh_bracket(b, cube, one_left=False)
    h = b.op("Mul", b.const(0.5), p)
    return b.form("gelu", b.op("Mul", "x", h), ROW, opset=18)


def gelu_tanh_halved_first() -> Form:
    """tf.nn.gelu(approximate=True) through tf2onnx (and HF's NewGELU through torch.onnx):
    Pow(x, 3), (0.5 * x) * (1 + tanh)."""
    b = _Builder()
    h = b.op("Mul", b.const(0.5), "x")
    cube = b.op("Pow", "x", b.const(3.0))
    p = _tanh_bracket(b, cube, one_left=True)
    return b.form("gelu", b.op("Mul", h, p), ROW, opset=13)


# ------------------------------------------------------------------------------------- SiLU
def silu_torch() -> Form:
    """nn.SiLU(), both torch.onnx exporters at every opset: x * Sigmoid(x)."""
    b = _Builder()
    s = b.op("Sigmoid", "x")
    return b.form("silu", b.op("Mul", "x", s), ROW, opset=13)


def swish_paddle2onnx() -> Form:
    """paddle's swish (beta = 1) through paddle2onnx: x * Sigmoid(x * [1.0]), as in PP-OCRv4's recognizer."""
    b = _Builder()
    bx = b.op("Mul", "x", b.const([1.0]))
    s = b.op("Sigmoid", bx)
    return b.form("silu", b.op("Mul", "x", s), ROW, opset=12)


# --------------------------------------------------------------------------------- HardSwish
def hardswish_torchscript_13() -> Form:
    """nn.Hardswish(), TorchScript exporter at opset 13 (14 and later write HardSwish): HardSigmoid(alpha=1/6)."""
    b = _Builder()
    h = b.op("HardSigmoid", "x", alpha=0.1666666716337204)
    return b.form("hard-swish", b.op("Mul", "x", h), ROW, opset=13)


def hardswish_clip_div() -> Form:
    """x * relu6(x + 3) / 6 through either torch.onnx exporter, and paddle2onnx's hard_swish below opset 14."""
    b = _Builder()
    a = b.op("Add", "x", b.const(3.0))
    c = b.op("Clip", a, b.const(0.0), b.const(6.0))
    m = b.op("Mul", "x", c)
    return b.form("hard-swish", b.op("Div", m, b.const(6.0)), ROW, opset=13)


def hardswish_keras() -> Form:
    """Keras MobileNetV3's hard_swish through tf2onnx: x * (Relu6(x + 3) * (1 / 6)), Relu6 as Clip."""
    b = _Builder()
    a = b.op("Add", "x", b.const(3.0))
    c = b.op("Clip", a, b.const(0.0), b.const(6.0))
    h = b.op("Mul", c, b.const(1.0 / 6.0))
    return b.form("hard-swish", b.op("Mul", "x", h), ROW, opset=13)


# --------------------------------------------------------------------------------- LayerNorm
def _gamma_beta(b: _Builder, dtype=None) -> tuple[str, str]:
    return b.weight(rng.uniform(0.5, 1.5, ROW[-1]), dtype), b.weight(rng.normal(0, 0.2, ROW[-1]), dtype)


def layer_norm_torchscript() -> Form:
    """nn.LayerNorm, TorchScript exporter at opsets 13-16 (17 and later write LayerNormalization)."""
    b = _Builder()
    gamma, beta = _gamma_beta(b)
    mean = b.op("ReduceMean", "x", axes=[-1])
    sub = b.op("Sub", "x", mean)
    var = b.op("ReduceMean", b.op("Pow", sub, b.const(2.0)), axes=[-1])
    std = b.op("Sqrt", b.op("Add", var, b.const(1e-5)))
    scaled = b.op("Mul", b.op("Div", sub, std), gamma)
    return b.form("layer-norm", b.op("Add", scaled, beta), ROW, opset=13)


def layer_norm_torchscript_half() -> Form:
    """nn.LayerNorm on a half-precision model, TorchScript exporter at opsets 13-16: the centred value
    cast to double for the variance, the normalized value cast back to half before gamma."""
    b = _Builder(dtype=np.float16)
    gamma, beta = _gamma_beta(b)
    mean = b.op("ReduceMean", "x", axes=[-1])
    sub = b.op("Sub", "x", mean)
    up = b.op("Cast", sub, to=TensorProto.DOUBLE)
    var = b.op("ReduceMean", b.op("Pow", up, b.const(2.0, np.float64)), axes=[-1])
    std = b.op("Sqrt", b.op("Add", var, b.const(1e-5, np.float64)))
    down = b.op("Cast", b.op("Div", up, std), to=TensorProto.FLOAT16)
    scaled = b.op("Mul", down, gamma)
    return b.form("layer-norm", b.op("Add", scaled, beta), ROW, opset=13, elem=TensorProto.FLOAT16)


def layer_norm_torchscript_autocast() -> Form:
    """nn.LayerNorm after a bfloat16 Linear under torch.autocast, TorchScript exporter at opsets 13-16:
    statistics in bfloat16, the normalized value cast to float before the float gamma. (At 13 and 14
    its Pow by a bfloat16 exponent fails the checker; at 15 and 16 it is valid.)"""
    b = _Builder(dtype=np.float32)
    gamma, beta = _gamma_beta(b)
    low = b.op("Cast", "x", to=TensorProto.BFLOAT16, inside=False)
    bf16 = onnx.helper.make_tensor
    two, eps = (f"bf{k}" for k in range(2))
    b.nodes += [
        helper.make_node("Constant", [], [two], name="two", value=bf16(two, TensorProto.BFLOAT16, [], [2.0])),
        helper.make_node("Constant", [], [eps], name="eps", value=bf16(eps, TensorProto.BFLOAT16, [], [1e-5])),
    ]
    mean = b.op("ReduceMean", low, axes=[-1])
    sub = b.op("Sub", low, mean)
    var = b.op("ReduceMean", b.op("Pow", sub, two), axes=[-1])
    std = b.op("Sqrt", b.op("Add", var, eps))
    up = b.op("Cast", b.op("Div", sub, std), to=TensorProto.FLOAT)
    scaled = b.op("Mul", up, gamma)
    return b.form("layer-norm", b.op("Add", scaled, beta), ROW, opset=16)


def layer_norm_hand_cast() -> Form:
    """A LayerNorm written by hand with a float Cast around it (T5 and other HF models), TorchScript
    exporter at opset 18: axes as an input, the normalized value cast before gamma * (...) + beta."""
    b = _Builder()
    gamma, beta = _gamma_beta(b)
    xf = b.op("Cast", "x", to=TensorProto.FLOAT, inside=False)
    axes = b.const([-1], np.int64)
    mean = b.op("ReduceMean", xf, axes, keepdims=1)
    sub = b.op("Sub", xf, mean)
    var = b.op("ReduceMean", b.op("Pow", sub, b.const(2.0)), axes, keepdims=1)
    std = b.op("Sqrt", b.op("Add", var, b.const(1e-6)))
    cast = b.op("Cast", b.op("Div", sub, std), to=TensorProto.FLOAT)
    scaled = b.op("Mul", gamma, cast)
    return b.form("layer-norm", b.op("Add", scaled, beta), ROW, opset=18)


def layer_norm_dynamo_tiny_eps() -> Form:
    """A hand-written LayerNorm with eps 1e-12 (BERT's), dynamo exporter at opsets 18-20: its optimizer
    drops the Add of the epsilon, so the Sqrt reads the variance; gamma on the left."""
    b = _Builder(initializers=True)
    gamma, beta = _gamma_beta(b)
    axes = b.const([-1], np.int64)
    mean = b.op("ReduceMean", "x", axes, keepdims=1, noop_with_empty_axes=0)
    sub = b.op("Sub", "x", mean)
    var = b.op("ReduceMean", b.op("Pow", sub, b.const(2.0)), axes, keepdims=1, noop_with_empty_axes=0)
    scaled = b.op("Mul", gamma, b.op("Div", sub, b.op("Sqrt", var)))
    return b.form("layer-norm", b.op("Add", scaled, beta), ROW, opset=18)


def layer_norm_paddle2onnx() -> Form:
    """paddle's layer_norm through paddle2onnx below opset 17: gamma and beta behind Reshape(…, [-1])."""
    b = _Builder()
    gamma, beta = _gamma_beta(b)
    flat = b.const([-1], np.int64)
    gamma_r = b.op("Reshape", gamma, flat, inside=False)
    beta_r = b.op("Reshape", beta, flat, inside=False)
    mean = b.op("ReduceMean", "x", axes=[-1])
    sub = b.op("Sub", "x", mean)
    var = b.op("ReduceMean", b.op("Pow", sub, b.const(2.0)), axes=[-1])
    std = b.op("Sqrt", b.op("Add", var, b.const(1e-5)))
    scaled = b.op("Mul", b.op("Div", sub, std), gamma_r)
    return b.form("layer-norm", b.op("Add", scaled, beta_r), ROW, opset=13)


def layer_norm_tf_moments() -> Form:
    """tf.nn.moments + tf.nn.batch_normalization (Keras' unfused LayerNormalization, BERT's layer_norm)
    through tf2onnx: SquaredDifference as Sub + Mul, Rsqrt as Sqrt + Reciprocal, and
    x * (gamma * rsqrt) + (beta - mean * (gamma * rsqrt))."""
    b = _Builder()
    gamma, beta = _gamma_beta(b)
    mean = b.op("ReduceMean", "x", axes=[-1])
    diff = b.op("Sub", "x", mean)
    var = b.op("ReduceMean", b.op("Mul", diff, diff), axes=[-1])
    inv = b.op("Reciprocal", b.op("Sqrt", b.op("Add", var, b.const(1e-3))))
    inv_gamma = b.op("Mul", inv, gamma)
    scaled = b.op("Mul", "x", inv_gamma)
    shift = b.op("Sub", beta, b.op("Mul", mean, inv_gamma))
    return b.form("layer-norm", b.op("Add", scaled, shift), ROW, opset=13)


# -------------------------------------------------------------------------------- LeakyReLU
def leaky_relu_where_torch() -> Form:
    """torch.where(x > 0, x, x * 0.1), either torch.onnx exporter."""
    b = _Builder()
    gt = b.op("Greater", "x", b.const(0.0))
    neg = b.op("Mul", "x", b.const(0.1))
    return b.form("leaky-relu", b.op("Where", gt, "x", neg), ROW, opset=13)


def leaky_relu_max_torch() -> Form:
    """torch.maximum(x, 0.1 * x), either torch.onnx exporter (tf.maximum through tf2onnx is the same)."""
    b = _Builder()
    neg = b.op("Mul", "x", b.const(0.1))
    return b.form("leaky-relu", b.op("Max", "x", neg), ROW, opset=13)


# ---------------------------------------------------------------------------- decomposed BN
def _bn_stats() -> dict[str, np.ndarray]:
    shape = (1, IMAGE[1], 1, 1)
    return {
        "mean": rng.normal(0, 0.5, shape), "var": rng.uniform(0.5, 2.0, shape),
        "gamma": rng.uniform(0.5, 1.5, shape), "beta": rng.normal(0, 0.2, shape),
    }


def decomposed_bn_folded_div() -> Form:
    """(x - mean) / sqrt(var + eps) * gamma + beta with buffers, either torch.onnx exporter at every
    opset: constant folding leaves sqrt(var + eps) as one constant."""
    b = _Builder(initializers=True)
    s = _bn_stats()
    sub = b.op("Sub", "x", b.weight(s["mean"]))
    div = b.op("Div", sub, b.weight(np.sqrt(s["var"] + 1e-5)))
    mul = b.op("Mul", div, b.weight(s["gamma"]))
    return b.form("decomposed-bn", b.op("Add", mul, b.weight(s["beta"])), IMAGE, opset=13)


def decomposed_bn_folded_rsqrt() -> Form:
    """(x - mean) * torch.rsqrt(var + eps) * gamma + beta, either exporter: the inverse folded."""
    b = _Builder(initializers=True)
    s = _bn_stats()
    sub = b.op("Sub", "x", b.weight(s["mean"]))
    mul = b.op("Mul", sub, b.weight(1.0 / np.sqrt(s["var"] + 1e-5)))
    mul2 = b.op("Mul", mul, b.weight(s["gamma"]))
    return b.form("decomposed-bn", b.op("Add", mul2, b.weight(s["beta"])), IMAGE, opset=13)


def decomposed_bn_rsqrt_unfolded() -> Form:
    """The rsqrt form exported with do_constant_folding=False (TorchScript): Div(1, Sqrt(var + eps))."""
    b = _Builder()
    s = _bn_stats()
    sub = b.op("Sub", "x", b.weight(s["mean"]))
    std = b.op("Sqrt", b.op("Add", b.weight(s["var"]), b.const(1e-5)))
    inv = b.op("Div", b.const(1.0), std)
    mul = b.op("Mul", b.op("Mul", sub, inv), b.weight(s["gamma"]))
    return b.form("decomposed-bn", b.op("Add", mul, b.weight(s["beta"])), IMAGE, opset=13)


# ------------------------------------------------------------------------------ Conv→Mul→Add
def conv_mul_add_torch() -> Form:
    """conv(x) * scale + shift with [1, C, 1, 1] parameters, either torch.onnx exporter at every opset."""
    b = _Builder(initializers=True)
    w = b.weight(rng.normal(0, 0.5, (IMAGE[1], IMAGE[1], 3, 3)))
    bias = b.weight(rng.normal(0, 0.1, IMAGE[1]))
    conv = b.op("Conv", "x", w, bias, kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1], dilations=[1, 1], group=1)
    mul = b.op("Mul", conv, b.weight(rng.uniform(0.5, 1.5, (1, IMAGE[1], 1, 1))))
    return b.form("conv-mul-add", b.op("Add", mul, b.weight(rng.normal(0, 0.2, (1, IMAGE[1], 1, 1)))), IMAGE, opset=13)


FORMS = [
    gelu_erf_torchscript, gelu_erf_dynamo, gelu_erf_halved_first,
    gelu_tanh_torchscript, gelu_tanh_dynamo, gelu_tanh_halved_first,
    silu_torch, swish_paddle2onnx,
    hardswish_torchscript_13, hardswish_clip_div, hardswish_keras,
    layer_norm_torchscript, layer_norm_torchscript_half, layer_norm_torchscript_autocast, layer_norm_hand_cast,
    layer_norm_dynamo_tiny_eps, layer_norm_paddle2onnx, layer_norm_tf_moments,
    leaky_relu_where_torch, leaky_relu_max_torch,
    decomposed_bn_folded_div, decomposed_bn_folded_rsqrt, decomposed_bn_rsqrt_unfolded,
    conv_mul_add_torch,
]
