"""The constraints a match must satisfy beyond its shape, each failing with a specific sentence.

The VF2 matcher uses these checks to accept or reject its structural matches; :mod:`explain` uses
the same ones to say which constraint failed. One implementation, so the two can never disagree.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx

from graphlens.core.constants import unevaluated
from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.nxview import consumers_of
from graphlens.core.types import TensorType, dtype_name, type_of_initializer
from graphlens.matching.variants import FlatNode, Variant
from graphlens.patterns.ir import Op, Pattern, ValueSpec

CONSTRAINTS = {
    "op_type": "Each node must have an op type the pattern allows at its place.",
    "attribute": "The node's attributes must have the values the pattern asks for.",
    "input_count": "The node must have the inputs the pattern gives it, no more and no fewer.",
    "structure": "The nodes must feed each other as they do in the pattern.",
    "binding": "A value the pattern names in two places must be the same tensor in both.",
    "constant": "The input must be a constant: fixed in the model, not a graph input or computed at run time.",
    "dtype": "The input must have the element type the pattern asks for.",
    "rank": "The input must have the number of dimensions the pattern asks for.",
    "shape": "The input must have the shape the pattern asks for.",
    "value": "The constant's values must meet the pattern's condition on them.",
    "graph_output": "What the match computes inside must not be an output of the graph.",
    "sole_use": "What the match computes inside must be used only inside the match.",
    "ordered_choice": "No earlier alternative of the pattern may match at the same place.",
}
"""Each kind of failure (:attr:`Failure.kind`, an identifier for scripts and ``--json``) as the constraint a person
reads: what the pattern requires, in plain words."""


@dataclass
class Failure:
    """The first constraint that failed: where, what kind, what was expected and found, and why in words.

    ``message`` is the reason a user reads, one sentence naming the nodes; ``kind`` identifies the constraint for
    scripts, and :attr:`constraint` says it in words."""

    kind: str
    label: str
    node: str | None
    expected: str
    actual: str
    message: str
    slot: int | None = None
    tensor: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def constraint(self) -> str:
        """The constraint that failed, in plain words (what the pattern requires)."""
        return CONSTRAINTS[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "constraint": self.constraint,
            "pattern_label": self.label,
            "node": self.node,
            "input": self.slot,
            "tensor": self.tensor,
            "expected": self.expected,
            "actual": self.actual,
            **self.extra,
        }


# ------------------------------------------------------------------------------ node checks
def node_failure(pn: FlatNode, node: Node) -> Failure | None:
    """Op type and attribute rules of one node."""
    op = pn.op
    if not op.accepts_op(node.op_type, node.domain):
        domain = f" (domain {node.domain})" if node.domain not in ("", "ai.onnx") else ""
        return Failure(
            "op_type", pn.label, node.name, op.op_words, node.op_type + domain,
            f"{node.label}: op type is {node.op_type}{domain} where {op.op_words} was expected",
        )
    for rule in op.attrs:
        if not rule.holds(node.attrs):
            actual = (f"{rule.name}={_attr_text(node.attrs[rule.name])}" if rule.name in node.attrs
                      else f"no {rule.name}")
            return Failure(
                "attribute", pn.label, node.name, rule.expected(), actual,
                f"{node.label} has {actual} where {rule.expected()} was expected",
            )
    return None


def node_matches(model_data: dict[str, Any], pattern_data: dict[str, Any]) -> bool:
    """VF2 ``node_match``: op type and attributes (model node data first, as networkx passes them)."""
    op: Op = pattern_data["pnode"].op
    if not op.accepts_op(model_data["op_type"], model_data["domain"]):
        return False
    attrs = model_data["attrs"]
    return all(rule.holds(attrs) for rule in op.attrs)


def edge_matches(model_data: dict[str, Any], pattern_data: dict[str, Any]) -> bool:
    """VF2 ``edge_match``: every pattern link has its own model link (any input slot if commutative)."""
    available = list(model_data["links"])
    for out_slot, in_slot in pattern_data["links"]:
        for k, (o, i, _) in enumerate(available):
            if o == out_slot and (in_slot is None or i == in_slot):
                del available[k]
                break
        else:
            return False
    return True


def _attr_text(v: Any) -> str:
    if isinstance(v, np.ndarray):
        return f"<tensor {v.shape}>"
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


# ----------------------------------------------------------------------------- input binding
def bind_inputs(
    variant: Variant, graph: Graph, mapping: dict[str, Node]
) -> tuple[dict[str, str] | None, Failure | None]:
    """Check every mapped node's inputs; return the value bindings, or the first failure.

    Nodes not (yet) in ``mapping`` are skipped, so explain can check a partial match. Commutative
    nodes try input orders, backtracking across nodes so shared values bind consistently.
    """
    order = [pn for pn in variant.nodes.values() if pn.label in mapping]
    if not any(pn.commutative for pn in order):  # one input order per node: no search needed
        bound: dict[str, str] = {}
        for pn in order:
            node = mapping[pn.label]
            assignment = _slot_assignments(pn, node)[0]
            if isinstance(assignment, Failure):
                return None, assignment
            failure = _check_assignment(variant, pn, node, assignment, graph, mapping, bound)
            if failure is not None:
                return None, failure
        return bound, None
    # The failure reported is the one met furthest into the search (the first of those): an input order
    # of a commutative node that fails at once says less than the order that bound more.
    deepest: list[tuple[int, Failure]] = []

    def note(k: int, failure: Failure) -> None:
        if not deepest or k > deepest[0][0]:
            deepest[:] = [(k, failure)]

    def solve(k: int, bound: dict[str, str]) -> dict[str, str] | None:
        if k == len(order):
            return bound
        pn = order[k]
        node = mapping[pn.label]
        for assignment in _slot_assignments(pn, node):
            if isinstance(assignment, Failure):
                note(k, assignment)
                return None
            trial = dict(bound)
            failure = _check_assignment(variant, pn, node, assignment, graph, mapping, trial)
            if failure is None:
                result = solve(k + 1, trial)
                if result is not None:
                    return result
            else:
                note(k, failure)
        return None

    result = solve(0, {})
    if result is not None:
        return result, None
    return None, deepest[0][1] if deepest else None


def quick_bindings(variant: Variant, graph: Graph, mapping: dict[str, Node]) -> dict[str, str] | None:
    """The value bindings of a match found by VF2, if its inputs pass :func:`bind_inputs` on its common path.

    The matcher's fast path, for variants whose checks are all simple (``Variant.quick_inputs``):
    an initializer that is not an input, an unconstrained value. Inputs from other matched nodes
    are edges VF2 has checked with their slots. It only ever accepts what :func:`bind_inputs`
    accepts; None means "not decided here", and the general check then decides and says why.
    """
    plan = variant.quick_inputs
    if plan is None:
        return None
    initializers, graph_inputs = graph.initializers, graph.input_names
    bound: dict[str, str] = {}
    for label, arity, inputs in plan:
        ins = mapping[label].inputs
        count = len(ins)
        if count > arity:
            return None
        for slot, optional, constant, value, shared in inputs:
            tensor = ins[slot] if slot < count else ""
            if not tensor:
                if optional:
                    continue
                return None
            if constant and (tensor not in initializers or tensor in graph_inputs):
                return None
            if shared and bound.get(value, tensor) != tensor:
                return None
            bound[value] = tensor
    return bound


_IDENTITY: list[list[int | None]] = [list(range(n)) for n in range(16)]
"""Slot maps of nodes whose inputs are all present, shared: they are only read."""


def _slot_assignments(pn: FlatNode, node: Node) -> list[Failure] | list[list[int | None]]:
    """Candidate maps from pattern input index to model input slot (None: the input is absent),
    or a one-item list holding the input-count failure."""
    ins = node.inputs
    count = len(ins)
    while count and not ins[count - 1]:
        count -= 1
    n_pattern = len(pn.inputs)
    if count > n_pattern and not pn.op.variadic:
        return [Failure(
            "input_count", pn.label, node.name, f"at most {n_pattern} inputs", f"{count} inputs",
            f"{node.label} has {count} inputs where at most {n_pattern} were expected",
        )]
    present = sum(1 for t in ins[:count] if t) if count > 1 else count
    required = pn.required
    if present < required:
        return [Failure(
            "input_count", pn.label, node.name, f"{required} inputs", f"{present} inputs",
            f"{node.label} has {present} inputs where {required} were expected",
        )]
    if not pn.commutative:
        if count == n_pattern and present == count:  # every input there: the common case, no list to build
            identity: list[int | None] = (_IDENTITY[n_pattern] if n_pattern < len(_IDENTITY)
                                          else list(range(n_pattern)))
            return [identity]
        return [[s if s < count and ins[s] else None for s in range(n_pattern)]]
    assignments: list[list[int | None]] = []
    seen: set[tuple[int | None, ...]] = set()
    for perm in itertools.permutations(range(count), min(n_pattern, count)):
        if not pn.op.variadic and len(perm) < present:
            continue  # every present model input must be accounted for
        full = tuple(s if ins[s] else None for s in perm) + (None,) * (n_pattern - len(perm))
        if full not in seen:
            seen.add(full)
            assignments.append(list(full))
    return assignments


def _check_assignment(
    variant: Variant,
    pn: FlatNode,
    node: Node,
    assignment: list[int | None],
    graph: Graph,
    mapping: dict[str, Node],
    bound: dict[str, str],
) -> Failure | None:
    initializers, graph_inputs, producers = graph.initializers, graph.input_names, graph.producers
    node_inputs = node.inputs
    for inp, slot in zip(pn.inputs, assignment):
        if slot is None:
            if inp.optional:
                continue
            return Failure(
                "input_count", pn.label, node.name, f"input {inp.slot}", "no such input",
                f"{node.label} has no input {inp.slot} ({inp.source.label})",
                slot=inp.slot,
            )
        tensor = node_inputs[slot]
        src = inp.source
        if src.kind == "node":
            expected = mapping.get(src.label)
            if expected is None:
                continue  # not mapped yet (partial match)
            found = producers.get(tensor) or graph.producer(tensor)
            if found is None or found[0] is not expected or found[1] != src.output:
                actual = "nothing" if found is None else found[0].label
                return Failure(
                    "structure", pn.label, node.name, f"output of {expected.label}", actual,
                    f"input {slot} of {node.label} comes from {origin_of(graph, tensor)} where the output of "
                    f"{expected.label} was expected",
                    slot=slot, tensor=tensor,
                )
            continue
        if inp.plain_constant and tensor in initializers and tensor not in graph_inputs:
            reason = None  # the common case, decided without the general path
        else:
            reason = value_failure(graph, tensor, variant.values[src.label])
        if reason is not None:
            kind, expected_text, actual_text, phrase = reason
            return Failure(
                kind, src.label, node.name, expected_text, actual_text,
                f"input {slot} ({src.label}) of {node.label} {phrase}",
                slot=slot, tensor=tensor,
            )
        previous = bound.get(src.label)
        if previous is not None and previous != tensor:
            return Failure(
                "binding", src.label, node.name, f"'{previous}'", f"'{tensor}'",
                f"input {slot} ({src.label}) of {node.label} is '{tensor}', but the same value '{src.label}' "
                f"is '{previous}' elsewhere in the match",
                slot=slot, tensor=tensor,
            )
        bound[src.label] = tensor
    return None


def origin_of(graph: Graph, tensor: str) -> str:
    """Where a tensor comes from, as messages name it: a node, an initializer or a graph input."""
    found = graph.producer(tensor)
    if found is not None:
        return found[0].label
    owner = graph.owner_of(tensor)
    if owner is not None and tensor in owner.initializers:
        return f"initializer '{tensor}'"
    return f"graph input '{tensor}'"


# --------------------------------------------------------------------------------- values
def value_failure(graph: Graph, tensor: str, spec: ValueSpec) -> tuple[str, str, str, str] | None:
    """None if ``tensor`` satisfies ``spec``; else (kind, expected, actual, phrase completing a sentence)."""
    if spec.constant or spec.needs_value:
        why = graph.why_not_constant(tensor)
        if why is not None:
            phrase = why if "constant" in why else f"{why} and is not constant"
            return "constant", "a constant", why, phrase
    if spec.dtype is not None or spec.rank is not None or spec.shape is not None:
        ttype = _type_of(graph, tensor, spec.constant)
        if spec.dtype is not None and ttype.dtype != spec.dtype:
            return ("dtype", spec.dtype, str(ttype.dtype),
                    f"has element type {ttype.dtype or 'unknown'} where {spec.dtype} was expected")
        shape = ttype.shape
        if spec.rank is not None and (shape is None or len(shape) != spec.rank):
            actual = "unknown rank" if shape is None else f"rank {len(shape)}"
            return "rank", f"rank {spec.rank}", actual, f"has {actual} where rank {spec.rank} was expected"
        if spec.shape is not None:
            ok = (shape is not None and len(shape) == len(spec.shape)
                  and all(w is None or w == d for w, d in zip(spec.shape, shape)))
            if not ok:
                want = "[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]"
                got = "unknown" if shape is None else "[" + ", ".join(str(d) for d in shape) + "]"
                return "shape", want, got, f"has shape {got} where {want} was expected"
    if spec.needs_value:
        arr = graph.constant_value(tensor)
        if arr is None:
            missing = unevaluated(graph, tensor)
            phrase = missing.reason if missing is not None else "is constant but could not be evaluated"
            return "constant", "a computable constant", "not computable", phrase
        if (spec.scalar or spec.approx is not None) and arr.size != 1:
            return ("value", "a scalar", f"shape {list(arr.shape)}",
                    f"has shape {list(arr.shape)} where a scalar was expected")
        if spec.approx is not None:
            v = float(np.asarray(arr, dtype=np.float64).reshape(-1)[0])
            if not np.isclose(v, spec.approx, rtol=1e-3, atol=1e-6):
                return "value", f"≈ {spec.approx:g}", f"{v:g}", f"is {v:g} where ≈ {spec.approx:g} was expected"
        if spec.per_channel and sum(1 for d in arr.shape if d != 1) > 1:
            return (
                "value", "per-channel (one axis longer than 1)", f"shape {list(arr.shape)}",
                f"has shape {list(arr.shape)}, not one value per channel",
            )
        if spec.range is not None:
            low, high = spec.range
            values = np.asarray(arr, dtype=np.float64)
            if ((low is not None and values.min(initial=np.inf) < low)
                    or (high is not None and values.max(initial=-np.inf) > high)):
                want = "[" + ", ".join("?" if b is None else f"{b:g}" for b in spec.range) + "]"
                got = f"{values.min():g}" if values.size == 1 else f"from {values.min():g} to {values.max():g}"
                return "value", f"within {want}", got, f"is {got}, outside {want}"
        if spec.predicate is not None and not spec.predicate(arr):
            name = spec.predicate_name or "the pattern's condition on it"
            return "value", name, "fails", f"does not meet {name}"
    return None


def _type_of(graph: Graph, tensor: str, constant: bool) -> TensorType:
    """A tensor's type, read from the initializer or computed constant before asking shape inference."""
    owner = graph.owner_of(tensor)
    if owner is not None and tensor in owner.initializers:
        return type_of_initializer(owner.initializers[tensor])
    if constant:
        arr = graph.constant_value(tensor)
        if arr is not None:
            try:
                dtype = dtype_name(onnx.helper.np_dtype_to_tensor_dtype(arr.dtype))
            except (KeyError, ValueError, TypeError):
                dtype = str(arr.dtype)
            return TensorType(dtype, tuple(int(d) for d in arr.shape))
    return graph.tensor_type(tensor)


