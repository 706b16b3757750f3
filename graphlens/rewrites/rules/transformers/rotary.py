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

Where x is only the heads view of a projection [B, S, H·D] (Reshape to [B, S, H, D], then maybe
Transpose to [B, H, S, D], read by nothing else), the op rotates the projection itself (num_heads
says the heads; it rotates each head as before) and the same view follows it: attention then reads
the rotated [B, S, H·D] tensor, as MultiHeadAttention and Attention take their query.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import onnx
from onnx import numpy_helper

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import Dim
from graphlens.rewrites.rule import Refusal, Rule, Site, clone_node, fresh_name
from graphlens.rewrites.rules.fusion import Fused, Fusion, TargetOp, target_op
from graphlens.rewrites.rules.transformers.common import written_by
from graphlens.rewrites.rules.transformers.graph_dims import dims_of, is_last
from graphlens.rewrites.rules.transformers.rotary_tables import (
    INT64_MAX,
    Table,
    axis_of,
    cut,
    heads_view,
    same,
    span,
    trace,
)

OP_TYPES = ("float32", "float16", "bfloat16")
"""The element types both RotaryEmbedding ops take."""


# ------------------------------------------------------------------------------- the rule
class Shape(NamedTuple):
    """What the rule knows of a site: x, its dims and head_dim (its last dim), the rotated width d, the form."""

    x: str
    dims: tuple[Dim, ...]
    width: int
    d: int
    interleaved: bool


