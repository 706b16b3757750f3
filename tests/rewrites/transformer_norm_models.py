"""The norms of transformer blocks as exporters write them, built with ``onnx.helper``.

RMSNorm: the dynamo exporter (onnxscript's test decoders: ``Pow`` by a Constant 2, ``ReduceMean``
with its axes as an input, ε as ``CastLike(ε, mean)``, ``Sqrt``, ``Reciprocal``, ``Mul(x, ·)``,
``Mul(weight, ·)``), the TorchScript exporter (axes as an attribute before opset 18, torch.rsqrt
as ``Div(1, Sqrt)``, weight on the right), HF LlamaRMSNorm in half precision (x cast to float, the
result cast back before the weight), ``x / rms`` and ``x * x``. Skip forms: a residual ``Add``
(after the projection's ``Add(bias, MatMul)`` as TorchScript writes nn.Linear) before each of
those, before LayerNormalization (weights as initializers, or as dynamo's ``CastLike(weight, x)``)
and before layer normalization in pieces. Every model takes ``x`` of ``SHAPE`` (or the shape asked
for) and names its nodes after their role.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, tensor

SHAPE = [2, 3, 8]
HIDDEN = SHAPE[-1]
rng = np.random.default_rng(23)
ELEM = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.float64: TensorProto.DOUBLE}


@dataclass
class Block:
    """Nodes and initializers of a model being built; constants as Constant nodes or initializers."""

    dtype: type = np.float32
    constant_nodes: bool = True
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)

    def input(self, name: str, shape=None, dtype=None) -> str:
        self.inputs.append(tensor(name, ELEM[dtype or self.dtype], SHAPE if shape is None else shape))
        return name

    def const(self, name: str, value, dtype=None) -> str:
        array = np.asarray(value, dtype or self.dtype)
        if self.constant_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const", value=init(name, array)))
        else:
            self.inits.append(init(name, array))
        return name

    def weight(self, name: str, shape=(HIDDEN,), low=0.5, high=1.5, dtype=None) -> str:
        self.inits.append(init(name, rng.uniform(low, high, shape).astype(dtype or self.dtype)))
        return name

    def op(self, op_type: str, name: str, *inputs: str, outputs: int = 1, **attrs) -> str:
        names = [name] if outputs == 1 else [name] + [f"{name}_{i}" for i in range(1, outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=name, **attrs))
        return name

    def model(self, outputs: list[str], *, opset: int = 18, out_dtype=None, shape=None) -> onnx.ModelProto:
        elem = ELEM[out_dtype or self.dtype]
        graph = helper.make_graph(self.nodes, "block", self.inputs,
                                  [tensor(o, elem, SHAPE if shape is None else shape) for o in outputs], self.inits)
        opsets = [helper.make_opsetid("", opset)]
        model = helper.make_model(graph, opset_imports=opsets, producer_name="graphlens-tests")
        model.ir_version = 10 if opset >= 21 else 8
        return model


def with_value_info(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with the type of every tensor declared, as the dynamo exporter writes its models: inferred
    on a copy whose constant nodes (a Reshape of Constants, ...) are Constants, which ONNX's inference reads."""
    from graphlens.core.model import Model

    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    graph = Model(onnx.ModelProto.FromString(model.SerializeToString())).graph
    for i, n in enumerate(twin.graph.node):
        value = graph.constant_value(n.output[0]) if n.op_type != "Constant" else None
        if value is not None:
            twin.graph.node[i].CopyFrom(helper.make_node("Constant", [], [n.output[0]], name=n.name,
                                                         value=init(n.output[0], value)))
    model.graph.value_info.extend(onnx.shape_inference.infer_shapes(twin).graph.value_info)
    return model


