"""Multi-head attention blocks as exporters write them, built with ``onnx.helper`` for the tests.

One :class:`AttentionForm` describes a block: how Q, K and V are projected (separately, or one
packed projection cut by Slice or Split), how the heads are split (a constant shape, or a Concat of
shape pieces as TorchScript computes it), how Kᵀ is made, where the scale is, which mask is applied,
and how the heads are merged. The nodes the tests look for have fixed names: ``scores``,
``softmax``, ``context``, ``merge``, ``out`` (the merging Reshape), ``mask``, ``q_split``...

The forms follow real exports: TorchScript BERT-like encoders (packed QKV, Kᵀ by one Transpose
[0, 2, 3, 1], Mul by 0.125 after the scores, an added bias), HF eager attention (K transposed on its
own, Div by √d), torch.export decoders (Kᵀ by Reshape/Transpose/Reshape, √scale on Q and on Kᵀ,
CastLike-typed constants, a causal mask), TorchScript's scaled_dot_product_attention (the scale
computed from Q's shape) and GPT-2 (a causal Where).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, make_model, tensor

BATCH, SEQ, HEADS, HEAD_SIZE = 2, 5, 4, 8
HIDDEN = HEADS * HEAD_SIZE
PAST = 3
SCALE = 1 / np.sqrt(HEAD_SIZE)


@dataclass(frozen=True)
class AttentionForm:
    qkv: str = "separate"
    """separate | packed_slice | packed_split"""
    bias: bool = True
    split_shape: str = "const"
    """const | concat (shape pieces) | minus_one (heads as -1) | computed (the head count computed)"""
    kt: str = "perm0231"
    """perm0231 | transpose (heads split, then [0, 1, 3, 2]) | dynamo (Reshape/Transpose/Reshape)"""
    scale: str = "mul_after"
    """mul_after | div_after | mul_q | div_q | split | torchscript | none | castlike | input (a graph input) |
    unscaled (T5: no scale anywhere)"""
    mask: str = "none"
    """none | add | add_rows (one row, [B, 1, 1, S]) | add_column ([B, 1, S, 1]) | causal_const | trilu |
    trilu_dynamic | where_causal | where_trilu | where_bool | masked_fill | where_zero | padding (HF's bias from
    attention_mask [batch, keys]: (1 - mask) · lowest, unsqueezed to [batch, 1, 1, keys]) | add_heads (T5's position
    bias, one per head, [1, H, S, S]) | sdpa_bool (TorchScript's
    scaled_dot_product_attention with a boolean mask: Where(keep, 0, -inf) added, NaN rows zeroed after the
    Softmax by Where(IsNaN(p), 0, p))"""
    q: str = "proj"
    """proj | rotary (Q and K rotated in heads layout, by element-wise Muls and an Add) | rope (Q and K rotated
    in heads layout by rotate-half with constant cos and sin, as fuse-rotary fuses it)"""
    past: bool = False
    """K and V concatenated after a cache given as graph inputs; the concatenations are graph outputs"""
    softmax_axis: int = -1
    softmax_casts: bool = False
    """T5's softmax(scores.float()).type_as(scores): a Cast to float before the Softmax and after it"""
    dropout: str = "none"
    """none | inference (torch.export's Dropout after the Softmax) | training (its training_mode a graph input)"""
    merge: str = "const"
    """const | concat | rows (a 2-D [B·S, hidden] Reshape)"""
    kv_heads: int = HEADS
    repeat_kv: bool = False
    """K and V heads repeated up to Q's (HF's repeat_kv: Unsqueeze, Expand, Reshape) for grouped-query attention"""
    layers: int = 1
    symbolic: bool = False
    """x declared [batch, seq, hidden], as TorchScript exports with dynamic axes: shape inference then knows no
    dim of a heads split whose shape is computed"""
    opset: int = 17
    probs_output: bool = False
    """the attention probabilities are also a graph output"""
    scores_output: bool = False