# ------------------------------------------------------------------------------- sole use
def sole_use_failure(pattern: Pattern, variant: Variant, graph: Graph, mapping: dict[str, Node]) -> Failure | None:
    """Values inside a match (not its outputs) must not be used outside it, be graph outputs or feed subgraphs."""
    if pattern.allow_shared:
        return None
    inside = {n.name for n in mapping.values()}
    model = graph.to_networkx()
    inner, graph_outputs = variant.inner_labels, graph.outputs
    for label, node in mapping.items():
        if label not in inner:
            continue
        for tensor in node.outputs:
            if tensor and tensor in graph_outputs:
                return Failure(
                    "graph_output", label, node.name, "used only inside the match", "a graph output",
                    f"the output '{tensor}' of {node.label} is a graph output, so {pattern.verb} would remove it",
                    tensor=tensor,
                )
        consumers = consumers_of(model, node.name)
        outside = [c for c in consumers if c not in inside]
        if outside:
            tensor = next(t for _, _, t in consumers[outside[0]]["links"])
            users = [c for c, data in consumers.items() if any(t == tensor for _, _, t in data["links"])]
            names = ", ".join(f"'{u}'" for u in users)
            changed = ", ".join(f"'{u}'" for u in users if u not in inside)
            return Failure(
                "sole_use", label, node.name, "used only inside the match", f"{len(users)} consumers",
                f"the output of {node.label} has {len(users)} consumers "
                f"({names}), so {pattern.verb} would change {changed}",
                tensor=tensor, extra={"outside_consumers": [u for u in users if u not in inside]},
            )
        outer = graph.outer_reads()
        for tensor in node.outputs:
            if tensor in outer:
                return Failure(
                    "sole_use", label, node.name, "used only inside the match", "read by a subgraph",
                    f"the output '{tensor}' of {node.label} is read "
                    f"inside a subgraph, so {pattern.verb} would change it",
                    tensor=tensor,
                )
    return None
