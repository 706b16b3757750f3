"""One model each transformer pattern of the library matches, and one close to it that it must not.

The forms themselves are tested where their builders live (``tests/rewrites/test_transformer_*.py``);
these pairs only keep the library's promise that every built-in has both.
"""

from __future__ import annotations

from collections.abc import Callable

import onnx

from tests.matching import attention_block_models as abm
from tests.matching import pattern_models as pm
from tests.rewrites import transformer_attention_models as am
from tests.rewrites import transformer_embed_models as em
from tests.rewrites import transformer_gelu_models as gm
from tests.rewrites import transformer_norm_models as nm
from tests.rewrites import transformer_rotary_models as rm


def _skip_layer_norm_in_pieces() -> onnx.ModelProto:
    b = nm.Block()
    x = b.input("x")
    total = b.op("Add", "residual", nm.projection(b, x, "linear"), x)
    return b.model([nm.layer_norm_pieces(b, total)], opset=14)


def _layer_norm_in_pieces_alone() -> onnx.ModelProto:
    b = nm.Block()
    return b.model([nm.layer_norm_pieces(b, b.input("x"))], opset=14)


Build = Callable[[], onnx.ModelProto]
CASES: dict[str, tuple[Build, Build, str]] = {
    # pattern: (a model it matches, one it must not, what the second one lacks)
    "attention": (lambda: am.build(am.variant(qkv="packed_slice", split_shape="concat", merge="concat", mask="add")),
                  lambda: nm.rms_model(nm.rms_dynamo), "no Softmax at all"),
    "attention-block": (lambda: abm.build(abm.form(mask=True)),
                        lambda: abm.build(abm.form(kv_input="v_from_memory")), "K and V from different tensors"),
    "attention-block-packed": (lambda: abm.build(abm.form(qkv="packed", bounds="computed", mask=True)),
                               lambda: abm.build(abm.form(qkv="packed", after_softmax="reduced_only")),
                               "no ·V after the Softmax"),
    "sdpa": (lambda: am.build(am.variant()), lambda: gm.silu_mlp(), "MatMuls with no Softmax between them"),
    "rms-norm": (lambda: nm.rms_model(nm.rms_dynamo), lambda: nm.rms_model(nm.rms_dynamo, weight=False), "no γ"),
    "rms-norm-plain": (lambda: nm.rms_model(nm.rms_dynamo, weight=False), lambda: pm.layer_norm_cubed(),
                       "a mean of cubes, not of squares"),
    "skip-norm": (lambda: nm.post_norm_block(), lambda: nm.rms_model(nm.rms_dynamo), "no residual Add"),
    "skip-layer-norm": (_skip_layer_norm_in_pieces, _layer_norm_in_pieces_alone, "no residual Add"),
    "skip-rms-norm": (lambda: nm.decoder_block(bias=True), lambda: nm.rms_model(nm.rms_dynamo), "no residual Add"),
    "rotary-embedding": (lambda: rm.llama_dynamo(), lambda: rm.gptj(), "the interleaved form"),
    "rotary-interleaved": (lambda: rm.gptj(), lambda: rm.llama_dynamo(), "the rotate-half form"),
    "rotary-partial": (lambda: rm.phi2_partial(), lambda: rm.llama_dynamo(), "every channel rotated"),
    "bias-gelu": (lambda: gm.bias_gelu_torchscript(), lambda: gm.gelu_without_bias(), "no bias Add"),
    "bias-gelu-ms": (lambda: gm.bias_then_gelu_op(17, "com.microsoft"), lambda: gm.bias_then_gelu_op(),
                     "ONNX's Gelu, not onnxruntime's"),
    "fast-gelu": (lambda: gm.fast_gelu_torchscript(), lambda: gm.bias_gelu_torchscript(), "the erf form"),
    "embed-layer-norm": (lambda: em.embeddings(), lambda: nm.post_norm_block(), "no table lookups"),
    "silu-mlp": (lambda: gm.silu_mlp(), lambda: gm.bias_gelu_torchscript(), "no gate"),
}