class FuseRotary(Fusion):
    """A rotary embedding (rotate-half, interleaved, partial) → RotaryEmbedding, standard or com.microsoft."""

    name = "fuse-rotary"
    description = ("replace a rotary position embedding written in pieces (rotate-half, interleaved, partial) "
                   "by RotaryEmbedding (opset 23) or onnxruntime's com.microsoft RotaryEmbedding (off by default)")
    pattern_names = ("rotary-partial", "rotary-embedding", "rotary-interleaved")
    kind = "rotary-embedding"
    family = "rotary embedding"
    fused_ops = ("RotaryEmbedding",)
    anchor_ops = ("Neg",)

    def already_fused(self, graph: Graph) -> int:
        """RotaryEmbedding nodes, and the GroupQueryAttention nodes that rotate Q and K themselves (do_rotary)."""
        attention = (graph.by_name[name] for name in graph.nodes_by_op().get("GroupQueryAttention", ()))
        return super().already_fused(graph) + sum(1 for node in attention if node.attrs.get("do_rotary"))

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A Neg of one half of x (a Slice, Split or Gather) that is put back beside the other (Concat, or
        Unsqueeze and Concat): rotate-half; not any negation."""
        halves = ("Slice", "Split", "Gather")
        rejoined = ("Concat", "Unsqueeze", "SequenceConstruct")
        dtype = graph.tensor_type(node.inputs[0]).dtype if node.inputs else None
        if dtype is not None and not dtype.startswith(("float", "bfloat")):
            return False  # integers negated (T5's relative position buckets) are not a rotation
        return (bool(node.inputs) and written_by(graph, node.inputs[0], lambda n: n.op_type in halves)
                and any(reader.op_type in rejoined for reader, _ in graph.consumers(node.outputs[0])))

    def fuse(self, site: Site) -> Fused | Refusal:
        shape = self._shape(site)
        if isinstance(shape, Refusal):
            return shape
        target = target_op(site, "RotaryEmbedding", "RotaryEmbedding")
        if isinstance(target, Refusal):
            return target
        dtype = next((t.dtype for t in map(site.graph.tensor_type, (shape.x, site.value("cos"))) if t.dtype), None)
        if dtype is None or dtype not in OP_TYPES:
            return site.refuse(f"{site.matched('out').label} works in {dtype or 'an unknown type'}, "
                               f"and RotaryEmbedding takes only {', '.join(OP_TYPES)}")
        np_dtype = np.dtype(np.float32) if dtype == "bfloat16" else np.dtype(dtype)
        tables = []
        for label, mul in (("cos", "x_cos"), ("sin", "rotated_sin")):
            table = trace(site.graph, site.value(label), len(shape.dims), shape.d, shape.interleaved, np_dtype)
            if isinstance(table, str):
                return site.refuse(f"{site.matched(mul).label} multiplies by "
                                   f"{label} '{site.value(label)}', which {table}")
            tables.append(table)
        if tables[0].head_axis != tables[1].head_axis:
            return site.refuse(f"{site.matched('out').label} reads cos and sin that span different axes of x")
        if dtype == "bfloat16" and any(t.value is not None or t.cache is not None for t in tables):
            return site.refuse(f"{site.matched('out').label} would need a bfloat16 cache, which numpy cannot write")
        return Builder(site, shape, target, tables).build()

    # ------------------------------------------------------------------ the matched structure
    def _shape(self, site: Site) -> Shape | Refusal:
        """x, its dims and the rotated width, after checking every Slice, Concat and Reshape of the match."""
        x = site.value("x")
        dims = dims_of(site.graph, x)
        width = dims[-1] if dims is not None and len(dims) in (3, 4) else None
        if dims is None or not isinstance(width, int):
            shown = "unknown" if dims is None else "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
            return site.refuse(f"{site.matched('x1' if site.node('x_rot') is None else 'x_rot').label} slices "
                               f"'{x}' of shape {shown}, not a [batch, (heads,) sequence, head_dim] tensor "
                               "with a known head_dim")
        rank = len(dims)
        interleaved = site.node("pairs") is not None
        d = width
        if site.node("x_rot") is not None:
            partial = self._partial_width(site, rank, width)
            if isinstance(partial, Refusal):
                return partial
            d = partial
        if d % 2:
            return site.refuse(f"{site.matched('x1').label} splits {d} channels, an odd rotary width")
        wrong = self._halves(site, rank, d, interleaved)
        return wrong if wrong is not None else Shape(x, tuple(dims), width, d, interleaved)

    def _partial_width(self, site: Site, rank: int, width: int) -> int | Refusal:
        """rotary_dim: x_rot = x[..., :rotary_dim] and x_pass = x[..., rotary_dim:]."""
        rot, rest, out = site.matched("x_rot"), site.matched("x_pass"), site.matched("out")
        kept, passed = cut(site.graph, rot, rank), cut(site.graph, rest, rank)
        if isinstance(kept, str):
            return site.refuse(f"{rot.label} {kept}")
        if isinstance(passed, str):
            return site.refuse(f"{rest.label} {passed}")
        (start, end, step), (rest_start, rest_end, rest_step) = kept, passed
        if (start, step, rest_step) != (0, 1, 1) or not 0 < end < width or rest_start != end or rest_end < width:
            return site.refuse(f"{rot.label} and {rest.label} do not split x's {width} channels at one point "
                               f"(x[..., :{end}] and x[..., {rest_start}:])")
        if not is_last(int(out.attrs.get("axis", 0)), rank) or out.inputs[0] != site.matched("rope").outputs[0]:
            return site.refuse(f"{out.label} does not put the rotated channels first on the last axis")
        return end

    def _halves(self, site: Site, rank: int, d: int, interleaved: bool) -> Refusal | None:
        """x1, x2 are x's halves (rotate-half) or its even and odd channels (interleaved), re-joined as the op does."""
        first, second = site.matched("x1"), site.matched("x2")
        want = [(0, d // 2, 1), (d // 2, d, 1)] if not interleaved else [(0, d, 2), (1, d, 2)]
        for node, (start, end, step) in zip((first, second), want):
            found = cut(site.graph, node, rank)
            if isinstance(found, str):
                return site.refuse(f"{node.label} {found}")
            if found[0] != start or found[2] != step or (found[1] < end if end == d else found[1] != end):
                return site.refuse(f"{node.label} takes {span(*found, d)} where the rotation over {d} channels "
                                   f"needs {span(start, end, step, d)}")
        concat = site.matched("rotated")
        if not interleaved and not is_last(int(concat.attrs.get("axis", 0)), rank):
            return site.refuse(f"{concat.label} joins −x2 and x1 on axis {concat.attrs.get('axis', 0)}, not the last")
        return self._pairs(site, rank, d) if interleaved else None

    def _pairs(self, site: Site, rank: int, d: int) -> Refusal | None:
        """(−x2, x1) stacked on a new last axis and flattened back: any other stacking is not an interleave."""
        pairs, flat = site.matched("pairs"), site.matched("rotated")
        axes: list[int | None] = [int(pairs.attrs.get("axis", 0))]
        axes += [axis_of(site.graph, node) for node in map(site.node, ("neg_pair", "x1_pair")) if node is not None]
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
        self.graph, self.out = site.graph, site.matched("out")
        self.contrib = bool(target.domain)
        self.head_axis = tables[0].head_axis
        self.seq_axis = 2 if self.head_axis == 1 else 1
        self.taken: set[str] = set()
        self.view = heads_view(self.graph, shape.x, self.head_axis, set(site.match.nodes.values()))
        self.before: list[onnx.NodeProto] = []
        self.inits: dict[str, onnx.TensorProto] = {}

    def build(self) -> Fused | Refusal:
        shape, out = self.shape, self.out
        attrs: dict[str, int] = {"interleaved": 1} if shape.interleaved else {}
        if shape.d < shape.width:
            attrs["rotary_embedding_dim"] = shape.d
        heads = shape.dims[self.head_axis] if self.head_axis is not None else 1
        three_d = self.head_axis != 1  # [B, S, D] as is, [B, S, H, D] reshaped to [B, S, H·D]
        if not isinstance(heads, int):
            if three_d or self.view is not None or (self.contrib and "rotary_embedding_dim" in attrs):
                return self.site.refuse(f"{out.label} rotates '{shape.x}', whose head count is unknown, and "
                                        f"{self.target.label} needs it as num_heads")
        elif three_d or self.contrib or self.view is not None:
            attrs["num_heads"] = heads
        x, outputs = shape.x, None
        after: list[onnx.NodeProto] = []
        replaced: list[str] = []
        if self.view is not None:  # rotate the 3-D tensor the heads are a view of; the same view after
            x, replaced = self.view[0], [node.name for node in self.view[1]]
            outputs, after = self.view_after()
        elif self.head_axis == 2:
            x = self.node("Reshape", [x, self.const("rotary_merge_heads", np.array([0, 0, -1], np.int64))], "merged")
            mid = fresh_name(self.graph, f"{out.outputs[0]}_merged", self.taken)
            back = self.const(f"rotary_split_heads_{heads}x{shape.width}",
                              np.array([0, 0, heads, shape.width], np.int64))
            after = [onnx.helper.make_node("Reshape", [mid, back], [out.outputs[0]], name=f"{out.name}/split_heads")]
            outputs = [mid]
        found = self.caches()
        if isinstance(found, Refusal):
            return found
        cos, sin, positions = found
        if self.contrib:
            assert positions is not None, "com.microsoft's op reads the caches at position ids"
            inputs = [x, positions, cos, sin]
        else:
            inputs = [x, cos, sin] + ([positions] if positions else [])
        return Fused(self.target, inputs, attrs, outputs, self.before, initializers=self.inits, after=after,
                           replaces=replaced)

    def view_after(self) -> tuple[list[str], list[onnx.NodeProto]]:
        """The op's 3-D output, and the heads view of x (its Reshape, then its Transpose) redone on it."""
        assert self.view is not None
        result = self.out.outputs[0]
        rotated = fresh_name(self.graph, f"{result}_flat", self.taken)
        tensor, after = rotated, []
        for node in reversed(self.view[1]):  # the Reshape first
            last = node is self.view[1][0]
            output = result if last else fresh_name(self.graph, f"{result}_{node.op_type.lower()}", self.taken)
            after.append(clone_node(node, inputs=[tensor, *node.inputs[1:]], outputs=[output],
                                    name=f"{self.out.name}/"
                                         f"{'to_heads' if node.op_type == 'Transpose' else 'split_heads'}"))
            tensor = output
        return [rotated], after

    def caches(self) -> tuple[str, str, str | None] | Refusal:
        """cos, sin and position ids as the target op takes them (see the module docstring)."""
        cos, sin = self.tables
        x_batch, x_seq = self.shape.dims[0], self.shape.dims[self.seq_axis]
        if cos.cache is not None and sin.cache is not None and cos.positions and cos.positions == sin.positions:
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
            cos_tokens, sin_tokens = (self.node("Expand", [h, target], f"{label}_expanded")
                                      for h, label in zip(halves, ("cos", "sin")))
            return cos_tokens, sin_tokens, None
        (batch, seq), why = dims[0], None
        positions: str | None = None
        if not all(same(s, x_seq) for _, s in dims):
            why = f"whose sequence length ({seq}) is not known to be x's ({x_seq})"
        elif all(same(b, 1) for b, _ in dims):
            # row 0 of the cache is token 0's: the op's offset form
            positions = self.const("rotary_positions_1", np.zeros(1, np.int64))
        elif (all(isinstance(b, int) and same(b, x_batch) for b, _ in dims)
              and isinstance(x_batch, int) and isinstance(x_seq, int)):
            positions = self.const(f"rotary_positions_{x_batch}x{x_seq}",
                                   np.arange(x_batch * x_seq, dtype=np.int64).reshape(x_batch, x_seq))
        elif all(same(b, x_batch) for b, _ in dims):
            positions = self.token_positions()  # one table per batch row (HF's position_ids [batch, seq])
        else:
            why = f"whose table differs per batch row over a batch not known to be x's ({batch}, x's {x_batch})"
        if why is not None or positions is None:
            return self.site.refuse(f"{self.site.matched('x_cos').label} reads cos '{self.site.value('cos')}', {why}, "
                                    f"so it cannot become the one cache {self.target.label} reads")
        flat = [self.flat(table, label) for table, label in zip(self.tables, ("cos", "sin"))]
        return flat[0], flat[1], positions

    def half(self, table: Table, label: str) -> str:
        """The [B, S, h] table: as found, a constant, or the full one cut to its first half (even channels)."""
        if table.half is not None:
            return table.half
        if table.value is not None:
            return self.const(f"{self.site.value(label)}_rotary_half", table.value)
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
            return self.const(f"{self.site.value(label)}_rotary_cache", table.value.reshape(-1, h))
        shape = self.const(f"rotary_cache_shape_{h}", np.array([-1, h], np.int64))
        return self.node("Reshape", [self.half(table, label), shape], f"{label}_cache")

    def token_positions(self) -> str:
        """[B, S] ids 0 … B·S − 1 computed from x's shape: each token's row of the per-token cache (:meth:`flat`)."""
        x, seq_axis = (self.view[0], 1) if self.view is not None else (self.shape.x, self.seq_axis)
        shape = self.node("Shape", [x], "x_shape")
        tokens = self.node("Gather", [shape, self.const(f"rotary_token_axes_{seq_axis}",
                                                          np.array([0, seq_axis], np.int64))], "tokens", axis=0)
        count = self.node("ReduceProd", [tokens], "token_count", keepdims=0)
        ids = self.node("Range", [self.const("rotary_zero", np.array(0, np.int64)), count,
                                  self.const("rotary_step", np.array(1, np.int64))], "token_ids")
        return self.node("Reshape", [ids, tokens], "token_positions")

    def batch_and_sequence(self) -> str:
        """[x's batch, x's sequence, 1]: the shape the per-token tables expand to."""
        x_batch, x_seq = self.shape.dims[0], self.shape.dims[self.seq_axis]
        if isinstance(x_batch, int) and isinstance(x_seq, int):
            return self.const(f"rotary_tokens_{x_batch}x{x_seq}", np.array([x_batch, x_seq, 1], np.int64))
        x, seq_axis = (self.view[0], 1) if self.view is not None else (self.shape.x, self.seq_axis)
        shape = self.node("Shape", [x], "x_shape")
        picked = self.node("Gather", [shape, self.const(f"rotary_token_axes_{seq_axis}",
                                                          np.array([0, seq_axis], np.int64))], "tokens", axis=0)
        return self.node("Concat", [picked, self.const("rotary_one", np.ones(1, np.int64))], "token_shape", axis=0)

    def node(self, op: str, inputs: list[str], what: str, **attrs: Any) -> str:
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
