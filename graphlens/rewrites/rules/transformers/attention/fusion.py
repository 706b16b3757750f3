"""fuse-attention: attention exported in pieces becomes one ``Attention`` (opset 23) or onnxruntime's
``MultiHeadAttention`` (com.microsoft).

Per head, with Q, K, V in [batch, heads, seq, head_size]::

    out = softmax(Q·Kᵀ·s + M)·V

``s`` is the product of the scale factors the match holds (a Mul by c gives c, a Div by c gives
1/c; the split form multiplies Q and Kᵀ by √s each), 1 when there are none. ``M`` is the additive
mask or bias (an Add); a boolean mask ``Where(c, scores, fill)`` is the bias ``Where(c, 0, fill)``.
A causal mask (the square lower triangle) becomes ``is_causal=1`` / ``unidirectional=1`` instead.

The fused op reads Q, K and V as [batch, seq, heads·head_size] where the graph has them so (what
the heads-split Reshapes read, in the match or just before it, as after a rotation), else in the
heads layout (MultiHeadAttention takes K and V so, Q is reshaped for it). The projections stay, and
so do the heads-split nodes something else still reads. K and V appended to a cache by a Concat
become the fused op's past inputs and present outputs (:mod:`.cache`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeAlias

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.rewrites.rule import Refusal, Rule, Site, fresh_name
from graphlens.rewrites.rules.fusion import Fused, Fusion, TargetOp, target_op
from graphlens.rewrites.rules.transformers.attention import edits as edits
from graphlens.rewrites.rules.transformers.attention import packing as packing
from graphlens.rewrites.rules.transformers.attention import scores as scores
from graphlens.rewrites.rules.transformers.attention import shapes as shapes
from graphlens.rewrites.rules.transformers.attention.cache import Cache, caches
from graphlens.rewrites.rules.transformers.attention.padding import padding_mask
from graphlens.rewrites.rules.transformers.common import reads_activations, written_by
from graphlens.rewrites.rules.transformers.graph_dims import Dims, dims_of

OpAttrs: TypeAlias = dict[str, int | float | list[int]]
"""The fused op's attributes: head counts, the scale, causal flags."""
CORE_LABELS = ("scores", "scaled", "masked", "probs", "probs_nan", "dropped", "attn", "merged")
"""Nodes of the quadratic part: one of them still read elsewhere would be computed twice."""


@dataclass
class Side:
    """Q, K or V as the match shows it: the tensors that hold it in each layout the graph has."""

    role: str
    heads: str | None = None
    """[batch, heads, seq, head_size]"""
    flat: str | None = None
    """[batch, seq, heads·head_size], what the heads-split Reshape reads"""
    bshd: str | None = None
    """[batch, seq, heads, head_size], the heads-split Reshape's output"""
    split: Node | None = None
    num_heads: int | None = None
    head_size: int | None = None


@dataclass
class AttentionFused(Fused):
    """The fused node, and the nodes after it that give the matched output its layout back."""

    replaced: list[Node] = field(default_factory=list)
    """Nodes outside the match the fused node takes the place of (the KV cache Concats)."""


