"""Folding a per-channel affine map into the linear layer before it (shared by fold-bn and fold-affine).

The arithmetic is in :mod:`graphlens.rewrites.bn_math`; this module reads the layer's weights and
attributes, checks that they can absorb the map, and writes the new node and initializers.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.constants import input_refusal
from graphlens.core.linear import LinearOp, linear_op
from graphlens.core.node import Node
from graphlens.rewrites import bn_math
from graphlens.rewrites.bn_math import AffineParams
from graphlens.rewrites.edit import GraphEdit
from graphlens.rewrites.rule import Plan, Refusal, Site, clone_node, fresh_name, initializer, is_float, shape_text


@dataclass
class Layer:
    """A linear layer's constant parameters, as the fold needs them."""

    node: Node
    op: LinearOp
    weight: np.ndarray
    bias: np.ndarray | None

    @property
    def kind(self) -> str:
        return self.op.op_type

    @property
    def channels(self) -> int:
        return self.op.output_channels(self.weight.shape)

    @property
    def out_rank(self) -> int:
        """Rank of the layer's output: the weight's for convolutions, 2 for Gemm and (as :func:`read_layer`
        checks) a folded MatMul."""
        return self.op.output_rank(self.weight.ndim) or 2


def read_layer(site: Site, node: Node) -> Layer | Refusal:
    """The layer's parameters, or why they cannot be folded into."""
    op = linear_op(node)
    if op is None:
        return site.refuse(f"{node.label} is not a linear layer")
    weight = site.graph.constant_value(node.inputs[1]) if len(node.inputs) > 1 else None
    if weight is None:
        return site.refuse(input_refusal(site.graph, node, 1, "weight") if len(node.inputs) > 1
                           else f"{node.label} has no weight")
    if not is_float(weight):
        return site.refuse(f"{node.label} has a {weight.dtype} weight; only float16/32/64 weights are folded")
    bias_name = node.inputs[2] if len(node.inputs) > 2 and node.inputs[2] else None
    bias = site.graph.constant_value(bias_name) if bias_name else None
    if bias_name and bias is None:
        return site.refuse(input_refusal(site.graph, node, 2, "bias"))
    problem = op.weight_problem(weight.shape)
    if problem is not None:
        return site.refuse(f"{node.label} {problem}")
    layer = Layer(node, op, weight, bias)
    if op.channel_bias and bias is not None and bias.size != layer.channels:
        return site.refuse(f"the bias of {node.label} has {bias.size} values for {layer.channels} output channels")
    if op.output_rank(weight.ndim) is None:  # a MatMul: its output's rank is its input's
        return _matmul_refusal(site, node, weight) or layer
    return layer


def _matmul_refusal(site: Site, node: Node, weight: np.ndarray) -> Refusal | None:
    """Why a MatMul's output columns are not on axis 1 of a 2-D output, where a per-channel map reads them."""
    if weight.ndim != 2:
        return site.refuse(f"{node.label} has a weight of rank {weight.ndim}; only 2-D weights are folded")
    rank = site.rank_of(node.inputs[0])
    if rank == 2:
        return None
    said = "an unknown rank" if rank is None else f"rank {rank}"
    return site.refuse(
        f"the input of {node.label} has {said}; only a 2-D MatMul puts its output columns on the "
        "BatchNormalization's channel axis"
    )


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
    """What the layer adds after its product, before the affine map: its own bias (β·C for a Gemm)
    plus any bias Add in between; None when there is neither."""
    base = layer.op.bias_term(layer.bias, layer.channels)
    if extra_bias is None:
        return base
    return extra_bias if base is None else base + extra_bias


@dataclass(frozen=True)
class FoldedWeights:
    """The layer's new weight and bias, in float64 (cast back when written)."""

    weight: np.ndarray
    bias: np.ndarray


def folded_parameters(layer: Layer, params: AffineParams, extra_bias: np.ndarray | None) -> FoldedWeights:
    """The numbers the rewrite writes and the preview and the lesson show."""
    new_weight = layer.op.scale_outputs(layer.weight, params.scale)
    bias = effective_bias(layer, extra_bias)
    if layer.op.channel_bias:
        return FoldedWeights(new_weight, bn_math.fold_bias(bias, params))
    return FoldedWeights(new_weight, bn_math.fold_gemm_c(bias, 1.0, params))


def channel_norms(layer: Layer, weight: np.ndarray) -> np.ndarray:
    """L2 norm of each output channel's weights."""
    w = np.asarray(weight, np.float64).reshape(-1)
    norms: np.ndarray = np.linalg.norm(w[layer.op.positions(layer.weight.shape, "out")], axis=1)
    return norms


def fold_plan(site: Site, layer: Layer, folded: FoldedWeights, *, output: str, remove: list[str],
              description: str) -> Plan:
    """The edit replacing the ``remove`` nodes by the layer with ``folded`` weights, writing ``output``.

    ``output`` keeps its name, so downstream readers and graph outputs are unchanged.
    """
    node, dtype = layer.node, layer.weight.dtype
    taken: set[str] = set()
    weight_name = fresh_name(site.graph, f"{node.name}.weight_folded", taken)
    bias_name = fresh_name(site.graph, f"{node.name}.bias_folded", taken)
    inputs = [node.inputs[0], weight_name, bias_name]
    if layer.op.channel_bias:  # Conv, ConvTranspose: b is an input of its own
        proto = clone_node(node, inputs=inputs, outputs=[output])
    else:  # the new C is the folded bias, with β = 1; a MatMul by a 2-D weight becomes a Gemm
        proto = clone_node(node, inputs=inputs, outputs=[output], op_type="Gemm",
                           set_attrs={"beta": 1.0} if layer.op.beta != 1.0 else None)
    inits = {weight_name: initializer(weight_name, folded.weight, dtype),
             bias_name: initializer(bias_name, folded.bias, dtype)}
    return GraphEdit(site.graph.path, site.rule.name, description, remove, [proto], inits, boundary=[(output, output)],
                site=dict(site.match.nodes))