# ----------------------------------------------------------------------------- RMSNorm pieces
def rms_dynamo(b: Block, x: str, prefix: str = "norm", *, opset: int = 18, weight: bool = True) -> str:
    """onnxscript's decoders (dynamo): Pow, ReduceMean(axes input), CastLike ε, Sqrt, Reciprocal, Mul,
    Mul(weight, ·)."""
    squared = b.op("Pow", f"{prefix}/pow", x, b.const(f"{prefix}/two", 2.0))
    if opset >= 18:
        mean = b.op("ReduceMean", f"{prefix}/mean", squared, b.const(f"{prefix}/axes", [-1], np.int64), keepdims=1)
    else:
        mean = b.op("ReduceMean", f"{prefix}/mean", squared, axes=[-1], keepdims=1)
    eps = b.op("CastLike", f"{prefix}/eps_like", b.const(f"{prefix}/eps", 1e-5), mean)
    rms = b.op("Sqrt", f"{prefix}/sqrt", b.op("Add", f"{prefix}/add_eps", mean, eps))
    normalized = b.op("Mul", f"{prefix}/mul", x, b.op("Reciprocal", f"{prefix}/rsqrt", rms))
    if not weight:
        return normalized
    return b.op("Mul", f"{prefix}/scale", b.const(f"{prefix}/weight", rng.uniform(0.5, 1.5, HIDDEN)), normalized)


def rms_dynamo_llama(b: Block, x: str, prefix: str = "norm") -> str:
    """HF LlamaRMSNorm, dynamo exporter (onnxscript's _smollm_2): x.to(float32) and back kept as Casts, the
    exponent a Cast of an int 2, the axes a Reshape of a Constant, the weight CastLike(weight, result)."""
    up = b.op("Cast", f"{prefix}/to_copy", x, to=TensorProto.FLOAT)
    two = b.op("Cast", f"{prefix}/two_cast", b.const(f"{prefix}/two", 2, np.int64), to=TensorProto.FLOAT)
    squared = b.op("Pow", f"{prefix}/pow", up, two)
    minus_one, flat = b.const(f"{prefix}/m1", [-1], np.int64), b.const(f"{prefix}/flat", [-1], np.int64)
    axes = b.op("Reshape", f"{prefix}/axes", minus_one, flat)
    mean = b.op("ReduceMean", f"{prefix}/mean", squared, axes, keepdims=1)
    eps = b.op("CastLike", f"{prefix}/eps_like", b.const(f"{prefix}/eps", 1e-5, np.float32), mean)
    rms = b.op("Sqrt", f"{prefix}/sqrt", b.op("Add", f"{prefix}/add_eps", mean, eps))
    normalized = b.op("Mul", f"{prefix}/mul", up, b.op("Reciprocal", f"{prefix}/rsqrt", rms))
    down = b.op("Cast", f"{prefix}/to_copy_back", normalized, to=ELEM[b.dtype])
    weight = b.op("CastLike", f"{prefix}/weight_like", b.const(f"{prefix}/weight", rng.uniform(0.5, 1.5, HIDDEN)), down)
    return b.op("Mul", f"{prefix}/scale", weight, down)


def rms_torchscript(b: Block, x: str, prefix: str = "norm", *, cast: bool = False) -> str:
    """TorchScript at opset 17: ReduceMean(axes=[-1]), ε a Constant, torch.rsqrt as Div(1, Sqrt), weight last."""
    up = b.op("Cast", f"{prefix}/to_float", x, to=TensorProto.FLOAT) if cast else x
    squared = b.op("Pow", f"{prefix}/pow", up, b.const(f"{prefix}/two", 2.0))
    mean = b.op("ReduceMean", f"{prefix}/mean", squared, axes=[-1])
    rms = b.op("Sqrt", f"{prefix}/sqrt", b.op("Add", f"{prefix}/add_eps", mean, b.const(f"{prefix}/eps", 1e-6)))
    inv = b.op("Div", f"{prefix}/rsqrt", b.const(f"{prefix}/one", 1.0), rms)
    normalized = b.op("Mul", f"{prefix}/mul", up, inv)
    return b.op("Mul", f"{prefix}/scale", normalized, b.weight(f"{prefix}.weight"))


def rms_llama_half(b: Block, x: str, prefix: str = "norm") -> str:
    """HF LlamaRMSNorm on a float16 model: x cast to float, normalized, cast back, then the float16 weight."""
    up = b.op("Cast", f"{prefix}/to_float", x, to=TensorProto.FLOAT)
    squared = b.op("Pow", f"{prefix}/pow", up, b.const(f"{prefix}/two", 2.0, np.float32))
    mean = b.op("ReduceMean", f"{prefix}/mean", squared, b.const(f"{prefix}/axes", [-1], np.int64))
    with_eps = b.op("Add", f"{prefix}/add_eps", mean, b.const(f"{prefix}/eps", 1e-6, np.float32))
    inv = b.op("Reciprocal", f"{prefix}/rsqrt", b.op("Sqrt", f"{prefix}/sqrt", with_eps))
    down = b.op("Cast", f"{prefix}/to_half", b.op("Mul", f"{prefix}/mul", up, inv), to=TensorProto.FLOAT16)
    return b.op("Mul", f"{prefix}/scale", b.weight(f"{prefix}.weight"), down)


