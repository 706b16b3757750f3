"""Whole multi-head attention blocks, projections included, as exporters write them, built with ``onnx.helper``.

One :class:`BlockForm` describes a block: separate Q, K, V projections or one packed QKV projection
cut by three Slices (their bounds constant, or computed from its shape as TorchScript does), which
projections add a bias and on which side, how Kᵀ is made, where the scale is, a rotary embedding as
fuse-rotary leaves it (com.microsoft ``RotaryEmbedding`` on Q and K in heads layout), a mask, and
what reads the probabilities. The nodes have fixed names: ``q_proj``, ``q_bias`` (``qkv_proj``,
``qkv_bias``, ``q_slice`` when packed), ``q_split``, ``q_heads``, ``kt``, ``scores``, ``softmax``,
``context``, ``merge``, ``out``, ``o_proj``, ``o_bias``.

The forms follow real exports: TorchScript BERT-like encoders (rxnmap: packed QKV, Slice bounds from
``Shape``, Kᵀ by one Transpose [0, 2, 3, 1], Mul after the scores, an added bias), TorchScript's
scaled_dot_product_attention (BART: √scale computed from Q's shape, on Q and on Kᵀ), HF eager
Whisper (the query projection scaled before its heads split, no bias on K, weights as dynamo's
``CastLike``), torch.export decoders (SmolLM: Kᵀ by Reshape/Transpose/Reshape, √scale on Q and Kᵀ,
a mask) and TorchScript LLaMA after fuse-rotary (K rotated, then transposed by [0, 1, 3, 2]).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, tensor

BATCH, SEQ, HEADS, HEAD_SIZE = 2, 5, 4, 8
HIDDEN = HEADS * HEAD_SIZE
SCALE = float(1 / np.sqrt(HEAD_SIZE))
OPSET = 17


@dataclass(frozen=True)
class BlockForm:
    qkv: str = "separate"
    """separate | packed (one MatMul, cut by three Slices)"""
    biases: str = "qkvo"
    """the projections that add a bias: "" none, "qvo" as Whisper (no bias on K); packed: "q" stands for the QKV bias"""
    bias_first: bool = True
    """Add(bias, MatMul) as TorchScript writes it; False: Add(MatMul, bias)"""
    weights: str = "init"
    """init | castlike (dynamo: weights and biases as CastLike(constant, the tensor they meet)) | q_input (Q's weight
    a graph input: not a projection)"""
    kt: str = "perm0231"
    """perm0231 (one Transpose of the heads split) | transpose (heads, then [0, 1, 3, 2]) |
    dynamo (Reshape/Transpose/Reshape)"""
    scale: str = "mul_after"
    """mul_after | div_after | none | prescale (query projection · c) | split (√c on Q and Kᵀ) |
    split_shape (BART: √c from Q's shape)"""
    rotary: bool = False
    """Q and K rotated in heads layout by com.microsoft RotaryEmbedding"""
    mask: bool = False
    """an additive mask, a graph input [B, 1, 1, S]"""
    bounds: str = "const"
    """packed: the Slices' bounds const | computed (rxnmap: from Shape of the projection)"""
    shapes: str = "const"
    """heads-split and merge shapes const | computed (Concat of Shape pieces of x, as TorchScript writes them)"""
    kv_input: str = "x"
    """x (self-attention) | memory (cross-attention: K and V from a second input) | v_from_memory (K from x, V not)"""
    after_softmax: str = "v"
    """v | also_reduced (the probabilities also summed, an output) | reduced_only (no ·V: rxnmap's last layer)"""


def form(**changes) -> BlockForm:
    return replace(BlockForm(), **changes)


class _Builder:
    def __init__(self, f: BlockForm) -> None:
        self.f = f
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.inputs = [tensor("x", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN])]
        self.outputs: list[onnx.ValueInfoProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self.rng = np.random.default_rng(11)

    def node(self, op: str, inputs: list[str], name: str, domain: str | None = None, **attrs) -> str:
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, domain=domain, **attrs))
        return name

    def const(self, value, name: str, dtype=np.float32) -> str:
        self.inits.append(init(name, np.asarray(value, dtype)))
        return name

    def constant_node(self, value, name: str, dtype=np.float32) -> str:
        """A Constant node, as TorchScript writes scalars."""
        value = init(name, np.asarray(value, dtype))
        self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_node", value=value))
        return name

    def typed(self, name: str, like: str) -> str:
        """A constant as the tensor it meets reads it: itself, or dynamo's CastLike(constant, that tensor)."""
        return self.node("CastLike", [name, like], f"{name}_cast") if self.f.weights == "castlike" else name

    def linear(self, x: str, width: int, name: str, bias: bool) -> str:
        """x·W (+ b), the nodes named ``{name}_proj`` and ``{name}_bias``."""
        weight = self.const(self.rng.normal(0, 0.3, (HIDDEN, width)), f"w_{name}")
        if self.f.weights == "q_input" and name == "q":
            self.inits.pop()
            self.inputs.append(tensor(weight, TensorProto.FLOAT, [HIDDEN, width]))
        projected = self.node("MatMul", [x, self.typed(weight, x)], f"{name}_proj")
        if not bias:
            return projected
        b = self.typed(self.const(self.rng.normal(0, 0.3, (width,)), f"b_{name}"), projected)
        return self.node("Add", [b, projected] if self.f.bias_first else [projected, b], f"{name}_bias")

    def shape_of(self, x: str, dims: list[int | None], name: str) -> str:
        """A Reshape's shape: constant, or [B, S, ...] from x's Shape as TorchScript computes it."""
        if self.f.shapes == "const":
            return self.const([BATCH, SEQ, *dims], name, np.int64)
        pieces = []
        for axis in (0, 1):
            dims_of_x = self.node("Shape", [x], f"{name}_shape{axis}")
            at = self.constant_node(axis, f"{name}_at{axis}", np.int64)
            dim = self.node("Gather", [dims_of_x, at], f"{name}_dim{axis}", axis=0)
            unsqueeze_axes = self.const([0], f"{name}_axes{axis}", np.int64)
            pieces.append(self.node("Unsqueeze", [dim, unsqueeze_axes], f"{name}_piece{axis}"))
        pieces += [self.constant_node([d], f"{name}_rest{i}", np.int64) for i, d in enumerate(dims)]
        return self.node("Concat", pieces, name, axis=0)


