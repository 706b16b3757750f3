"""Finding every match of a pattern with networkx's VF2, anchored for speed.

networkx's ``DiGraphMatcher`` maps model nodes to pattern nodes (we invert its result). Started
from an empty state it scans the whole model; instead, each search is seeded with one pair
(model node, the pattern's rarest-op node) and grows only through true neighbours of the nodes
already matched, so the cost is proportional to the number of anchor candidates, not to the
model. ``anchored=False`` runs plain VF2 over the whole graph; the tests hold both to the same
answers.

VF2 checks shape, op types, attributes and edge slots; :mod:`checks` then checks input order,
values and sole use, identically for both.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import networkx as nx
from networkx.algorithms.isomorphism import DiGraphMatcher

from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.task import Task, task_or_idle
from graphlens.matching.checks import bind_inputs, edge_matches, node_matches, quick_bindings, sole_use_failure
from graphlens.matching.match import Match
from graphlens.matching.variant_cache import cached_variants
from graphlens.matching.variants import Variant, compile_variants, site_labels
from graphlens.patterns.ir import Pattern


class _CoreState:
    """A VF2 search state that records only the node mapping.

    networkx's DiGMState also maintains the terminal sets its own candidate generator and
    look-ahead rules read; the anchored matcher reads neither, so keeping them is wasted work.
    """

    __slots__ = ("gm", "model_node", "pattern_node")

    def __init__(self, gm: _AnchoredMatcher, model_node: str, pattern_node: str) -> None:
        self.gm, self.model_node, self.pattern_node = gm, model_node, pattern_node
        gm.core_1[model_node] = pattern_node
        gm.core_2[pattern_node] = model_node

    def restore(self) -> None:
        del self.gm.core_1[self.model_node]
        del self.gm.core_2[self.pattern_node]


class _AnchoredMatcher(DiGraphMatcher):  # type: ignore[misc]  # networkx ships no type information
    """VF2 seeded with one (model node, pattern node) pair, growing only to true neighbours.

    The stock candidate generator falls back to every unmatched model node when its terminal sets
    run dry, which on a 100,000-node model costs more than the rest of the search together. For a
    connected pattern explored outward from the anchor, a pattern node's image must be a neighbour
    of its matched neighbour's image, so nothing is lost. Feasibility is checked in one place: the
    op and attribute rules through precomputed ``allowed`` sets, then every pattern edge to an
    already matched node must exist in the model with matching slots (a monomorphism).

    It reads networkx's own adjacency dicts (``_succ``, ``_pred``, ``_node``) on purpose: the public
    ``succ``/``pred``/``nodes`` wrap each lookup in a view object, which in this innermost loop costs
    more than the lookup itself.
    """

    order: list[str]
    allowed: dict[str, set[str]]
    """Pattern node -> model nodes passing its op-type and attribute rules, computed once per search."""

    def initialize(self) -> None:
        self.core_1: dict[str, str] = {}
        self.core_2: dict[str, str] = {}
        self.mapping: dict[str, str] = {}

    def syntactic_feasibility(self, model_node: str, pattern_node: str) -> bool:
        return True  # folded into semantic_feasibility, which looks each edge up once

    def semantic_feasibility(self, model_node: str, pattern_node: str) -> bool:
        if model_node not in self.allowed[pattern_node]:
            return False
        core_2 = self.core_2
        for q, data in self.G2._succ[pattern_node].items():
            if q in core_2:
                model_edge = self.G1._succ[model_node].get(core_2[q])
                if model_edge is None or not edge_matches(model_edge, data):
                    return False
        for q, data in self.G2._pred[pattern_node].items():
            if q in core_2:
                model_edge = self.G1._pred[model_node].get(core_2[q])
                if model_edge is None or not edge_matches(model_edge, data):
                    return False
        return True

    def candidate_pairs_iter(self) -> Iterator[tuple[str, str]]:
        core_1, core_2 = self.core_1, self.core_2
        for p in self.order:
            if p in core_2:
                continue
            for q in self.G2._pred[p]:
                if q in core_2:
                    for c in self.G1._succ[core_2[q]]:
                        if c not in core_1:
                            yield c, p
                    return
            for q in self.G2._succ[p]:
                if q in core_2:
                    for c in self.G1._pred[core_2[q]]:
                        if c not in core_1:
                            yield c, p
                    return
            return

    def seeded(self, model_node: str, pattern_node: str) -> Iterator[dict[str, str]]:
        self.test = "mono"
        self.initialize()
        if not self.semantic_feasibility(model_node, pattern_node):
            return
        state = self.state = _CoreState(self, model_node, pattern_node)
        yield from self.match()
        state.restore()


_compiled: weakref.WeakKeyDictionary[Pattern, list[Variant]] = weakref.WeakKeyDictionary()


def _variants_of(pattern: Pattern) -> list[Variant]:
    """The pattern's variants, compiled once per pattern object (the fold driver asks every round)."""
    found = _compiled.get(pattern)
    if found is None:
        found = _compiled[pattern] = cached_variants(pattern, compile_variants)
    return found


