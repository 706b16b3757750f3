"""Which nodes of B correspond to which nodes of A, graph by graph.

Names go first (a node named the same, with a name the file gave it, in the paired graph). The
rest pair by structure, because folding and re-exporting rename everything: a node's *signature*
(op type, domain, attributes, number of inputs and outputs) plus where its inputs come from
(a paired node's output slot, a graph input by position, a constant by dtype and shape) is its
forward key; the signature plus which paired nodes read its outputs, and at which input slot, is
its backward key. A node of A and one of B with equal keys pair; each new pair makes its
neighbours' keys known, so a work list propagates pairs from the inputs, the outputs and the
name pairs to a fixpoint in time linear in the graph.

Where propagation stalls, the unpaired nodes form connected *regions* bounded by paired tensors.
An A region and a B region between the same boundary pair node by node when they are isomorphic
(VF2 on op types, small regions only), else as one group (a decomposed GELU ↔ Gelu, Conv+BN ↔
Conv). A region only one side has, sitting on a tensor the other side passes straight on (a BN
after a conv that the folded model lacks, Q/DQ around a conv), joins the pair next to it as a
group when that pair changed too (its weights were folded) or the region only passes values on.
New pairs make new keys known, so propagation and regions alternate until nothing changes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

from graphlens.compare.changes import AttributeKey, attribute_key, constant_shape, node_changes
from graphlens.core.graph import Graph
from graphlens.core.node import Node

PASS_THROUGH = frozenset({"Identity", "QuantizeLinear", "DequantizeLinear", "Cast", "Dropout"})
"""Ops that only pass a value on (or re-encode it): a region of them joins a neighbouring pair."""

_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})

VF2_LIMIT = 64
"""Regions up to this many nodes are matched node by node with VF2; larger ones become a group."""

Anchor = tuple[Hashable, ...]
"""Where a tensor comes from, as both sides name it: ("in", graph, position) a graph input, ("p", pair, slot)
a pair's output, ("g", pair, k) a group's, ("c", dims…) a constant, ("none",) an empty input,
("outer", tensor) a name from an enclosing graph."""
Reader = tuple[str, int] | tuple[str, int, int]
"""A paired reader of a tensor: ("p", pair, input slot), ("g", group pair) or ("out", graph output position)."""
Readers = frozenset[Reader]
Signature = tuple[str, str, AttributeKey, int, int]
"""Domain, op type, attributes, number of inputs and of outputs."""
Key = tuple[Signature, tuple[Hashable, ...]]
"""A node's signature with its input anchors (forward) or its outputs' readers (backward)."""


@dataclass
class Record:
    """A pair as the matcher builds it: nodes of each side (graph order), how it was found."""

    graph_a: str
    graph_b: str
    a: list[Node] = field(default_factory=list)
    b: list[Node] = field(default_factory=list)
    how: str = "name"


class _Side:
    """One side's graph with what the matcher knows of it: anchors of tensors, pairs of nodes."""

    def __init__(self, graph: Graph, parent: _Side | None, input_key: str) -> None:
        self.graph = graph
        self.parent = parent
        self.anchor: dict[str, Anchor] = {}
        self.by_anchor: dict[Anchor, str] = {}
        self.pair: dict[str, int] = {}
        self.positions = graph.positions()
        self.out_pos = {t: i for i, t in enumerate(graph.outputs)}
        self._sigs: dict[str, Signature] = {}
        fed = [t for t in graph.inputs if t not in graph.initializers]
        for i, tensor in enumerate(fed):
            self.set_anchor(tensor, ("in", input_key, i))

    def set_anchor(self, tensor: str, anchor: Anchor) -> None:
        self.anchor[tensor] = anchor
        self.by_anchor[anchor] = tensor

    def sig(self, node: Node) -> Signature:
        found = self._sigs.get(node.name)
        if found is None:
            found = (node.domain or "", node.op_type, attribute_key(node), len(node.inputs), len(node.outputs))
            self._sigs[node.name] = found
        return found

    def anchor_of(self, tensor: str) -> Anchor | None:
        """Where ``tensor`` comes from, in terms both sides share; None while its producer is unpaired."""
        if not tensor:
            return ("none",)
        found = self.anchor.get(tensor)
        if found is not None:
            return found
        graph = self.graph
        if tensor in graph.producers or tensor in graph.initializers:
            shape = constant_shape(graph, tensor)
            if shape is not None:
                return ("c", *shape[1:])  # not the dtype: an int8 weight stands where the float one was
            found = graph.local_producer(tensor)
            if found is not None and found[0].op_type == "DequantizeLinear" and found[0].name not in self.pair:
                return self._through_dequantize(found[0])
            return None
        if self.parent is not None:
            return self.parent.anchor_of(tensor)
        return None

    def _through_dequantize(self, dq: Node) -> Anchor | None:
        """A Q→DQ pair (or a DQ of a constant) not yet paired is looked through: quantizing a model
        puts them on its edges, and the nodes around them are still the same nodes."""
        source = dq.inputs[0] if dq.inputs else ""
        found = self.graph.local_producer(source) if source else None
        if found is not None and found[0].op_type == "QuantizeLinear" and found[0].name not in self.pair:
            return self.anchor_of(found[0].inputs[0])
        shape = constant_shape(self.graph, source) if source else None
        return None if shape is None else ("c", *shape[1:])

    def consumer_anchors(self, tensor: str, groups: set[int], skip: AbstractSet[str] = frozenset(),
                         depth: int = 0) -> Readers:
        """The paired readers of ``tensor`` (pair, input slot) and its graph-output position; readers
        through unpaired Q→DQ pairs count (see :meth:`_through_dequantize`)."""
        found: set[Reader] = set()
        if tensor in self.out_pos:
            found.add(("out", self.out_pos[tensor]))
        for consumer, slot in self.graph.consumers(tensor):
            if consumer.name in skip:
                continue
            pid = self.pair.get(consumer.name)
            if pid is not None:
                found.add(("g", pid) if pid in groups else ("p", pid, slot))
            elif consumer.op_type == "QuantizeLinear" and slot == 0 and depth < 4 and not skip:
                for dq, dq_slot in self.graph.consumers(consumer.outputs[0]):
                    if dq.op_type == "DequantizeLinear" and dq_slot == 0 and dq.name not in self.pair:
                        found |= self.consumer_anchors(dq.outputs[0], groups, skip, depth + 1)
        return frozenset(found)

    def forward_key(self, node: Node) -> Key | None:
        if not node.inputs:
            return None  # constants pair by who reads them
        parts = []
        for tensor in node.inputs:
            anchor = self.anchor_of(tensor)
            if anchor is None:
                return None
            parts.append(anchor)
        return (self.sig(node), tuple(parts))

    def backward_key(self, node: Node, groups: set[int]) -> Key | None:
        slots = tuple(self.consumer_anchors(t, groups) if t else frozenset() for t in node.outputs)
        if not any(slots):
            return None
        return (self.sig(node), slots)


