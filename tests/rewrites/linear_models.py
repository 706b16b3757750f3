"""Linear layer -> (optional bias Add) -> BatchNormalization models in every configuration fold-bn handles."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests import models

NP = {TensorProto.FLOAT: np.float32, TensorProto.FLOAT16: np.float16, TensorProto.DOUBLE: np.float64}


@dataclass(frozen=True)
class Config:
    kind: str = "Conv"  # Conv, ConvTranspose, Gemm, MatMul
    rank: int = 2  # spatial rank for convolutions
    c_in: int = 4
    c_out: int = 6
    group: int = 1
    kernel: int = 3
    stride: int = 1
    dilation: int = 1
    pad: int = 1
    bias: bool = True
    bias_add: bool = False
    trans_b: int = 0
    alpha: float = 1.0
    beta: float = 1.0
    c_shape: str = "vector"  # Gemm C: vector [N], full [M, N], scalar [1]
    dtype: int = TensorProto.FLOAT
    seed: int = 0


def linear_bn(cfg: Config) -> onnx.ModelProto:
    rng = np.random.default_rng(cfg.seed)
    dt = NP[cfg.dtype]
    c_out = cfg.c_out
    nodes, inits = [], []

    def add(name, value):
        inits.append(models.init(name, np.asarray(value).astype(dt)))

    if cfg.kind in ("Conv", "ConvTranspose"):
        spatial = [5 + i for i in range(cfg.rank)]
        x_shape = [1, cfg.c_in] + spatial
        k = [cfg.kernel] * cfg.rank
        if cfg.kind == "Conv":
            add("w", rng.normal(0, 0.5, [c_out, cfg.c_in // cfg.group] + k))
        else:
            add("w", rng.normal(0, 0.5, [cfg.c_in, c_out // cfg.group] + k))
        attrs = dict(group=cfg.group, strides=[cfg.stride] * cfg.rank, dilations=[cfg.dilation] * cfg.rank,
                     pads=[cfg.pad] * (2 * cfg.rank), kernel_shape=k)
        ins = ["x", "w"]
        if cfg.bias:
            add("b", rng.normal(0, 0.3, [c_out]))
            ins.append("b")
        nodes.append(helper.make_node(cfg.kind, ins, ["lin"], name="layer", **attrs))
        out_rank = cfg.rank + 2
        add_shape = [c_out] + [1] * cfg.rank
    else:
        m, k_dim = 3, cfg.c_in
        x_shape = [m, k_dim]
        if cfg.kind == "Gemm":
            add("w", rng.normal(0, 0.5, [c_out, k_dim] if cfg.trans_b else [k_dim, c_out]))
            ins = ["x", "w"]
            if cfg.bias:
                c_shape = {"vector": [c_out], "full": [m, c_out], "scalar": [1]}[cfg.c_shape]
                add("b", rng.normal(0, 0.3, c_shape))
                ins.append("b")
            nodes.append(helper.make_node("Gemm", ins, ["lin"], name="layer", transB=cfg.trans_b, alpha=cfg.alpha,
                                          beta=cfg.beta))
        else:
            add("w", rng.normal(0, 0.5, [k_dim, c_out]))
            nodes.append(helper.make_node("MatMul", ["x", "w"], ["lin"], name="layer"))
        out_rank = 2
        add_shape = [c_out]
    bn_in = "lin"
    if cfg.bias_add:
        add("c", rng.normal(0, 0.3, add_shape))
        nodes.append(helper.make_node("Add", ["lin", "c"], ["biased"], name="bias_add"))
        bn_in = "biased"
    for key, value in models.bn_params(c_out, prefix="bn", dtype=dt).items():
        add(key, value)
    nodes.append(helper.make_node("BatchNormalization", [bn_in, "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["y"],
                                  name="bn", epsilon=1e-3))
    return models.make_model(nodes, [models.tensor("x", cfg.dtype, x_shape)],
                             [models.tensor("y", cfg.dtype, [None] * out_rank)], inits)