class Matcher:
    """A compiled pattern, ready to search models."""

    def __init__(self, pattern: Pattern) -> None:
        self.pattern = pattern
        self.variants = _variants_of(pattern)
        self.site_labels = site_labels(self.variants)
        self._allowed_cache: dict[str, dict[int, set[str]]] = {}

    def site_of(self, match: Match) -> tuple[str, ...]:
        """The model nodes that place ``match``: at one site only the first matching variant counts."""
        if not self.site_labels:
            return tuple(sorted(match.nodes.values()))
        return tuple(match.nodes[label] for label in self.site_labels)

    def first_at_site(self, match: Match) -> Match:
        """The match the ordered choice keeps at ``match``'s site: the first variant matching there.

        Only variants before ``match``'s are searched, seeded at one of the site's nodes.
        """
        if not self.site_labels:
            return match
        site = self.site_of(match)
        graph, label = match.graph, self.site_labels[0]
        self._allowed_cache = {}
        for variant in self.variants[: match.variant]:
            for mapping in self._anchored(graph, variant, label, [site[0]], Task()):
                found = self._accept(graph, variant, mapping)
                if found is not None and self.site_of(found) == site:
                    return found
        return match

    def find(
        self,
        target: Model | Graph,
        *,
        subgraphs: bool = True,
        non_overlapping: bool = False,
        anchored: bool = True,
        task: Task | None = None,
    ) -> list[Match]:
        """All matches, de-duplicated, in graph order then topological order of their last node.

        At one site (:func:`~graphlens.matching.variants.site_labels`) only the first variant that
        matches is kept: ``either`` is an ordered choice, and an optional node present wins over
        skipped. ``non_overlapping`` keeps, in that order, only matches sharing no node with an earlier one.
        ``task`` is told the share of anchor candidates tried; cancelling it stops the search with
        :class:`~graphlens.core.task.Cancelled`.
        """
        return self._find(target, subgraphs, non_overlapping, anchored, task_or_idle(task))

    def _find(
        self,
        target: Model | Graph,
        subgraphs: bool,
        non_overlapping: bool,
        anchored: bool,
        task: Task,
    ) -> list[Match]:
        self._allowed_cache = {}
        root = target.graph if isinstance(target, Model) else target
        graphs = list(root.walk()) if subgraphs else [root]
        work = [(g, v, self._anchor(g, v)) for g in graphs for v in self.variants]
        total = sum(len(cands) for _, _, (_, cands) in work)
        done = 0
        found: dict[tuple[str, frozenset[str]], tuple[tuple[int, int], Match]] = {}
        for graph_index, graph in enumerate(graphs):
            position, path = graph.positions(), graph.path
            for g, variant, (anchor, candidates) in work:
                if g is not graph:
                    continue
                mappings = (
                    self._anchored(graph, variant, anchor, candidates, task)
                    if anchored
                    else self._unanchored(graph, variant)
                )
                for mapping in mappings:
                    match = self._accept(graph, variant, mapping)
                    if match is None:
                        continue
                    key = (path, frozenset(match.nodes.values()))
                    order = (graph_index, max(map(position.__getitem__, match.nodes.values())))
                    if key not in found:
                        found[key] = (order, match)
                done += len(candidates)
                task.report(done / max(total, 1))
        matches = [m for _, m in sorted(found.values(), key=lambda om: (om[0], sorted(om[1].nodes.values())))]
        matches = self._first_per_site(matches)
        if non_overlapping:
            matches = _non_overlapping(matches)
        return matches

    # ------------------------------------------------------------------ internals
    def _first_per_site(self, matches: list[Match]) -> list[Match]:
        """Of the matches at one site, the one from the earliest variant (then the earliest in order)."""
        best: dict[tuple[str, tuple[str, ...]], Match] = {}
        for m in matches:
            key = (m.graph.path, self.site_of(m))
            if key not in best or m.variant < best[key].variant:
                best[key] = m
        kept = {id(m) for m in best.values()}
        return [m for m in matches if id(m) in kept]

    def _anchor(self, graph: Graph, variant: Variant) -> tuple[str, list[str]]:
        """The pattern node with the fewest candidate model nodes, and those candidates in graph order."""
        by_op = graph.nodes_by_op()
        best: tuple[int, str] | None = None
        for label, pn in variant.nodes.items():
            ops = pn.op.ops
            count = len(graph.nodes) if ops is None else sum(len(by_op.get(o, ())) for o in ops)
            if best is None or count < best[0]:
                best = (count, label)
        assert best is not None
        anchor = best[1]
        ops = variant.nodes[anchor].op.ops
        if ops is None:
            return anchor, [n.name for n in graph.nodes]
        wanted = set(ops)
        return anchor, ([n.name for n in graph.nodes if n.op_type in wanted] if len(wanted) > 1
                        else list(by_op.get(ops[0], ())))

    def _anchored(
        self, graph: Graph, variant: Variant, anchor: str, candidates: list[str], task: Task
    ) -> Iterator[dict[str, str]]:
        if not candidates:
            return
        model = graph.to_networkx()
        gm = _AnchoredMatcher(model, variant.graph)
        gm.allowed = _allowed_nodes(graph, variant, self._allowed_cache.setdefault(graph.path, {}))
        undirected = variant.graph.to_undirected(as_view=True)
        gm.order = [anchor] + [v for _, v in nx.bfs_edges(undirected, anchor, sort_neighbors=sorted)]
        # An anchor whose pattern neighbours have no acceptable counterpart next to it cannot match.
        needs_succ = [gm.allowed[q] for q in variant.graph.succ[anchor]]
        needs_pred = [gm.allowed[q] for q in variant.graph.pred[anchor]]
        allowed_anchor = gm.allowed[anchor]
        succ, pred = model._succ, model._pred  # networkx's adjacency dicts: .succ/.pred add a view per lookup
        try:
            for k, candidate in enumerate(candidates):
                if k % 256 == 0:
                    task.check("matching")
                if candidate not in allowed_anchor:
                    continue
                if (any(s.isdisjoint(succ[candidate]) for s in needs_succ)
                        or any(p.isdisjoint(pred[candidate]) for p in needs_pred)):
                    continue
                # each mapping is a fresh copy (networkx's match() copies core_1)
                yield from gm.seeded(candidate, anchor)
        finally:
            gm.reset_recursion_limit()  # VF2 raises it process-wide for large patterns; give it back

    def _unanchored(self, graph: Graph, variant: Variant) -> Iterator[dict[str, str]]:
        gm = DiGraphMatcher(graph.to_networkx(), variant.graph, node_match=node_matches, edge_match=edge_matches)
        try:
            yield from gm.subgraph_monomorphisms_iter()
        finally:
            gm.reset_recursion_limit()  # VF2 raises it process-wide for large patterns; give it back

    def _accept(self, graph: Graph, variant: Variant, model_to_pattern: dict[str, str]) -> Match | None:
        by_name = graph.by_name
        mapping: dict[str, Node] = {label: by_name[name] for name, label in model_to_pattern.items()}
        bindings = quick_bindings(variant, graph, mapping)
        if bindings is None:
            bindings, _ = bind_inputs(variant, graph, mapping)
            if bindings is None:
                return None
        if sole_use_failure(self.pattern, variant, graph, mapping) is not None:
            return None
        nodes = {label: mapping[label].name for label in variant.nodes}
        values = {k: v for k, v in bindings.items() if not k.startswith("_")} if variant.has_hidden_values else bindings
        return Match(self.pattern.name, graph, nodes, values, variant.index)


