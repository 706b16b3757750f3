"""Linear layers (Conv, ConvTranspose, Gemm, MatMul): which nodes are one, and where their channels sit.

One class per op type, each overriding only what differs; everything that folds, equalizes,
quantizes or binarizes a layer's weight asks here rather than comparing op types itself:

- Conv: W is [C_out, C_in/g, k…]. Output channel o is row o (axis 0); input channel
  (o // (C_out/g))·(C_in/g) + j is read through W[o, j]. The bias B has one value per output channel.
- ConvTranspose: W is [C_in, C_out/g, k…]. Input channel i is row i (axis 0); i belongs to group
  i // (C_in/g) and feeds output channels g·(C_out/g) + j through W[i, j] (axis 1 within a group).
  The bias B has one value per output channel.
- Gemm: Y = α·A'·B' + β·C with B' = B, or Bᵀ when transB = 1; output channels are B''s columns
  (axis 1 of B, or axis 0 with transB), input channels its rows. C broadcasts onto the [M, N] output.
- MatMul: W is [..., K, N]; output channels are its last axis, input channels the one before. No bias.

A *linear layer* (:func:`linear_layer`) is a node of one of these types in the default domain whose
weight (input 1) is a float constant of a shape the op accepts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from graphlens.core.graph import Graph
from graphlens.core.node import Node


def _shape(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _flat(shape: tuple[int, ...]) -> np.ndarray:
    """The flat index of every entry of a weight of ``shape``, in that shape."""
    return np.arange(int(np.prod(shape, dtype=np.int64))).reshape(shape)


def _grouped(flat: np.ndarray, groups: int) -> np.ndarray:
    """[channels, -1] for the axis that counts channels within a group: W[i, j] of a weight [A, B, k…]
    split into ``groups`` groups along A belongs to channel (i // (A/groups))·B + j."""
    a, b = flat.shape[0], flat.shape[1]
    rest = int(np.prod(flat.shape[2:], dtype=np.int64))
    grouped: np.ndarray = flat.reshape(groups, a // groups, b, rest).transpose(0, 2, 1, 3).reshape(groups * b, -1)
    return grouped


@dataclass(frozen=True, kw_only=True)
class LinearOp:
    """A linear layer's op type and the attributes that place its channels in the weight."""

    op_type: ClassVar[str]
    channel_bias: ClassVar[bool] = False
    """Whether input 2 holds one bias value per output channel (Conv) rather than Gemm's C over [M, N]."""
    group: int = 1
    trans_a: int = 0
    trans_b: int = 0
    alpha: float = 1.0
    beta: float = 1.0

    def output_axis(self, ndim: int) -> int:
        """The weight axis that numbers output channels (within a group, for a grouped ConvTranspose)."""
        raise NotImplementedError

    def output_channels(self, shape: tuple[int, ...]) -> int:
        """How many output channels a weight of ``shape`` makes."""
        return int(shape[self.output_axis(len(shape))])

    def output_rank(self, weight_ndim: int) -> int | None:
        """The rank of the layer's output, which keeps its channels on axis 1; None when it depends on the
        input (a MatMul's)."""
        return 2

    def positions(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        """Flat weight indices per channel, [channels, -1]: the entries of each output (``out``) or input
        (``in``) channel, in the weight's order."""
        raise NotImplementedError

    def channel_index(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        """For each weight entry (in the weight's shape), the output or input channel it belongs to."""
        positions = self.positions(shape, side)
        index = np.empty(positions.size, np.int64)
        index[positions] = np.arange(positions.shape[0])[:, None]
        return index.reshape(shape)

    def scale_outputs(self, weight: np.ndarray, scale: np.ndarray) -> np.ndarray:
        """W·s: every weight entry times the factor of its output channel, in float64."""
        w = np.asarray(weight, dtype=np.float64)
        scaled: np.ndarray = w * np.asarray(scale, dtype=np.float64)[self.channel_index(w.shape, "out")]
        return scaled

    def bias_term(self, bias: np.ndarray | None, channels: int) -> np.ndarray | None:
        """What input 2 adds after the product, in float64 (Gemm's β·C); None when nothing."""
        return None if bias is None else self.beta * np.asarray(bias, np.float64)

    def weight_problem(self, shape: tuple[int, ...]) -> str | None:
        """Why a weight of ``shape`` does not fit this op, as words after the node's name; None if it fits."""
        if len(shape) < 2:
            return f"has a weight of rank {len(shape)}; a {self.op_type} weight has rank 2 or more"
        return None

    @property
    def kernel_groups(self) -> int:
        """How many groups split axis 0 of the weight into separate kernels (a ConvTranspose's group)."""
        return 1


@dataclass(frozen=True, kw_only=True)
class Conv(LinearOp):
    op_type: ClassVar[str] = "Conv"
    channel_bias: ClassVar[bool] = True
    grouped_side: ClassVar[str] = "output"
    """Which channels axis 0 counts, and the groups split."""

    def output_axis(self, ndim: int) -> int:
        return 0

    def output_rank(self, weight_ndim: int) -> int | None:
        return weight_ndim

    def positions(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        flat = _flat(shape)
        return flat.reshape(shape[0], -1) if side == "out" else _grouped(flat, self.group)

    def bias_term(self, bias: np.ndarray | None, channels: int) -> np.ndarray | None:
        return np.zeros(channels) if bias is None else np.asarray(bias, np.float64)

    def weight_problem(self, shape: tuple[int, ...]) -> str | None:
        if len(shape) < 3:
            return f"has a weight of shape {_shape(shape)}; a convolution weight has rank 3 or more"
        if self.group < 1 or shape[0] % self.group:
            return (f"has {shape[0]} {self.grouped_side} channels, which do not split into "
                    f"{self.group} groups")
        return None


@dataclass(frozen=True, kw_only=True)
class ConvTranspose(Conv):
    op_type: ClassVar[str] = "ConvTranspose"
    grouped_side: ClassVar[str] = "input"

    def output_axis(self, ndim: int) -> int:
        return 1

    def output_channels(self, shape: tuple[int, ...]) -> int:
        return int(shape[1]) * self.group

    def positions(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        flat = _flat(shape)
        return flat.reshape(shape[0], -1) if side == "in" else _grouped(flat, self.group)

    @property
    def kernel_groups(self) -> int:
        return self.group


@dataclass(frozen=True, kw_only=True)
class Gemm(LinearOp):
    op_type: ClassVar[str] = "Gemm"

    def output_axis(self, ndim: int) -> int:
        return 0 if self.trans_b else 1

    def positions(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        flat = _flat(shape)
        rows = flat.T if self.trans_b else flat  # rows of B' = B or Bᵀ: one per input channel
        return rows if side == "in" else rows.T

    def weight_problem(self, shape: tuple[int, ...]) -> str | None:
        if len(shape) != 2:
            return f"has a weight of rank {len(shape)}; a Gemm weight has rank 2"
        if self.trans_a not in (0, 1) or self.trans_b not in (0, 1):
            return "has an invalid transA or transB"
        return None


@dataclass(frozen=True, kw_only=True)
class MatMul(LinearOp):
    op_type: ClassVar[str] = "MatMul"

    def output_axis(self, ndim: int) -> int:
        return max(ndim - 1, 0)

    def output_rank(self, weight_ndim: int) -> int | None:
        return None

    def positions(self, shape: tuple[int, ...], side: str) -> np.ndarray:
        flat = _flat(shape)
        axis = -1 if side == "out" else -2
        return np.moveaxis(flat, axis, 0).reshape(shape[axis], -1)


LINEAR_OPS: dict[str, type[LinearOp]] = {cls.op_type: cls for cls in (Conv, ConvTranspose, Gemm, MatMul)}
"""The linear op types, by name."""
LINEAR_OP_TYPES: tuple[str, ...] = tuple(LINEAR_OPS)


def linear_op(node: Node) -> LinearOp | None:
    """The node's linear op with its attributes, whatever its weight; None for any other op."""
    cls = LINEAR_OPS.get(node.op_type)
    if cls is None or node.domain not in ("", "ai.onnx"):
        return None
    return cls(group=int(node.attr("group", 1) or 1), trans_a=int(node.attr("transA", 0) or 0),
               trans_b=int(node.attr("transB", 0) or 0), alpha=float(node.attr("alpha", 1.0)),
               beta=float(node.attr("beta", 1.0)))


@dataclass(frozen=True)
class LinearWeight:
    """A linear layer's weight as read, or why the node is not one (then ``value`` may be None)."""

    value: np.ndarray | None
    problem: str | None


def read_weight(graph: Graph, node: Node, op: LinearOp) -> LinearWeight:
    """``node``'s weight (it is a ``op``), checked once for every caller that goes on to use it."""
    if len(node.inputs) < 2 or not node.inputs[1]:
        return LinearWeight(None, "has no weight input")
    weight = graph.constant_value(node.inputs[1])
    if weight is None:
        return LinearWeight(None, "has a weight that is not a constant")
    if weight.dtype.kind != "f":
        return LinearWeight(weight, f"has a {weight.dtype} weight, not a float one")
    return LinearWeight(weight, op.weight_problem(tuple(weight.shape)))


def weight_refusal(graph: Graph, node: Node, op: LinearOp) -> str | None:
    """Why ``node`` (a ``op``) is not a linear layer of ``graph``, as words after its name; None if it is."""
    return read_weight(graph, node, op).problem


def linear_layer(graph: Graph, node: Node) -> LinearOp | None:
    """The one test of a linear layer: a Conv, ConvTranspose, Gemm or MatMul whose weight is a float
    constant of a shape its op accepts. Its op says which weight axis holds the output channels."""
    op = linear_op(node)
    if op is None or weight_refusal(graph, node, op) is not None:
        return None
    return op


def nothing_found(verb: str, graph: Graph, op_types: tuple[str, ...] | list[str], weight: str) -> str:
    """Why there is nothing to ``verb`` in ``graph``'s main graph, naming the layers that sit in If/Loop/Scan
    bodies (which quantize and binarize do not reach) so that a model made of branches is not a mystery."""
    message = f"nothing to {verb}: no {', '.join(op_types)} with a constant {weight} weight outside the exclusions"
    owners: dict[str, int] = {}
    for node in graph.nodes:
        for body in node.all_subgraphs():
            found = sum(1 for g in body.walk() for n in g.nodes if n.op_type in op_types)
            if found:
                owners[node.label] = owners.get(node.label, 0) + found
    if owners:
        count = sum(owners.values())
        message += (f" in the main graph; {count} such layer{'s' if count != 1 else ''} sit inside the bodies of "
                    f"{', '.join(owners)}, which {verb} does not reach")
    return message
