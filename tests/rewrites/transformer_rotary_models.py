"""Rotary position embeddings as exporters write them, built with ``onnx.helper``.

rotate-half (HF LLaMA/GPT-NeoX) as the dynamo exporter writes it in onnxscript's test decoders
(SmolLM): q and k reshaped to heads and transposed to [B, H, S, D]; cos and sin computed in the
graph, ``inv_freq [1, D/2, 1] @ positions [1, 1, S]``, transposed, ``Concat(freqs, freqs)``,
``Cos``/``Sin``, ``Unsqueeze`` on axis 1, shared by q and k; the Slice bounds as ``CastLike`` of
``Constant`` nodes. The TorchScript form of older HF code reads cos and sin from a constant cache
with ``Gather(cache, position_ids)``. Phi-2 rotates the first rotary_dim channels only and
concatenates the rest. GPT-J interleaves: ``x[..., ::2]`` and ``x[..., 1::2]`` by Slices of step 2,
``torch.stack((-x2, x1), -1).flatten(-2)``, on [B, S, H, D] before the heads are transposed, with
cos and sin split from one gathered ``sincos`` table and repeat-interleaved.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, tensor

BATCH, SEQ, HEADS, HEAD_DIM = 2, 5, 3, 8
MAX_POS = 12
rng = np.random.default_rng(31)
INT64_MAX = 2**63 - 1


@dataclass
class Block:
    """Nodes, initializers and inputs of a model being built; constants as Constant nodes or initializers."""

    constant_nodes: bool = True
    elem: int = TensorProto.FLOAT
    """The element type of x, cos, sin and the outputs."""
    cast_like: bool = False
    """Slice bounds as the dynamo exporter writes them: CastLike(Constant, Constant)."""
    cast_shapes: bool = False
    """Reshape shapes as Cast(Constant) (onnxscript's second SmolLM export): ONNX shape inference cannot read them."""
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    inits: list[onnx.TensorProto] = field(default_factory=list)
    inputs: list[onnx.ValueInfoProto] = field(default_factory=list)

    def input(self, name: str, shape, elem=None) -> str:
        self.inputs.append(tensor(name, elem or self.elem, shape))
        return name

    def const(self, name: str, value, dtype=np.float32) -> str:
        array = np.asarray(value, dtype)
        if self.constant_nodes:
            self.nodes.append(helper.make_node("Constant", [], [name], name=f"{name}_const", value=init(name, array)))
        else:
            self.inits.append(init(name, array))
        return name

    def ints(self, name: str, values: list[int]) -> str:
        if not self.cast_like:
            return self.const(name, values, np.int64)
        like = self.const(f"{name}_like", [1], np.int64)
        return self.op("CastLike", f"{name}_cast", self.const(name, values, np.int64), like)

    def op(self, op_type: str, name: str, *inputs: str, outputs: int = 1, **attrs) -> str:
        names = [name] if outputs == 1 else [f"{name}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), names, name=name, **attrs))
        return names[0]

    def slice(self, name: str, x: str, start: int, end: int, step: int = 1, axis: int = -1) -> str:
        return self.op("Slice", name, x, self.ints(f"{name}/start", [start]), self.ints(f"{name}/end", [end]),
                       self.ints(f"{name}/axis", [axis]), self.ints(f"{name}/step", [step]))

    def model(self, outputs: list[tuple[str, list]], *, opset: int) -> onnx.ModelProto:
        graph = helper.make_graph(self.nodes, "block", self.inputs,
                                  [tensor(name, self.elem, shape) for name, shape in outputs], self.inits)
        imports = [helper.make_opsetid("", opset)]
        if any(n.domain == "com.microsoft" for n in self.nodes):
            imports.append(helper.make_opsetid("com.microsoft", 1))
        model = helper.make_model(graph, opset_imports=imports, producer_name="graphlens-tests")
        model.ir_version = 10 if opset >= 21 else 8
        return model


# ------------------------------------------------------------------------------ rotations
def rotate_half(b: Block, prefix: str, x: str, cos: str, sin: str, d: int) -> str:
    """x·cos + Concat(−x[d/2:], x[:d/2])·sin, in the order the dynamo exporter writes it."""
    x_cos = b.op("Mul", f"{prefix}/mul_cos", x, cos)
    x1 = b.slice(f"{prefix}/x1", x, 0, d // 2)
    x2 = b.slice(f"{prefix}/x2", x, d // 2, INT64_MAX)
    rotated = b.op("Concat", f"{prefix}/rotate", b.op("Neg", f"{prefix}/neg", x2), x1, axis=-1)
    return b.op("Add", f"{prefix}/add", x_cos, b.op("Mul", f"{prefix}/mul_sin", rotated, sin))


def rotate_every_two(b: Block, prefix: str, x: str, cos: str, sin: str, shape: list[int], *,
                     sequence: bool = False, stack_axis: int = -1) -> str:
    """GPT-J: x·cos + stack((−x[..., 1::2], x[..., ::2]), −1).flatten(−2)·sin."""
    x1 = b.slice(f"{prefix}/x1", x, 0, INT64_MAX, 2)
    x2 = b.slice(f"{prefix}/x2", x, 1, INT64_MAX, 2)
    neg = b.op("Neg", f"{prefix}/neg", x2)
    if sequence:
        pairs = b.op("ConcatFromSequence", f"{prefix}/stack", b.op("SequenceConstruct", f"{prefix}/seq", neg, x1),
                     axis=stack_axis, new_axis=1)
    else:
        axis = b.ints(f"{prefix}/stack_axis", [stack_axis])
        pairs = b.op("Concat", f"{prefix}/stack", b.op("Unsqueeze", f"{prefix}/neg_pair", neg, axis),
                     b.op("Unsqueeze", f"{prefix}/x1_pair", x1, axis), axis=stack_axis)
    rotated = b.op("Reshape", f"{prefix}/flatten", pairs, b.const(f"{prefix}/shape", shape, np.int64))
    x_cos = b.op("Mul", f"{prefix}/mul_cos", x, cos)
    return b.op("Add", f"{prefix}/add", x_cos, b.op("Mul", f"{prefix}/mul_sin", rotated, sin))


def heads(b: Block, name: str, batch=BATCH, head_dim: int = HEAD_DIM, transpose: bool = True) -> str:
    """A projection input [B, S, H·D] split into heads, [B, H, S, D] (or [B, S, H, D])."""
    x = b.input(name, [batch, SEQ, HEADS * head_dim])
    shape = b.const(f"{name}/heads", [0, 0, HEADS, head_dim], np.int64)
    if b.cast_shapes:
        shape = b.op("Cast", f"{name}/heads_cast", shape, to=TensorProto.INT64)
    split = b.op("Reshape", f"{name}/view", x, shape)
    return b.op("Transpose", f"{name}/transpose", split, perm=[0, 2, 1, 3]) if transpose else split


# ------------------------------------------------------------------------------ cos and sin
def computed_cos_sin(b: Block, rotary_dim: int, *, scaling: bool = False) -> tuple[str, str]:
    """The dynamo export of LlamaRotaryEmbedding.forward: position_ids [1, S] → cos, sin [1, 1, S, rotary_dim]."""
    positions = b.input("position_ids", [1, SEQ], TensorProto.INT64)
    inv_freq = 1.0 / (10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim))
    expanded = b.op("Unsqueeze", "rope/unsqueeze_pos", positions, b.const("rope/axis1", [1], np.int64))
    as_float = b.op("Cast", "rope/to_float", expanded, to=TensorProto.FLOAT)
    freqs = b.op("MatMul", "rope/matmul", b.const("rope/inv_freq", inv_freq.reshape(1, -1, 1)), as_float)
    freqs = b.op("Transpose", "rope/transpose", freqs, perm=[0, 2, 1])
    emb = b.op("Concat", "rope/cat", freqs, freqs, axis=-1)
    tables = []
    for op in ("Cos", "Sin"):
        table = b.op(op, f"rope/{op.lower()}", emb)
        if b.elem != TensorProto.FLOAT:  # cos.to(dtype=x.dtype)
            table = b.op("Cast", f"rope/{op.lower()}_to_x", table, to=b.elem)
        if scaling:
            table = b.op("Mul", f"rope/{op.lower()}_scaled", table, b.const(f"rope/{op.lower()}_scaling", 1.0))
        tables.append(b.op("Unsqueeze", f"rope/{op.lower()}_4d", table,
                           b.const(f"rope/{op.lower()}_axis", [1], np.int64)))
    return tables[0], tables[1]


def cached_cos_sin(b: Block, rotary_dim: int, batch=BATCH, seq=SEQ) -> tuple[str, str]:
    """Older HF code, TorchScript: cos = cos_cached[position_ids].unsqueeze(1), from constant caches [P, rotary_dim]."""
    positions = b.input("position_ids", [batch, seq], TensorProto.INT64)
    angles = np.outer(np.arange(MAX_POS), 1.0 / (10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim)))
    emb = np.concatenate([angles, angles], axis=-1)
    tables = []
    for name, fn in (("cos", np.cos), ("sin", np.sin)):
        b.inits.append(init(f"{name}_cached", fn(emb).astype(np.float32)))
        gathered = b.op("Gather", f"rope/{name}_gather", f"{name}_cached", positions, axis=0)
        tables.append(b.op("Unsqueeze", f"rope/{name}_4d", gathered, b.const(f"rope/{name}_axis", [1], np.int64)))
    return tables[0], tables[1]


def gptj_cos_sin(b: Block, rotary_dim: int) -> tuple[str, str]:
    """GPT-J: sincos = embed_positions[position_ids]; sin, cos = split(sincos); each [:, :, None, :]
    repeat-interleaved by 2."""
    positions = b.input("position_ids", [BATCH, SEQ], TensorProto.INT64)
    angles = np.outer(np.arange(MAX_POS), 1.0 / (10000 ** (np.arange(0, rotary_dim, 2) / rotary_dim)))
    b.inits.append(init("embed_positions", np.concatenate([np.sin(angles), np.cos(angles)], -1).astype(np.float32)))
    sincos = b.op("Gather", "rope/gather", "embed_positions", positions, axis=0)
    half = rotary_dim // 2
    sin = b.slice("rope/sin", sincos, 0, half)
    cos = b.slice("rope/cos", sincos, half, INT64_MAX)
    tables = []
    for name, table in (("cos", cos), ("sin", sin)):
        heads_axis = b.op("Unsqueeze", f"rope/{name}_heads", table, b.const(f"rope/{name}_axis2", [2], np.int64))
        pairs = b.op("Unsqueeze", f"rope/{name}_pairs", heads_axis, b.const(f"rope/{name}_axis4", [4], np.int64))
        tiled = b.op("Expand", f"rope/{name}_expand", pairs, b.const(f"rope/{name}_reps", [1, 1, 1, 1, 2], np.int64))
        tables.append(b.op("Reshape", f"rope/{name}_interleave", tiled,
                           b.const(f"rope/{name}_flat", [BATCH, SEQ, 1, rotary_dim], np.int64)))
    return tables[0], tables[1]


# ------------------------------------------------------------------------------ models
def llama_dynamo(*, opset: int = 18, scaling: bool = False, elem: int = TensorProto.FLOAT,
                 cast_shapes: bool = False) -> onnx.ModelProto:
    """q and k of one attention layer, rotated with cos/sin computed in the graph (onnxscript's SmolLM export)."""
    b = Block(cast_like=True, elem=elem, cast_shapes=cast_shapes)
    cos, sin = computed_cos_sin(b, HEAD_DIM, scaling=scaling)
    outs = [rotate_half(b, name, heads(b, name, batch=1), cos, sin, HEAD_DIM) for name in ("q", "k")]
    return b.model([(o, [1, HEADS, SEQ, HEAD_DIM]) for o in outs], opset=opset)


def llama_cached(*, opset: int = 17, view_output: bool = False) -> onnx.ModelProto:
    """One rotation with cos/sin gathered from constant caches by position ids (TorchScript, Constant-node bounds);
    ``view_output``: q's heads are a graph output too."""
    b = Block()
    cos, sin = cached_cos_sin(b, HEAD_DIM)
    x = heads(b, "q")
    out = rotate_half(b, "q", x, cos, sin, HEAD_DIM)
    return b.model([(out, [BATCH, HEADS, SEQ, HEAD_DIM])] + [(x, [BATCH, HEADS, SEQ, HEAD_DIM])] * view_output,
                   opset=opset)


def llama_torchscript_dynamic(*, opset: int = 17) -> onnx.ModelProto:
    """TorchScript with dynamic axes: rotate_half's x.shape[-1] // 2 as Shape, Gather, Div, Unsqueeze."""
    b = Block()
    cos, sin = cached_cos_sin(b, HEAD_DIM, batch="batch")
    out = _rotate_half_of_computed_width(b, heads(b, "q", batch="batch"), cos, sin)
    return b.model([(out, ["batch", HEADS, SEQ, HEAD_DIM])], opset=opset)


def _rotate_half_of_computed_width(b: Block, x: str, cos: str, sin: str) -> str:
    """rotate_half with its Slice bounds x.shape[-1] // 2, computed as TorchScript writes them."""
    last = b.op("Gather", "q/last", b.op("Shape", "q/shape", x), b.const("q/three", 3, np.int64), axis=0)
    half = b.op("Unsqueeze", "q/half_1d", b.op("Div", "q/half", last, b.const("q/two", 2, np.int64)),
                b.const("q/zero", [0], np.int64))
    x_cos = b.op("Mul", "q/mul_cos", x, cos)
    x1 = b.op("Slice", "q/x1", x, b.const("q/start", [0], np.int64), half, b.const("q/axis", [3], np.int64))
    x2 = b.op("Slice", "q/x2", x, half, b.const("q/end", [INT64_MAX], np.int64), b.const("q/axis2", [3], np.int64))
    rotated = b.op("Concat", "q/rotate", b.op("Neg", "q/neg", x2), x1, axis=-1)
    return b.op("Add", "q/add", x_cos, b.op("Mul", "q/mul_sin", rotated, sin))


def llama_torchscript_heads(*, opset: int = 17) -> onnx.ModelProto:
    """TorchScript with batch and sequence dynamic: q's heads split by Reshape to Concat(batch, seq, H, D) computed
    from its Shape (shape inference then knows no dim of the heads), the Slice bounds x.shape[-1] // 2."""
    b = Block()
    cos, sin = cached_cos_sin(b, HEAD_DIM, batch="batch", seq="seq")
    flat = b.input("q", ["batch", "seq", HEADS * HEAD_DIM])
    pieces = [b.op("Unsqueeze", f"q/dim{axis}", b.op("Gather", f"q/gather{axis}", b.op("Shape", f"q/shape{axis}", flat),
                                                      b.const(f"q/at{axis}", axis, np.int64), axis=0),
                   b.const(f"q/axes{axis}", [0], np.int64)) for axis in (0, 1)]
    target = b.op("Concat", "q/heads_shape", *pieces, b.const("q/heads_n", [HEADS], np.int64),
                  b.const("q/head_dim", [HEAD_DIM], np.int64), axis=0)
    x = b.op("Transpose", "q/transpose", b.op("Reshape", "q/view", flat, target), perm=[0, 2, 1, 3])
    out = _rotate_half_of_computed_width(b, x, cos, sin)
    return b.model([(out, ["batch", HEADS, "seq", HEAD_DIM])], opset=opset)


def phi2_partial(*, opset: int = 18, rotary_dim: int = 4, batch="batch") -> onnx.ModelProto:
    """Phi-2: the first rotary_dim channels rotated, the rest concatenated after (dynamo, symbolic batch)."""
    b = Block(cast_like=True)
    cos, sin = computed_cos_sin(b, rotary_dim)
    q = heads(b, "q", batch=batch)
    rot = b.slice("q/x_rot", q, 0, rotary_dim)
    rest = b.slice("q/x_pass", q, rotary_dim, INT64_MAX)
    out = b.op("Concat", "q/cat", rotate_half(b, "q", rot, cos, sin, rotary_dim), rest, axis=-1)
    return b.model([(out, [batch, HEADS, SEQ, HEAD_DIM])], opset=opset)


def gptj(*, opset: int = 18, rotary_dim: int = HEAD_DIM, sequence: bool = False,
         stack_axis: int = -1) -> onnx.ModelProto:
    """GPT-J: q [B, S, H, D] rotated interleaved before its heads are transposed; partial when rotary_dim < D."""
    b = Block(constant_nodes=False)
    cos, sin = gptj_cos_sin(b, rotary_dim)
    q = heads(b, "q", transpose=False)
    rot = q if rotary_dim == HEAD_DIM else b.slice("q/x_rot", q, 0, rotary_dim)
    shape = [BATCH, SEQ, HEADS, rotary_dim]
    out = rotate_every_two(b, "q", rot, cos, sin, shape, sequence=sequence, stack_axis=stack_axis)
    if rotary_dim < HEAD_DIM:
        out = b.op("Concat", "q/cat", out, b.slice("q/x_pass", q, rotary_dim, INT64_MAX), axis=-1)
    return b.model([(out, [BATCH, SEQ, HEADS, HEAD_DIM])], opset=opset)


def constant_tables(*, opset: int = 18) -> onnx.ModelProto:
    """cos and sin as constants [1, 1, S, D] (fold-constants' result where the positions are constant too)."""
    b = Block(constant_nodes=False)
    angles = np.outer(np.arange(SEQ), 1.0 / (10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM)))
    emb = np.concatenate([angles, angles], -1)[None, None]
    cos, sin = b.const("cos_table", np.cos(emb)), b.const("sin_table", np.sin(emb))
    out = rotate_half(b, "q", heads(b, "q"), cos, sin, HEAD_DIM)
    return b.model([(out, [BATCH, HEADS, SEQ, HEAD_DIM])], opset=opset)


def odd_width(*, opset: int = 18) -> onnx.ModelProto:
    """x of 7 channels "rotated" as x[..., 3:] and x[..., :3]: no rotation has an odd width."""
    b = Block()
    x = b.input("q", [1, HEADS, SEQ, 7])
    out = rotate_half(b, "q", x, b.input("cos", [1, 1, SEQ, 7]), b.input("sin", [1, 1, SEQ, 7]), 7)
    return b.model([(out, [1, HEADS, SEQ, 7])], opset=opset)


def behind_a_contrib_op(*, opset: int = 18) -> onnx.ModelProto:
    """q projected from a com.microsoft SkipSimplifiedLayerNormalization (an earlier fusion's), where ONNX shape
    inference stops: only the Reshape to heads says what q is."""
    b = Block(cast_like=True)
    cos, sin = computed_cos_sin(b, HEAD_DIM)
    hidden = HEADS * HEAD_DIM
    b.inits.append(init("norm_weight", rng.uniform(0.5, 1.5, hidden).astype(np.float32)))
    b.inits.append(init("q_weight", rng.normal(0, 0.2, (hidden, hidden)).astype(np.float32)))
    normed = b.input("h", [1, SEQ, hidden])
    b.nodes.append(helper.make_node("SkipSimplifiedLayerNormalization", [normed, normed, "norm_weight"], ["norm"],
                                    name="norm", domain="com.microsoft", epsilon=1e-5))
    projected = b.op("MatMul", "q/proj", "norm", "q_weight")
    split = b.op("Reshape", "q/view", projected, b.const("q/heads", [1, SEQ, HEADS, HEAD_DIM], np.int64))
    x = b.op("Transpose", "q/transpose", split, perm=[0, 2, 1, 3])
    out = rotate_half(b, "q", x, cos, sin, HEAD_DIM)
    return b.model([(out, [1, HEADS, SEQ, HEAD_DIM])], opset=opset)


def cos_sin_from_inputs(*, opset: int = 18) -> onnx.ModelProto:
    """cos and sin handed in by the caller ([1, S, D], unsqueezed): nothing shows that their halves repeat."""
    b = Block()
    cos, sin = (b.op("Unsqueeze", f"{name}_4d", b.input(name, [1, SEQ, HEAD_DIM]),
                     b.const(f"{name}_axis", [1], np.int64))
                for name in ("cos", "sin"))
    out = rotate_half(b, "q", heads(b, "q"), cos, sin, HEAD_DIM)
    return b.model([(out, [BATCH, HEADS, SEQ, HEAD_DIM])], opset=opset)


def per_batch_positions(*, opset: int = 18) -> onnx.ModelProto:
    """cos/sin computed from position ids [batch, S] of a symbolic batch (left padding): one table per batch row."""
    b = Block(cast_like=True)
    positions = b.input("position_ids", ["batch", SEQ], TensorProto.INT64)
    inv_freq = 1.0 / (10000 ** (np.arange(0, HEAD_DIM, 2) / HEAD_DIM))
    as_float = b.op("Cast", "rope/to_float", b.op("Unsqueeze", "rope/unsqueeze_pos", positions,
                                                   b.const("rope/axis1", [1], np.int64)), to=TensorProto.FLOAT)
    freqs = b.op("MatMul", "rope/matmul", b.const("rope/inv_freq", inv_freq.reshape(1, -1, 1)), as_float)
    emb = b.op("Concat", "rope/cat", *[b.op("Transpose", "rope/transpose", freqs, perm=[0, 2, 1])] * 2, axis=-1)
    cos, sin = (b.op("Unsqueeze", f"rope/{op}_4d", b.op(op, f"rope/{op}", emb),
                     b.const(f"rope/{op}_axis", [1], np.int64))
                for op in ("Cos", "Sin"))
    out = rotate_half(b, "q", heads(b, "q", batch="batch"), cos, sin, HEAD_DIM)
    return b.model([(out, ["batch", HEADS, SEQ, HEAD_DIM])], opset=opset)


def uneven_halves(*, opset: int = 18) -> onnx.ModelProto:
    """x1 = x[..., :3] of 8 channels: not the halves a rotation takes."""
    b = Block()
    cos, sin = computed_cos_sin(b, HEAD_DIM)
    x = heads(b, "q", batch=1)
    x_cos = b.op("Mul", "q/mul_cos", x, cos)
    x1 = b.slice("q/x1", x, 0, 3)
    x2 = b.slice("q/x2", x, 3, INT64_MAX)
    rotated = b.op("Concat", "q/rotate", b.op("Neg", "q/neg", x2), x1, axis=-1)
    out = b.op("Add", "q/add", x_cos, b.op("Mul", "q/mul_sin", rotated, sin))
    return b.model([(out, [1, HEADS, SEQ, HEAD_DIM])], opset=opset)


def unknown_head_dim(*, opset: int = 18) -> onnx.ModelProto:
    """x given as [1, H, S, ?]: the width the Slices halve is unknown."""
    b = Block()
    cos, sin = computed_cos_sin(b, HEAD_DIM)
    x = b.input("q", [1, HEADS, SEQ, "head_dim"])
    out = rotate_half(b, "q", x, cos, sin, HEAD_DIM)
    return b.model([(out, [1, HEADS, SEQ, "head_dim"])], opset=opset)