def _allowed_nodes(graph: Graph, variant: Variant, cache: dict[int, set[str]]) -> dict[str, set[str]]:
    """For each pattern node, the model nodes whose op type and attributes it accepts.

    ``cache`` (keyed by pattern op) shares the sets between variants of one search.
    """
    by_op = graph.nodes_by_op()
    model = graph.to_networkx()
    allowed: dict[str, set[str]] = {}
    for label, pn in variant.nodes.items():
        key = id(pn.op)
        if key not in cache:
            names = ([n.name for n in graph.nodes] if pn.op.ops is None
                     else [x for o in pn.op.ops for x in by_op.get(o, ())])
            if pn.op.attrs or pn.op.ops is None or pn.op.domain:
                data = {"pnode": pn}
                cache[key] = {n for n in names if node_matches(model._node[n], data)}
            else:
                cache[key] = {n for n in names if graph.by_name[n].domain in ("", "ai.onnx")}
        allowed[label] = cache[key]
    return allowed


def _non_overlapping(matches: list[Match]) -> list[Match]:
    """Greedy in order of each match's first node, larger matches first; kept in the usual order."""
    graph_order: dict[str, int] = {}
    for m in matches:
        graph_order.setdefault(m.graph.path, len(graph_order))

    def first_then_larger(m: Match) -> tuple[int, int, int]:
        position = m.graph.positions()
        return (graph_order[m.graph.path], min(position[n] for n in m.nodes.values()), -len(m.nodes))

    used: set[tuple[str, str]] = set()
    kept: set[int] = set()
    for m in sorted(matches, key=first_then_larger):
        keys = {(m.graph.path, n) for n in m.nodes.values()}
        if not keys & used:
            used |= keys
            kept.add(id(m))
    return [m for m in matches if id(m) in kept]


def find_matches(pattern: Pattern, target: Model | Graph, **options: Any) -> list[Match]:
    """Every match of ``pattern`` in ``target`` (see :meth:`Matcher.find` for the options)."""
    return Matcher(pattern).find(target, **options)
