"""Box text for fused transformer operators: what the op does with its settings, in a few words.

One fused node stands for a dozen exported ones, so its box says what they did:
``16 heads × 64 dims · causal``, ``rotates 32 of 64 dims · interleaved``, ``RMS ε 1e-06``, and
which optional inputs other nodes feed (``+mask``, ``+past kv``), since those are the settings to
check when a fused model disagrees with the original; constant ones have their own line, as
every op's constant inputs do (``bias ⟨3072⟩``). It covers ONNX's own ops (Attention,
RotaryEmbedding, RMSNormalization, LayerNormalization, Gelu) and onnxruntime's contrib ops in
``com.microsoft``, plus SimplifiedLayerNormalization, which onnxruntime registers in the default
domain. Head sizes come from the declared or inferred input shapes, and are left out when unknown.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from graphlens.core.node import Node
from graphlens.core.types import dtype_name

MS_DOMAIN = "com.microsoft"
SEP = " · "

CONTRIB_INPUTS: dict[tuple[str, str], tuple[str, ...]] = {
    (MS_DOMAIN, "MultiHeadAttention"): (
        "query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value",
        "past_sequence_length", "cache_indirection",
    ),
    (MS_DOMAIN, "Attention"): (
        "input", "weights", "bias", "mask_index", "past", "attention_bias", "past_sequence_length",
    ),
    (MS_DOMAIN, "GroupQueryAttention"): (
        "query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length",
        "cos_cache", "sin_cache", "position_ids", "attention_bias", "head_sink",
    ),
    (MS_DOMAIN, "RotaryEmbedding"): ("input", "position_ids", "cos_cache", "sin_cache"),
    (MS_DOMAIN, "SkipLayerNormalization"): ("input", "skip", "gamma", "beta", "bias"),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): ("input", "skip", "gamma", "bias"),
    (MS_DOMAIN, "SimplifiedLayerNormalization"): ("X", "scale"),
    ("", "SimplifiedLayerNormalization"): ("X", "scale"),
    (MS_DOMAIN, "BiasGelu"): ("A", "B"),
    (MS_DOMAIN, "FastGelu"): ("X", "bias"),
    (MS_DOMAIN, "Gelu"): ("X",),
    (MS_DOMAIN, "QuickGelu"): ("X",),
    (MS_DOMAIN, "MatMulNBits"): ("A", "B", "scales", "zero_points", "g_idx", "bias"),
    (MS_DOMAIN, "EmbedLayerNormalization"): (
        "input_ids", "segment_ids", "word_embedding", "position_embedding", "segment_embedding", "gamma", "beta",
        "mask", "position_ids",
    ),
}
"""Input names of onnxruntime's operators, which ONNX's schema registry does not know."""

_QK_OUTPUT = {0: "QKᵀ out", 1: "QKᵀ+mask out", 2: "softcapped QKᵀ out", 3: "softmax out"}
_A = onnx.AttributeProto


def _number(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def _set(a: dict[str, object], name: str, words: str) -> list[str]:
    """``scale 0.125`` when the attribute is set and not zero (zero means "the default" for these)."""
    value = a.get(name)
    return [f"{words} {_number(value)}"] if value else []


def _attributes(node: Node) -> dict[str, object]:
    """Scalar and string attributes straight from the protobuf (see :mod:`graphlens.layout.labels`)."""
    values: dict[str, object] = {}
    for attr in node.proto.attribute:
        if attr.type == _A.INT:
            values[attr.name] = int(attr.i)
        elif attr.type == _A.FLOAT:
            values[attr.name] = float(attr.f)
        elif attr.type == _A.STRING:
            values[attr.name] = attr.s.decode("utf-8", errors="replace")
    return values


def _wired(node: Node, slot: int) -> bool:
    return slot < len(node.inputs) and bool(node.inputs[slot])


def _drawn_in_box(node: Node, slot: int) -> bool:
    """A constant input: the box already names it on a line of its own (``bias ⟨3072⟩``)."""
    graph, tensor = node.graph, node.inputs[slot]
    return graph is not None and (tensor in graph.initializers or graph.is_constant(tensor))


def _marks(node: Node, names: dict[int, str]) -> list[str]:
    """``+mask``, ``+past kv``: the optional inputs this node reads from other nodes, each name once."""
    wired = (name for slot, name in names.items() if _wired(node, slot) and not _drawn_in_box(node, slot))
    return list(dict.fromkeys(f"+{name}" for name in wired))


def _shape(node: Node, slot: int) -> list[object] | None:
    graph = node.graph
    if graph is None or not _wired(node, slot):
        return None
    shape = graph.tensor_type(node.inputs[slot]).shape
    return list(shape) if shape is not None else None


def _head_size(shape: list[object] | None, heads_in_last_dim: int | None) -> int | None:
    """Last dimension of a 4-D or 5-D (packed) input, or a 3-D hidden size split over its heads."""
    if not shape or not isinstance(shape[-1], int):
        return None
    if len(shape) in (4, 5):
        return shape[-1]
    if len(shape) == 3 and heads_in_last_dim and shape[-1] % heads_in_last_dim == 0:
        return shape[-1] // heads_in_last_dim
    return None


def _heads(q_heads: object, kv_heads: object = None, head_size: int | None = None) -> str:
    """``16 heads × 64 dims``, or ``q 32 · kv 8 heads`` when keys and values have fewer heads."""
    size = f" × {head_size} dims" if head_size else ""
    if kv_heads and kv_heads != q_heads:
        return f"q {q_heads}{SEP}kv {kv_heads} heads{size}"
    return f"{q_heads} heads{size}"


def _int(value: object) -> int:
    """An integer attribute; 0 (unset) for one a malformed model stored with another type."""
    return value if isinstance(value, int) else 0


# ------------------------------------------------------------- attention
def _multi_head_attention(node: Node, a: dict[str, object]) -> list[str]:
    heads = _int(a.get("num_heads"))
    head = _head_size(_shape(node, 0), heads) or _head_size(_shape(node, 1), heads)  # key: 3-D or 4-D
    parts = [_heads(heads, None, head)] if heads else []
    parts += _set(a, "scale", "scale")
    if a.get("unidirectional"):
        parts.append("causal")
    if not _wired(node, 1):
        parts.append("packed QKV")
    elif not _wired(node, 2):
        parts.append("packed KV")
    parts += _marks(node, {3: "bias", 4: "key mask", 5: "attn bias", 6: "past kv", 7: "past kv"})
    if "mask_filter_value" in a and _wired(node, 4):
        parts.append(f"mask fill {_number(a['mask_filter_value'])}")
    return parts


def _contrib_attention(node: Node, a: dict[str, object]) -> list[str]:
    """onnxruntime's Attention, which also holds the packed Q/K/V projection weights."""
    parts = [_heads(a["num_heads"])] if a.get("num_heads") else []
    parts += _set(a, "scale", "scale")
    if a.get("unidirectional"):
        parts.append("causal")
    if a.get("do_rotary"):
        parts.append("rotary")
    return parts + _marks(node, {2: "bias", 3: "mask", 4: "past kv", 5: "attn bias"})


