"""A decoder layer as onnxruntime-genai's model builder writes it, built with ``onnx.helper`` for the tests.

Packed QKV projection into ``GroupQueryAttention`` (com.microsoft) with its KV cache as graph inputs
``past_key_values.0.key [batch_size, 2, past_sequence_length, kv_cache_dim]`` (the head size left symbolic),
``seqlens_k`` and ``total_sequence_length`` computed from ``attention_mask [batch_size, total_sequence_length]``,
``SimplifiedLayerNormalization`` in the default domain, and a Constant whose value_info states the wrong rank.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, tensor

HIDDEN, HEADS, KV_HEADS, HEAD = 32, 4, 2, 8
VOCAB = 50


def genai_decoder() -> onnx.ModelProto:
    rng = np.random.default_rng(7)
    width = (HEADS + 2 * KV_HEADS) * HEAD
    cache = ["batch_size", KV_HEADS, "past_sequence_length", "kv_cache_dim"]
    present = ["batch_size", KV_HEADS, "total_sequence_length", "kv_cache_dim"]
    inputs = [tensor("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
              tensor("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
              tensor("past_key_values.0.key", shape=cache), tensor("past_key_values.0.value", shape=cache)]
    outputs = [tensor("logits", shape=["batch_size", "sequence_length", HIDDEN]),
               tensor("present.0.key", shape=present), tensor("present.0.value", shape=present)]
    weights = [init("embed", rng.normal(0, 0.5, (VOCAB, HIDDEN)).astype(np.float32)),
               init("norm_w", np.ones(HIDDEN, np.float32)),
               init("qkv_w", rng.normal(0, 0.2, (HIDDEN, width)).astype(np.float32)),
               init("o_w", rng.normal(0, 0.2, (HIDDEN, HIDDEN)).astype(np.float32)),
               init("one_axis", np.array([1], np.int64))]
    nodes = [
        helper.make_node("Gather", ["embed", "input_ids"], ["x"], name="embed_tokens"),
        helper.make_node("SimplifiedLayerNormalization", ["x", "norm_w"], ["normed"], name="input_layernorm",
                         axis=-1, epsilon=1e-6),
        helper.make_node("MatMul", ["normed", "qkv_w"], ["qkv"], name="qkv_proj"),
        helper.make_node("Constant", [], ["one"], name="one_const", value=init("one_v", np.array([1], np.int64))),
        helper.make_node("ReduceSum", ["attention_mask", "one_axis"], ["mask_sum"], name="mask_sum"),
        helper.make_node("Sub", ["mask_sum", "one"], ["seqlens"], name="seqlens"),
        helper.make_node("Cast", ["seqlens"], ["seqlens_k"], name="seqlens_k", to=TensorProto.INT32),
        helper.make_node("Shape", ["attention_mask"], ["mask_shape"], name="mask_shape"),
        helper.make_node("Gather", ["mask_shape", "one"], ["total"], name="total", axis=0),
        helper.make_node("Squeeze", ["total"], ["total_scalar"], name="total_scalar"),
        helper.make_node("Cast", ["total_scalar"], ["total_sequence_length"], name="total_len", to=TensorProto.INT32),
        helper.make_node("GroupQueryAttention", ["qkv", "", "", "past_key_values.0.key", "past_key_values.0.value",
                                                "seqlens_k", "total_sequence_length"],
                         ["attn", "present.0.key", "present.0.value"], name="attn", domain="com.microsoft",
                         num_heads=HEADS, kv_num_heads=KV_HEADS, scale=float(HEAD ** -0.5)),
        helper.make_node("MatMul", ["attn", "o_w"], ["logits"], name="o_proj"),
    ]
    graph = helper.make_graph(nodes, "genai", inputs, outputs, weights)
    graph.value_info.append(tensor("one", TensorProto.INT64, []))  # the builder's value_info: rank 0 for a [1]
    imports = [helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    model = helper.make_model(graph, opset_imports=imports, producer_name="onnxruntime-genai")
    model.ir_version = 10
    return model