def build(f: BlockForm) -> onnx.ModelProto:
    """The model: x (and ``memory`` in cross-attention) through one attention block; its output is the graph's."""
    b = _Builder(f)
    if f.kv_input != "x":
        b.inputs.append(tensor("memory", TensorProto.FLOAT, [BATCH, SEQ, HIDDEN]))
    q3, k3, v3 = _projections(b)
    q = b.node("Transpose", [b.node("Reshape", [q3, b.shape_of("x", [HEADS, HEAD_SIZE], "q_shape")], "q_split")],
               "q_heads", perm=[0, 2, 1, 3])
    if f.rotary:
        q = _rotate(b, q, "q")
    scores = _scores(b, q, _k_transposed(b, k3))
    if f.mask:
        b.inputs.append(tensor("attention_bias", TensorProto.FLOAT, [BATCH, 1, 1, SEQ]))
        scores = b.node("Add", [scores, "attention_bias"], "mask")
    probs = b.node("Softmax", [scores], "softmax", axis=-1)
    if f.after_softmax != "v":
        reduced = b.node("ReduceSum", [probs, b.const([1], "heads_axis", np.int64)], "reduce", keepdims=0)
        b.outputs.append(tensor(reduced, TensorProto.FLOAT, [BATCH, SEQ, SEQ]))
        if f.after_softmax == "reduced_only":
            return _model(b)
    v = b.node("Transpose", [b.node("Reshape", [v3, b.shape_of("x", [HEADS, HEAD_SIZE], "v_shape")], "v_split")],
               "v_heads", perm=[0, 2, 1, 3])
    context = b.node("MatMul", [probs, v], "context")
    merged = b.node("Transpose", [context], "merge", perm=[0, 2, 1, 3])
    out = b.node("Reshape", [merged, b.shape_of("x", [HIDDEN], "merged_shape")], "out")
    projected = b.linear(out, HIDDEN, "o", "o" in f.biases)
    b.outputs.insert(0, tensor(projected, TensorProto.FLOAT, [BATCH, SEQ, HIDDEN]))
    return _model(b)


def _model(b: _Builder) -> onnx.ModelProto:
    graph = helper.make_graph(b.nodes, "attention_block", b.inputs, b.outputs, b.inits, value_info=b.value_info)
    opsets = [helper.make_opsetid("", OPSET)] + ([helper.make_opsetid("com.microsoft", 1)] if b.f.rotary else [])
    model = helper.make_model(graph, opset_imports=opsets, producer_name="graphlens-tests")
    model.ir_version = 8
    return model


def _projections(b: _Builder) -> tuple[str, str, str]:
    f = b.f
    if f.qkv == "separate":
        k_input = "memory" if f.kv_input == "memory" else "x"
        v_input = "x" if f.kv_input == "x" else "memory"
        q3 = b.linear("x", HIDDEN, "q", "q" in f.biases)
        k3 = b.linear(k_input, HIDDEN, "k", "k" in f.biases)
        v3 = b.linear(v_input, HIDDEN, "v", "v" in f.biases)
    else:
        qkv = b.linear("x", 3 * HIDDEN, "qkv", "q" in f.biases)
        q3, k3, v3 = (b.node("Slice", [qkv, start, end, axes], f"{side}_slice")
                      for side, (start, end, axes) in zip("qkv", _bounds(b, qkv)))
    if f.scale == "prescale":  # HF: q_proj(x) * scaling
        q3 = b.node("Mul", [q3, b.typed(b.const(SCALE, "q_factor"), q3)], "q_prescale")
    return q3, k3, v3


