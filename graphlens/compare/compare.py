"""Compare two models: pair their nodes graph by graph, say what changed, measure the error.

Subgraphs (If/Loop/Scan bodies) are paired through their owning nodes: the bodies of a paired If
are compared with each other, with the outer tensors they read anchored by the outer pairing.
The bodies of a node only one side has are added or removed whole.
"""

from __future__ import annotations

import numpy as np

from graphlens.compare.changes import ChangeCache, group_changes
from graphlens.compare.pairing import GraphPairing, Record, _Side
from graphlens.compare.result import Comparison, Pair, count_statuses
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.task import Task, task_or_idle

PAIRING_SHARE = 0.05
"""The share of a comparison's progress that pairing the nodes takes; running both models takes the rest."""


def compare_models(
    a: Model,
    b: Model,
    *,
    numeric: bool = True,
    inputs: dict[str, np.ndarray] | None = None,
    inputs_file: str | None = None,
    dims: dict[str, int] | None = None,
    task: Task | None = None,
) -> Comparison:
    """Pair every node of A with B's (see :mod:`graphlens.compare.pairing`), then, with ``numeric``,
    run both on the same inputs and attach each pair's tensor error.

    ``inputs`` are fed to both (by name, or by position where B names its inputs differently), and
    ``inputs_file`` names where they were read from in :attr:`Comparison.inputs_line`;
    without them random inputs are made with ``dims`` and the other dynamic dims searched.
    ``task`` hears the pairing as the first 5 % of the work and the runs as the rest; cancelling it stops the
    work with :class:`~graphlens.core.task.Cancelled`.
    """
    task = task_or_idle(task)
    task.report(0.0)
    records: list[Record] = []
    changes_of = ChangeCache()
    _pair_graphs(a.graph, b.graph, records, set(), None, task, changes_of)
    pairs = _pairs(_in_graph_order(records, a, b), changes_of)
    _add_body_changes(pairs, a)
    comparison = Comparison(a, b, pairs, count_statuses(pairs))
    if not numeric:
        comparison.numeric_reason = "numeric comparison not asked for"
        return comparison
    task.check("the comparison")
    task.report(PAIRING_SHARE)
    from graphlens.compare.numeric import attach_errors

    comparison.numeric_reason, comparison.inputs_line = attach_errors(
        comparison, inputs, dims, task.part(PAIRING_SHARE, 1.0), inputs_file)
    return comparison


def _pair_graphs(ga: Graph, gb: Graph, records: list[Record], groups: set[int],
                 parents: tuple[_Side, _Side] | None, task: Task, changes_of: ChangeCache) -> None:
    task.check("the comparison")
    pairing = GraphPairing(ga, gb, records, groups, parents, changes_of)
    first = len(records)
    pairing.run()
    a, b = pairing.sides["a"], pairing.sides["b"]
    for node in ga.nodes:
        if node.name not in a.pair:
            records.append(Record(ga.path, gb.path, [node], [], "name"))
            _whole_bodies(node, "a", records)
    for node in gb.nodes:
        if node.name not in b.pair:
            records.append(Record(ga.path, gb.path, [], [node], "name"))
            _whole_bodies(node, "b", records)
    for record in records[first:]:
        if len(record.a) == 1 and len(record.b) == 1 and record.a[0].subgraphs and record.b[0].subgraphs:
            na, nb = record.a[0], record.b[0]
            for attr, bodies_a in na.subgraphs.items():
                bodies_b = nb.subgraphs.get(attr, [])
                for body_a, body_b in zip(bodies_a, bodies_b):
                    _pair_graphs(body_a, body_b, records, groups, (a, b), task, changes_of)
                for body in bodies_a[len(bodies_b):]:
                    _whole_graph(body, "a", records)
                for body in bodies_b[len(bodies_a):]:
                    _whole_graph(body, "b", records)
            for attr, bodies_b in nb.subgraphs.items():
                if attr not in na.subgraphs:
                    for body in bodies_b:
                        _whole_graph(body, "b", records)


def _whole_bodies(node: Node, side: str, records: list[Record]) -> None:
    for body in node.all_subgraphs():
        _whole_graph(body, side, records)


def _whole_graph(graph: Graph, side: str, records: list[Record]) -> None:
    """Every node of a body only one side has, removed (A) or added (B)."""
    for g in graph.walk():
        for node in g.nodes:
            if side == "a":
                records.append(Record(g.path, g.path, [node], [], "name"))
            else:
                records.append(Record(g.path, g.path, [], [node], "name"))


def _in_graph_order(records: list[Record], a: Model, b: Model) -> list[Record]:
    """Graph by graph (A's order, then graphs only B has), each by its first node's position in A
    (B's for added nodes, after A's), as people read a summary."""
    order = {g.path: k for k, g in enumerate(a.graph.walk())}
    for g in b.graph.walk():
        order.setdefault(g.path, len(order))

    def key(record: Record) -> tuple[int, int, int]:
        if record.a:
            positions = record.a[0].graph.positions()
            return (order.get(record.graph_a, 0), 0, min(positions[n.name] for n in record.a))
        positions = record.b[0].graph.positions()
        return (order.get(record.graph_a, 0), 1, min(positions[n.name] for n in record.b))

    return sorted(records, key=key)


def _pairs(records: list[Record], changes_of: ChangeCache) -> list[Pair]:
    pairs = []
    for record in records:
        graph_b = record.graph_b if record.graph_b != record.graph_a else None
        names_a, names_b = [n.name for n in record.a], [n.name for n in record.b]
        if not record.b:
            pairs.append(Pair(record.graph_a, names_a, [], "removed", [], record.how))
            continue
        if not record.a:
            pairs.append(Pair(record.graph_a, [], names_b, "added", [], record.how, graph_b=graph_b))
            continue
        if len(record.a) == 1 and len(record.b) == 1:
            changes = changes_of(record.a[0], record.b[0])
        else:
            changes = group_changes(record.a, record.b, changes_of)
        pairs.append(Pair(record.graph_a, names_a, names_b, "changed" if changes else "same", changes, record.how,
                          graph_b=graph_b))
    return pairs


def _add_body_changes(pairs: list[Pair], a: Model) -> None:
    """An If/Loop pair whose bodies differ says so, and counts as changed (a collapsed view shows it)."""
    bodies = {g.path: (g.parent.graph.path, g.parent.name, g.attr_name) for g in a.graph.walk() if g.parent}
    owners = {(p.graph, p.a[0]): p for p in pairs if len(p.a) == 1 and p.b}
    depth = {g.path: g.depth for g in a.graph.walk()}
    by_graph: dict[str, list[Pair]] = {}
    for pair in pairs:
        by_graph.setdefault(pair.graph, []).append(pair)
    for path in sorted(bodies, key=lambda body: -depth[body]):  # deepest first: a change two bodies down
        count = sum(1 for p in by_graph.get(path, ()) if p.status != "same")  # reaches the outer If too
        outer, node, attr = bodies[path]
        owner = owners.get((outer, node))
        if count and owner is not None:
            owner.changes.append(f"body {attr}: {count} node{'s' if count != 1 else ''} differ")
            owner.status = "changed"
