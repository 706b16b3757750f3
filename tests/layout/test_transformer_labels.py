"""Fused transformer ops on the canvas: their boxes say what they do, and they get their family's colour."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.layout.labels import MAX_LINES, WRAP, input_name
from graphlens.layout.view import build_view, op_category
from tests.models import init, make_model, tensor

MS = "com.microsoft"
HIDDEN = [1, 8, 64]  # batch 1, 8 tokens, 4 heads of 16


def _box(node: onnx.NodeProto, shapes: dict[str, list] | None = None, weights: dict[str, list] | None = None,
         opset: int = 23):
    """The view item of ``node`` in a one-node model: ``weights`` are initializers, every other input a
    graph input of the shape in ``shapes`` (``HIDDEN`` when not given)."""
    shapes, weights = shapes or {}, weights or {}
    inputs = [tensor(name, TensorProto.BOOL if name == "bool_mask" else TensorProto.FLOAT, shapes.get(name, HIDDEN))
              for name in dict.fromkeys(node.input) if name and name not in weights]
    inits = [init(name, np.zeros(shape, np.float32)) for name, shape in weights.items()]
    outputs = [tensor(name) for name in node.output if name]
    model = make_model([node], inputs, outputs, inits, opset=opset)
    if node.domain:
        model.opset_import.append(helper.make_opsetid(node.domain, 1))
    graph = Model(model).graph
    view = build_view(graph)
    return view.items[view.index[node.name]], graph.nodes[0]


# -------------------------------------------------------------- attention
def test_multi_head_attention_says_heads_scale_causal_and_which_inputs_are_wired():
    node = helper.make_node(
        "MultiHeadAttention", ["q", "k", "v", "qkv_bias", "", "attn_bias", "past_k", "past_v"], ["y", "pk", "pv"],
        name="mha", domain=MS, num_heads=4, scale=0.125, unidirectional=1,
    )
    box, _ = _box(node, {"attn_bias": [1, 4, 8, 8], "past_k": [1, 4, "past", 16], "past_v": [1, 4, "past", 16]},
                  {"qkv_bias": [192]})
    assert box.lines == ["4 heads × 16 dims · scale 0.125", "causal · +attn bias · +past kv", "bias ⟨192⟩"]
    assert box.category == "attention"


def test_multi_head_attention_with_packed_qkv_and_a_key_mask():
    node = helper.make_node("MultiHeadAttention", ["qkv", "", "", "", "key_mask"], ["y"], name="mha", domain=MS,
                            num_heads=4, mask_filter_value=-1e9)
    box, _ = _box(node, {"qkv": [1, 8, 4, 3, 16], "key_mask": [1, 8]})
    assert box.lines == ["4 heads × 16 dims · packed QKV", "+key mask · mask fill -1e+09"]


def test_multi_head_attention_takes_the_head_size_from_a_4d_key_when_the_query_shape_is_unknown():
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain=MS, num_heads=4)
    box, _ = _box(node, {"q": None, "k": [1, 4, 8, 16], "v": [1, 4, 8, 16]})
    assert box.lines == ["4 heads × 16 dims"]


def test_onnx_attention_with_fewer_key_value_heads():
    node = helper.make_node("Attention", ["q", "k", "v", "mask", "past_k", "past_v"], ["y", "pk", "pv"],
                            name="attention", q_num_heads=8, kv_num_heads=2, is_causal=1)
    box, _ = _box(node, {"k": [1, 8, 16], "v": [1, 8, 16], "mask": [8, 8],
                         "past_k": [1, 2, "past", 8], "past_v": [1, 2, "past", 8]})
    assert box.lines == ["q 8 · kv 2 heads × 8 dims · causal", "+mask · +past kv"]
    assert box.category == "attention"


def test_onnx_attention_reads_head_counts_from_4d_inputs():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y"], name="attention", scale=0.25)
    box, _ = _box(node, {"q": [1, 8, 8, 16], "k": [1, 2, 8, 16], "v": [1, 2, 8, 16]})
    assert box.lines == ["q 8 · kv 2 heads × 16 dims", "scale 0.25"]


def test_onnx_attention_softcap_precision_and_scores_output():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "scores"], name="attention",
                            q_num_heads=4, kv_num_heads=4, softcap=30.0, qk_matmul_output_mode=3,
                            softmax_precision=TensorProto.FLOAT)
    box, _ = _box(node)
    assert box.lines == ["4 heads × 16 dims · softcap 30", "softmax in float32 · softmax out"]


def test_group_query_attention_with_rotary_window_and_cache():
    node = helper.make_node(
        "GroupQueryAttention",
        ["q", "k", "v", "past_k", "past_v", "seqlens_k", "total_len", "cos", "sin"], ["y", "pk", "pv"],
        name="gqa", domain=MS, num_heads=4, kv_num_heads=2, do_rotary=1, rotary_interleaved=1,
        local_window_size=256,
    )
    box, _ = _box(node, {"k": [1, 8, 32], "v": [1, 8, 32], "past_k": [1, 2, "past", 16],
                         "past_v": [1, 2, "past", 16], "seqlens_k": [1], "total_len": []},
                  {"cos": [8, 8], "sin": [8, 8]})
    assert box.lines == ["q 4 · kv 2 heads × 16 dims", "local window 256", "rotary (interleaved) · +past kv",
                         "cos_cache, sin_cache ⟨8×8⟩"]
    assert box.category == "attention"


def test_group_query_attention_with_packed_qkv():
    node = helper.make_node("GroupQueryAttention", ["qkv", "", "", "", "", "seqlens_k", "total_len"], ["y"],
                            name="gqa", domain=MS, num_heads=4, kv_num_heads=2)
    box, _ = _box(node, {"qkv": [1, 8, 128], "seqlens_k": [1], "total_len": []})
    assert box.lines == ["q 4 · kv 2 heads × 16 dims", "packed QKV"]


def test_onnxruntime_attention_names_its_packed_weights():
    node = helper.make_node("Attention", ["x", "weights", "bias", "mask_index"], ["y"], name="attention",
                            domain=MS, num_heads=4, unidirectional=1)
    box, _ = _box(node, {"mask_index": [1, 8]}, {"weights": [64, 192], "bias": [192]})
    assert box.lines == ["4 heads · causal · +mask", "weights ⟨64×192⟩", "bias ⟨192⟩"]


# ----------------------------------------------------------------- rotary
def test_onnx_rotary_embedding_rotating_part_of_each_head():
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "positions"], ["y"], name="rotary")
    box, _ = _box(node, {"x": [1, 4, 8, 16], "positions": [1, 8]}, {"cos": [8, 4], "sin": [8, 4]})
    assert box.lines == ["rotates 8 of 16 dims · rotate-half", "+position ids", "cos_cache, sin_cache ⟨8×4⟩"]
    assert box.category == "math"


def test_onnxruntime_rotary_embedding_rotating_whole_heads_of_a_3d_input():
    node = helper.make_node("RotaryEmbedding", ["x", "positions", "cos", "sin"], ["y"], name="rotary",
                            domain=MS, num_heads=4, interleaved=1)
    box, _ = _box(node, {"positions": [1, 8]}, {"cos": [8, 8], "sin": [8, 8]})
    assert box.lines == ["rotates all 16 dims · interleaved", "4 heads", "cos_cache, sin_cache ⟨8×8⟩"]
    assert box.category == "math"


def test_rotary_embedding_with_an_explicit_rotary_dim_and_unknown_heads():
    node = helper.make_node("RotaryEmbedding", ["x", "cos", "sin"], ["y"], name="rotary",
                            rotary_embedding_dim=32, interleaved=1)
    box, _ = _box(node, {"x": None, "cos": [8, 16], "sin": [8, 16]})
    assert box.lines == ["rotates 32 dims · interleaved"]


# ---------------------------------------------------------- normalization
def test_skip_layer_normalization_with_a_computed_bias_and_its_sum_output():
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"],
                            ["y", "", "", "x_plus_skip"], name="skip_ln", domain=MS, epsilon=1e-5)
    box, _ = _box(node, {"bias": [64]}, {"gamma": [64], "beta": [64]})
    assert box.lines == ["ε 1e-05 · +bias · outputs x+skip", "gamma, beta ⟨64⟩"]
    assert box.category == "normalization"


def test_skip_layer_normalization_with_a_constant_bias_names_it_once():
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma", "beta", "bias"], ["y"],
                            name="skip_ln", domain=MS, epsilon=1e-12)
    box, _ = _box(node, weights={"gamma": [64], "beta": [64], "bias": [64]})
    assert box.lines == ["ε 1e-12", "gamma, beta, bias ⟨64⟩"]


def test_skip_simplified_layer_normalization_is_an_rms_norm():
    node = helper.make_node("SkipSimplifiedLayerNormalization", ["x", "skip", "gamma"], ["y"],
                            name="skip_rms", domain=MS, epsilon=1e-6)
    box, _ = _box(node, weights={"gamma": [64]})
    assert box.lines == ["RMS ε 1e-06", "gamma ⟨64⟩"]
    assert box.category == "normalization"


@pytest.mark.parametrize("domain", ["", MS])
def test_simplified_layer_normalization_is_an_rms_norm_in_either_domain(domain):
    node = helper.make_node("SimplifiedLayerNormalization", ["x", "scale"], ["y"], name="rms", domain=domain or None,
                            axis=-1, epsilon=1e-6, stash_type=1)
    box, _ = _box(node, weights={"scale": [64]}, opset=17)
    assert box.lines == ["RMS ε 1e-06", "scale ⟨64⟩"]
    assert box.category == "normalization"


def test_rms_normalization_shows_only_settings_that_differ_from_the_defaults():
    node = helper.make_node("RMSNormalization", ["x", "scale"], ["y"], name="rms", axis=1,
                            stash_type=TensorProto.FLOAT16)
    box, _ = _box(node, weights={"scale": [8, 64]})
    assert box.lines == ["ε 1e-05 · axis 1", "stats in float16", "scale ⟨8×64⟩"]
    assert box.category == "normalization"


def test_layer_normalization_shows_epsilon_not_the_default_axis():
    node = helper.make_node("LayerNormalization", ["x", "scale", "bias"], ["y"], name="ln", axis=-1,
                            epsilon=1e-5)
    box, _ = _box(node, weights={"scale": [64], "bias": [64]}, opset=17)
    assert box.lines == ["ε 1e-05", "Scale, B ⟨64⟩"]
    assert box.category == "normalization"


# ------------------------------------------------------------- activation
@pytest.mark.parametrize(
    ("op", "domain", "attrs", "bias", "lines"),
    [
        ("BiasGelu", MS, {}, {"weights": {"b": [64]}}, ["erf (exact)", "B ⟨64⟩"]),
        ("FastGelu", MS, {}, {"weights": {"b": [64]}}, ["tanh approx.", "bias ⟨64⟩"]),
        ("FastGelu", MS, {}, {"shapes": {"b": [64]}}, ["tanh approx. · +bias"]),
        ("Gelu", MS, {}, None, ["erf (exact)"]),
        ("Gelu", "", {"approximate": "tanh"}, None, ["tanh approx."]),
        ("Gelu", "", {}, None, ["erf (exact)"]),
        ("QuickGelu", MS, {"alpha": 1.702}, None, ["x·σ(1.702·x)"]),
    ],
)
def test_gelu_family_says_which_gelu(op, domain, attrs, bias, lines):
    inputs = ["x", "b"] if bias else ["x"]
    node = helper.make_node(op, inputs, ["y"], name="gelu", domain=domain or None, **attrs)
    box, _ = _box(node, **(bias or {}))
    assert box.lines == lines
    assert box.category == "activation"


# ------------------------------------------------------------------- the rest
@pytest.mark.parametrize(
    ("op", "domain", "category"),
    [
        ("MultiHeadAttention", MS, "attention"), ("GroupQueryAttention", MS, "attention"),
        ("Attention", MS, "attention"), ("Attention", "", "attention"), ("PackedMultiHeadAttention", MS, "attention"),
        ("RotaryEmbedding", MS, "math"), ("RotaryEmbedding", "", "math"),
        ("SkipLayerNormalization", MS, "normalization"), ("SkipSimplifiedLayerNormalization", MS, "normalization"),
        ("SimplifiedLayerNormalization", MS, "normalization"), ("SimplifiedLayerNormalization", "", "normalization"),
        ("LayerNormalization", MS, "normalization"), ("EmbedLayerNormalization", MS, "normalization"),
        ("RMSNormalization", "", "normalization"), ("LayerNormalization", "ai.onnx", "normalization"),
        ("BiasGelu", MS, "activation"), ("FastGelu", MS, "activation"), ("Gelu", MS, "activation"),
        ("QuickGelu", MS, "activation"),
        ("FusedConv", MS, "other"), ("MatMulNBits", MS, "other"), ("MultiHeadAttention", "com.example", "other"),
    ],
)
def test_categories_of_fused_ops(op, domain, category):
    assert op_category(op, domain) == category


def test_onnxruntime_input_names_label_constant_inputs():
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v", "b"], ["y"], name="mha", domain=MS, num_heads=4)
    _, graph_node = _box(node, weights={"b": [192]})
    assert [input_name(graph_node, slot) for slot in range(8)] == [
        "query", "key", "value", "bias", "key_padding_mask", "attention_bias", "past_key", "past_value"]


def test_every_fused_box_stays_narrow():
    """No line wider than the wrap width, no box taller than the line limit, on the busiest settings."""
    node = helper.make_node(
        "MultiHeadAttention", ["q", "k", "v", "b", "key_mask", "attn_bias", "past_k", "past_v"], ["y"],
        name="mha", domain=MS, num_heads=4, scale=0.125, unidirectional=1, mask_filter_value=-1e4,
    )
    box, _ = _box(node, {"b": [192], "key_mask": [1, 8], "attn_bias": [1, 4, 8, 8], "past_k": [1, 4, "p", 16],
                         "past_v": [1, 4, "p", 16]})
    assert len(box.lines) <= MAX_LINES
    assert all(len(line) <= WRAP for line in box.lines)


def test_attributes_of_the_wrong_type_leave_the_box_readable():
    """A malformed model's settings never stop the canvas: the odd ones are shown as stored or left out."""
    node = helper.make_node("SkipLayerNormalization", ["x", "skip", "gamma"], ["y"], name="skip_ln", domain=MS,
                            epsilon="tiny")
    assert _box(node, weights={"gamma": [64]})[0].lines == ["ε tiny", "gamma ⟨64⟩"]
    node = helper.make_node("MultiHeadAttention", ["q", "k", "v"], ["y"], name="mha", domain=MS,
                            num_heads=4.0, scale="big")
    assert _box(node)[0].lines == ["scale big"]


def test_matmul_nbits_says_the_weight_shape_and_its_quantization():
    node = helper.make_node("MatMulNBits", ["x", "w_q4", "w_scales"], ["y"], name="q_proj", domain=MS,
                            K=64, N=128, bits=4, block_size=32, accuracy_level=4)
    box, _ = _box(node, weights={"w_q4": [128, 2, 16], "w_scales": [256]})
    assert box.lines[:2] == ["64×128 · 4-bit · block 32", "accuracy level 4"]


def test_embed_layer_norm_says_which_lookups_it_adds():
    node = helper.make_node("EmbedLayerNormalization", ["ids", "types", "word", "position", "type_table", "gamma",
                                                        "beta"], ["y", "mask_index"], name="embeddings", domain=MS,
                            epsilon=1e-12)
    box, _ = _box(node, {"ids": [1, 8], "types": [1, 8]},
                  {"word": [30, 64], "position": [16, 64], "type_table": [2, 64], "gamma": [64], "beta": [64]})
    assert box.lines[:2] == ["word + position + token type", "ε 1e-12"]