def _bounds(b: _Builder, qkv: str) -> list[tuple[str, str, str]]:
    """[0, h), [h, 2h), [2h, 3h) on the last axis: constants, or as rxnmap computes them from the projection's width."""
    if b.f.bounds == "const":
        axes = b.const([2], "slice_axes", np.int64)
        cuts = [b.const([i * HIDDEN], f"cut{i}", np.int64) for i in range(4)]
        return [(cuts[i], cuts[i + 1], axes) for i in range(3)]
    last = b.constant_node([-1], "last_axis", np.int64)
    width = b.node("Gather", [b.node("Shape", [qkv], "qkv_shape"), last], "qkv_width", axis=0)
    third = b.node("Div", [b.node("Add", [width, b.constant_node([2], "two", np.int64)], "qkv_width_up"),
                           b.constant_node([3], "three", np.int64)], "qkv_third")
    cuts = [b.constant_node([0], "cut0", np.int64)]
    cuts += [b.node("Mul", [third, b.constant_node([i], f"times{i}", np.int64)], f"cut{i}") for i in (1, 2, 3)]
    return [(cuts[i], cuts[i + 1], last) for i in range(3)]


def _rotate(b: _Builder, heads: str, name: str) -> str:
    """com.microsoft RotaryEmbedding on [B, N, S, H], as fuse-rotary writes it below opset 23."""
    if "position_ids" not in {i.name for i in b.inputs}:
        b.inputs.append(tensor("position_ids", TensorProto.INT64, [BATCH, SEQ]))
        angles = np.arange(SEQ)[:, None] * np.exp(-np.arange(HEAD_SIZE // 2) / 4)[None, :]
        b.const(np.cos(angles), "cos_cache")
        b.const(np.sin(angles), "sin_cache")
    # its type, kept from the pieces fuse-rotary replaced (ONNX cannot infer a com.microsoft op's)
    b.value_info.append(tensor(f"{name}_rotary", TensorProto.FLOAT, [BATCH, HEADS, SEQ, HEAD_SIZE]))
    return b.node("RotaryEmbedding", [heads, "position_ids", "cos_cache", "sin_cache"], f"{name}_rotary",
                  domain="com.microsoft", num_heads=HEADS)


def _k_transposed(b: _Builder, k3: str) -> str:
    f = b.f
    split = b.node("Reshape", [k3, b.shape_of("x", [HEADS, HEAD_SIZE], "k_shape")], "k_split")
    if f.kt == "perm0231":
        return b.node("Transpose", [split], "kt", perm=[0, 2, 3, 1])
    k = b.node("Transpose", [split], "k_heads", perm=[0, 2, 1, 3])
    if f.rotary:
        k = _rotate(b, k, "k")
    if f.kt == "transpose":
        return b.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])
    flat = b.node("Reshape", [k, b.const([-1, SEQ, HEAD_SIZE], "k_3d", np.int64)], "k_flat")
    flat_t = b.node("Transpose", [flat], "k_flat_t", perm=[0, 2, 1])
    return b.node("Reshape", [flat_t, b.const([BATCH, HEADS, HEAD_SIZE, SEQ], "kt_shape", np.int64)], "kt")


def _scores(b: _Builder, q: str, kt: str) -> str:
    scale = b.f.scale
    if scale in ("split", "split_shape"):
        if scale == "split":
            root_q = root_k = b.typed(b.const(np.sqrt(SCALE), "root_scale"), q)
        else:
            root_q = root_k = _root_from_shape(b, q)
        if scale == "split" and b.f.weights == "castlike":
            root_k = b.node("CastLike", ["root_scale", kt], "root_scale_k_cast")
        q = b.node("Mul", [q, root_q], "q_scaled")
        kt = b.node("Mul", [kt, root_k], "kt_scaled")
    scores = b.node("MatMul", [q, kt], "scores")
    if scale == "mul_after":
        return b.node("Mul", [scores, b.constant_node(SCALE, "scale")], "scaled")
    if scale == "div_after":
        return b.node("Div", [scores, b.constant_node(1 / SCALE, "scale")], "scaled")
    return scores


def _root_from_shape(b: _Builder, q: str) -> str:
    """√(1/√d) with d read off Q's shape, as torch.onnx writes scaled_dot_product_attention."""
    last = b.node("Slice", [b.node("Shape", [q], "q_dims"), b.const([-1], "last", np.int64),
                            b.const([np.iinfo(np.int64).max], "end", np.int64)], "q_size")
    size = b.node("Cast", [last], "q_size_float", to=TensorProto.FLOAT)
    inverse = b.node("Div", [b.constant_node(1.0, "one"), b.node("Sqrt", [size], "root_size")], "inverse_root")
    return b.node("Sqrt", [b.node("Cast", [inverse], "inverse_root_float", to=TensorProto.FLOAT)], "root_scale")


def inputs_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for every graph input (positions 0..S-1)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        if value.type.tensor_type.elem_type == TensorProto.INT64:
            feeds[value.name] = np.broadcast_to(np.arange(shape[-1], dtype=np.int64), shape).copy()
        else:
            feeds[value.name] = rng.normal(size=shape).astype(np.float32)
    return feeds
