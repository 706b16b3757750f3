"""Graph edits: a rewrite's plan, shown before it happens, applied, and undone exactly.

A :class:`GraphEdit` names the nodes it removes, the nodes it adds (placed where the last removed
node stood: every input from outside the match exists by then, so the order stays topological), the inputs it
reroutes and the initializers it adds. Nothing changes until :meth:`EditHistory.apply`; each application is
one undo step, and undo puts back the very node list, inputs and initializers that were there before.

Rerouting follows TensorFlow's ``RerouteTensor(new, old)``: chosen consumers of one tensor are
pointed at another. Graph input and output names never change: a rewrite that replaces the
producer of a graph output gives the new node that output's name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node


@dataclass(frozen=True)
class Rescaled:
    """A tensor an edit adds that carries another's values divided, channel by channel (axis 1), by positive
    factors: what cross-layer equalization does to the tensors between its layers. Its range and values follow from
    the original's per channel, without running the edited model."""

    source: str
    divisor: np.ndarray
    """One float64 factor per channel."""


@dataclass
class GraphEdit:
    """One rewrite's changes to one graph, as data."""

    graph: str
    rule: str
    description: str
    remove: list[str] = field(default_factory=list)
    add: list[onnx.NodeProto] = field(default_factory=list)
    initializers: dict[str, onnx.TensorProto] = field(default_factory=dict)
    reroute: list[tuple[str, int, str]] = field(default_factory=list)
    """(consumer node, input slot, new tensor)."""
    drop_initializers: list[str] = field(default_factory=list)
    boundary: list[tuple[str, str]] = field(default_factory=list)
    """(tensor before, tensor after) pairs that must carry the same values; for numeric diffs."""
    site: dict[str, str] = field(default_factory=dict)
    """Pattern label -> node name of the match this edit rewrites."""
    drop_inputs: list[str] = field(default_factory=list)
    """Graph inputs to remove from the input list (their initializers stay, now as constants)."""
    kind: str = ""
    """What the fold report counts this edit as (a rule's :attr:`Rule.kind`); the rule's name when empty."""
    rescaled: dict[str, Rescaled] = field(default_factory=dict)
    """New tensor -> the tensor whose values it carries rescaled per channel (see :class:`Rescaled`)."""

    def summary(self) -> str:
        added = ", ".join(f"{n.op_type} '{n.name}'" for n in self.add) or "nothing"
        return f"{self.description}: remove {', '.join(repr(r) for r in self.remove) or 'nothing'}; add {added}"


@dataclass
class _Applied:
    graph: Graph
    nodes_before: list[Node]
    initializers_before: dict[str, onnx.TensorProto]
    rerouted: list[tuple[Node, int, str, str]]  # node, slot, old, new
    inputs_before: list[str] = field(default_factory=list)
    nodes_after: list[Node] | None = None
    initializers_after: dict[str, onnx.TensorProto] | None = None
    inputs_after: list[str] | None = None


@dataclass
class Change:
    """One undo step: the edits applied together, per graph."""

    label: str
    edits: list[GraphEdit]
    applied: list[_Applied]