class FuseAttention(Fusion):
    """softmax(Q·Kᵀ·s + M)·V with its heads split and merged → Attention or MultiHeadAttention."""

    name = "fuse-attention"
    description = "fuse attention exported in pieces into Attention (opset 23) or MultiHeadAttention (com.microsoft)"
    pattern_names = ("attention", "sdpa")
    kind = "attention"
    family = "attention"
    fused_ops = ("MultiHeadAttention", "Attention", "GroupQueryAttention", "PackedAttention",
                 "PackedMultiHeadAttention")
    anchor_ops = ("Softmax",)

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A Softmax over scores Q·Kᵀ (scaled, masked): not one over a classifier's logits x·W."""
        return bool(node.inputs) and written_by(
            graph, node.inputs[0], lambda n: n.op_type in ("MatMul", "Einsum") and reads_activations(graph, n),
            through=("Add", "Sub", "Mul", "Div", "Where", "Cast"), steps=3)

    def fuse(self, site: Site) -> AttentionFused | Refusal:
        target = target_op(site, "Attention", "MultiHeadAttention")
        if isinstance(target, Refusal):
            return target
        probs_refusal = _softmax_axis_refusal(site) or _dropout_refusal(site) or _guard_refusal(site)
        if probs_refusal is not None:
            return probs_refusal
        q, k, v = _sides(site)
        if not target.domain:  # opset 23's Attention takes fewer K/V heads than Q's: read them before their repeat
            _unrepeated(site.graph, k)
            _unrepeated(site.graph, v)
        counts = _head_counts(site, target, q, k, v)
        if isinstance(counts, Refusal):
            return counts
        q_heads, kv_heads = counts
        q.num_heads, k.num_heads, v.num_heads = q_heads, kv_heads, kv_heads
        q.head_size = k.head_size = q.head_size or k.head_size  # Q·Kᵀ: one size
        known: dict[str, Dims] = {s.heads: (None, s.num_heads, None, s.head_size) for s in (q, k, v) if s.heads}
        known.update({s.bshd: (None, None, s.num_heads, s.head_size) for s in (q, k, v) if s.bshd})
        scale = scores.scale_of(site, known)
        if isinstance(scale, Refusal):
            return scale
        out = site.matched("out")
        emitted = edits.Emitted(site.graph, out.name)
        mask = scores.mask_of(site, emitted)
        if isinstance(mask, Refusal):
            return mask
        bias, causal = mask
        if target.domain:
            return _multi_head_attention(site, target, emitted, (q, k, v), q_heads, scale, bias, causal)
        return _standard_attention(site, target, emitted, (q, k, v), (q_heads, kv_heads), scale, bias, causal)

    def removed(self, site: Site, fused: Fused, added: list[onnx.NodeProto]) -> list[str] | Refusal:
        """The match, the cache Concats it replaces and the exporter's leftovers nothing else reads, in graph
        order; a refusal when a node of the core would still be read (it would be computed twice)."""
        assert isinstance(fused, AttentionFused)
        matched = [site.graph.by_name[n] for n in site.match.nodes.values()]
        removed = edits.removal(site.graph, [*matched, *fused.replaced], added)
        kept = [label for label in CORE_LABELS if label in site.match.nodes and site.match.nodes[label] not in removed]
        if kept:
            return site.refuse(_computed_twice(site, kept[0], removed))
        order = site.graph.positions()
        return sorted(removed, key=order.__getitem__)


# ------------------------------------------------------------------------------ Q, K, V
def _sides(site: Site) -> tuple[Side, Side, Side]:
    """Q, K and V in the layouts the match shows, with their head counts and sizes where known."""
    graph = site.graph
    sides = []
    for role, split_label, heads_label, flat_label in (("Q", "q_split", "q", "q_in"), ("K", "k_split", "k", "k_in"),
                                                       ("V", "v_split", "v", "v_in")):
        side = Side(role)
        split, heads = site.node(split_label), site.node(heads_label)
        side.heads = heads.outputs[0] if heads is not None else site.tensor(heads_label)
        if split is not None:
            side.split, side.flat, side.bshd = split, site.tensor(flat_label), split.outputs[0]
            side.num_heads, side.head_size = shapes.heads_from_split(graph, split, side.flat)
        elif side.heads and (view := shapes.heads_view(graph, side.heads)) is not None:
            # heads split outside the match (after a rotation): the fused op reads the flat tensor
            side.flat, side.split, side.num_heads, side.head_size = view
            side.bshd = side.split.outputs[0]
        sides.append(side)
    q, k, v = sides
    kt = site.node("kt")
    if (kt is not None and kt.op_type == "Transpose" and list(kt.attrs.get("perm", ())) == [0, 2, 3, 1]
            and k.split is None):
        k.bshd, k.heads = k.heads, None  # sdpa: Kᵀ made from [batch, seq, heads, head_size]
        split = shapes.producer(graph, k.bshd) if k.bshd else None
        flat_dims = dims_of(graph, split.inputs[0]) if split is not None and split.op_type == "Reshape" else None
        if split is not None and flat_dims is not None and len(flat_dims) == 3:  # the heads split of K's projection
            k.split, k.flat = split, split.inputs[0]
    if kt is not None and kt.op_type == "Reshape" and k.num_heads is None:
        k.num_heads, k.head_size = shapes.heads_from_split(graph, kt, None, heads_at=1)
        k.split = k.split or kt
    for side in sides:
        _heads_from_dims(graph, side)
    return q, k, v


def _heads_from_dims(graph: Graph, side: Side) -> None:
    """Fill a side's unknown head count and size from the inferred shape of its heads tensors."""
    for tensor, at in ((side.heads, 1), (side.bshd, 2)):
        found = dims_of(graph, tensor) if tensor else None  # also through a rotation shape inference did not type
        if found is None or len(found) != 4:
            continue
        heads, size = shapes.static_int(found[at]), shapes.static_int(found[3])
        side.num_heads = side.num_heads or heads
        side.head_size = side.head_size or size