class _Builder:
    def __init__(self, form: AttentionForm) -> None:
        self.form = form
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        dims = ["batch", "seq", HIDDEN] if form.symbolic else [BATCH, SEQ, HIDDEN]
        self.inputs = [tensor("x", TensorProto.FLOAT, dims)]
        self.outputs: list[onnx.ValueInfoProto] = []
        self.rng = np.random.default_rng(5)
        self.prefix = ""

    def node(self, op: str, inputs: list[str], name: str, outputs: int = 1, **attrs) -> str | list[str]:
        full = f"{self.prefix}{name}"
        outs = [full] if outputs == 1 else [f"{full}_{i}" for i in range(outputs)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=full, **attrs))
        return outs[0] if outputs == 1 else outs

    def const(self, value, name: str, dtype=np.float32) -> str:
        full = f"{self.prefix}{name}"
        self.inits.append(init(full, np.asarray(value, dtype)))
        return full

    def constant_node(self, value, name: str, dtype=np.float32) -> str:
        """A Constant node, as TorchScript writes scalars."""
        full = f"{self.prefix}{name}"
        self.nodes.append(helper.make_node("Constant", [], [full], name=f"{full}_node",
                                           value=init(full, np.asarray(value, dtype))))
        return full

    def weight(self, shape, name: str) -> str:
        return self.const(self.rng.normal(0, 0.3, shape), name)


def build(form: AttentionForm) -> onnx.ModelProto:
    """The model: ``x`` through ``form.layers`` attention blocks (each with an output projection)."""
    b = _Builder(form)
    hidden = "x"
    for layer in range(form.layers):
        b.prefix = f"l{layer}/" if form.layers > 1 else ""
        hidden = _block(b, hidden)
    b.outputs.insert(0, tensor(hidden, TensorProto.FLOAT, ["batch", "seq", HIDDEN] if form.symbolic else
                               [BATCH, SEQ, HIDDEN]))
    opset = form.opset
    return make_model(b.nodes, b.inputs, b.outputs, b.inits, opset=opset)


def _block(b: _Builder, x: str) -> str:
    form = b.form
    q3, k3, v3 = _projections(b, x)
    q = _heads(b, q3, "q", HEADS, transpose=True)
    rotate = {"rotary": _rotate, "rope": _rope}.get(form.q)
    if rotate is not None:
        q = rotate(b, q, "q")
    if form.kt == "perm0231" and not form.past and rotate is None:
        kt = b.node("Transpose", [_heads(b, k3, "k", form.kv_heads, transpose=False)], "kt", perm=[0, 2, 3, 1])
    else:
        k = _heads(b, k3, "k", form.kv_heads, transpose=True)
        if rotate is not None:
            k = rotate(b, k, "k")
        if form.past:
            b.inputs.append(tensor(f"{b.prefix}past_k", TensorProto.FLOAT, [BATCH, form.kv_heads, PAST, HEAD_SIZE]))
            k = b.node("Concat", [f"{b.prefix}past_k", k], "present_k", axis=2)
            b.outputs.append(tensor(k, TensorProto.FLOAT, [BATCH, form.kv_heads, SEQ + PAST, HEAD_SIZE]))
        kt = _transpose_k(b, _repeated(b, k, "k"))
    v = _heads(b, v3, "v", form.kv_heads, transpose=True)
    if form.past:
        b.inputs.append(tensor(f"{b.prefix}past_v", TensorProto.FLOAT, [BATCH, form.kv_heads, PAST, HEAD_SIZE]))
        v = b.node("Concat", [f"{b.prefix}past_v", v], "present_v", axis=2)
        b.outputs.append(tensor(v, TensorProto.FLOAT, [BATCH, form.kv_heads, SEQ + PAST, HEAD_SIZE]))
    v = _repeated(b, v, "v")
    scores = _scaled_scores(b, q, kt)
    masked = _mask(b, scores)
    if form.softmax_casts:
        masked = b.node("Cast", [masked], "softmax_float", to=TensorProto.FLOAT)
    probs = b.node("Softmax", [masked], "softmax", axis=form.softmax_axis)
    if form.softmax_casts:
        probs = b.node("Cast", [probs], "softmax_type_as", to=TensorProto.FLOAT)
    if form.mask == "sdpa_bool":
        zero = b.constant_node([0.0], "nan_zero")
        probs = b.node("Where", [b.node("IsNaN", [probs], "softmax_nan"), zero, probs], "softmax_guard")
    if form.probs_output:
        b.outputs.append(tensor(probs, TensorProto.FLOAT, [BATCH, HEADS, SEQ, _keys(form)]))
    if form.dropout != "none":
        inputs = [probs, b.const(0.1, "dropout_ratio")]
        if form.dropout == "training":
            b.inputs.append(tensor("training", TensorProto.BOOL, []))
            inputs.append("training")
        probs = b.node("Dropout", inputs, "dropout", outputs=2)[0]
    context = b.node("MatMul", [probs, v], "context")
    merged = b.node("Transpose", [context], "merge", perm=[0, 2, 1, 3])
    out = b.node("Reshape", [merged, _merge_shape(b, x)], "out")
    projected = b.node("MatMul", [out, b.weight((HIDDEN, HIDDEN), "w_o")], "o_proj")
    if form.merge != "rows":
        return projected
    return b.node("Reshape", [projected, b.const([BATCH, SEQ, HIDDEN], "rows_back", np.int64)], "o_rows")