def _attention(node: Node, a: dict[str, object]) -> list[str]:
    """ONNX Attention (opset 23): 4-D inputs carry their head counts, 3-D ones need the attributes."""
    q_heads, kv_heads = _int(a.get("q_num_heads")), _int(a.get("kv_num_heads"))
    q_shape, k_shape = _shape(node, 0), _shape(node, 1)
    if q_shape and len(q_shape) == 4:
        q_heads = q_heads or _int(q_shape[1])
        kv_heads = kv_heads or (_int(k_shape[1]) if k_shape and len(k_shape) == 4 else 0)
    parts = [_heads(q_heads, kv_heads, _head_size(q_shape, q_heads))] if q_heads else []
    parts += _set(a, "scale", "scale")
    if a.get("is_causal"):
        parts.append("causal")
    parts += _set(a, "softcap", "softcap")
    for name, words in (("left_window_size", "looks back"), ("right_window_size", "looks ahead")):
        if _int(a.get(name, -1)) >= 0:
            parts.append(f"{words} {a[name]}")
    if a.get("softmax_precision"):
        parts.append(f"softmax in {dtype_name(_int(a['softmax_precision']))}")
    parts += _marks(node, {3: "mask", 4: "past kv", 5: "past kv", 6: "kv lengths"})
    if len(node.outputs) > 3 and node.outputs[3]:
        parts.append(_QK_OUTPUT.get(_int(a.get("qk_matmul_output_mode", 0)), "QKᵀ out"))
    return parts


