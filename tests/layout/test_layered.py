"""Layout invariants: layers follow edges, boxes never overlap, everything is finite and repeatable."""

from __future__ import annotations

import dataclasses
import gc
import threading

import numpy as np
import pytest
from onnx import helper

from benchmarks.densenet import make_densenet121
from graphlens.core.model import Model, load_model
from graphlens.core.task import Cancelled, Task
from graphlens.layout.layered import ARROW_GAP, Layout, item_size, layout_view
from graphlens.layout.view import Edge, Item, View, ViewOptions, build_view
from tests import models
from tests.layout.layout_models import group_before_its_producer, grouping_cycle, random_dag, scoped_model


def check(view: View, layout: Layout, *, acyclic: bool = True) -> None:
    n = len(view.items)
    for array in (layout.x, layout.y, layout.w, layout.h):
        assert array.shape == (n,) and array.dtype == np.float64 and np.all(np.isfinite(array))
    assert layout.layer.shape == (n,) and layout.layer.dtype.kind == "i"
    assert len(layout.edge_paths) == len(view.edges)
    for edge, path in zip(view.edges, layout.edge_paths):
        assert len(path) == 4 and np.all(np.isfinite(np.array(path)))
        if edge.source == edge.target:
            continue
        s, t = edge.source, edge.target
        if acyclic:
            assert layout.layer[s] < layout.layer[t]
        else:
            assert layout.layer[s] != layout.layer[t]
        assert path[0] == pytest.approx((layout.x[s] + layout.w[s] / 2, layout.y[s] + layout.h[s]))
        assert path[3] == pytest.approx((layout.x[t] + layout.w[t] / 2, layout.y[t] - ARROW_GAP))
    for number in np.unique(layout.layer):
        members = np.flatnonzero(layout.layer == number)
        members = members[np.argsort(layout.x[members])]
        assert np.all(layout.x[members][1:] >= (layout.x + layout.w)[members][:-1] + 1.0)
        centres = layout.y[members] + layout.h[members] / 2
        assert np.allclose(centres, centres[0])
    lower = layout.layer[:, None] < layout.layer[None, :]
    assert np.all(((layout.y + layout.h)[:, None] < layout.y[None, :])[lower])
    assert layout.x.min() >= 0 and layout.y.min() >= 0
    assert np.all(layout.x + layout.w <= layout.width) and np.all(layout.y + layout.h <= layout.height)
    for (sx, sy), (ax, ay), (bx, by), (tx, ty) in layout.edge_paths:
        assert min(sx, ax, bx, tx) >= 0 and max(sx, ax, bx, tx) <= layout.width
        assert min(sy, ay, by, ty) >= 0 and max(sy, ay, by, ty) <= layout.height


def test_demo_model(demo_path):
    view = build_view(load_model(demo_path).graph)
    layout = layout_view(view)
    check(view, layout)
    assert layout.layer[view.inputs[0]] == 0
    assert layout.layer[view.index["/stem/bn"]] == layout.layer[view.index["/stem/conv"]] + 1


def test_demo_with_constants_pulls_them_next_to_their_consumer(demo_path):
    view = build_view(load_model(demo_path).graph, ViewOptions(show_constants=True))
    layout = layout_view(view)
    check(view, layout)
    bn = layout.layer[view.index["/stage2/block2/bn"]]
    assert layout.layer[view.index["/stage2/block2/bn/Constant_3"]] == bn - 1


@pytest.mark.parametrize("seed", range(6))
def test_random_dags_with_isolated_boxes(seed):
    view = build_view(Model(random_dag(seed, nodes=80, inputs=3, isolated=seed % 3)).graph)
    check(view, layout_view(view))


@pytest.mark.parametrize("concat", ["running", "all"])
def test_densenet(concat):
    view = build_view(Model(make_densenet121(0, concat=concat)).graph)
    assert len(view.items) == 427 + 2
    layout = layout_view(view)
    check(view, layout)
    assert layout.width < 2000  # one column with its skip edges, not a sprawl


def test_collapsed_groups(write_model):
    view = build_view(load_model(write_model(scoped_model())).graph, ViewOptions(collapse_threshold=10))
    layout = layout_view(view)
    check(view, layout)
    assert list(layout.layer) == [0, 1, 2, 3, 4, 5]


def test_cycle_closed_by_grouping_still_lays_out():
    view = build_view(Model(grouping_cycle()).graph, ViewOptions(grouping=True))
    keys = [i.key for i in view.items]
    assert keys == ["input:x", "group:/A", "group:/B", "output:y"]
    a, b = view.index["group:/A"], view.index["group:/B"]
    assert {(e.source, e.target) for e in view.edges} >= {(a, b), (b, a)}
    check(view, layout_view(view), acyclic=False)