def _projections(b: _Builder, x: str) -> tuple[str, str, str]:
    form = b.form
    kv_width = form.kv_heads * HEAD_SIZE
    if form.qkv == "separate":
        outs = []
        for name, width in (("q", HIDDEN), ("k", kv_width), ("v", kv_width)):
            proj = b.node("MatMul", [x, b.weight((HIDDEN, width), f"w_{name}")], f"{name}_proj")
            if form.bias:
                proj = b.node("Add", [b.weight((width,), f"b_{name}"), proj], f"{name}_bias")
            outs.append(proj)
        q3, k3, v3 = outs
    else:
        width = HIDDEN + 2 * kv_width
        qkv = b.node("MatMul", [x, b.weight((HIDDEN, width), "w_qkv")], "qkv_proj")
        if form.bias:
            qkv = b.node("Add", [b.weight((width,), "b_qkv"), qkv], "qkv_bias")
        bounds = [0, HIDDEN, HIDDEN + kv_width, width]
        if form.qkv == "packed_split":
            split = b.const([HIDDEN, kv_width, kv_width], "split_sizes", np.int64)
            q3, k3, v3 = b.node("Split", [qkv, split], "qkv_split", outputs=3, axis=2)
        else:
            q3, k3, v3 = (
                b.node("Slice", [qkv, b.const([lo], f"{n}_start", np.int64), b.const([hi], f"{n}_end", np.int64),
                                 b.const([2], f"{n}_axis", np.int64)], f"{n}_slice")
                for n, lo, hi in zip("qkv", bounds, bounds[1:])
            )
    if form.scale == "none":
        q3 = b.node("Mul", [q3, b.constant_node(SCALE, "q_prescale")], "q_prescaled")
    return q3, k3, v3


def _heads(b: _Builder, flat: str, name: str, heads: int, *, transpose: bool) -> str:
    split = b.node("Reshape", [flat, _split_shape(b, flat, name, heads)], f"{name}_split")
    return b.node("Transpose", [split], f"{name}_heads", perm=[0, 2, 1, 3]) if transpose else split


def _split_shape(b: _Builder, flat: str, name: str, heads: int) -> str:
    form = b.form.split_shape
    if form == "const":
        return b.const([BATCH, SEQ, heads, HEAD_SIZE], f"{name}_shape", np.int64)
    batch, seq = _shape_piece(b, flat, 0, f"{name}_batch"), _shape_piece(b, flat, 1, f"{name}_seq")
    if form == "computed":  # heads = hidden // head_size, computed from the projection's shape
        width = b.node("Gather",
                       [b.node("Shape", [flat], f"{name}_width_shape"), b.const([2], f"{name}_width_at", np.int64)],
                       f"{name}_width", axis=0)
        count = b.node("Div", [width, b.const([HEAD_SIZE], f"{name}_size", np.int64)], f"{name}_count")
        return b.node("Concat", [batch, seq, count, b.const([HEAD_SIZE], f"{name}_size2", np.int64)], f"{name}_shape",
                      axis=0)
    heads_entry = -1 if form == "minus_one" else heads
    pieces = [batch, seq, b.constant_node([heads_entry], f"{name}_heads_n", np.int64),
              b.constant_node([HEAD_SIZE], f"{name}_size", np.int64)]
    return b.node("Concat", pieces, f"{name}_shape", axis=0)


