"""fuse-rotary: a rotary position embedding written in pieces, replaced by one RotaryEmbedding.

The math. Let x's rotated width be d = 2h (all of the head dimension, or its first rotary_dim
channels) and c, s per-token tables of width h. The exporters write, with per-token C and S of
width d::

    rotate-half (GPT-NeoX, LLaMA):  out = x·C + Concat(−x[h:], x[:h])·S,        C = Concat(c, c)
    interleaved (GPT-J):            out = x·C + Stack(−x[1::2], x[0::2])·S,      C[2i] = C[2i+1] = c[i]

while RotaryEmbedding computes out[:h] = x1·c − x2·s and out[h:] = x2·c + x1·s from x's halves
(x1, x2), or from its pairs (x[2i], x[2i+1]) when interleaved. The two agree exactly when the
exported cos and sin repeat their first half in their second (their even channels in the odd
ones); the rule proves that from how they are made (Concat(f, f) or repeat_interleave before
Cos/Sin, a constant's values) and refuses where it cannot. Channels past rotary_dim pass through
unchanged (partial rotary, Phi-2): the op's ``rotary_embedding_dim``.

What the op reads. ONNX's RotaryEmbedding (opset 23) takes per-token tables [B, S, h] and no
position ids; they are x's cos and sin cut to their first half (or their even channels), expanded
to x's batch where that is not known to match. onnxruntime's com.microsoft RotaryEmbedding takes
caches [P, h] read at position_ids [B, S]: one batch row of the per-token table is such a cache,
read from row 0 on (position_ids = [0], the op's offset form), so no largest position needs
guessing. Where cos and sin are a Gather from a constant cache by position ids, either op takes
that cache (its first half) and those ids. x is [B, H, S, D] (cos unsqueezed on axis 1), [B, S, H,
D] (axis 2; reshaped to [B, S, H·D] and back) or [B, S, D] (one head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.graph import Graph, Node
from graphlens.core.types import Dim
from graphlens.matching.matcher import Match
from graphlens.rewrites.edit import GraphEdit, without_orphans
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site, fresh_name
from graphlens.rewrites.rules.transformers.common import Fused, TargetOp, TransformerFusion, target_op

INT64_MAX = 2**63 - 1
OP_TYPES = ("float32", "float16", "bfloat16")
"""The element types both RotaryEmbedding ops take."""
ELEMENTWISE = ("Cast", "Cos", "Sin", "Neg", "Identity")
"""Ops that keep a table repeating its halves (or pairs) if their input does."""
REPEATED = {False: "its first half in its second", True: "each even channel in the next odd one"}
"""What cos and sin must repeat, rotate-half and interleaved."""


@dataclass
class RotaryFused(Fused):
    """A :class:`Fused` that also adds initializers and a node after the op (x [B, S, H, D] reshaped back)."""

    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    after: list[onnx.NodeProto] = field(default_factory=list)


@dataclass
class Table:
    """Where the op's cos (or sin) comes from.

    Exactly one of: ``half``, a tensor holding the [B, S, h] values; ``full``, a [B, S, d] tensor
    proven to repeat its halves (pairs), to be cut; ``value``, constant [B, S, h] values. ``cache``
    [P, h] with ``positions`` is there besides when the table is a Gather from a constant cache.
    """

    half: str | None = None
    full: str | None = None
    value: np.ndarray | None = None
    cache: np.ndarray | None = None
    positions: str | None = None
    head_axis: int | None = None
    """x's head axis the table broadcasts over: 1 ([B, H, S, D]), 2 ([B, S, H, D]), None (3-D x)."""

    def dims(self, graph: Graph) -> tuple[Dim, Dim]:
        """The table's batch and sequence dims."""
        if self.value is not None:
            return self.value.shape[0], self.value.shape[1]
        shape = dims_of(graph, self.half or self.full or "")
        return (shape[0], shape[1]) if shape is not None and len(shape) == 3 else (None, None)


# ---------------------------------------------------------------------------------- constants
def ints(graph: Graph, tensor: str) -> list[int] | None:
    """A small integer constant's values, also behind a CastLike (as the dynamo exporter writes them)."""
    value = graph.constant_value(tensor)
    if value is None:
        found = graph.producer(tensor)
        if found is None or found[0].op_type != "CastLike":
            return None
        value = graph.constant_value(found[0].inputs[0])
    return None if value is None or value.size > 8 else [int(v) for v in np.asarray(value).reshape(-1)]


