"""Mutations of structure, names, external data and the file itself (tests/mutations.py)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
from onnx import AttributeProto, NodeProto, TensorProto, helper, numpy_helper

from tests.mutant_graphs import (
    HOSTILE_NAME_PARTS,
    NON_UTF8_MARKER,
    Draft,
    Mutation,
    as_array,
    constant_tensors,
    graphs,
    node_label,
    nodes,
    real_inputs,
    rename_tensor,
    subgraphs,
)


# ---------------------------------------------------------------------------------------- graph structure
def dangling_input(draft: Draft, rng: random.Random) -> str | None:
    found = [(g, n) for g, n in nodes(draft.model) if any(n.input)]
    if not found:
        return None
    _, node = rng.choice(found)
    k = rng.choice([k for k, name in enumerate(node.input) if name])
    node.input[k] = f"ghost_{rng.randrange(1000)}"
    return f"{node_label(node)} input {k} reads '{node.input[k]}', which nothing produces"


def duplicate_producer(draft: Draft, rng: random.Random) -> str | None:
    """A second node (a twin) producing the same tensor as an existing one."""
    graph, node = rng.choice(nodes(draft.model))
    twin = NodeProto()
    twin.CopyFrom(node)
    twin.name = f"{node.name}_twin"
    graph.node.insert(list(graph.node).index(node) + 1, twin)
    return f"{node_label(twin)} also produces {list(node.output)}"


def out_of_order(draft: Draft, rng: random.Random) -> str | None:
    """Nodes listed out of topological order: shuffled, reversed, or the last one first."""
    candidates = [g for g in graphs(draft.model) if len(g.node) > 1]
    if not candidates:
        return None
    graph = rng.choice(candidates)
    order = list(graph.node)
    how = rng.choice(["shuffled", "reversed", "last first"])
    if how == "shuffled":
        rng.shuffle(order)
    elif how == "reversed":
        order.reverse()
    else:
        order.insert(0, order.pop())
    copies = [NodeProto() for _ in order]
    for copy, node in zip(copies, order):
        copy.CopyFrom(node)
    del graph.node[:]
    graph.node.extend(copies)
    return f"graph '{graph.name}': nodes {how}"


def subgraph_arity(draft: Draft, rng: random.Random) -> str | None:
    """An If branch with an output too few or too many; a Loop body with an input missing."""
    found = nodes(draft.model, "If", "Loop", "Scan")
    if not found:
        return None
    _, node = rng.choice(found)
    body = rng.choice(subgraphs(node))
    if node.op_type == "Loop" and body.input and rng.random() < 0.5:
        body.input.pop()
        return f"{node_label(node)}: body '{body.name}' lost its last input"
    if len(body.output) > 1 and rng.random() < 0.5:
        body.output.pop()
        return f"{node_label(node)}: branch '{body.name}' lost its last output"
    body.output.append(body.output[0])
    return f"{node_label(node)}: branch '{body.name}' has one output more"


def deep_if(draft: Draft, rng: random.Random) -> str | None:
    """A graph input reaches its first consumer through Ifs nested 8, 40 or 300 deep."""
    graph = draft.model.graph
    used = [(v, n) for v in real_inputs(draft.model) if v.type.HasField("tensor_type")
            for n in graph.node if v.name in n.input]
    if not used:
        return None
    (source, user), depth = used[0], rng.choice([8, 40, 300])
    rest = list(graph.node)  # the model's own nodes go after the deep one, which is never copied again
    del graph.node[:]
    graph.node.add().CopyFrom(helper.make_node("Constant", [], ["deep_cond"], name="deep_cond",
                                               value=numpy_helper.from_array(np.array(True))))
    node = graph.node.add()  # built in place, level by level: copying a message this deep exceeds protobuf's limit
    for level in range(depth, 0, -1):
        node.CopyFrom(helper.make_node("If", ["deep_cond"], [f"deep_if_{level}"], name=f"deep_if_{level}"))
        branches = []
        for name in ("then_branch", "else_branch"):
            attribute = node.attribute.add()
            attribute.name, attribute.type = name, AttributeProto.GRAPH
            attribute.g.name = f"{name}_{level}"
            attribute.g.output.add().CopyFrom(source)
            attribute.g.output[0].name = f"deep_if_{level - 1}" if name == "then_branch" else f"deep_else_{level}"
            branches.append(attribute.g)
        branches[1].node.add().CopyFrom(helper.make_node("Identity", [source.name], [f"deep_else_{level}"],
                                                         name=f"deep_else_{level}"))
        node = branches[0].node.add()
    node.CopyFrom(helper.make_node("Identity", [source.name], ["deep_if_0"], name="deep_identity"))
    graph.node.extend(rest)
    user = next(n for n in graph.node if source.name in n.input and n.name == user.name)  # the copy in the graph
    user.input[:] = [f"deep_if_{depth}" if x == source.name else x for x in user.input]
    return f"graph input '{source.name}' passes through If nested {depth} deep before {node_label(user)}"


# ---------------------------------------------------------------------------------------- names
def _rename_some(draft: Draft, rng: random.Random, part: Callable[[], str]) -> str | None:
    outputs = {v.name for v in draft.model.graph.output}
    found = [(g, n) for g, n in nodes(draft.model) if n.output and n.output[0] and n.output[0] not in outputs]
    if not found:
        return None
    graph, node = rng.choice(found)
    old, node.name = node.name, f"{node.name}{part()}"
    tensor = f"{node.output[0]}{part()}"
    rename_tensor(graph, node.output[0], tensor)
    return f"{node.op_type} '{old}' renamed {node.name!r}, its output {tensor!r}"


def name_non_utf8(draft: Draft, rng: random.Random) -> str | None:
    return _rename_some(draft, rng, lambda: NON_UTF8_MARKER)


def name_bidi(draft: Draft, rng: random.Random) -> str | None:
    return _rename_some(draft, rng, lambda: rng.choice(HOSTILE_NAME_PARTS))


# ---------------------------------------------------------------------------------------- external data
def _externalize(draft: Draft, rng: random.Random, location: str) -> tuple[str, bytes] | None:
    tensors = [t for t in constant_tensors(draft.model) if t[2].data_type == TensorProto.FLOAT and t[2].dims]
    if not tensors:
        return None
    label, _, tensor = max(tensors, key=lambda t: int(np.prod(t[2].dims)))
    data = as_array(tensor).astype("<f4").tobytes()
    for name in ("raw_data", "float_data"):
        tensor.ClearField(name)
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(len(data)))):
        entry = tensor.external_data.add()
        entry.key, entry.value = key, value
    return label, data


def external_data(draft: Draft, rng: random.Random) -> str | None:
    """The largest weight moved to an external file: outside the folder, absolute, missing, short, or far."""
    how = rng.choice(["outside", "absolute", "missing", "short", "offset past the end", "length 2^40"])
    location = {"outside": "../weights.bin", "absolute": "/etc/hostname"}.get(how, "weights.bin")
    found = _externalize(draft, rng, location)
    if found is None:
        return None
    label, data = found
    if how in ("outside", "short", "offset past the end", "length 2^40"):
        draft.files[location] = data[: len(data) // 2] if how == "short" else data
    tensor = next(t for _, _, t in constant_tensors(draft.model) if t.data_location == TensorProto.EXTERNAL)
    entries = {e.key: e for e in tensor.external_data}
    if how == "offset past the end":
        entries["offset"].value = str(len(data) * 4)
    elif how == "length 2^40":
        entries["length"].value = str(2**40)
    return f"{label} stored in external data '{location}': {how}"


# ---------------------------------------------------------------------------------------- the file itself
def truncated(draft: Draft, rng: random.Random) -> str | None:
    draft.truncate = rng.choice([0.1, 0.5, 0.9, 0.9999])
    return f"file cut to {draft.truncate:.2%} of its bytes"


def in_place_of_file(kind: str) -> Mutation:
    def mutation(draft: Draft, rng: random.Random) -> str | None:
        draft.kind = kind
        return {"directory": "a directory named like the model", "dev-zero": "/dev/zero",
                "fifo": "a named pipe nothing writes to"}[kind]

    return mutation