class EditHistory:
    """Applies edits to a model and keeps the undo/redo history."""

    def __init__(self, model: Model, on_change: Callable[[], None] | None = None, *, keep_history: bool = True) -> None:
        self.model = model
        self.keep_history = keep_history
        """False for one-shot runs (the CLI): nothing to undo, so the replaced weights can be freed at once."""
        self.undo_stack: list[Change] = []
        self.redo_stack: list[Change] = []
        self.on_change = on_change
        self._group: Change | None = None
        self._saved_at: int | None = 0
        """Undo-stack depth when last saved (None: that state can no longer be reached)."""

    def apply(self, edits: list[GraphEdit], label: str | None = None) -> Change:
        """Apply ``edits`` (they must not touch the same nodes) as one undo step."""
        if not edits:
            raise GraphLensError("nothing to apply")
        by_graph: dict[str, list[GraphEdit]] = {}
        for edit in edits:
            by_graph.setdefault(edit.graph, []).append(edit)
        applied = [_apply(self.model.graph_at(path), group) for path, group in by_graph.items()]
        change = Change(label or (edits[0].description if len(edits) == 1 else f"{len(edits)} rewrites"),
                        edits, applied)
        if not self.keep_history:
            self.model.modified = True
            return change
        if self._group is not None:
            self._group.edits.extend(change.edits)
            self._group.applied.extend(change.applied)
            return self._group
        self._push(change)
        return change

    def _push(self, change: Change) -> None:
        if self._saved_at is not None and self._saved_at > len(self.undo_stack):
            self._saved_at = None  # the saved state was undone and is now replaced
        self.undo_stack.append(change)
        self.redo_stack.clear()
        self._changed()

    def mark_saved(self) -> None:
        """The model as it is now is what is on disk: modified until undo/redo comes back here."""
        self._saved_at = len(self.undo_stack)
        self._changed()

    @contextmanager
    def group(self, label: str) -> Iterator[Change]:
        """Everything applied inside is one undo step (e.g. a whole fold run)."""
        outer = self._group
        self._group = Change(label, [], [])
        try:
            yield self._group
        finally:
            change, self._group = self._group, outer
            if change.applied and outer is None:
                self._push(change)
            elif change.applied and outer is not None:
                outer.edits.extend(change.edits)
                outer.applied.extend(change.applied)

    @contextmanager
    def all_or_nothing(self, label: str) -> Iterator[Change]:
        """A :meth:`group` that is taken back whole when anything inside raises (a failure or a cancel):
        the model is left as it was and nothing is left to redo."""
        depth = len(self.undo_stack)
        try:
            with self.group(label) as change:
                yield change
        except BaseException:
            if self.keep_history and len(self.undo_stack) > depth:
                self.undo()
                self.redo_stack.clear()
            raise

    def undo(self) -> Change | None:
        if not self.undo_stack:
            return None
        change = self.undo_stack.pop()
        for step in reversed(change.applied):
            step.nodes_after = list(step.graph.nodes)
            step.initializers_after = dict(step.graph.initializers)
            step.inputs_after = list(step.graph.inputs)
            for node, slot, old, _ in reversed(step.rerouted):
                step.graph.set_input(node, slot, old)
            if step.inputs_after != step.inputs_before:
                step.graph.set_inputs(list(step.inputs_before))
            step.graph.set_initializers(dict(step.initializers_before))
            step.graph.set_nodes(list(step.nodes_before))
        self.redo_stack.append(change)
        self._changed()
        return change

    def redo(self) -> Change | None:
        if not self.redo_stack:
            return None
        change = self.redo_stack.pop()
        for step in change.applied:
            assert step.nodes_after is not None and step.initializers_after is not None
            for node, slot, _, new in step.rerouted:
                step.graph.set_input(node, slot, new)
            if step.inputs_after is not None and step.inputs_after != step.inputs_before:
                step.graph.set_inputs(list(step.inputs_after))
            step.graph.set_initializers(dict(step.initializers_after))
            step.graph.set_nodes(list(step.nodes_after))
        self.undo_stack.append(change)
        self._changed()
        return change

    @property
    def modified(self) -> bool:
        return self._saved_at != len(self.undo_stack)

    def _changed(self) -> None:
        self.model.modified = self.modified
        if self.on_change is not None:
            self.on_change()