def _unrepeated(graph: Graph, side: Side) -> None:
    """The side as it was before HF's repeat_kv copied its heads up to Q's count (grouped-query attention)."""
    if side.heads is None or (found := shapes.repeat_source(graph, side.heads)) is None:
        return
    source, kv_heads = found
    side.heads, side.flat, side.bshd, side.split = source, None, None, None
    side.num_heads = kv_heads
    if (view := shapes.heads_view(graph, source)) is not None:
        side.flat, side.split, side.num_heads, side.head_size = view
        side.bshd = side.split.outputs[0]
        side.num_heads = side.num_heads or kv_heads
    _heads_from_dims(graph, side)


def _head_counts(site: Site, target: TargetOp, q: Side, k: Side, v: Side) -> tuple[int, int] | Refusal:
    """(Q heads, K/V heads), or why they cannot be known or fused."""
    if k.num_heads and v.num_heads and k.num_heads != v.num_heads:
        return site.refuse(f"K has {k.num_heads} heads and V {v.num_heads}, so they cannot share one attention op")
    kv_heads = k.num_heads or v.num_heads
    # Q·Kᵀ broadcasts one K head over all of Q's, so only K's count above 1 tells Q's
    q_heads = q.num_heads or (kv_heads if kv_heads and kv_heads > 1 else None)
    if q_heads is None:
        return site.refuse(_unknown_heads(q))
    kv_heads = kv_heads or q_heads
    if q.head_size and k.head_size and q.head_size != k.head_size:
        return site.refuse(f"Q has heads of size {q.head_size} and K of size {k.head_size}, so Q·Kᵀ is not per head")
    if kv_heads != q_heads:
        if target.domain:
            return site.refuse(f"K and V have {kv_heads} head{'s' if kv_heads > 1 else ''} where Q has {q_heads} "
                               f"(grouped-query attention), which MultiHeadAttention does not support")
        if q_heads % kv_heads:
            return site.refuse(f"Q has {q_heads} heads, not a multiple of the {kv_heads} heads of K and V")
    return q_heads, kv_heads


def _unknown_heads(q: Side) -> str:
    if q.split is not None:
        return (f"{q.split.label} splits the heads with a shape whose head count is not constant,"
                " so the head count is unknown")
    return (f"Q ('{q.heads}') comes in heads layout from no Reshape of constant shape, and its shape is unknown,"
            " so the head count is unknown")


def _softmax_axis_refusal(site: Site) -> Refusal | None:
    probs = site.matched("probs")
    model = site.graph.model
    opset = (model.opset("") if model is not None else None) or 13
    axis = int(probs.attrs.get("axis", -1 if opset >= 13 else 1))
    if axis in (-1, 3):
        return None
    return site.refuse(f"{probs.label} normalizes over axis {axis}, not over the keys (the last axis)")


def _dropout_refusal(site: Site) -> Refusal | None:
    """A Dropout between the Softmax and ·V is fused only in inference mode, where it passes its input."""
    dropout = site.node("dropped")
    if dropout is None or dropout.op_type != "Dropout" or len(dropout.inputs) < 3 or not dropout.inputs[2]:
        return None
    training = site.graph.constant_value(dropout.inputs[2])
    if training is not None and not bool(np.asarray(training).reshape(-1)[0]):
        return None
    return site.refuse(f"{dropout.label} may run in training mode (its "
                       f"training_mode input '{dropout.inputs[2]}' is not false)")


def _guard_refusal(site: Site) -> Refusal | None:
    """A Where(IsNaN(probs), fill, probs) is the exporter's NaN guard only when ``fill`` is a constant 0."""
    fill = site.tensor("nan_fill")
    if fill is None:
        return None
    value = site.graph.constant_value(fill)
    if value is not None and value.size == 1 and float(np.asarray(value).reshape(-1)[0]) == 0:
        return None
    guard = site.matched("dropped")
    return site.refuse(f"{guard.label} replaces NaN probabilities by '{fill}', not by a constant 0, "
                       "so it is not the exporter's guard for rows that see no key")