def _shape_piece(b: _Builder, x: str, axis: int, name: str) -> str:
    """Unsqueeze(Gather(Shape(x), axis)): one dim of x, as TorchScript computes a view's shape."""
    dim = b.node("Gather", [b.node("Shape", [x], f"{name}_shape"), b.constant_node(axis, f"{name}_at", np.int64)],
                 f"{name}_dim", axis=0)
    return b.node("Unsqueeze", [dim, b.const([0], f"{name}_axes", np.int64)], f"{name}_piece")


def _rotate(b: _Builder, heads: str, name: str) -> str:
    """x·cos + x·sin with [S, D] tables: a stand-in for a rotary embedding applied in heads layout."""
    cos = b.const(np.cos(b.rng.normal(size=(SEQ, HEAD_SIZE))), f"{name}_cos")
    sin = b.const(np.sin(b.rng.normal(size=(SEQ, HEAD_SIZE))), f"{name}_sin")
    return b.node("Add", [b.node("Mul", [heads, cos], f"{name}_rot_cos"),
                          b.node("Mul", [heads, sin], f"{name}_rot_sin")], f"{name}_rotated")


def _rope(b: _Builder, heads: str, name: str) -> str:
    """x·cos + Concat(−x[..., D/2:], x[..., :D/2])·sin, cos and sin [1, 1, S, D] for positions after the cache."""
    half = HEAD_SIZE // 2
    positions = np.arange(SEQ) + (PAST if b.form.past else 0)
    angles = np.outer(positions, 1.0 / (10000 ** (np.arange(half) / half)))
    emb = np.concatenate([angles, angles], -1).reshape(1, 1, SEQ, HEAD_SIZE)
    x1 = b.node("Slice",
                [heads, b.const([0], f"{name}_x1_start", np.int64), b.const([half], f"{name}_x1_end", np.int64),
                          b.const([-1], f"{name}_x1_axis", np.int64)], f"{name}_x1")
    x2 = b.node("Slice", [heads, b.const([half], f"{name}_x2_start", np.int64),
                          b.const([np.iinfo(np.int64).max], f"{name}_x2_end", np.int64),
                          b.const([-1], f"{name}_x2_axis", np.int64)], f"{name}_x2")
    rotated = b.node("Concat", [b.node("Neg", [x2], f"{name}_neg"), x1], f"{name}_rotate_half", axis=-1)
    x_cos = b.node("Mul", [heads, b.const(np.cos(emb), f"{name}_cos")], f"{name}_rot_cos")
    return b.node("Add", [x_cos, b.node("Mul", [rotated, b.const(np.sin(emb), f"{name}_sin")], f"{name}_rot_sin")],
                  f"{name}_rotated")


def _repeated(b: _Builder, heads: str, name: str) -> str:
    """[B, kv, T, D] → [B, H, T, D] by Unsqueeze(2), Expand to [B, kv, H/kv, T, D] and Reshape, as HF's repeat_kv."""
    form = b.form
    if not form.repeat_kv:
        return heads
    keys, groups = _keys(form), HEADS // form.kv_heads
    wide = b.node("Unsqueeze", [heads, b.const([2], f"{name}_repeat_axis", np.int64)], f"{name}_repeat_unsqueeze")
    grown = b.node("Expand", [wide, b.const([BATCH, form.kv_heads, groups, keys, HEAD_SIZE], f"{name}_repeat_shape",
                                            np.int64)], f"{name}_repeat_expand")
    return b.node("Reshape", [grown, b.const([BATCH, HEADS, keys, HEAD_SIZE], f"{name}_repeated_shape", np.int64)],
                  f"{name}_repeated")


def _keys(form: AttentionForm) -> int:
    return SEQ + PAST if form.past else SEQ