def _group_query_attention(node: Node, a: dict[str, object]) -> list[str]:
    heads, kv_heads = _int(a.get("num_heads")), _int(a.get("kv_num_heads"))
    packed = not _wired(node, 1)
    per_query = heads + 2 * kv_heads if packed else heads
    parts = [_heads(heads, kv_heads, _head_size(_shape(node, 0), per_query))] if heads else []
    parts += _set(a, "scale", "scale")
    parts += _set(a, "softcap", "softcap")
    if _int(a.get("local_window_size", -1)) >= 0:
        parts.append(f"local window {a['local_window_size']}")
    if a.get("do_rotary"):
        parts.append("rotary (" + ("interleaved" if a.get("rotary_interleaved") else "rotate-half") + ")")
    if a.get("smooth_softmax"):
        parts.append("smooth softmax")
    if packed:
        parts.append("packed QKV")
    return parts + _marks(node, {3: "past kv", 4: "past kv", 9: "position ids", 10: "attn bias", 11: "head sink"})


# ----------------------------------------------------------------- rotary
def _rotary(node: Node, a: dict[str, object]) -> list[str]:
    """How many dimensions of each head turn, and how they pair up: halves (GPT-NeoX) or neighbours (GPT-J)."""
    contrib = node.domain == MS_DOMAIN
    heads = _int(a.get("num_heads"))
    head = _head_size(_shape(node, 0), heads)
    rotated = _int(a.get("rotary_embedding_dim"))
    if not rotated:
        cos_shape = _shape(node, 2 if contrib else 1)
        rotated = 2 * cos_shape[-1] if cos_shape and isinstance(cos_shape[-1], int) else 0
    parts = []
    if head and rotated and rotated < head:
        parts.append(f"rotates {rotated} of {head} dims")
    elif head:
        parts.append(f"rotates all {head} dims")
    elif rotated:
        parts.append(f"rotates {rotated} dims")
    parts.append("interleaved" if a.get("interleaved") else "rotate-half")
    if heads:
        parts.append(f"{heads} heads")
    if contrib and a.get("scale", 1.0) != 1.0:
        parts.append(f"scale {_number(a['scale'])}")
    if a.get("is_packed_batching"):
        parts.append("packed batch")
    return parts if contrib else parts + _marks(node, {3: "position ids"})


# ---------------------------------------------------------- normalization
def _norm_settings(a: dict[str, object], prefix: str = "") -> list[str]:
    """``ε 1e-05`` (the default when unset: it matters when outputs differ), a non-last axis, a stash type."""
    parts = [f"{prefix}ε {_number(a.get('epsilon', 1e-5))}"]
    if _int(a.get("axis", -1)) != -1:
        parts.append(f"axis {a['axis']}")
    if a.get("stash_type", 1) != 1:
        parts.append(f"stats in {dtype_name(_int(a['stash_type']))}")
    return parts


def _skip_norm(bias_slot: int, prefix: str) -> Callable[[Node, dict[str, object]], list[str]]:
    def describe(node: Node, a: dict[str, object]) -> list[str]:
        parts = _norm_settings(a, prefix) + _marks(node, {bias_slot: "bias"})
        if len(node.outputs) > 3 and node.outputs[3]:
            parts.append("outputs x+skip")
        return parts

    return describe


