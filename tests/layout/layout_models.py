"""Models for the layout tests: scoped chains, branchy random DAGs, a grouping cycle."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.models import init, make_model, tensor


def scoped_model(stages: int = 3, blocks: int = 4) -> onnx.ModelProto:
    """``/encoder/stage{s}/block{b}/{conv,relu,add}`` residual blocks plus an unscoped head."""
    nodes, inits = [], []
    x = "x"
    for s in range(1, stages + 1):
        for b in range(1, blocks + 1):
            scope = f"/encoder/stage{s}/block{b}"
            w = f"stage{s}.block{b}.w"
            inits.append(init(w, np.ones((4, 4, 1, 1), np.float32)))
            nodes += [
                helper.make_node("Conv", [x, w], [f"{scope}/c"], name=f"{scope}/conv", kernel_shape=[1, 1]),
                helper.make_node("Relu", [f"{scope}/c"], [f"{scope}/r"], name=f"{scope}/relu"),
                helper.make_node("Add", [f"{scope}/r", x], [f"{scope}/a"], name=f"{scope}/add"),
            ]
            x = f"{scope}/a"
    nodes.append(helper.make_node("Flatten", [x], ["y"], name="flatten"))
    return make_model(nodes, [tensor("x", shape=[1, 4, 8, 8])], [tensor("y", shape=[1, 256])], inits)


def random_dag(seed: int, nodes: int = 60, inputs: int = 2, isolated: int = 0) -> onnx.ModelProto:
    """Adds and Concats reading random earlier tensors: fan-in, fan-out and long edges.

    ``isolated`` extra Constant-free sources feed nothing (their outputs are graph outputs
    only when asked), to give the layout boxes without edges.
    """
    rng = np.random.default_rng(seed)
    available = [f"in{i}" for i in range(inputs)]
    made = []
    for i in range(nodes):
        k = int(rng.integers(1, 4))
        picks = [available[int(j)] for j in rng.integers(0, len(available), k)]
        op = "Concat" if k == 3 else ("Add" if k == 2 else "Relu")
        attrs = {"axis": 0} if op == "Concat" else {}
        out = f"/b{i % 5}/t{i}"
        made.append(helper.make_node(op, picks, [out], name=f"/b{i % 5}/n{i}", **attrs))
        available.append(out)
    consumed = {t for n in made for t in n.input}
    outputs = [t for t in available[inputs:] if t not in consumed]
    for i in range(isolated):
        made.append(helper.make_node("RandomNormal", [], [f"lone{i}"], name=f"lone{i}", shape=[2]))
    return make_model(
        made,
        [tensor(f"in{i}", shape=None) for i in range(inputs)],
        [tensor(t, shape=None) for t in outputs],
    )


def grouping_cycle() -> onnx.ModelProto:
    """``/A/first -> /B/middle -> /A/last``: collapsing /A closes a cycle through /B."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a1"], name="/A/first"),
        helper.make_node("Relu", ["a1"], ["b1"], name="/B/middle"),
        helper.make_node("Relu", ["b1"], ["b2"], name="/B/after"),
        helper.make_node("Add", ["b2", "a1"], ["y"], name="/A/last"),
    ]
    return make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])


def group_before_its_producer() -> onnx.ModelProto:
    """``/G/a`` comes first, then unscoped ``b``, then ``/G/c`` reading ``b``: no cycle, but the
    collapsed /G stands (at ``/G/a``) before ``b``, which feeds it."""
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="/G/a"),
        helper.make_node("Sigmoid", ["x"], ["b"], name="b"),
        helper.make_node("Add", ["a", "b"], ["y"], name="/G/c"),
    ]
    return make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])