def _transpose_k(b: _Builder, k: str) -> str:
    if b.form.kt == "dynamo":
        keys = _keys(b.form)
        flat = b.node("Reshape", [k, b.const([-1, keys, HEAD_SIZE], "k_3d", np.int64)], "k_flat")
        flat_t = b.node("Transpose", [flat], "k_flat_t", perm=[0, 2, 1])
        return b.node("Reshape", [flat_t, b.const([BATCH, b.form.kv_heads, HEAD_SIZE, keys], "kt_shape", np.int64)],
                      "kt")
    return b.node("Transpose", [k], "kt", perm=[0, 1, 3, 2])


def _scaled_scores(b: _Builder, q: str, kt: str) -> str:
    scale = b.form.scale
    if scale in ("mul_q", "div_q"):
        factor = SCALE if scale == "mul_q" else 1 / SCALE
        q = b.node(scale[:3].capitalize(), [q, b.constant_node(factor, "q_scale")], "q_scaled")
    elif scale == "split":
        root = b.constant_node(np.sqrt(SCALE), "root_scale")
        q = b.node("Mul", [q, root], "q_scaled")
        kt = b.node("Mul", [kt, b.node("CastLike", [b.const(np.sqrt(SCALE), "root_scale_k"), kt], "root_scale_cast")],
                    "kt_scaled")
    elif scale == "torchscript":
        root = _torchscript_root_scale(b, q)
        q = b.node("Mul", [q, root], "q_scaled")
        kt = b.node("Mul", [kt, root], "kt_scaled")
    scores = b.node("MatMul", [q, kt], "scores")
    if b.form.scores_output:
        b.outputs.append(tensor(scores, TensorProto.FLOAT, [BATCH, HEADS, SEQ, _keys(b.form)]))
    if scale == "mul_after":
        return b.node("Mul", [scores, b.constant_node(SCALE, "scale")], "scaled")
    if scale == "div_after":
        return b.node("Div", [scores, b.constant_node(1 / SCALE, "scale")], "scaled")
    if scale == "castlike":
        return b.node("Mul", [scores, b.node("CastLike", [b.const(SCALE, "scale"), scores], "scale_cast")], "scaled")
    if scale == "input":
        b.inputs.append(tensor("temperature", TensorProto.FLOAT, []))
        return b.node("Mul", [scores, "temperature"], "scaled")
    return scores


def _torchscript_root_scale(b: _Builder, q: str) -> str:
    """√(1/√d) with d read off Q's shape, as torch.onnx writes scaled_dot_product_attention."""
    last = b.node("Slice", [b.node("Shape", [q], "q_dims"), b.const([-1], "last", np.int64),
                            b.const([np.iinfo(np.int64).max], "end", np.int64)], "q_last_dim")
    size = b.node("Cast", [last], "q_last_dim_float", to=TensorProto.FLOAT)
    inverse = b.node("Div", [b.constant_node(1.0, "one"), b.node("Sqrt", [size], "root_size")], "inverse_root")
    return b.node("Sqrt", [b.node("Cast", [inverse], "inverse_root_float", to=TensorProto.FLOAT)], "root_scale")


def _mask(b: _Builder, scores: str) -> str:
    mask = b.form.mask
    if mask == "none":
        return scores
    keys = _keys(b.form)
    causal = np.triu(np.full((SEQ, keys), -np.inf, np.float32), 1)
    lower = np.tril(np.ones((SEQ, keys), bool))
    if mask in ("add", "add_rows", "add_column", "add_heads"):
        shape = {"add": [BATCH, 1, SEQ, keys], "add_rows": [BATCH, 1, 1, keys], "add_column": [BATCH, 1, SEQ, 1],
                 "add_heads": [1, HEADS, SEQ, keys]}[mask]
        b.inputs.append(tensor(f"{b.prefix}attention_bias", TensorProto.FLOAT, shape))
        bias = f"{b.prefix}attention_bias"
    elif mask == "causal_const":
        bias = b.const(causal.reshape(1, 1, SEQ, keys), "causal")
    elif mask in ("trilu", "trilu_dynamic"):
        shape = b.const([SEQ, SEQ], "mask_shape", np.int64) if mask == "trilu" else _square_shape(b)
        fill = b.node("ConstantOfShape", [shape], "mask_fill", value=init("v", np.array([-np.inf], np.float32)))
        bias = b.node("Trilu", [fill, b.const(1, "diagonal", np.int64)], "causal_mask", upper=1)
    elif mask == "padding":
        if not any(i.name == "attention_mask" for i in b.inputs):
            b.inputs.append(tensor("attention_mask", TensorProto.INT64, [BATCH, keys]))
        wide = b.node("Unsqueeze", ["attention_mask", b.const([1, 2], "mask_axes", np.int64)], "mask_4d")
        hidden = b.node("Sub", [b.const(1.0, "mask_one"), b.node("Cast", [wide], "mask_float", to=TensorProto.FLOAT)],
                        "mask_hidden")
        bias = b.node("Mul", [hidden, b.const(np.finfo(np.float32).min, "mask_lowest")], "mask_bias")
    elif mask == "sdpa_bool":
        b.inputs.append(tensor(f"{b.prefix}keep", TensorProto.BOOL, [BATCH, 1, SEQ, keys]))
        bias = b.node("Where", [f"{b.prefix}keep", b.constant_node([0.0], "mask_zero"),
                                b.constant_node([-np.inf], "mask_hidden")], "mask_bias")
    else:
        return _where_mask(b, scores, lower, keys)
    return b.node("Add", [scores, bias], "mask")