class GraphPairing:
    """Pairs the nodes of one graph of A with one graph of B; records go to a list shared by all graphs."""

    def __init__(self, ga: Graph, gb: Graph, records: list[Record], groups: set[int],
                 parents: tuple[_Side, _Side] | None = None,
                 changes_of: Callable[[Node, Node], list[str]] = node_changes) -> None:
        key = ga.path
        self.sides = {"a": _Side(ga, parents[0] if parents else None, key),
                      "b": _Side(gb, parents[1] if parents else None, key)}
        self.records = records
        self.groups = groups
        self.changes_of = changes_of
        self._queue: deque[tuple[str, str, Node]] = deque()
        self._index: dict[tuple[str, str], dict[Key, deque[Node]]] = {
            (d, s): {} for d in ("f", "b") for s in ("a", "b")}

    # ------------------------------------------------------------ pairing
    def run(self) -> None:
        a, b = self.sides["a"], self.sides["b"]
        for node in a.graph.nodes:  # by name, when the file named the node
            other = b.graph.by_name.get(node.name)
            if other is not None and node.proto.name and other.proto.name and other.name not in b.pair:
                self.make_pair([node], [other], "name")
        # Unnamed nodes whose outputs carry the same tensor names and op type: e.g. the Constants of a
        # branch that only a nested body reads, which have no neighbour in their own graph to pair from.
        by_outputs = {tuple(n.outputs): n for n in b.graph.nodes
                      if not n.proto.name and n.name not in b.pair and any(n.outputs)}
        for node in a.graph.nodes:
            if node.proto.name or node.name in a.pair or not any(node.outputs):
                continue
            other = by_outputs.get(tuple(node.outputs))
            if other is not None and other.op_type == node.op_type and other.name not in b.pair:
                self.make_pair([node], [other], "name")
        for side in ("b", "a"):  # B first: A's seeds then find their partners waiting, in graph order
            graph = self.sides[side].graph
            self._queue.extend(("f", side, node) for node in graph.nodes)  # those with known inputs pair now
            for tensor in graph.outputs:
                found = graph.local_producer(tensor)
                if found is not None:
                    self._queue.append(("b", side, found[0]))
        rounds = 0
        while True:
            self._drain()
            rounds += 1
            if not self._regions() or rounds > 10_000:
                break

    def make_pair(self, nodes_a: list[Node], nodes_b: list[Node], how: str) -> int:
        pid = len(self.records)
        a, b = self.sides["a"], self.sides["b"]
        self.records.append(Record(a.graph.path, b.graph.path, list(nodes_a), list(nodes_b), how))
        for node in nodes_a:
            a.pair[node.name] = pid
        for node in nodes_b:
            b.pair[node.name] = pid
        if len(nodes_a) == 1 and len(nodes_b) == 1:
            for slot, (ta, tb) in enumerate(zip(nodes_a[0].outputs, nodes_b[0].outputs)):
                if ta and tb:
                    a.set_anchor(ta, ("p", pid, slot))
                    b.set_anchor(tb, ("p", pid, slot))
        else:
            self.groups.add(pid)
        for side, nodes in (("a", nodes_a), ("b", nodes_b)):
            self._push_neighbours(side, nodes)
        return pid

    def _push_neighbours(self, side: str, nodes: list[Node], depth: int = 0) -> None:
        """Queue the readers and producers of ``nodes`` (and those beyond Q/DQ nodes, which keys look through)."""
        graph = self.sides[side].graph
        for node in nodes:
            for tensor in node.outputs:
                for consumer, _ in graph.consumers(tensor):
                    self._queue.append(("f", side, consumer))
                    if consumer.op_type in _QDQ and depth < 3:
                        self._push_neighbours(side, [consumer], depth + 1)
            for tensor in node.inputs:
                found = graph.local_producer(tensor) if tensor else None
                if found is not None:
                    self._queue.append(("b", side, found[0]))
                    if found[0].op_type in _QDQ and depth < 3:
                        self._push_neighbours(side, [found[0]], depth + 1)

    def _key(self, direction: str, side: str, node: Node) -> Key | None:
        s = self.sides[side]
        return s.forward_key(node) if direction == "f" else s.backward_key(node, self.groups)

    def _drain(self) -> None:
        queue = self._queue
        while queue:
            direction, side, node = queue.popleft()
            if node.name in self.sides[side].pair:
                continue
            key = self._key(direction, side, node)
            if key is None:
                continue
            other = "b" if side == "a" else "a"
            bucket = self._index[(direction, other)].get(key)
            while bucket:
                candidate = bucket.popleft()
                if candidate.name in self.sides[other].pair or self._key(direction, other, candidate) != key:
                    continue
                pair = ([node], [candidate]) if side == "a" else ([candidate], [node])
                self.make_pair(*pair, "structure")
                break
            else:
                self._index[(direction, side)].setdefault(key, deque()).append(node)

    # ------------------------------------------------------------ regions
    def _region_list(self, side: str) -> list[_Region]:
        s = self.sides[side]
        graph = s.graph
        unpaired = [n for n in graph.nodes if n.name not in s.pair]
        parent = {n.name: n.name for n in unpaired}

        def find(x: str) -> str:
            while parent[x] != x:
                parent[x] = parent[parent[x]]
                x = parent[x]
            return x

        for node in unpaired:
            for tensor in node.inputs:
                found = graph.local_producer(tensor) if tensor else None
                if found is not None and found[0].name in parent:
                    ra, rb = find(node.name), find(found[0].name)
                    if ra != rb:
                        parent[ra] = rb
        regions: dict[str, list[Node]] = {}
        for node in unpaired:
            regions.setdefault(find(node.name), []).append(node)
        return [_Region.of(s, nodes, self.groups) for nodes in regions.values()]

    def _regions(self) -> bool:
        """Pair regions with equal boundaries, fold lone regions into a neighbour; True if anything paired."""
        regions_a, regions_b = self._region_list("a"), self._region_list("b")
        if not regions_a and not regions_b:
            return False
        progress = False
        waiting: dict[tuple[frozenset[Anchor], frozenset[Readers]], deque[_Region]] = {}
        for region in regions_b:
            waiting.setdefault(region.key, deque()).append(region)
        lone_a = []
        for region in regions_a:
            bucket = waiting.get(region.key)
            # Quantization scaffolding is not what the other side had there (a BN folded away
            # where B quantizes the conv's output): both are left to join the pair beside them.
            if (region.inputs or region.outputs) and bucket and region.only_qdq == bucket[0].only_qdq:
                self._pair_regions(region, bucket.popleft())
                progress = True
                continue
            lone_a.append(region)
        lone_b = [r for bucket in waiting.values() for r in bucket]
        for side, lone in (("a", lone_a), ("b", lone_b)):
            for region in lone:
                progress |= self._absorb(side, region)
        return progress

    def _pair_regions(self, ra: _Region, rb: _Region) -> None:
        if len(ra.nodes) == len(rb.nodes) == 1:
            self.make_pair(ra.nodes, rb.nodes, "structure")
            return
        if len(ra.nodes) == len(rb.nodes) <= VF2_LIMIT:
            mapping = _isomorphism(ra.nodes, rb.nodes)
            if mapping is not None:
                for na in ra.nodes:
                    self.make_pair([na], [mapping[na.name]], "structure")
                return
        pid = self.make_pair(ra.nodes, rb.nodes, "group")
        a, b = self.sides["a"], self.sides["b"]
        outs_b = {cons: t for t, cons in rb.out_tensors.items()}
        for k, (tensor, cons) in enumerate(ra.out_tensors.items()):
            other = outs_b.get(cons)
            if other is not None:
                a.set_anchor(tensor, ("g", pid, k))
                b.set_anchor(other, ("g", pid, k))
        self._push_neighbours("a", ra.nodes)
        self._push_neighbours("b", rb.nodes)

    def _absorb(self, side: str, region: _Region) -> bool:
        """Join a region only ``side`` has to the pair beside it, when the other side bypasses it."""
        s = self.sides[side]
        other = self.sides["b" if side == "a" else "a"]
        target: int | None = None
        if len(region.inputs) == 1 and len(region.out_tensors) == 1:
            (anchor,) = region.inputs
            bypass = other.by_anchor.get(anchor)
            (cons,) = region.out_tensors.values()
            if bypass is None or not cons or other.consumer_anchors(bypass, self.groups) != cons:
                return False
            if anchor[0] in ("p", "g") and isinstance(anchor[1], int) and anchor[1] < len(self.records) \
                    and self.records[anchor[1]].graph_a == self.sides["a"].graph.path:
                target = anchor[1]
            else:
                target = _single_pair(cons)
        elif not region.inputs and region.out_tensors:  # constants feeding one pair (a weight's DequantizeLinear)
            targets = {_single_pair(c) for c in region.out_tensors.values()}
            target = targets.pop() if len(targets) == 1 else None
        if target is None:
            return False
        record = self.records[target]
        if not _worth_absorbing(record, region.nodes, self.changes_of):
            return False
        nodes = record.a if side == "a" else record.b
        nodes.extend(region.nodes)
        nodes.sort(key=lambda n: s.positions.get(n.name, 0))
        record.how = "group"
        self.groups.add(target)
        for node in region.nodes:
            s.pair[node.name] = target
        if len(region.inputs) == 1 and len(region.out_tensors) == 1:
            (tensor,) = region.out_tensors
            s.set_anchor(tensor, next(iter(region.inputs)))
        self._push_neighbours(side, region.nodes)
        return True


