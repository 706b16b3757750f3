"""Raising the model's opset when a quantization feature needs it (per-axis scales: 13; int4: 21).

The number alone is raised when no op of the model changed meaning between the two versions
(every op's schema at the new opset dates from the old one or before). Otherwise the main graph's
nodes are converted by ``onnx.version_converter`` (Softmax's axis, Split's and Squeeze's inputs
and so on) and swapped in as one :class:`GraphEdit`, so undo puts the original nodes back. The
opset number itself lives on the model, not on a graph, so it follows the undo history: it is
set to the version of the latest quantization still applied whenever the session changes.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

import onnx
from onnx import version_converter

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.rewrites.edit import Change, EditHistory, GraphEdit


@dataclass(frozen=True)
class OpsetRaise:
    """The default-domain opset before and after, why, and whether nodes had to be converted."""

    before: int
    after: int
    reason: str
    converted: bool

    def line(self) -> str:
        how = "nodes converted" if self.converted else "no op changes meaning"
        return f"opset raised from {self.before} to {self.after} for {self.reason} ({how})"


def changed_ops(model: Model, before: int, after: int) -> list[str]:
    """Op types of the default domain whose meaning changes between the two opsets."""
    found = []
    for op in sorted({n.op_type for g in model.graphs() for n in g.nodes if n.domain in ("", "ai.onnx")}):
        try:
            schema = onnx.defs.get_schema(op, after, "")
        except onnx.defs.SchemaError:
            found.append(op)
            continue
        if schema.since_version > before:
            found.append(op)
    return found


def raise_opset(model: Model, session: EditHistory, target: int, reason: str) -> tuple[OpsetRaise, list[GraphEdit]]:
    """Raise the default opset to ``target``; the node edits (maybe none) are applied here.

    Raises :class:`GraphLensError` (one line) when onnx cannot convert the model.
    """
    before = model.opset("") or 1
    changed = changed_ops(model, before, target)
    edits: list[GraphEdit] = []
    if changed:
        if any(g is not model.graph for g in model.graphs()):
            raise GraphLensError(f"{reason} needs opset {target}, and converting ops inside subgraphs "
                                 f"({', '.join(changed)}) is not supported")
        unknown = next((n for n in model.graph.nodes if n.domain in ("", "ai.onnx") and not onnx.defs.has(n.op_type)),
                       None)
        if unknown is not None:  # the converter would stop on it with an unformatted C++ assertion
            raise GraphLensError(f"{reason} needs opset {target}; onnx cannot convert the model from opset {before}: "
                                 f"node '{unknown.name}' is a {unknown.op_type} in the default ONNX domain, which has "
                                 f"no such op (an onnxruntime op belongs to the com.microsoft domain)")
        try:
            # weights reduced to their type and dims: the converter copies the model several times over
            converted = version_converter.convert_version(model.weightless_proto(), target)
        except Exception as exc:  # onnx raises plain RuntimeErrors naming the adapter
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise GraphLensError(f"{reason} needs opset {target}; onnx cannot convert the model from opset {before} "
                                 f"({first})") from exc
        graph = model.graph
        names: set[str] = set()
        nodes = []
        constants = {n.outputs[0]: n for n in graph.nodes if n.op_type == "Constant" and n.outputs}
        for k, proto in enumerate(converted.graph.node):
            original = constants.get(proto.output[0]) if proto.op_type == "Constant" and proto.output else None
            if original is not None:  # its value as it was, not the converter's weightless copy of it
                if original.proto.name and original.proto.name == proto.name:
                    proto = original.proto  # the very node: undo puts back what is there now
                else:
                    _restore_tensors(proto, original.proto)  # an unnamed one is named below: a copy
            if not proto.name or proto.name in names:
                base = proto.name or f"{proto.op_type}_opset{target}"
                name, i = base, k
                while name in names or (name in graph.by_name and name != proto.name):
                    name, i = f"{base}_{i}", i + 1
                proto.name = name
            names.add(proto.name)
            nodes.append(proto)
        new_inits = {t.name: t for t in converted.graph.initializer if t.name not in graph.initializers}
        edits.append(GraphEdit(graph.path, "opset", f"convert to opset {target}", remove=[n.name for n in graph.nodes],
                               add=nodes, initializers=new_inits))
        session.apply(edits)
    set_opset(model, target)
    return OpsetRaise(before, target, reason, bool(changed)), edits


def _restore_tensors(converted: onnx.NodeProto, original: onnx.NodeProto) -> None:
    """Copy ``original``'s tensor attributes over the weightless ones of its converted copy."""
    values = {a.name: a.t for a in original.attribute if a.type == onnx.AttributeProto.TENSOR}
    for attribute in converted.attribute:
        if attribute.type == onnx.AttributeProto.TENSOR and attribute.name in values:
            attribute.t.CopyFrom(values[attribute.name])


def set_opset(model: Model, version: int) -> None:
    """Set the default-domain opset of ``model`` to ``version`` (adding the entry if it has none)."""
    for entry in model.proto.opset_import:
        if entry.domain in ("", "ai.onnx"):
            entry.version = version
            return
    model.proto.opset_import.append(onnx.helper.make_opsetid("", version))


_tracked: weakref.WeakKeyDictionary[EditHistory, list[tuple[Change, int, int]]] = weakref.WeakKeyDictionary()


def follow_history(session: EditHistory, change: Change, raised: OpsetRaise) -> None:
    """Keep the model's opset in step with ``change`` being applied, undone and redone."""
    if not session.keep_history:
        return  # nothing can be undone
    entries = _tracked.get(session)
    if entries is None:
        entries = _tracked[session] = []
        downstream = session.on_change
        owner = weakref.ref(session)

        def on_change() -> None:
            live = owner()
            if live is not None:
                _sync(live)
            if downstream is not None:
                downstream()

        session.on_change = on_change
    entries.append((change, raised.before, raised.after))


def _sync(session: EditHistory) -> None:
    entries = _tracked.get(session, [])
    if not entries:
        return
    version = entries[0][1]
    for change, _before, after in entries:
        if any(c is change for c in session.undo_stack):
            version = after
    set_opset(session.model, version)