def test_a_group_fed_by_a_later_item_is_placed_below_it():
    view = build_view(Model(group_before_its_producer()).graph, ViewOptions(grouping=True))
    assert [i.key for i in view.items] == ["input:x", "group:/G", "b", "output:y"]
    layout = layout_view(view)
    check(view, layout)
    assert layout.layer[view.index["b"]] < layout.layer[view.index["group:/G"]]


def test_self_loops_are_ignored():
    view = build_view(Model(models.conv_bn()).graph)
    looped = dataclasses.replace(view, edges=[*view.edges, Edge(1, 1, ["c"])])
    layout = layout_view(looped)
    check(looped, layout)
    plain = layout_view(view)
    assert np.array_equal(layout.x, plain.x) and np.array_equal(layout.layer, plain.layer)


def test_disconnected_components_sit_side_by_side():
    nodes = [
        helper.make_node("Relu", ["x1"], ["a1"], name="left/relu"),
        helper.make_node("Sigmoid", ["a1"], ["y1"], name="left/sigmoid"),
        helper.make_node("Relu", ["x2"], ["a2"], name="right/relu"),
        helper.make_node("Tanh", ["a2"], ["y2"], name="right/tanh"),
    ]
    model = models.make_model(
        nodes,
        [models.tensor("x1", shape=[2]), models.tensor("x2", shape=[2])],
        [models.tensor("y1", shape=[2]), models.tensor("y2", shape=[2])],
    )
    view = build_view(Model(model).graph)
    layout = layout_view(view)
    check(view, layout)
    left = [view.index[k] for k in ("input:x1", "left/relu", "left/sigmoid", "output:y1")]
    right = [view.index[k] for k in ("input:x2", "right/relu", "right/tanh", "output:y2")]
    assert (layout.x + layout.w)[left].max() < layout.x[right].min()
    assert list(layout.layer[left]) == list(layout.layer[right]) == [0, 1, 2, 3]


def test_boxes_without_edges_go_in_a_grid():
    view = build_view(Model(random_dag(1, nodes=10, inputs=1, isolated=9)).graph)
    layout = layout_view(view)
    check(view, layout)
    lone = [view.index[f"lone{i}"] for i in range(9)]
    rest = [i for i in range(len(view.items)) if i not in lone]
    assert layout.x[lone].min() > (layout.x + layout.w)[rest].max()
    assert sorted(layout.layer[lone]) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_same_layout_twice(demo_path):
    graph = load_model(demo_path).graph
    first = layout_view(build_view(graph))
    second = layout_view(build_view(graph))
    for name in ("x", "y", "w", "h", "layer"):
        assert np.array_equal(getattr(first, name), getattr(second, name))
    assert first.edge_paths == second.edge_paths
    assert (first.width, first.height) == (second.width, second.height)


def test_cancellation_between_phases(demo_path):
    view = build_view(load_model(demo_path).graph)
    with pytest.raises(Cancelled, match="the layout was cancelled"):
        layout_view(view, Task(cancelled=lambda: True))
    asked = []

    def later() -> bool:
        asked.append(1)
        return len(asked) > 3

    with pytest.raises(Cancelled):
        layout_view(view, Task(cancelled=later))
    assert len(asked) == 4


def test_progress_runs_from_zero_to_one(demo_path):
    view = build_view(load_model(demo_path).graph)
    seen: list[float] = []
    layout_view(view, Task(seen.append))
    assert seen[0] == 0.0 and seen[-1] == 1.0
    assert seen == sorted(seen) and len(seen) >= 5


def test_item_size():
    def item(title: str, lines: list[str], subtitle: str = "") -> Item:
        return Item(title, "node", title, subtitle, lines, "other", title, [title], False)

    assert item_size(item("Relu", [])) == (90.0, 28.0)
    assert item_size(item("Conv", [], "stem_conv")) == ((4 + 3 + 9) * 7 + 20, 28.0)  # one header row
    assert item_size(item("x" * 200, ["a", "b"])) == (260.0, 58.0)
    width, height = item_size(item("BatchNormalization", ["ε 1e-05", "scale, B, mean, var ⟨64⟩"]))
    assert 90 < width < 260 and height == 58.0


def test_an_empty_view_lays_out_empty(demo_path):
    view = build_view(load_model(demo_path).graph)
    empty = dataclasses.replace(view, items=[], edges=[], index={}, node_item={}, inputs=[], outputs=[])
    layout = layout_view(empty)
    assert len(layout.x) == 0 and layout.edge_paths == []


def test_layout_in_a_worker_thread_matches_and_leaves_the_collector_on(demo_path):
    graph = load_model(demo_path).graph
    here = layout_view(build_view(graph))
    found: list[Layout] = []
    worker = threading.Thread(target=lambda: found.append(layout_view(build_view(graph))))
    worker.start()
    worker.join()
    assert np.array_equal(found[0].x, here.x) and found[0].edge_paths == here.edge_paths
    assert gc.isenabled()