@dataclass
class _Region:
    """Connected unpaired nodes of one side, with the paired tensors around them."""

    nodes: list[Node]
    inputs: frozenset[Anchor]
    """Anchors of the non-constant tensors the region reads from outside it."""
    out_tensors: dict[str, Readers]
    """Tensors it produces for paired readers or graph outputs -> those readers' anchors."""

    @property
    def outputs(self) -> frozenset[Readers]:
        return frozenset(self.out_tensors.values())

    @property
    def key(self) -> tuple[frozenset[Anchor], frozenset[Readers]]:
        return (self.inputs, self.outputs)

    @property
    def only_qdq(self) -> bool:
        """Only QuantizeLinear/DequantizeLinear nodes (and Constants feeding them): quantization, nothing else."""
        return (any(n.op_type in _QDQ for n in self.nodes)
                and all(n.op_type in _QDQ or n.op_type == "Constant" for n in self.nodes))

    @classmethod
    def of(cls, side: _Side, nodes: list[Node], groups: set[int]) -> _Region:
        names = {n.name for n in nodes}
        graph = side.graph
        inputs: set[Anchor] = set()
        outs: dict[str, Readers] = {}
        for node in nodes:
            for tensor in node.inputs:
                found = graph.local_producer(tensor) if tensor else None
                if found is not None and found[0].name in names:
                    continue
                anchor = side.anchor_of(tensor)
                if anchor is None:
                    anchor = ("outer", tensor)
                if anchor[0] not in ("c", "none"):
                    inputs.add(anchor)
            for tensor in node.outputs:
                if tensor:
                    cons = side.consumer_anchors(tensor, groups, names)
                    if cons:
                        outs[tensor] = cons
        return cls(nodes, frozenset(inputs), outs)


