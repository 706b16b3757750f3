"""BERT-like encoders whose node names carry exporter scopes, for the tests of where fused nodes land.

Each layer: attention (the blocks of :mod:`transformer_attention_models`, with an additive mask), a residual
Add and a LayerNormalization, a feed-forward block (Linear, erf GELU in pieces, Linear), a residual Add and
a LayerNormalization; the fusions turn each layer into Attention (Q, K, V packed), two SkipLayerNormalization and a
BiasGelu. Names follow torch.onnx: ``/encoder/layer.3/attention/…``, ``/encoder/layer.3/norm1/…``, the
layer's own ops in ``/encoder/layer.3``. With ``shared`` one module runs every layer, as in rxnmap: its own
ops of the n-th call go to ``/encoder/layer_n``, its submodules' to ``/encoder/layer/norm1_n``.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto

from tests.models import make_model, tensor
from tests.rewrites import transformer_attention_models as am

INNER = 4 * am.HIDDEN


def encoder(layers: int = 3, *, shared: bool = False) -> onnx.ModelProto:
    b = am._Builder(am.variant(mask="add"))
    hidden = "x"
    for index in range(layers):
        hidden = _layer(b, hidden, index, shared)
    b.outputs.insert(0, tensor(hidden, TensorProto.FLOAT, [am.BATCH, am.SEQ, am.HIDDEN]))
    return make_model(b.nodes, b.inputs, b.outputs, b.inits, opset=17)


def _layer(b: am._Builder, x: str, index: int, shared: bool) -> str:
    suffix = f"_{index}" if shared and index else ""
    own = f"/encoder/layer{suffix}/" if shared else f"/encoder/layer.{index}/"

    def scope(module: str) -> str:
        return f"/encoder/layer/{module}{suffix}/" if shared else f"{own}{module}/"

    b.prefix = scope("attention")
    attended = am._block(b, x)
    b.prefix = own
    total = b.node("Add", [x, attended], "Add")
    normed = _norm(b, total, scope("norm1"))
    b.prefix = scope("linear1")
    inner = b.node("Add", [b.weight((INNER,), "bias"),
                           b.node("MatMul", [normed, b.weight((am.HIDDEN, INNER), "weight")], "MatMul")], "Add")
    b.prefix = own
    erf = b.node("Erf", [b.node("Div", [inner, b.const(np.sqrt(2.0), "sqrt2")], "Div")], "Erf")
    bracket = b.node("Add", [erf, b.const(1.0, "one")], "Add_1")
    gelu = b.node("Mul", [b.node("Mul", [inner, bracket], "Mul"), b.const(0.5, "half")], "Mul_1")
    b.prefix = scope("linear2")
    out = b.node("Add", [b.weight((am.HIDDEN,), "bias"),
                         b.node("MatMul", [gelu, b.weight((INNER, am.HIDDEN), "weight")], "MatMul")], "Add")
    b.prefix = own
    return _norm(b, b.node("Add", [normed, out], "Add_2"), scope("norm2"))


def _norm(b: am._Builder, x: str, prefix: str) -> str:
    b.prefix = prefix
    gamma = b.const(1 + 0.1 * b.rng.normal(size=am.HIDDEN), "weight")
    return b.node("LayerNormalization", [x, gamma, b.weight((am.HIDDEN,), "bias")], "LayerNormalization",
                  axis=-1, epsilon=1e-5)
