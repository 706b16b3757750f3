"""Why a pattern does (not) match at a node: the deepest partial match and the first failed constraint.

Starting from the node the user points at, the pattern is laid over the graph outward along its
edges, as the matcher does. Structure (op types, which node feeds which input) must hold for the
walk to continue; the softer constraints (attributes, constant and value rules, sole use) are
checked with the matcher's own functions and the first one that fails is reported, while the walk
still completes the partial match so it can be drawn. The deepest attempt over all variants and
starting points wins: most pattern nodes placed, then fewest failed constraints. Variants are tried
in the matcher's order of preference, and a complete match that an earlier variant shadows at its
site is reported as such, so explain never calls "a match" what the matcher does not report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx

from graphlens.core.constants import value_refusals
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.names import no_such_node
from graphlens.core.node import Node
from graphlens.core.nxview import consumers_of
from graphlens.core.types import dtype_name
from graphlens.matching.checks import Failure, bind_inputs, edge_matches, node_failure, origin_of, sole_use_failure
from graphlens.matching.match import Match
from graphlens.matching.matcher import Matcher
from graphlens.matching.variants import FlatNode, Variant
from graphlens.patterns.ir import Pattern

_STEP_BUDGET = 20_000
"""Search steps per starting point; patterns with wildcards on high fan-out nodes stop here."""


@dataclass
class Explanation:
    """The outcome at one place: matched or not, the (partial) mapping, and the first failure."""

    pattern: str
    matched: bool
    message: str
    at: str | None
    graph: str | None
    mapping: dict[str, str] = field(default_factory=dict)
    failure: Failure | None = None
    variant: int | None = None
    pattern_nodes: int = 0
    score: tuple[int, int] = (0, 0)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "pattern": self.pattern,
            "matched": self.matched,
            "message": self.message,
            "at": self.at,
            "graph": self.graph,
            "mapping": dict(self.mapping),
            "matched_nodes": len(self.mapping),
            "pattern_nodes": self.pattern_nodes,
            "variant": self.variant,
        }
        if self.failure is not None:
            data.update(self.failure.to_json())
        return data


@dataclass
class NearMisses:
    """Without a starting node: how many matches there are and the closest misses elsewhere."""

    pattern: str
    match_count: int
    near_misses: list[Explanation]

    @property
    def matched(self) -> bool:
        return self.match_count > 0

    @property
    def message(self) -> str:
        head = f"{self.pattern}: {self.match_count} match{'es' if self.match_count != 1 else ''}"
        if not self.near_misses:
            return head + "; no near misses"
        best = self.near_misses[0]
        count = len(self.near_misses)
        if count == 1:
            return f"{head}; 1 near miss, at {best.at}: {best.message}"
        return f"{head}; {count} near misses, the closest at {best.at}: {best.message}"

    def to_json(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "matched": self.matched,
            "message": self.message,
            "match_count": self.match_count,
            "near_misses": [n.to_json() for n in self.near_misses],
        }


# ------------------------------------------------------------------------------ entry points
def explain(pattern: Pattern, target: Model | Graph, at: str | None = None, *,
            limit: int = 10) -> Explanation | NearMisses:
    """Explain ``pattern`` at node ``at`` (any graph of the model), or list near misses without it."""
    root = target.graph if isinstance(target, Model) else target
    matcher = Matcher(pattern)
    if at is not None:
        graph = _graph_of(root, at)
        return _explain_at(matcher, graph, graph.by_name[at])
    return _near_misses(matcher, root, limit)


def _graph_of(root: Graph, name: str) -> Graph:
    for g in root.walk():
        if name in g.by_name:
            return g
    raise no_such_node(name, [n for g in root.walk() for n in g.by_name])


def _best_attempt(matcher: Matcher, graph: Graph, node: Node) -> _Attempt | None:
    """The deepest attempt from ``node`` over every variant and pattern node that accepts its op type.

    When attempts tie on an op-type failure at the same node, their expectations are merged
    ("Add or Conv|ConvTranspose"), since each variant (an optional node present or skipped) is an
    equally good reading.
    """
    best: list[_Attempt] = []
    for variant in matcher.variants:
        for label, pn in variant.nodes.items():
            if not pn.op.accepts_op(node.op_type, node.domain):
                continue
            attempt = _Walk(matcher.pattern, variant, graph).run(label, node)
            if attempt.complete:
                return _ordered_choice(matcher, graph, attempt)
            # Equal depth: the smaller variant reads better (an optional node the site lacks is skipped,
            # not reported as missing).
            if not best or _rank(attempt) > _rank(best[0]):
                best = [attempt]
            elif _rank(attempt) == _rank(best[0]):
                best.append(attempt)
    if not best:
        return None
    first = best[0]
    ties = [a.failure for a in best if a.failure is not None]
    if first.failure is not None and first.failure.kind == "op_type" and len(ties) > 1 and all(
        f.kind == "op_type" and f.node == first.failure.node for f in ties
    ):
        wanted = " or ".join(dict.fromkeys(op for f in ties for op in f.expected.split(" or ")))
        f = first.failure
        message = f.message.replace(f"where {f.expected} was expected", f"where {wanted} was expected")
        first.failure = Failure(f.kind, f.label, f.node, wanted, f.actual, message, f.slot, f.tensor, f.extra)
    return first


def _no_op_note(graph: Graph, node: Node) -> str:
    """Names a node that changes nothing for what it is (a Cast to the type its input has, an Identity): fold
    bypasses those before matching, so the site may still fuse."""
    if node.op_type == "Identity" or (
            node.op_type == "Cast" and node.inputs and "to" in node.attrs
            and graph.tensor_type(node.inputs[0]).dtype == dtype_name(int(node.attrs["to"]))):
        return (f" (a no-op: {'a Cast to the type its input already has' if node.op_type == 'Cast' else 'an Identity'}"
                ", which fold bypasses before matching)")
    return ""


def _rank(attempt: _Attempt) -> tuple[int, int, int]:
    return (*attempt.score, -len(attempt.variant.nodes))


def _ordered_choice(matcher: Matcher, graph: Graph, attempt: _Attempt) -> _Attempt:
    """A complete attempt, or the same one failed because an earlier variant matches at its site.

    The matcher keeps one match per site, the first variant that matches there; explain says so
    rather than calling a match the matcher does not report a match.
    """
    nodes = {label: node.name for label, node in attempt.mapping.items()}
    found = Match(matcher.pattern.name, graph, nodes, {}, attempt.variant.index)
    winner = matcher.first_at_site(found)
    if winner.variant == found.variant:
        return attempt
    site = ", ".join(graph.by_name[n].label for n in matcher.site_of(found))
    listing = ", ".join(f"{label} = {graph.by_name[name].label}" for label, name in winner.nodes.items())
    failure = Failure(
        "ordered_choice", matcher.site_labels[0], found.nodes[matcher.site_labels[0]],
        f"variant {winner.variant}", f"variant {found.variant}",
        f"at {site} an earlier alternative of {matcher.pattern.name} matches ({listing}), and the first one that "
        "matches at a site is the match",
        extra={"winner": dict(winner.nodes)},
    )
    return _Attempt(attempt.mapping, failure, attempt.variant, False, (attempt.score[0], attempt.score[1] - 1))


def _explain_at(matcher: Matcher, graph: Graph, node: Node) -> Explanation:
    best = _best_attempt(matcher, graph, node)
    if best is None:
        wanted = sorted({op for v in matcher.variants for pn in v.nodes.values()
                         for op in pn.op.op_words.split(" or ")})
        failure = Failure(
            "op_type", "", node.name, " or ".join(wanted), node.op_type,
            f"{node.label}: op type is {node.op_type}, and {matcher.pattern.name} has no node of that type "
            f"(it has {', '.join(wanted)})",
        )
        return Explanation(matcher.pattern.name, False, failure.message, node.name, graph.path, {}, failure, None,
                           max(len(v.nodes) for v in matcher.variants))
    return best.explanation(matcher.pattern, node.name, graph)


def _near_misses(matcher: Matcher, root: Graph, limit: int) -> NearMisses:
    matches = matcher.find(root)
    covered = {(m.graph.path, n) for m in matches for n in m.nodes.values()}
    found: list[tuple[tuple[int, int], int, int, Explanation]] = []
    for graph_index, graph in enumerate(root.walk()):
        position = graph.positions()
        by_op = graph.nodes_by_op()
        tried: set[str] = set()
        # Start from the rarest pattern op; widen to the next only while too few misses are found.
        pattern_nodes = sorted(
            {pn.label: pn for v in matcher.variants for pn in v.nodes.values()}.values(),
            key=lambda pn: _candidate_count(pn, graph, by_op),
        )
        anchors = set(matcher.pattern.anchors)
        if anchors:  # a site is known by these ops (attention by its Softmax): start nowhere else
            pattern_nodes = [pn for pn in pattern_nodes if pn.op.ops is not None and anchors & set(pn.op.ops)]
        for pn in pattern_nodes:
            names = ([n.name for n in graph.nodes] if pn.op.ops is None
                     else [x for o in pn.op.ops for x in by_op.get(o, ())])
            for name in names:
                if name in tried or (graph.path, name) in covered:
                    continue
                tried.add(name)
                attempt = _best_attempt(matcher, graph, graph.by_name[name])
                if attempt is None or attempt.complete:
                    continue
                found.append((attempt.score, graph_index, position[name],
                              attempt.explanation(matcher.pattern, name, graph)))
            if len(found) >= limit:
                break
    found.sort(key=lambda f: (-f[0][0], -f[0][1], f[1], f[2]))
    kept: list[Explanation] = []
    sites: list[set[str]] = []
    for _, _, _, e in found:
        nodes = set(e.mapping.values()) | {e.at or ""}
        if any(nodes <= site for site in sites):
            continue  # the same place, seen better from another of its nodes
        sites.append(nodes)
        kept.append(e)
        if len(kept) == limit:
            break
    return NearMisses(matcher.pattern.name, len(matches), kept)


def _candidate_count(pn: FlatNode, graph: Graph, by_op: dict[str, list[str]]) -> int:
    return len(graph.nodes) if pn.op.ops is None else sum(len(by_op.get(o, ())) for o in pn.op.ops)


# ------------------------------------------------------------------------------------ the walk
@dataclass
class _Attempt:
    mapping: dict[str, Node]
    failure: Failure | None
    variant: Variant
    complete: bool
    score: tuple[int, int]

    def explanation(self, pattern: Pattern, at: str, graph: Graph) -> Explanation:
        names = {label: node.name for label, node in self.mapping.items()}
        if self.complete:
            listing = ", ".join(f"{label} = {node.label}" for label, node in self.mapping.items())
            message = f"{pattern.name} matches here: {listing}"
            refusals = [r for node in self.mapping.values() for r in value_refusals(graph, node)]
            if refusals:
                message += "; but " + "; ".join(refusals)
        else:
            assert self.failure is not None
            message = self.failure.message
        return Explanation(pattern.name, self.complete, message, at, graph.path, names, self.failure,
                           self.variant.index, len(self.variant.nodes), self.score)


def _outward_order(pattern_graph: nx.DiGraph, start: str) -> list[str]:
    """Pattern labels from ``start``: first everything that feeds it (breadth first), then the rest
    breadth first, each node's producers before its consumers; every label next to an earlier one.

    Placing what feeds a node before what reads it shows the most of a site that fails downstream:
    at an attention Softmax whose output goes elsewhere, the scores, scale, mask and heads are placed.
    """
    order, seen = [start], {start}
    for label in order:  # the cone of producers
        for neighbour in sorted(pattern_graph.predecessors(label)):
            if neighbour not in seen:
                seen.add(neighbour)
                order.append(neighbour)
    for label in order:  # then outward, in both directions
        for neighbour in [*sorted(pattern_graph.predecessors(label)), *sorted(pattern_graph.successors(label))]:
            if neighbour not in seen:
                seen.add(neighbour)
                order.append(neighbour)
    return order


class _Walk:
    """Depth-first placement of one variant's nodes, outward from a starting node."""

    def __init__(self, pattern: Pattern, variant: Variant, graph: Graph) -> None:
        self.pattern, self.variant, self.graph = pattern, variant, graph
        self.model = graph.to_networkx()
        self.best: _Attempt | None = None
        self.steps = 0

    def run(self, start_label: str, start: Node) -> _Attempt:
        self.order = _outward_order(self.variant.graph, start_label)
        mapping: dict[str, Node] = {}
        soft: list[Failure] = []
        self._place(0, start, mapping, soft)
        assert self.best is not None
        return self.best

    def _record(self, mapping: dict[str, Node], soft: list[Failure], hard: Failure | None) -> None:
        complete = hard is None and not soft and len(mapping) == len(self.variant.nodes)
        score = (len(mapping), -len(soft) - (1 if hard else 0))
        if self.best is None or score > self.best.score:
            failure = soft[0] if soft else hard
            self.best = _Attempt(dict(mapping), failure, self.variant, complete, score)

    def _place(self, k: int, node: Node, mapping: dict[str, Node], soft: list[Failure]) -> bool:
        """Place pattern node ``order[k]`` on ``node`` and continue; True once a full match is found."""
        self.steps += 1
        label = self.order[k]
        pn = self.variant.nodes[label]
        failure = node_failure(pn, node)
        added_soft = 0
        if failure is not None:
            if failure.kind == "op_type":
                self._record(mapping, soft, failure)
                return False
            soft.append(failure)
            added_soft = 1
        structural = self._edges_to_mapped(label, node, mapping)
        if structural is not None:
            self._record(mapping, soft, structural)
            del soft[len(soft) - added_soft :]
            return False
        mapping[label] = node
        done = self._continue(k + 1, mapping, soft)
        del mapping[label]
        del soft[len(soft) - added_soft :]
        return done

    def _continue(self, k: int, mapping: dict[str, Node], soft: list[Failure]) -> bool:
        if k == len(self.order):
            return self._finish(mapping, soft)
        if self.steps > _STEP_BUDGET:
            self._record(mapping, soft, None)
            return False
        label = self.order[k]
        candidates, missing = self._candidates(label, mapping)
        if not candidates:
            self._record(mapping, soft, missing)
            return False
        return any(self._place(k, candidate, mapping, soft) for candidate in candidates)

    def _finish(self, mapping: dict[str, Node], soft: list[Failure]) -> bool:
        extra: list[Failure] = []
        if not soft:
            _, failure = bind_inputs(self.variant, self.graph, mapping)
            if failure is None:
                failure = sole_use_failure(self.pattern, self.variant, self.graph, mapping)
            if failure is not None:
                extra.append(failure)
        self._record(mapping, soft + extra, None)
        return self.best is not None and self.best.complete

    def _edges_to_mapped(self, label: str, node: Node, mapping: dict[str, Node]) -> Failure | None:
        """Every pattern edge between ``label`` and a placed node must exist in the model, slots included."""
        pg = self.variant.graph  # its _succ/_pred: networkx's adjacency dicts, read without a view per lookup
        for q, data in pg._succ[label].items():
            if q in mapping:
                edge = consumers_of(self.model, node.name).get(mapping[q].name)
                if edge is None or not edge_matches(edge, data):
                    return self._wiring_failure(node, q, mapping[q])
        for q, data in pg._pred[label].items():
            if q in mapping:
                edge = consumers_of(self.model, mapping[q].name).get(node.name)
                if edge is None or not edge_matches(edge, data):
                    return self._wiring_failure(mapping[q], label, node)
        return None

    def _wiring_failure(self, producer: Node, consumer_label: str, consumer: Node) -> Failure:
        return Failure(
            "structure", consumer_label, consumer.name, f"an input from {producer.label}", "no such input",
            f"{consumer.label} does not read the output of {producer.label} where the pattern expects it",
        )

    def _candidates(self, label: str, mapping: dict[str, Node]) -> tuple[list[Node], Failure | None]:
        """Model nodes that could take ``label``, found from a placed neighbour; or why there are none."""
        pg = self.variant.graph
        pn = self.variant.nodes[label]
        for q in pg._succ[label]:  # label feeds q: look at q's inputs
            if q not in mapping:
                continue
            consumer = mapping[q]
            qn = self.variant.nodes[q]
            slots = [i.slot for i in qn.inputs if i.source.kind == "node" and i.source.label == label]
            model_slots = (range(len(consumer.inputs)) if qn.commutative
                           else [s for s in slots if s < len(consumer.inputs)])
            found: list[Node] = []
            for s in model_slots:
                produced = self.graph.local_producer(consumer.inputs[s])
                if produced is not None and produced[0] not in found and produced[0] not in mapping.values():
                    found.append(produced[0])
            fitting = [c for c in found if pn.op.accepts_op(c.op_type, c.domain)]
            if fitting:
                return fitting, None
            slot = slots[0] if slots else 0
            if found:
                other = found[0]
                return [], Failure(
                    "op_type", label, other.name, pn.op.op_words, other.op_type,
                    f"input {slot} of {consumer.label} comes from {other.label}: op type is {other.op_type} "
                    f"where {pn.op.op_words} was expected",
                    slot=slot,
                )
            tensor = consumer.inputs[slot] if slot < len(consumer.inputs) else ""
            if not tensor:
                return [], Failure(
                    "structure", label, consumer.name, f"the output of {pn.op.op_words}", "no input",
                    f"{consumer.label} has no input {slot}, where the output of {pn.op.op_words} was expected",
                    slot=slot,
                )
            placed = self.graph.local_producer(tensor)
            if placed is not None and placed[0] in mapping.values():
                role = next(k for k, v in mapping.items() if v is placed[0])
                return [], Failure(
                    "structure", label, consumer.name, f"the output of {pn.op.op_words}", placed[0].label,
                    f"input {slot} of {consumer.label} comes from {placed[0].label}, which this match already uses "
                    f"as '{role}', where another {pn.op.op_words} was expected",
                    slot=slot, tensor=tensor,
                )
            origin = origin_of(self.graph, tensor)
            return [], Failure(
                "structure", label, consumer.name, f"the output of {pn.op.op_words}", origin,
                f"input {slot} of {consumer.label} is {origin} where the output of {pn.op.op_words} was expected",
                slot=slot, tensor=tensor,
            )
        for q in pg._pred[label]:  # q feeds label: look at q's consumers
            if q not in mapping:
                continue
            producer = mapping[q]
            users = [self.graph.by_name[c] for c in consumers_of(self.model, producer.name)]
            users = [u for u in users if u not in mapping.values()]
            fitting = [u for u in users if pn.op.accepts_op(u.op_type, u.domain)]
            if fitting:
                return fitting, None
            if users:
                listing = ", ".join(u.label for u in users[:3]) + _no_op_note(self.graph, users[0])
                return [], Failure(
                    "op_type", label, users[0].name, pn.op.op_words, users[0].op_type,
                    f"the output of {producer.label} goes to {listing}, where {pn.op.op_words} was expected",
                )
            return [], Failure(
                "structure", label, producer.name, f"{pn.op.op_words} reading it", "no consumer",
                f"the output of {producer.label} is not read by any node, where {pn.op.op_words} was expected",
            )
        raise AssertionError("pattern walk reached a node with no placed neighbour")  # pragma: no cover