def _single_pair(cons: Readers) -> int | None:
    pids = {c[1] for c in cons if c[0] in ("p", "g")}
    return pids.pop() if len(pids) == 1 and len(cons) == 1 else None


def _worth_absorbing(record: Record, nodes: list[Node], changes_of: Callable[[Node, Node], list[str]]) -> bool:
    """A lone region joins a pair that changed too (folding changes the conv's weights), or passes values on."""
    if all(n.op_type in PASS_THROUGH or n.op_type == "Constant" for n in nodes):
        return True
    if len(record.a) != 1 or len(record.b) != 1:
        return True
    return bool(changes_of(record.a[0], record.b[0]))


def _isomorphism(nodes_a: list[Node], nodes_b: list[Node]) -> dict[str, Node] | None:
    """A's node name -> B's node for two small regions with the same shape (VF2 on op types)."""
    import networkx as nx
    from networkx.algorithms.isomorphism import DiGraphMatcher

    def small(nodes: list[Node]) -> nx.DiGraph:
        g = nx.DiGraph()
        names = {n.name for n in nodes}
        for node in nodes:
            g.add_node(node.name, op=node.op_type)
            for tensor in node.inputs:
                found = node.graph.local_producer(tensor) if tensor else None
                if found is not None and found[0].name in names:
                    g.add_edge(found[0].name, node.name)
        return g

    ga, gb = small(nodes_a), small(nodes_b)
    matcher = DiGraphMatcher(ga, gb, node_match=lambda x, y: x["op"] == y["op"])
    if not matcher.is_isomorphic():
        return None
    by_name = {n.name: n for n in nodes_b}
    return {a: by_name[b] for a, b in matcher.mapping.items()}
