"""KV caches: K and V that attention reads as ``Concat(past, new)`` become the fused op's past and present.

A decoder step appends its new keys to the cache, ``present = Concat(past [B, H, P, D], new [B, H,
S, D], axis 2)``, attends over ``present`` and returns it as a graph output. MultiHeadAttention
(inputs 6, 7; outputs 1, 2) and Attention (opset 23; inputs 4, 5; outputs 1, 2) compute exactly that
concatenation from ``past_key``/``past_value`` and the new tokens given as [B, S, H·D], and attend
over it. So where the new K and V are the heads view of a [B, S, H·D] tensor (Reshape to [B, S, H,
D], Transpose to [B, H, S, D]), the fused node reads those tensors and the caches, writes the
Concats' outputs under their names (the graph's outputs keep theirs), and the Concats and the heads
views go.
"""

from __future__ import annotations

from dataclasses import dataclass

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import Dim
from graphlens.rewrites.rules.transformers.attention import shapes as shapes
from graphlens.rewrites.rules.transformers.graph_dims import dims_of
from graphlens.rewrites.rules.transformers.rotary_tables import producer


@dataclass(frozen=True)
class Cache:
    """One of K, V as ``present = Concat(past, heads view of flat)``."""

    past: str
    """[B, H, P, D]"""
    present: str
    """[B, H, P + S, D], the Concat's output"""
    concat: Node
    flat: str
    """the new tokens, [B, S, H·D]"""


def cache_of(graph: Graph, heads: str | None, num_heads: int | None, head_size: int | None) -> Cache | None:
    """The cache behind a K or V heads tensor, or None where it is not a Concat the fused op can take.

    The Concat joins two tensors on the sequence axis (2 of [B, H, S, D]); the past has the side's
    head count and size where those are known; the new part is Transpose([0, 2, 1, 3]) of a Reshape
    of a 3-D tensor into (heads, head size) that agree with the side's.
    """
    concat = producer(graph, heads, "Concat") if heads else None
    if concat is None or len(concat.inputs) != 2 or int(concat.attrs.get("axis", 0)) not in (2, -2):
        return None
    past, new = concat.inputs
    past_dims = dims_of(graph, past)
    if (past_dims is None or len(past_dims) != 4
            or not _agree(past_dims[1], num_heads) or not _agree(past_dims[3], head_size)):
        return None
    view = shapes.heads_view(graph, new)
    if view is None or view[2] is None or view[2] != num_heads or view[3] is None or view[3] != head_size:
        return None
    return Cache(past, concat.outputs[0], concat, view[0])


def caches(graph: Graph, k: tuple[str | None, int | None, int | None], v: tuple[str | None, int | None, int | None],
           out: Node, matched: set[str]) -> tuple[Cache, Cache] | None:
    """K's and V's caches (each as (heads tensor, heads, head size)), where both have one the fused node can take.

    The fused node stands where the match's output does: a node outside the match reading a present
    tensor before that would then read it before it is made, so such a cache stays a Concat.
    """
    key, value = cache_of(graph, *k), cache_of(graph, *v)
    if key is None or value is None or key.concat is value.concat:
        return None
    order = graph.positions()
    for cache in (key, value):
        early = [r for r, _ in graph.consumers(cache.present)
                 if r.name not in matched and order[r.name] < order[out.name]]
        if early:
            return None
    return key, value


def _agree(dim: Dim, expected: int | None) -> bool:
    """A past dim that is not known to differ from the side's."""
    return not isinstance(dim, int) or expected is None or dim == expected