def _apply(graph: Graph, edits: list[GraphEdit]) -> _Applied:
    before = list(graph.nodes)
    inits_before = dict(graph.initializers)
    inputs_before = list(graph.inputs)
    position = graph.positions()
    removed: set[str] = set()
    placed: dict[str, list[Node]] = {}
    for edit in edits:
        missing = [n for n in edit.remove if n not in graph.by_name]
        if missing:
            raise GraphLensError(f"{edit.description}: node '{missing[0]}' is not in {graph.path}")
        clash = removed.intersection(edit.remove)
        if clash:
            raise GraphLensError(f"two rewrites remove node '{sorted(clash)[0]}'")
        removed.update(edit.remove)
        if not edit.add:
            continue
        if not edit.remove:
            raise GraphLensError(f"{edit.description}: new nodes must replace at least one node")
        # Where the last removed node stood, every input from outside the match already exists.
        anchor = max(edit.remove, key=position.__getitem__)
        placed.setdefault(anchor, []).extend(graph.node_from(p) for p in edit.add)
    rerouted: list[tuple[Node, int, str, str]] = []
    for edit in edits:
        for name, slot, tensor in edit.reroute:
            node = graph.by_name[name]
            rerouted.append((node, slot, node.inputs[slot], tensor))
            graph.set_input(node, slot, tensor)
    nodes: list[Node] = []
    for node in before:
        nodes.extend(placed.get(node.name, ()))
        if node.name not in removed:
            nodes.append(node)
    initializers = dict(inits_before)
    for edit in edits:
        initializers.update(edit.initializers)
        for name in edit.drop_initializers:
            initializers.pop(name, None)
    dropped = {name for edit in edits for name in edit.drop_inputs}
    if dropped:
        graph.set_inputs([name for name in inputs_before if name not in dropped])
    graph.set_initializers(initializers)
    graph.set_nodes(nodes)
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        dup = next(n for n in names if names.count(n) > 1)
        _revert(graph, before, inits_before, rerouted, inputs_before)
        raise GraphLensError(f"rewrite would create two nodes named '{dup}'")
    return _Applied(graph, before, inits_before, rerouted, inputs_before)


def _revert(graph: Graph, nodes: list[Node], inits: dict[str, onnx.TensorProto],
            rerouted: list[tuple[Node, int, str, str]], inputs: list[str]) -> None:
    for node, slot, old, _ in reversed(rerouted):
        graph.set_input(node, slot, old)
    if graph.inputs != inputs:
        graph.set_inputs(list(inputs))
    graph.set_initializers(dict(inits))
    graph.set_nodes(list(nodes))


def graph_replacement(graph: Graph, source: Graph, rule: str, description: str) -> GraphEdit:
    """One edit that gives ``graph`` (a main graph) ``source``'s nodes, initializers and inputs: a copy of the same
    graph edited on the side (the quantization trial's arm that is the model to write), written back as one step.
    An initializer both hold under one name is the same tensor and stays as ``graph`` has it; the nodes and the other
    initializers are copied, so nothing refers into ``source``'s protobuf (which holds every weight) once it goes."""
    add = []
    for node in source.nodes:
        proto = onnx.NodeProto()
        proto.CopyFrom(node.proto)
        add.append(proto)
    initializers = {}
    for name, tensor in source.initializers.items():
        if name not in graph.initializers:
            copy = onnx.TensorProto()
            copy.CopyFrom(tensor)
            initializers[name] = copy
    kept_inputs = set(source.inputs)
    return GraphEdit(graph.path, rule, description, remove=[n.name for n in graph.nodes], add=add,
                     initializers=initializers,
                     drop_initializers=[name for name in graph.initializers if name not in source.initializers],
                     drop_inputs=[name for name in graph.inputs if name not in kept_inputs])


def without_orphans(graph: Graph, edit: GraphEdit) -> GraphEdit:
    """``edit``, also dropping the initializers that only the nodes it removes read.

    A fold replaces a layer's weights with new ones; the old ones would stay behind unread (and
    onnxruntime warns about each when it loads the saved model). Graph inputs and outputs and
    tensors read inside subgraphs are kept.
    """
    removed = set(edit.remove)
    still_read = {t for n in graph.nodes if n.name not in removed for t in n.inputs}
    still_read.update(t for proto in edit.add for t in proto.input)
    still_read.update(tensor for _, _, tensor in edit.reroute)  # a reader sent to it reads it now
    keep = set(graph.inputs) | set(graph.outputs) | graph.outer_reads() | still_read
    orphans = dict.fromkeys(
        t for name in edit.remove for t in graph.by_name[name].inputs
        if t in graph.initializers and t not in keep and t not in edit.initializers
    )
    extra = [t for t in orphans if t not in edit.drop_initializers]
    return replace(edit, drop_initializers=[*edit.drop_initializers, *extra]) if extra else edit