# ------------------------------------------------------------------------------ the fused node
def _multi_head_attention(site: Site, target: TargetOp, emitted: edits.Emitted, sides: tuple[Side, Side, Side],
                          heads: int, scale: float, bias: str | None, causal: bool) -> AttentionFused | Refusal:
    """MultiHeadAttention(query [B, S, H·D], key, value [B, T, H·D] or [B, H, T, D], …, attention_bias)."""
    q, k, v = sides
    query, scale = _prescaled(site, q, scale) if q.flat else (emitted.flat(q.heads, "q"), scale)
    cached = _caches(site, k, v)
    if cached is not None:
        key, value = cached[0].flat, cached[1].flat
    elif k.flat and v.flat:
        key, value = k.flat, v.flat
    else:
        if v.head_size and k.head_size and v.head_size != k.head_size:
            return site.refuse(f"V has heads of size {v.head_size} and K of size {k.head_size}, which "
                               f"MultiHeadAttention takes only as [batch, seq, hidden] tensors, and K is not one here")
        key, value = _to_heads(emitted, k), _to_heads(emitted, v)
    inputs = [query, key, value]
    attrs: OpAttrs = {"num_heads": heads, "scale": float(scale)}
    together = packing.packed(site.graph, emitted, (query, key, value)) if cached is None else None
    if together is not None:  # onnxruntime's Attention: the three projections as one GEMM in the kernel
        target, inputs = TargetOp("Attention", target.domain), [together.x, together.weight, together.bias]
        if len(set(together.widths)) > 1:
            attrs["qkv_hidden_sizes"] = list(together.widths)
    padding = padding_mask(site.graph, bias) if bias is not None and cached is None else None
    if padding is not None:  # the mask itself: Attention's mask_index (input 3), MHA's key_padding_mask (4)
        slot = 3 if together is not None else 4
        key_mask = emitted.node("Cast", [padding.mask], "key_mask", to=onnx.TensorProto.INT32)
        inputs += [""] * (slot - len(inputs)) + [key_mask]
        attrs["mask_filter_value"] = padding.hidden
        bias = None
    if bias is not None:
        expanded = scores.expand_bias(site, emitted, bias, *_query(q))
        if isinstance(expanded, Refusal):
            return expanded
        inputs += ["", "", expanded]
    if cached is not None:
        inputs += [""] * (6 - len(inputs)) + [cached[0].past, cached[1].past]
    if causal:
        attrs["unidirectional"] = 1
    return _finish(site, target, emitted, inputs, attrs, heads, _width(q, v, heads), flat_output=True, cached=cached)


def _standard_attention(site: Site, target: TargetOp, emitted: edits.Emitted, sides: tuple[Side, Side, Side],
                        heads: tuple[int, int], scale: float, bias: str | None,
                        causal: bool) -> AttentionFused | Refusal:
    """Attention(Q, K, V, attn_mask): all three [B, S, H·D] where the graph has them so, else all [B, H, S, D]."""
    q, k, v = sides
    cached = _caches(site, k, v) if q.flat else None
    flat = bool(q.flat and k.flat and v.flat) or cached is not None
    if flat:
        query, scale = _prescaled(site, q, scale)
        key, value = (cached[0].flat, cached[1].flat) if cached is not None else (k.flat, v.flat)
        assert key is not None and value is not None  # flat: the caches' new tokens, or K and V as [B, S, H·D]
        inputs = [query, key, value]
        attrs: OpAttrs = {"q_num_heads": heads[0], "kv_num_heads": heads[1]}
    else:
        inputs = [_to_heads(emitted, side) for side in sides]
        attrs = {}
    attrs["scale"] = float(scale)
    if bias is not None:
        expanded = scores.expand_bias(site, emitted, bias, *_query(q))
        if isinstance(expanded, Refusal):
            return expanded
        inputs.append(expanded)
    if cached is not None:
        inputs += [""] * (4 - len(inputs)) + [cached[0].past, cached[1].past]
    if causal:
        attrs["is_causal"] = 1
    return _finish(site, target, emitted, inputs, attrs, heads[0], _width(q, v, heads[0]),
                   flat_output=flat, cached=cached)


def _finish(site: Site, target: TargetOp, emitted: edits.Emitted, inputs: list[str], attrs: OpAttrs, heads: int,
            width: int | None, flat_output: bool, cached: tuple[Cache, Cache] | None = None) -> AttentionFused:
    """The fused node writing the matched output, with the layout change between them if one is needed,
    and the present K and V where it takes the caches' Concats' place.

    ``width`` is heads·head_size of V where known: the merged output's last dim.
    """
    out = site.matched("out")
    result = out.outputs[0]
    fused = AttentionFused(target, inputs, attrs, before=emitted.nodes)
    after = edits.Emitted(site.graph, out.name, taken=emitted.taken)
    raw = fresh_name(site.graph, f"{out.name}/fused", emitted.taken)
    relayout = (flat_output if site.match.pattern == "sdpa"
                else not flat_output or not shapes.plain_merge(site.graph, out, width))
    source = raw
    if site.node("probs_nan") is not None:  # the exporter's NaN guard, kept on the output: see _nan_guarded
        source = _nan_guarded(site, after, raw, None if relayout else result)
    if relayout:
        _layout_back(site, after, source, heads, flat_output)
    fused.outputs = [raw] if after.nodes else [result]
    if cached is not None:
        fused.outputs += [cache.present for cache in cached]
        fused.replaced = [cache.concat for cache in cached]
    fused.after = after.nodes
    fused.initializers = {**emitted.initializers, **after.initializers}
    return fused