def dims_of(graph: Graph, tensor: str, depth: int = 0) -> tuple[Dim, ...] | None:
    """The tensor's dims: its type's, completed through the shape-only and elementwise ops that made it.

    Shape inference stops at the com.microsoft ops earlier fusions write; Reshapes to constant shapes
    still say what x and the tables are.
    """
    shape = graph.tensor_type(tensor).shape
    found = graph.producer(tensor)
    if (shape is not None and all(isinstance(d, int) for d in shape)) or found is None or depth > 8:
        return shape
    node, op = found[0], found[0].op_type
    source = scaled(graph, node) or (node.inputs[0] if node.inputs else "")
    inner = dims_of(graph, source, depth + 1) if source else None
    derived: tuple[Dim, ...] | None = None
    if op in ELEMENTWISE or scaled(graph, node):
        derived = inner
    elif op == "Transpose" and inner is not None:
        derived = tuple(inner[p] for p in node.attrs.get("perm", range(len(inner) - 1, -1, -1)))
    elif op == "Reshape" and (target := ints(graph, node.inputs[1])) is not None:
        copy = not node.attrs.get("allowzero", 0) and inner is not None
        derived = tuple(d if d > 0 else inner[i] if d == 0 and copy and i < len(inner) else None
                        for i, d in enumerate(target))
    elif op == "Concat" and inner is not None and is_last(int(node.attrs.get("axis", 0)), len(inner)):
        widths = [(dims_of(graph, t, depth + 1) or (None,))[-1] for t in node.inputs]
        derived = (*inner[:-1], sum(widths) if all(isinstance(w, int) for w in widths) else None)
    if derived is None or shape is None or len(shape) != len(derived):
        return derived or shape
    return tuple(e if isinstance(e, int) or d is None else d for d, e in zip(shape, derived))


def scaled(graph: Graph, node: Node) -> str | None:
    """x where ``node`` is x·k or x/k for a scalar constant k (a scaling such as LongRoPE's), else None."""
    if node.op_type not in ("Mul", "Div") or len(node.inputs) != 2:
        return None
    shapes = [graph.tensor_type(t).shape for t in node.inputs]
    k = [t for t, shape in zip(node.inputs, shapes)
         if shape is not None and all(d == 1 for d in shape) and graph.constant_value(t) is not None]
    rest = [t for t in node.inputs if t not in k]
    return rest[0] if k and len(rest) == 1 and (node.op_type == "Mul" or rest[0] == node.inputs[0]) else None


def rank_of(graph: Graph, tensor: str) -> int | None:
    dims = dims_of(graph, tensor)
    return None if dims is None else len(dims)


def producer(graph: Graph, tensor: str, *ops: str) -> Node | None:
    found = graph.producer(tensor)
    return found[0] if found is not None and found[0].op_type in ops else None


def axis_of(graph: Graph, node: Node) -> int | None:
    """The single axis of an Unsqueeze (attribute or input), else None."""
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        axes = ints(graph, node.inputs[1])
    return int(axes[0]) if axes is not None and len(axes) == 1 else None


def is_last(axis: int | None, rank: int | None) -> bool:
    return axis is not None and (axis == -1 or (rank is not None and axis == rank - 1))


def same(a: Dim, b: Dim) -> bool:
    return a is not None and a == b


def cut(graph: Graph, node: Node, rank: int) -> tuple[int, int, int] | str:
    """(start, end, step) of a Slice along the last axis, or the end of a sentence saying why not."""
    if "starts" in node.attrs:  # opset < 10
        bounds = [node.attrs.get(k) for k in ("starts", "ends", "axes")] + [[1]]
    else:
        padded = [*node.inputs, "", "", "", ""]
        bounds = [ints(graph, t) if t else None for t in padded[1:5]]
        for role, t, b in zip(("start", "end", "axis", "step"), padded[1:5], bounds):
            if t and b is None:
                return f"slices with its {role} '{t}', which {graph.why_not_constant(t) or 'is not a small constant'}"
    starts, ends, axes, steps = bounds
    if len(starts) != 1 or len(ends) != 1:
        return "slices more than one axis"
    axis = int(axes[0]) if axes else 0
    if not is_last(axis, rank):
        return f"slices axis {axis}, not the last"
    return int(starts[0]), int(ends[0]), int(steps[0]) if steps else 1


