"""The float and the quantized model side by side in one graph, summarized inside it: the target search's
estimate pass (:mod:`~graphlens.quantize.target`) reads three sums of squares per quantized activation, the
layers' shapes and the graph outputs, and nothing else leaves onnxruntime.

Built from the gated model (:mod:`~graphlens.quantize.sensitivity`): its nodes twice, every gate fixed, the
float copy keeping the names, the quantized copy's tensors renamed with :data:`QUANTIZED`. For an activation
gate with ``x`` what reaches it in the float copy, ``s`` in the quantized copy and ``q = DQ(Q(s))``::

    x2 = Σ x²        added2 = Σ (q − s)²        accumulated2 = Σ (q − x)²

over every element of the batch. Exposing the tensors instead costs a copy of every activation of both runs:
on a 736×992 detector page that is gigabytes, and most of the pass's time.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx
from onnx import TensorProto, helper

from graphlens.numerics.inputs import float_outputs
from graphlens.quantize.sensitivity import GatedModel

QUANTIZED = "__quantized"
"""Suffix of the quantized copy's tensors and nodes."""


@dataclass(frozen=True)
class SumNames:
    """The outputs holding one activation gate's sums of squares."""

    x2: str
    added2: str
    accumulated2: str


@dataclass
class SideBySide:
    """The combined model and where to read what it computes."""

    proto: onnx.ModelProto
    sums: dict[str, SumNames]
    """Activation gate -> its sums' outputs."""
    shapes: dict[str, str]
    """Tensor -> the output holding its shape (float copy)."""
    outputs: dict[str, str]
    """Float graph output -> the quantized copy's same output."""


def side_by_side(gated: GatedModel, shaped: list[str]) -> SideBySide:
    """One graph computing the float and the quantized model on the same inputs, with the sums of squares
    of the module docstring for every activation gate and the shapes of ``shaped``."""
    source = gated.proto.graph
    gates = {g.name for g in gated.gates}
    produced = {o for n in source.node for o in n.output if o} | {
        o for n in source.node if _is_gate(n, gates) for b in _then(n) for o in b.output}
    sums: dict[str, SumNames] = {}
    after: dict[str, list[onnx.NodeProto]] = {}  # tensor -> the summary nodes to run as soon as it exists
    for k, gate in enumerate(g for g in gated.gates if g.record.kind == "activation"):
        x, s = gate.source, _renamed(gate.source, produced, True)
        q = _renamed(gate.switched, produced, True)
        names = SumNames(f"__x2_{k}", f"__added2_{k}", f"__accumulated2_{k}")
        after.setdefault(q, []).extend([
            helper.make_node("Sub", [q, s], [f"__added_{k}"], name=f"__added_{k}"),
            helper.make_node("Sub", [q, x], [f"__accumulated_{k}"], name=f"__accumulated_{k}"),
            *(helper.make_node("ReduceSumSquare", [t], [out], name=out, keepdims=0)
              for t, out in ((x, names.x2), (f"__added_{k}", names.added2),
                             (f"__accumulated_{k}", names.accumulated2))),
        ])
        sums[gate.name] = names
    shapes = {t: f"__shape_{i}" for i, t in enumerate(shaped)}
    for t, out in shapes.items():
        after.setdefault(t, []).append(helper.make_node("Shape", [t], [out], name=out))
    model = onnx.ModelProto()
    model.CopyFrom(gated.proto)
    graph = model.graph
    del graph.node[:]
    # the copies interleaved node by node and each summary right after its last input: a float activation is
    # freed once its twin is summarized, so the run holds about what two runs of one model would
    graph.node.extend(n for t in [t for t in after if t not in produced] for n in after.pop(t))  # graph inputs
    for node in source.node:
        for quantized in (False, True):
            for copy in _copy(node, gates, produced, quantized):
                graph.node.append(copy)
                for out in copy.output:
                    graph.node.extend(after.pop(out, []))
    del graph.input[:]
    graph.input.extend(v for v in source.input if v.name not in gates)
    del graph.output[:]
    outputs = {name: _renamed(name, produced, True) for name in float_outputs(gated.proto)}
    by_name = {v.name: v for v in source.output}
    for name, twin in outputs.items():
        graph.output.append(by_name[name])
        copy_value = graph.output.add()
        copy_value.CopyFrom(by_name[name])
        copy_value.name = twin
    for names in sums.values():
        graph.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, [])
                            for n in (names.x2, names.added2, names.accumulated2))
    graph.output.extend(helper.make_tensor_value_info(out, TensorProto.INT64, [None]) for out in shapes.values())
    _prune(graph)
    return SideBySide(model, sums, shapes, outputs)