def _layout_back(site: Site, after: edits.Emitted, source: str, heads: int, flat_output: bool) -> None:
    """Nodes from the fused op's output (``source``) to the matched output's layout, writing its tensor."""
    out = site.matched("out")
    result = out.outputs[0]
    if site.match.pattern == "sdpa":  # the match ends in [B, H, S, D]
        shape = after.const(np.array([0, 0, heads, -1], dtype=np.int64), "heads_shape")
        split = after.node("Reshape", [source, shape], "split_heads")
        after.nodes.append(onnx.helper.make_node("Transpose", [split], [result],
                                                 name=f"{out.name}/to_heads", perm=[0, 2, 1, 3]))
    elif not flat_output:  # the match's own merge: Transpose to [B, S, H, D], then its Reshape
        moved = after.node("Transpose", [source], "merge_heads", perm=[0, 2, 1, 3])
        after.nodes.append(onnx.helper.make_node("Reshape", [moved, out.inputs[1]], [result],
                                                 name=f"{out.name}/merged"))
    else:  # [B, S, H·D] to what the match's Reshape makes of it
        after.nodes.append(onnx.helper.make_node("Reshape", [source, out.inputs[1]], [result],
                                                 name=f"{out.name}/merged"))


def _nan_guarded(site: Site, after: edits.Emitted, raw: str, result: str | None) -> str:
    """``Where(IsNaN(out), 0, out)`` on the fused output, written to ``result`` (a new tensor when None).

    TorchScript zeroes the probabilities of a query whose keys are all hidden (softmax of a row of -inf
    is 0/0); the fused op gives that row NaN in the same place, so zeroing it there keeps the output
    equal, and keeps the NaN from spreading through the next layer's keys.
    """
    fill = site.tensor("nan_fill")
    assert fill is not None
    found = after.node("IsNaN", [raw], "fused_nan")
    name = result or fresh_name(site.graph, f"{site.matched('out').name}/zeroed", after.taken)
    after.nodes.append(onnx.helper.make_node("Where", [found, fill, raw], [name],
                                             name=f"{site.matched('out').name}/zeroed"))
    return name


def _query(q: Side) -> tuple[str, int]:
    """Q as the graph has it, [B, S, H·D] or [B, H, S, D], and its sequence axis."""
    query, seq_axis = (q.flat, 1) if q.flat else (q.heads, 2)
    assert query is not None
    return query, seq_axis


def _caches(site: Site, k: Side, v: Side) -> tuple[Cache, Cache] | None:
    """K's and V's caches where the fused op can take them as past and present (see :mod:`.cache`)."""
    out = site.matched("out")
    return caches(site.graph, (k.heads, k.num_heads, k.head_size), (v.heads, v.num_heads, v.head_size or k.head_size),
                  out, set(site.match.nodes.values()))


def _prescaled(site: Site, q: Side, scale: float) -> tuple[str, float]:
    """Q as [B, S, H·D], and the scale with a constant factor on the query projection taken in."""
    assert q.flat is not None and q.split is not None
    query, factor = shapes.prescale(site.graph, q.flat, q.split)
    return query, scale * factor


def _to_heads(emitted: edits.Emitted, side: Side) -> str:
    """The side in [B, H, S, D]: its heads tensor, else its [B, S, H, D] one transposed."""
    if side.heads is not None:
        return side.heads
    assert side.bshd is not None
    return emitted.node("Transpose", [side.bshd], f"{side.role.lower()}_heads", perm=[0, 2, 1, 3])


def _width(q: Side, v: Side, heads: int) -> int | None:
    size = v.head_size or q.head_size
    return None if size is None else heads * size


def _computed_twice(site: Site, label: str, removed: set[str]) -> str:
    node = site.node(label)
    assert node is not None
    readers = [r.label for t in node.outputs for r, _ in site.graph.consumers(t) if r.name not in removed]
    who = readers[0] if readers else "a graph output"
    return f"the output of {node.label} is also read by {who}, so fusing would compute the attention scores twice"


RULES: tuple[Rule, ...] = (FuseAttention(),)

__all__ = ["RULES", "FuseAttention"]
