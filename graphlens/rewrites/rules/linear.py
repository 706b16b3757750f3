"""Folding a per-channel affine map into the linear layer before it (shared by fold-bn and fold-affine).

The arithmetic is in :mod:`graphlens.rewrites.bn_math`; this module reads the layer's weights and
attributes, checks that they can absorb the map, and writes the new node and initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.constants import input_refusal
from graphlens.core.graph import Node
from graphlens.rewrites import bn_math
from graphlens.rewrites.bn_math import AffineParams
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Plan, Refusal, Site, clone_node, fresh_name, initializer, is_float, shape_text

LAYERS = ("Conv", "ConvTranspose", "Gemm", "MatMul")


@dataclass
class Layer:
    """A linear layer's constant parameters, as the fold needs them."""

    node: Node
    kind: str
    weight: np.ndarray
    bias: np.ndarray | None
    group: int
    trans_b: int
    alpha: float
    beta: float

    @property
    def channels(self) -> int:
        return bn_math.output_channels(self.kind, self.weight.shape, self.group, self.trans_b)

    @property
    def out_rank(self) -> int | None:
        """Rank of the layer's output: the weight's for convolutions, 2 for Gemm/MatMul."""
        return self.weight.ndim if self.kind in ("Conv", "ConvTranspose") else 2


def read_layer(site: Site, node: Node) -> Layer | Refusal:
    """The layer's parameters, or why they cannot be folded into."""
    weight = site.graph.constant_value(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None:
        return site.refuse(input_refusal(site.graph, node, 1, "weight") if len(node.inputs) > 1 else f"{node.label} has no weight")
    if not is_float(weight):
        return site.refuse(f"{node.label} has a {weight.dtype} weight; only float16/32/64 weights are folded")
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = site.graph.constant_value(bias_name) if bias_name else None
    if bias_name and bias is None:
        return site.refuse(input_refusal(site.graph, node, 2, "bias"))
    group = int(node.attrs.get("group", 1))
    trans_b = int(node.attrs.get("transB", 0))
    kind = node.op_type
    if kind in ("Conv", "ConvTranspose") and weight.ndim < 3:
        return site.refuse(f"{node.label} has a weight of shape {shape_text(weight.shape)}; a convolution weight has rank 3 or more")
    if kind in ("Gemm", "MatMul") and weight.ndim != 2:
        return site.refuse(f"{node.label} has a weight of rank {weight.ndim}; only 2-D weights are folded")
    if kind == "Gemm" and int(node.attrs.get("transA", 0)) not in (0, 1):
        return site.refuse(f"{node.label} has an invalid transA")
    if kind == "ConvTranspose" and weight.shape[0] % group:
        return site.refuse(f"{node.label}: {weight.shape[0]} input channels do not split into {group} groups")
    layer = Layer(node, kind, weight, bias, group, trans_b, float(node.attrs.get("alpha", 1.0)), float(node.attrs.get("beta", 1.0)))
    if kind in ("Conv", "ConvTranspose") and bias is not None and bias.size != layer.channels:
        return site.refuse(f"the bias of {node.label} has {bias.size} values for {layer.channels} output channels")
    if kind == "MatMul":
        rank = site.rank_of(node.inputs[0])
        if rank != 2:
            said = "an unknown rank" if rank is None else f"rank {rank}"
            return site.refuse(
                f"the input of {node.label} has {said}; only a 2-D MatMul puts its output columns on the "
                "BatchNormalization's channel axis"
            )
    return layer


def channel_vector(site: Site, value: np.ndarray, layer: Layer, what: str) -> np.ndarray | Refusal:
    """A per-channel constant as one value per output channel of ``layer``, or why it is not one."""
    rank = layer.out_rank or 2
    vector = bn_math.per_channel_vector(value, layer.channels, rank)
    if vector is None:
        return site.refuse(
            f"{what} of shape {shape_text(value.shape)} does not hold one value per output channel of "
            f"{layer.node.label} ({layer.channels} channels on axis 1 of a rank-{rank} output)"
        )
    return vector


def effective_bias(layer: Layer, extra_bias: np.ndarray | None) -> np.ndarray | None:
    """What the layer adds after its product, before the affine map: its own bias (times β for a
    Gemm) plus any bias Add in between; None when there is neither."""
    if layer.kind in ("Conv", "ConvTranspose"):
        base = np.asarray(layer.bias, np.float64) if layer.bias is not None else np.zeros(layer.channels)
        return base + extra_bias if extra_bias is not None else base
    c = None if layer.bias is None else layer.beta * np.asarray(layer.bias, np.float64)
    if extra_bias is not None:
        c = extra_bias if c is None else c + extra_bias
    return c


@dataclass(frozen=True)
class FoldedWeights:
    """The layer's new weight and bias, in float64 (cast back when written)."""

    weight: np.ndarray
    bias: np.ndarray


def folded_parameters(layer: Layer, params: AffineParams, extra_bias: np.ndarray | None) -> FoldedWeights:
    """The numbers the rewrite writes and the preview and the lesson show."""
    new_weight = bn_math.scale_weight(layer.kind, layer.weight, params.scale, layer.group, layer.trans_b)
    bias = effective_bias(layer, extra_bias)
    if layer.kind in ("Conv", "ConvTranspose"):
        return FoldedWeights(new_weight, bn_math.fold_bias(bias, params))
    return FoldedWeights(new_weight, bn_math.fold_gemm_c(bias, 1.0, params))


def channel_norms(layer: Layer, weight: np.ndarray) -> np.ndarray:
    """L2 norm of each output channel's weights."""
    w = np.asarray(weight, np.float64)
    if layer.kind == "Conv":
        return np.linalg.norm(w.reshape(w.shape[0], -1), axis=1)
    if layer.kind == "ConvTranspose":
        g, c_in, per = layer.group, w.shape[0], w.shape[1]
        grouped = w.reshape((g, c_in // g, per, -1)).transpose(0, 2, 1, 3)
        return np.linalg.norm(grouped.reshape(g * per, -1), axis=1)
    columns = w if (layer.kind == "Gemm" and layer.trans_b) else w.T
    return np.linalg.norm(columns, axis=1)


def fold_plan(site: Site, layer: Layer, folded: FoldedWeights, *, output: str, remove: list[str], description: str) -> Plan:
    """The edit replacing the ``remove`` nodes by the layer with ``folded`` weights, writing ``output``.

    ``output`` keeps its name, so downstream readers and graph outputs are unchanged.
    """
    node, kind, dtype = layer.node, layer.kind, layer.weight.dtype
    taken: set[str] = set()
    weight_name = fresh_name(site.graph, f"{node.name}.weight_folded", taken)
    bias_name = fresh_name(site.graph, f"{node.name}.bias_folded", taken)
    inputs = [node.inputs[0], weight_name, bias_name]
    if kind in ("Conv", "ConvTranspose"):
        proto = clone_node(node, inputs=inputs, outputs=[output])
    elif kind == "Gemm":
        proto = clone_node(node, inputs=inputs, outputs=[output], set_attrs={"beta": 1.0})
    else:  # MatMul by a 2-D weight becomes a Gemm
        proto = clone_node(node, inputs=inputs, outputs=[output], op_type="Gemm",
                           drop_attrs=tuple(a.name for a in node.proto.attribute))
    inits = {weight_name: initializer(weight_name, folded.weight, dtype), bias_name: initializer(bias_name, folded.bias, dtype)}
    return GraphEdit(site.graph.path, site.rule.name, description, remove, [proto], inits, boundary=[(output, output)],
                site=dict(site.match.nodes))