def _rms_norm(node: Node, a: dict[str, object]) -> list[str]:
    return _norm_settings(a, "RMS " if node.op_type == "SimplifiedLayerNormalization" else "")


def _layer_norm(node: Node, a: dict[str, object]) -> list[str]:
    return _norm_settings(a)


# ------------------------------------------------------------- activation
def _gelu(node: Node, a: dict[str, object]) -> list[str]:
    tanh = node.op_type == "FastGelu" or a.get("approximate") == "tanh"
    parts = ["tanh approx." if tanh else "erf (exact)"]
    return parts + _marks(node, {1: "bias"}) if node.op_type == "FastGelu" else parts


def _quick_gelu(node: Node, a: dict[str, object]) -> list[str]:
    return [f"x·σ({_number(a.get('alpha', 1.702))}·x)"]


# ------------------------------------------------------------ quantized and embeddings
def _matmul_nbits(node: Node, a: dict[str, object]) -> list[str]:
    """``64×128 · 4-bit · block 32``: the weight's shape and how it is quantized (onnxruntime-genai's int4)."""
    parts = [f"{_int(a.get('K'))}×{_int(a.get('N'))}"] if a.get("K") and a.get("N") else []
    parts.append(f"{_int(a.get('bits', 4))}-bit")
    if a.get("block_size"):
        parts.append(f"block {_int(a['block_size'])}")
    if a.get("accuracy_level"):
        parts.append(f"accuracy level {_int(a['accuracy_level'])}")
    return parts + _marks(node, {3: "zero points", 5: "bias"})


def _embed_layer_norm(node: Node, a: dict[str, object]) -> list[str]:
    """BERT's embeddings: which lookups it adds besides word and position, then the norm's ε."""
    parts = ["word + position" + (" + token type" if _wired(node, 1) else "")]
    return parts + _norm_settings(a) + _marks(node, {7: "mask", 8: "position ids"})


_Describe = Callable[[Node, dict[str, object]], list[str]]
_DESCRIBE: dict[tuple[str, str], _Describe] = {
    (MS_DOMAIN, "MultiHeadAttention"): _multi_head_attention,
    (MS_DOMAIN, "Attention"): _contrib_attention,
    ("", "Attention"): _attention,
    (MS_DOMAIN, "GroupQueryAttention"): _group_query_attention,
    ("", "RotaryEmbedding"): _rotary,
    (MS_DOMAIN, "RotaryEmbedding"): _rotary,
    (MS_DOMAIN, "SkipLayerNormalization"): _skip_norm(4, ""),
    (MS_DOMAIN, "SkipSimplifiedLayerNormalization"): _skip_norm(3, "RMS "),
    ("", "SimplifiedLayerNormalization"): _rms_norm,
    (MS_DOMAIN, "SimplifiedLayerNormalization"): _rms_norm,
    ("", "RMSNormalization"): _rms_norm,
    ("", "LayerNormalization"): _layer_norm,
    (MS_DOMAIN, "LayerNormalization"): _layer_norm,
    ("", "Gelu"): _gelu,
    (MS_DOMAIN, "Gelu"): _gelu,
    (MS_DOMAIN, "BiasGelu"): _gelu,
    (MS_DOMAIN, "FastGelu"): _gelu,
    (MS_DOMAIN, "QuickGelu"): _quick_gelu,
    (MS_DOMAIN, "MatMulNBits"): _matmul_nbits,
    (MS_DOMAIN, "EmbedLayerNormalization"): _embed_layer_norm,
}


def fused_lines(node: Node, width: int) -> list[str] | None:
    """The box lines of a fused transformer op, ``·``-separated and wrapped at ``width``; None for other ops."""
    domain = "" if node.domain == "ai.onnx" else node.domain
    describe = _DESCRIBE.get((domain, node.op_type))
    if describe is None:
        return None
    lines: list[str] = []
    for part in describe(node, _attributes(node)):
        if lines and len(lines[-1]) + len(SEP) + len(part) <= width:
            lines[-1] += SEP + part
        else:
            lines.append(part)
    return lines