def _square_shape(b: _Builder) -> str:
    seq = _shape_piece(b, "x", 1, "mask_seq")
    return b.node("Concat", [seq, seq], "mask_shape", axis=0)


def _where_mask(b: _Builder, scores: str, lower: np.ndarray, keys: int) -> str:
    mask = b.form.mask
    lowest = np.float32(np.finfo(np.float32).min)
    if mask == "where_causal":  # GPT-2: torch.where(causal, scores, lowest)
        cond = b.const(lower.reshape(1, 1, SEQ, keys), "causal", np.bool_)
    elif mask == "where_trilu":
        ones = b.node("ConstantOfShape", [b.const([SEQ, SEQ], "mask_shape", np.int64)], "mask_ones",
                      value=init("v", np.array([True])))
        cond = b.node("Trilu", [ones], "causal_mask", upper=0)
    else:
        b.inputs.append(tensor(f"{b.prefix}keep", TensorProto.BOOL, [BATCH, 1, 1, keys]))
        cond = f"{b.prefix}keep"
    fill = b.constant_node(0.0 if mask == "where_zero" else lowest, "fill")
    if mask == "masked_fill":  # scores.masked_fill(hidden, lowest): the scores in the last slot
        hidden = b.node("Not", [cond], "hidden")
        return b.node("Where", [hidden, fill, scores], "mask")
    return b.node("Where", [cond, scores, fill], "mask")


def _merge_shape(b: _Builder, x: str) -> str:
    merge = b.form.merge
    if merge == "rows":
        return b.const([BATCH * SEQ, HIDDEN], "merged_shape", np.int64)
    if merge == "concat":
        pieces = [_shape_piece(b, x, 0, "out_batch"), _shape_piece(b, x, 1, "out_seq"),
                  b.const([HIDDEN], "out_width", np.int64)]
        return b.node("Concat", pieces, "merged_shape", axis=0)
    return b.const([BATCH, SEQ, HIDDEN], "merged_shape", np.int64)


def inputs_for(model: onnx.ModelProto, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs that keep every query row with at least one visible key (a fully hidden row is where
    Where and an added bias legitimately differ)."""
    rng = np.random.default_rng(seed)
    feeds: dict[str, np.ndarray] = {}
    for value in model.graph.input:
        shape = [d.dim_value or {"batch": BATCH, "seq": SEQ}[d.dim_param] for d in value.type.tensor_type.shape.dim]
        if value.name == "attention_mask":  # 1s, the second sequence padded at its end
            mask = np.ones(shape, np.int64)
            mask[1:, -2:] = 0
            feeds[value.name] = mask
        elif value.type.tensor_type.elem_type == TensorProto.BOOL:
            keep = rng.random(shape) > 0.3
            keep[..., 0] = True
            feeds[value.name] = keep
        else:
            feeds[value.name] = rng.normal(size=shape).astype(np.float32)
    return feeds


def variant(**changes) -> AttentionForm:
    return replace(AttentionForm(), **changes)