def _renamed(name: str, produced: set[str], quantized: bool) -> str:
    return f"{name}{QUANTIZED}" if quantized and name in produced else name


def _is_gate(node: onnx.NodeProto, gates: set[str]) -> bool:
    return node.op_type in ("Where", "If") and bool(node.input) and node.input[0] in gates


def _then(node: onnx.NodeProto) -> list[onnx.NodeProto]:
    """An If gate's then-branch nodes (its QuantizeLinear and DequantizeLinear); none for a Where."""
    return [n for a in node.attribute if a.name == "then_branch" for n in a.g.node]


def _passed(node: onnx.NodeProto, quantized: bool) -> str:
    """What a gate passes when on (``quantized``) or off."""
    if node.op_type == "Where":
        return str(node.input[1] if quantized else node.input[2])
    branch = next(a.g for a in node.attribute if a.name == ("then_branch" if quantized else "else_branch"))
    return str(branch.output[0].name if quantized else branch.node[0].input[0])


def _copy(node: onnx.NodeProto, gates: set[str], produced: set[str], quantized: bool) -> list[onnx.NodeProto]:
    """``node`` in one copy: a gate becomes the Identity of what that copy's gate passes, after an If's
    then-branch nodes in the quantized copy."""
    if _is_gate(node, gates):
        inner = []
        for n in _then(node) if quantized else []:
            moved = onnx.NodeProto()
            moved.CopyFrom(n)
            moved.name = f"{n.name}{QUANTIZED}"
            moved.input[:] = [_renamed(i, produced, True) for i in n.input]
            moved.output[:] = [_renamed(o, produced, True) for o in n.output]
            inner.append(moved)
        return [*inner, helper.make_node("Identity", [_renamed(_passed(node, quantized), produced, quantized)],
                                         [_renamed(node.output[0], produced, quantized)],
                                         name=_renamed(node.name, {node.name}, quantized))]
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    if quantized:
        copy.name = f"{node.name}{QUANTIZED}"
        copy.input[:] = [_renamed(i, produced, True) for i in node.input]
        copy.output[:] = [_renamed(o, produced, True) for o in node.output]
        for sub in _subgraphs(copy):
            _rename_outer(sub, produced, set())
    return [copy]


def _rename_outer(graph: onnx.GraphProto, produced: set[str], shadowed: set[str]) -> None:
    """A subgraph's reads of the outer graph's tensors renamed to the quantized copy's (its own names shadow)."""
    own = shadowed | {v.name for v in graph.input} | {t.name for t in graph.initializer} | {
        o for n in graph.node for o in n.output}
    for node in graph.node:
        node.input[:] = [i if i in own else _renamed(i, produced, True) for i in node.input]
        for sub in _subgraphs(node):
            _rename_outer(sub, produced, own)
    for output in graph.output:
        if output.name not in own:
            output.name = _renamed(output.name, produced, True)


def _prune(graph: onnx.GraphProto) -> None:
    """Only the nodes the outputs need (the float copy's QuantizeLinear/DequantizeLinear are not)."""
    needed = {v.name for v in graph.output}
    kept = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output):
            kept.append(node)
            needed.update(i for i in node.input if i)
            needed.update(_outer_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(kept))


def _outer_reads(node: onnx.NodeProto) -> set[str]:
    """Every name a node's subgraphs read (a superset of what they take from outside: enough to keep)."""
    found: set[str] = set()
    for sub in _subgraphs(node):
        for inner in sub.node:
            found.update(i for i in inner.input if i)
            found |= _outer_reads(inner)
    return found


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs an If, Loop or Scan node holds in its attributes."""
    found: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            found.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            found.extend(attribute.graphs)
    return found