def rms_t5(b: Block, x: str, prefix: str = "norm") -> str:
    """HF T5LayerNorm, TorchScript exporter: only the variance reads x cast to float; in half precision
    the product casts x up again on its own, and the result is cast back before the half weight."""
    half = b.dtype == np.float16
    stat = b.op("Cast", f"{prefix}/Cast", x, to=TensorProto.FLOAT)
    squared = b.op("Pow", f"{prefix}/Pow", stat, b.const(f"{prefix}/two", 2.0, np.float32))
    mean = b.op("ReduceMean", f"{prefix}/ReduceMean", squared, axes=[-1])
    with_eps = b.op("Add", f"{prefix}/Add", mean, b.const(f"{prefix}/eps", 1e-6, np.float32))
    rms = b.op("Sqrt", f"{prefix}/Sqrt", with_eps)
    inv = b.op("Div", f"{prefix}/Div", b.const(f"{prefix}/one", 1.0, np.float32), rms)
    product = b.op("Cast", f"{prefix}/Cast_1", x, to=TensorProto.FLOAT) if half else x
    normalized = b.op("Mul", f"{prefix}/Mul", product, inv)
    if half:
        normalized = b.op("Cast", f"{prefix}/Cast_2", normalized, to=TensorProto.FLOAT16)
    return b.op("Mul", f"{prefix}/Mul_1", b.weight(f"{prefix}.weight"), normalized)


def rms_div(b: Block, x: str, prefix: str = "norm", *, square_by_mul: bool = False, axes=(-1,), keepdims: int = 1,
            eps=1e-6, weight: str | None = None) -> str:
    """x / √(mean(x·x) + ε) · γ, as hand-written modules and tf2onnx write it (axes as an attribute)."""
    squared = (b.op("Mul", f"{prefix}/square", x, x) if square_by_mul
               else b.op("Pow", f"{prefix}/pow", x, b.const(f"{prefix}/two", 2.0)))
    mean = b.op("ReduceMean", f"{prefix}/mean", squared, axes=list(axes), keepdims=keepdims)
    rms = b.op("Sqrt", f"{prefix}/sqrt", b.op("Add", f"{prefix}/add_eps", mean, b.const(f"{prefix}/eps", eps)))
    normalized = b.op("Div", f"{prefix}/div", x, rms)
    return b.op("Mul", f"{prefix}/scale", normalized, weight or b.weight(f"{prefix}.weight"))


def rms_model(form, *, opset: int = 18, dtype=np.float32, shape=None, **options) -> onnx.ModelProto:
    """One RMSNorm of x, in ``form``, as the whole model (with dynamo's value_info for its dynamo forms)."""
    b = Block(dtype=dtype)
    x = b.input("x", shape)
    out = form(b, x, **options) if form is not rms_dynamo else form(b, x, opset=opset, **options)
    model = b.model([out], opset=opset, shape=shape)
    return with_value_info(model) if form is rms_dynamo_llama else model


# ----------------------------------------------------------------------------- residual blocks
def projection(b: Block, x: str, prefix: str, *, bias: bool = True) -> str:
    """nn.Linear as TorchScript writes it: MatMul, then Add(bias, ·)."""
    out = b.op("MatMul", f"{prefix}/MatMul", x, b.weight(f"{prefix}.weight", (HIDDEN, HIDDEN), -0.5, 0.5))
    return b.op("Add", f"{prefix}/Add", b.weight(f"{prefix}.bias", low=-0.5, high=0.5), out) if bias else out