def span(start: int, end: int, step: int, width: int) -> str:
    """x[..., start:end:step] as Python writes it (an end past the width left out)."""
    return f"x[..., {start}:{'' if end >= width else end}{'' if step == 1 else f':{step}'}]"


# ------------------------------------------------------------------------------ cos and sin
def repeats(value: np.ndarray, d: int, interleaved: bool) -> bool:
    """Whether a constant table of width d repeats its first half in its second (even channels in the odd)."""
    second = value[..., 1::2] if interleaved else value[..., d // 2 :]
    return value.shape[-1] == d and bool(np.array_equal(halve(value, interleaved), second))


def halve(value: np.ndarray, interleaved: bool) -> np.ndarray:
    return value[..., 0::2] if interleaved else value[..., : value.shape[-1] // 2]


def duplicated_from(graph: Graph, tensor: str, interleaved: bool) -> str | None:
    """x when ``tensor`` is Concat(x, x) on the last axis, or x repeat-interleaved by 2 on it (GPT-J)."""
    rank = rank_of(graph, tensor)
    if not interleaved:
        node = producer(graph, tensor, "Concat")
        same_twice = node is not None and len(node.inputs) == 2 and node.inputs[0] == node.inputs[1]
        return node.inputs[0] if same_twice and is_last(int(node.attrs.get("axis", 0)), rank) else None
    flat = producer(graph, tensor, "Reshape")  # Reshape(Expand|Tile(Unsqueeze(x, -1), [1, .., 2])): repeat_interleave
    paired = flat and producer(graph, flat.inputs[0], "Expand", "Tile")
    unsqueeze = paired and producer(graph, paired.inputs[0], "Unsqueeze")
    if not unsqueeze:
        return None
    source = unsqueeze.inputs[0]
    source_rank = rank_of(graph, source)
    reps = ints(graph, paired.inputs[1])
    if source_rank is None or rank != source_rank or not is_last(axis_of(graph, unsqueeze), source_rank + 1):
        return None
    return source if reps is not None and reps[-1] == 2 and all(r == 1 for r in reps[:-1]) else None


def why_not_repeating(graph: Graph, tensor: str, d: int, interleaved: bool, depth: int = 0) -> str | None:
    """None when ``tensor`` is known to repeat its halves (pairs), else the end of a sentence naming what stops the proof."""
    if duplicated_from(graph, tensor, interleaved) is not None:
        return None
    value = graph.constant_value(tensor)
    if value is not None:
        return None if repeats(value, d, interleaved) else \
            f"{'comes from' if depth else 'is'} a constant that does not repeat {REPEATED[interleaved]}"
    found = graph.producer(tensor)
    node = found[0] if found is not None and depth < 12 else None
    rows = node is not None and node.op_type == "Gather" and int(node.attrs.get("axis", 0)) == 0  # rows of a table
    if node is not None and (node.op_type in ELEMENTWISE or rows or scaled(graph, node)):
        return why_not_repeating(graph, scaled(graph, node) or node.inputs[0], d, interleaved, depth + 1)
    source = node.label if node is not None else f"graph input '{tensor}'" if graph.is_graph_input(tensor) else f"'{tensor}'"
    return f"comes from {source}: nothing shows it to repeat {REPEATED[interleaved]}, as RotaryEmbedding assumes"


def gathered(graph: Graph, tensor: str) -> tuple[np.ndarray, str] | None:
    """(table, position ids) when ``tensor`` is Gather(constant 2-D table, int64 ids) on axis 0, maybe Cast."""
    cast = producer(graph, tensor, "Cast")
    gather = producer(graph, cast.inputs[0] if cast else tensor, "Gather")
    if gather is None or int(gather.attrs.get("axis", 0)) != 0:
        return None
    table = graph.constant_value(gather.inputs[0])
    ids = graph.tensor_type(gather.inputs[1]).dtype
    if table is None or table.ndim != 2 or ids != "int64" or rank_of(graph, gather.inputs[1]) != 2:
        return None
    return table, gather.inputs[1]


def trace(graph: Graph, tensor: str, x_rank: int, d: int, interleaved: bool, dtype: np.dtype) -> Table | str:
    """Where one of cos/sin comes from (see :class:`Table`), or the end of a sentence saying why it cannot be read."""
    value = graph.constant_value(tensor)
    if value is not None:
        return constant_table(value, x_rank, d, interleaved, dtype)
    head_axis, inner, half = None, tensor, None
    if x_rank == 4:
        source = duplicated_from(graph, tensor, interleaved) if interleaved else None
        unsqueeze = producer(graph, source or tensor, "Unsqueeze")
        head_axis = axis_of(graph, unsqueeze) if unsqueeze is not None else None
        head_axis = head_axis + 4 if head_axis is not None and head_axis < 0 else head_axis
        if head_axis not in (1, 2) or rank_of(graph, unsqueeze.inputs[0]) != 3:
            return f"is not a [batch, sequence, {d}] table unsqueezed on the heads' axis (1 or 2)"
        inner = unsqueeze.inputs[0]
        half = inner if source is not None else None
    elif rank_of(graph, tensor) != 3:
        return f"is not a [batch, sequence, {d}] table"
    if half is None:
        half = duplicated_from(graph, inner, interleaved)
    if half is None:
        reason = why_not_repeating(graph, inner, d, interleaved)
        if reason is not None:
            return reason
    found = gathered(graph, half or inner)
    cache = None if found is None else found[0] if half is not None else halve(found[0], interleaved)
    return Table(half=half, full=None if half else inner, head_axis=head_axis,
                 cache=None if cache is None else cache.astype(dtype), positions=found and found[1])


def constant_table(value: np.ndarray, x_rank: int, d: int, interleaved: bool, dtype: np.dtype) -> Table | str:
    """A constant cos/sin as a [B, S, h] table, with the head axis its shape shows."""
    if not repeats(value, d, interleaved):
        return f"is a constant that does not repeat {REPEATED[interleaved]}"
    if value.ndim != x_rank or (x_rank == 4 and value.shape[1] == value.shape[2] == 1):
        return f"is a constant of shape {list(value.shape)}, which does not say which axes of x it spans"
    if x_rank == 4:
        axis = 1 if value.shape[1] == 1 else 2 if value.shape[2] == 1 else None
        if axis is None:
            return f"is a constant of shape {list(value.shape)}, not one table for every head"
        return Table(value=halve(np.squeeze(value, axis), interleaved).astype(dtype), head_axis=axis)
    return Table(value=halve(value, interleaved).astype(dtype))


# ------------------------------------------------------------------------------- the rule
class Shape(NamedTuple):
    """What the rule knows of a site: x, its dims, the rotated width d, the form."""

    x: str
    dims: tuple[Dim, ...]
    d: int
    interleaved: bool


class FuseRotary(TransformerFusion):
    """A rotary embedding (rotate-half, interleaved, partial) → RotaryEmbedding, standard or com.microsoft."""

    name = "fuse-rotary"
    description = ("replace a rotary position embedding written in pieces (rotate-half, interleaved, partial) "
                   "by RotaryEmbedding (opset 23) or onnxruntime's com.microsoft RotaryEmbedding (off by default)")
    pattern_names = ("rotary-partial", "rotary-embedding", "rotary-interleaved")
    kind = "rotary-embedding"
    anchor_ops = ("Neg",)

    def fuse(self, site: Site) -> RotaryFused | Refusal:
        shape = self._shape(site)
        if isinstance(shape, Refusal):
            return shape
        target = target_op(site, ("RotaryEmbedding", 23), "RotaryEmbedding")
        if isinstance(target, Refusal):
            return target
        dtype = next((t.dtype for t in map(site.graph.tensor_type, (shape.x, site.tensor("cos"))) if t.dtype), None)
        if dtype not in OP_TYPES:
            return site.refuse(f"{site.node('out').label} works in {dtype or 'an unknown type'}, "
                               f"and RotaryEmbedding takes only {', '.join(OP_TYPES)}")
        np_dtype = np.dtype(np.float32) if dtype == "bfloat16" else np.dtype(dtype)
        tables = []
        for label, mul in (("cos", "x_cos"), ("sin", "rotated_sin")):
            table = trace(site.graph, site.tensor(label), len(shape.dims), shape.d, shape.interleaved, np_dtype)
            if isinstance(table, str):
                return site.refuse(f"{site.node(mul).label} multiplies by {label} '{site.tensor(label)}', which {table}")
            tables.append(table)
        if tables[0].head_axis != tables[1].head_axis:
            return site.refuse(f"{site.node('out').label} reads cos and sin that span different axes of x")
        if dtype == "bfloat16" and any(t.value is not None or t.cache is not None for t in tables):
            return site.refuse(f"{site.node('out').label} would need a bfloat16 cache, which numpy cannot write")
        return Builder(site, shape, target, tables).build()

    def plan(self, match: Match) -> Plan | Refusal:
        """As :meth:`TransformerFusion.plan`, with the initializers and the node after the op a fusion may add."""
        site = Site(match, self)
        fused = self.fuse(site)
        if isinstance(fused, Refusal):
            return fused
        out = site.node("out")
        result = out.outputs[0]
        node = onnx.helper.make_node(fused.target.op, fused.inputs, fused.outputs or [result], name=out.name,
                                     domain=fused.target.domain or None, **fused.attrs)
        edit = GraphEdit(site.graph.path, self.name,
                         f"fuse the {match.pattern} ending at {out.label} into {fused.target.label}",
                         list(match.nodes.values()), [*fused.before, node, *fused.after],
                         initializers=fused.initializers, boundary=[(result, result)], site=dict(match.nodes),
                         kind=self.kind)
        return without_orphans(site.graph, edit)

    # ------------------------------------------------------------------ the matched structure
    def _shape(self, site: Site) -> Shape | Refusal:
        """x, its dims and the rotated width, after checking every Slice, Concat and Reshape of the match."""
        x = site.tensor("x")
        dims = dims_of(site.graph, x)
        if dims is None or len(dims) not in (3, 4) or not isinstance(dims[-1], int):
            shown = "unknown" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
            return site.refuse(f"{site.node('x1' if site.node('x_rot') is None else 'x_rot').label} slices "
                               f"'{x}' of shape {shown}, not a [batch, (heads,) sequence, head_dim] tensor "
                               "with a known head_dim")
        rank, width = len(dims), dims[-1]
        interleaved = site.node("pairs") is not None
        d = width
        if site.node("x_rot") is not None:
            d = self._partial_width(site, rank, width)
            if isinstance(d, Refusal):
                return d
        if d % 2:
            return site.refuse(f"{site.node('x1').label} splits {d} channels, an odd rotary width")
        wrong = self._halves(site, rank, d, interleaved)
        return wrong if wrong is not None else Shape(x, tuple(dims), d, interleaved)

    def _partial_width(self, site: Site, rank: int, width: int) -> int | Refusal:
        """rotary_dim: x_rot = x[..., :rotary_dim] and x_pass = x[..., rotary_dim:]."""
        rot, rest, out = site.node("x_rot"), site.node("x_pass"), site.node("out")
        bounds = [cut(site.graph, node, rank) for node in (rot, rest)]
        for node, found in zip((rot, rest), bounds):
            if isinstance(found, str):
                return site.refuse(f"{node.label} {found}")
        (start, end, step), (rest_start, rest_end, rest_step) = bounds
        if (start, step, rest_step) != (0, 1, 1) or not 0 < end < width or rest_start != end or rest_end < width:
            return site.refuse(f"{rot.label} and {rest.label} do not split x's {width} channels at one point "
                               f"(x[..., :{end}] and x[..., {rest_start}:])")
        if not is_last(int(out.attrs.get("axis", 0)), rank) or out.inputs[0] != site.node("rope").outputs[0]:
            return site.refuse(f"{out.label} does not put the rotated channels first on the last axis")
        return end

    def _halves(self, site: Site, rank: int, d: int, interleaved: bool) -> Refusal | None:
        """x1, x2 are x's halves (rotate-half) or its even and odd channels (interleaved), re-joined as the op does."""
        first, second = site.node("x1"), site.node("x2")
        want = [(0, d // 2, 1), (d // 2, d, 1)] if not interleaved else [(0, d, 2), (1, d, 2)]
        for node, (start, end, step) in zip((first, second), want):
            found = cut(site.graph, node, rank)
            if isinstance(found, str):
                return site.refuse(f"{node.label} {found}")
            if found[0] != start or found[2] != step or (found[1] < end if end == d else found[1] != end):
                return site.refuse(f"{node.label} takes {span(*found, d)} where the rotation over {d} channels "
                                   f"needs {span(start, end, step, d)}")
        concat = site.node("rotated")
        if not interleaved and not is_last(int(concat.attrs.get("axis", 0)), rank):
            return site.refuse(f"{concat.label} joins −x2 and x1 on axis {concat.attrs.get('axis', 0)}, not the last")
        return self._pairs(site, rank, d) if interleaved else None

    def _pairs(self, site: Site, rank: int, d: int) -> Refusal | None:
        """(−x2, x1) stacked on a new last axis and flattened back: any other stacking is not an interleave."""
        pairs, flat = site.node("pairs"), site.node("rotated")
        axes = [int(pairs.attrs.get("axis", 0))]
        axes += [axis_of(site.graph, site.node(label)) for label in ("neg_pair", "x1_pair") if site.node(label)]
        if not all(a is not None and is_last(a, rank + 1) for a in axes):
            return site.refuse(f"{pairs.label} stacks −x2 and x1 on axis {axes[-1] if axes[-1] is not None else '?'}, "
                               "not a new last axis: an interleave the rotary op cannot express")
        out_shape = dims_of(site.graph, flat.outputs[0])
        if out_shape is None:
            return site.refuse(f"the shape {flat.label} gives is unknown, so it may not flatten the pairs back")
        if len(out_shape) != rank or out_shape[-1] != d:
            return site.refuse(f"{flat.label} reshapes the pairs to {list(out_shape)}, not back to x's shape")
        return None


class Builder:
    """The fused node's inputs and attributes at one site, and the few nodes and initializers they need."""

    def __init__(self, site: Site, shape: Shape, target: TargetOp, tables: list[Table]) -> None:
        self.site, self.shape, self.target, self.tables = site, shape, target, tables
        self.graph, self.out = site.graph, site.node("out")
        self.contrib = bool(target.domain)
        self.head_axis = tables[0].head_axis
        self.seq_axis = 2 if self.head_axis == 1 else 1
        self.taken: set[str] = set()
        self.before: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}

    def build(self) -> RotaryFused | Refusal:
        shape, out = self.shape, self.out
        attrs: dict[str, int] = {"interleaved": 1} if shape.interleaved else {}
        if shape.d < shape.dims[-1]:
            attrs["rotary_embedding_dim"] = shape.d
        heads = shape.dims[self.head_axis] if self.head_axis is not None else 1
        three_d = self.head_axis != 1  # [B, S, D] as is, [B, S, H, D] reshaped to [B, S, H·D]
        if not isinstance(heads, int) and (three_d or (self.contrib and "rotary_embedding_dim" in attrs)):
            return self.site.refuse(f"{out.label} rotates '{shape.x}', whose head count is unknown, and "
                                    f"{self.target.label} needs it as num_heads")
        if isinstance(heads, int) and (three_d or self.contrib):
            attrs["num_heads"] = heads
        x, outputs, after = shape.x, None, []
        if self.head_axis == 2:
            x = self.node("Reshape", [x, self.const("rotary_merge_heads", np.array([0, 0, -1], np.int64))], "merged")
            mid = fresh_name(self.graph, f"{out.outputs[0]}_merged", self.taken)
            back = self.const(f"rotary_split_heads_{heads}x{shape.dims[-1]}", np.array([0, 0, heads, shape.dims[-1]], np.int64))
            after = [onnx.helper.make_node("Reshape", [mid, back], [out.outputs[0]], name=f"{out.name}/split_heads")]
            outputs = [mid]
        found = self.caches()
        if isinstance(found, Refusal):
            return found
        cos, sin, positions = found
        inputs = [x, positions, cos, sin] if self.contrib else [x, cos, sin] + ([positions] if positions else [])
        return RotaryFused(self.target, inputs, attrs, outputs, self.before, initializers=self.inits, after=after)

    def caches(self) -> tuple[str, str, str | None] | Refusal:
        """cos, sin and position ids as the target op takes them (see the module docstring)."""
        cos, sin = self.tables
        x_batch, x_seq = self.shape.dims[0], self.shape.dims[self.seq_axis]
        if cos.cache is not None and sin.cache is not None and cos.positions == sin.positions:
            ids = dims_of(self.graph, cos.positions) or (None, None)
            if same(ids[0], x_batch) and same(ids[1], x_seq):
                return self.const(f"{cos.positions}_rotary_cos", cos.cache), \
                    self.const(f"{cos.positions}_rotary_sin", sin.cache), cos.positions
        dims = [table.dims(self.graph) for table in self.tables]
        if not self.contrib:
            halves = [self.half(table, label) for table, label in zip(self.tables, ("cos", "sin"))]
            if all(same(b, x_batch) and same(s, x_seq) for b, s in dims):
                return halves[0], halves[1], None
            target = self.batch_and_sequence()
            return *(self.node("Expand", [h, target], f"{label}_expanded") for h, label in zip(halves, ("cos", "sin"))), None
        (batch, seq), why = dims[0], None
        if not all(same(s, x_seq) for _, s in dims):
            why = f"whose sequence length ({seq}) is not known to be x's ({x_seq})"
        elif all(same(b, 1) for b, _ in dims):
            positions = np.zeros(1, np.int64)  # row 0 of the cache is token 0's: the op's offset form
        elif all(isinstance(b, int) and same(b, x_batch) for b, _ in dims) and isinstance(x_seq, int):
            positions = np.arange(x_batch * x_seq, dtype=np.int64).reshape(x_batch, x_seq)
        else:
            why = f"whose table differs per batch row over a batch of unknown size ({batch})"
        if why is not None:
            return self.site.refuse(f"{self.site.node('x_cos').label} reads cos '{self.site.tensor('cos')}', {why}, "
                                    f"so it cannot become the one cache {self.target.label} reads")
        flat = [self.flat(table, label) for table, label in zip(self.tables, ("cos", "sin"))]
        return flat[0], flat[1], self.const(f"rotary_positions_{'x'.join(map(str, positions.shape))}", positions)

    def half(self, table: Table, label: str) -> str:
        """The [B, S, h] table: as found, a constant, or the full one cut to its first half (even channels)."""
        if table.half is not None:
            return table.half
        if table.value is not None:
            return self.const(f"{self.site.tensor(label)}_rotary_half", table.value)
        assert table.full is not None
        d = self.shape.d
        end, step = (INT64_MAX, 2) if self.shape.interleaved else (d // 2, 1)
        bounds = [self.const(f"rotary_slice_{name}_{v}", np.array([v], np.int64))
                  for name, v in (("start", 0), ("end", end), ("axis", -1), ("step", step))]
        return self.node("Slice", [table.full, *bounds], f"{label}_half")

    def flat(self, table: Table, label: str) -> str:
        """The [B·S, h] cache com.microsoft's op reads: the per-token table with its batch and sequence merged."""
        h = self.shape.d // 2
        if table.value is not None:
            return self.const(f"{self.site.tensor(label)}_rotary_cache", table.value.reshape(-1, h))
        shape = self.const(f"rotary_cache_shape_{h}", np.array([-1, h], np.int64))
        return self.node("Reshape", [self.half(table, label), shape], f"{label}_cache")

    def batch_and_sequence(self) -> str:
        """[x's batch, x's sequence, 1]: the shape the per-token tables expand to."""
        x_batch, x_seq = self.shape.dims[0], self.shape.dims[self.seq_axis]
        if isinstance(x_batch, int) and isinstance(x_seq, int):
            return self.const(f"rotary_tokens_{x_batch}x{x_seq}", np.array([x_batch, x_seq, 1], np.int64))
        shape = self.node("Shape", [self.shape.x], "x_shape")
        picked = self.node("Gather", [shape, self.const(f"rotary_token_axes_{self.seq_axis}",
                                                          np.array([0, self.seq_axis], np.int64))], "tokens", axis=0)
        return self.node("Concat", [picked, self.const("rotary_one", np.ones(1, np.int64))], "token_shape", axis=0)

    def node(self, op: str, inputs: list[str], what: str, **attrs: int) -> str:
        """A node placed before the fused one; its output's name."""
        output = fresh_name(self.graph, f"{self.out.outputs[0]}_{what}", self.taken)
        self.before.append(onnx.helper.make_node(op, inputs, [output], name=f"{self.out.name}/{what}", **attrs))
        return output

    def const(self, base: str, value: np.ndarray) -> str:
        """An initializer named for its content, so sites that need the same one share it."""
        name, k = base, 2
        while True:
            existing = self.inits.get(name)
            if existing is None and name in self.graph.initializers and not self.graph.is_graph_input(name):
                existing = self.graph.initializers[name]
            if existing is not None:
                have = numpy_helper.to_array(existing)
                if have.dtype == value.dtype and np.array_equal(have, value):
                    return name
            elif not self.graph.is_defined(name):
                self.inits[name] = numpy_helper.from_array(np.ascontiguousarray(value), name)
                return name
            name, k = f"{base}_{k}", k + 1


RULES: tuple[Rule, ...] = (FuseRotary(),)