def decoder_block(norm=rms_dynamo, *, opset: int = 18, dtype=np.float32, bias: bool = False,
                  value_info: bool = False) -> onnx.ModelProto:
    """A pre-norm decoder layer (Llama): h = x + o_proj(norm1(x)); y = h + down(norm2(h)); norm3(y).

    norm1 reads the embedding alone; h is read by norm2 and again by the next residual Add.
    """
    b = Block(dtype=dtype)
    x = b.input("x")
    attn = projection(b, norm(b, x, "norm1"), "o_proj", bias=bias)
    h = b.op("Add", "residual1", x, attn)
    mlp = projection(b, norm(b, h, "norm2"), "down_proj", bias=bias)
    y = b.op("Add", "residual2", h, mlp)
    model = b.model([norm(b, y, "final_norm")], opset=opset)
    return with_value_info(model) if value_info else model


def post_norm_block(*, weights_like: bool = False, bias: bool = True, opset: int = 17) -> onnx.ModelProto:
    """A post-norm encoder layer (BERT, rxnmap): LayerNormalization(x + linear(x)), weights as initializers,
    or as ``CastLike(weight, sum)`` of Constant nodes (phi-2's dynamo export)."""
    b = Block(constant_nodes=True)
    x = b.input("x")
    total = b.op("Add", "residual", x, projection(b, x, "linear", bias=bias))
    gamma, beta = b.weight("norm.weight"), b.weight("norm.bias", low=-0.5, high=0.5)
    if weights_like:
        gamma = b.op("CastLike", "norm/weight_like", b.const("norm/w", rng.uniform(0.5, 1.5, HIDDEN)), total)
        beta = b.op("CastLike", "norm/bias_like", b.const("norm/b", rng.uniform(-0.5, 0.5, HIDDEN)), total)
    out = b.op("LayerNormalization", "norm", total, gamma, beta, axis=-1, epsilon=1e-5)
    return b.model([out], opset=opset)


def layer_norm_pieces(b: Block, x: str, prefix: str = "norm") -> str:
    """nn.LayerNorm, TorchScript exporter below opset 17: ReduceMean, Sub, Pow, ReduceMean, Add, Sqrt, Div, Mul, Add;
    in half precision the centred value is cast to double for the variance and the result back to half."""
    half = b.dtype == np.float16
    mean = b.op("ReduceMean", f"{prefix}/mean", x, axes=[-1])
    centered = b.op("Sub", f"{prefix}/sub", x, mean)
    if half:
        centered = b.op("Cast", f"{prefix}/to_double", centered, to=TensorProto.DOUBLE)
    stat = np.float64 if half else None
    squared = b.op("Pow", f"{prefix}/pow", centered, b.const(f"{prefix}/two", 2.0, stat))
    var = b.op("ReduceMean", f"{prefix}/var", squared, axes=[-1])
    std = b.op("Sqrt", f"{prefix}/sqrt", b.op("Add", f"{prefix}/add_eps", var, b.const(f"{prefix}/eps", 1e-5, stat)))
    normalized = b.op("Div", f"{prefix}/div", centered, std)
    if half:
        normalized = b.op("Cast", f"{prefix}/to_half", normalized, to=TensorProto.FLOAT16)
    scaled = b.op("Mul", f"{prefix}/mul", normalized, b.weight(f"{prefix}.weight"))
    return b.op("Add", f"{prefix}/add", scaled, b.weight(f"{prefix}.bias", low=-0.5, high=0.5))


def residual_then(norm_op: str, *, opset: int, domain: str = "", read_later: bool = True, twice: bool = False,
                  shape=None, skip_shape=None, out_shape=None, **attrs) -> onnx.ModelProto:
    """Add(x, r) read by a norm op (RMSNormalization, SimplifiedLayerNormalization, LayerNormalization, or
    SkipSimplifiedLayerNormalization of the sum with itself), and by a later Add."""
    b = Block()
    x, r = b.input("x", shape), b.input("r", skip_shape)
    total = b.op("Add", "residual", x, r)
    inputs = [total, total] if twice else [total]
    inputs.append(b.weight("norm.weight"))
    if norm_op == "LayerNormalization":
        inputs.append(b.weight("norm.bias", low=-0.5, high=0.5))
    b.nodes.append(helper.make_node(norm_op, inputs, ["normed"], name="norm", domain=domain or None, **attrs))
    outputs = ["normed"]
    if read_later:
        outputs.append(b.op("Add", "next_residual", total, b.op("Tanh", "mlp", "normed")))
    model = b.model(outputs, opset=opset, shape=out_shape or shape)
    if domain:
        model.opset_import.append(helper.make_opsetid(domain, 1))
    return model
