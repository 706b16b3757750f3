"""The anchored matcher finds exactly what plain VF2 over the whole graph finds."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import helper

from graphlens.core.model import Model
from graphlens.matching.matcher import Matcher
from graphlens.patterns.syntax import parse_pattern
from tests import models

OPS = {"Relu": 1, "Sigmoid": 1, "Add": 2, "Mul": 2, "Sub": 2, "Concat": 3}


@st.composite
def random_models(draw) -> Model:
    """A random DAG over a few op types; inputs drawn from earlier tensors, repeats allowed (Mul(x, x))."""
    n = draw(st.integers(2, 18))
    tensors = ["x", "y"]
    nodes = []
    for i in range(n):
        op = draw(st.sampled_from(sorted(OPS)))
        arity = OPS[op]
        inputs = [draw(st.sampled_from(tensors)) for _ in range(arity)]
        out = f"t{i}"
        attrs = {"axis": 0} if op == "Concat" else {}
        nodes.append(helper.make_node(op, inputs, [out], name=f"n{i}", **attrs))
        tensors.append(out)
    used = {t for node in nodes for t in node.input}
    outputs = [t for t in tensors[2:] if t not in used] or [tensors[-1]]
    proto = models.make_model(
        nodes, [models.tensor("x", shape=[2]), models.tensor("y", shape=[2])],
        [models.tensor(t, shape=None) for t in outputs]
    )
    return Model(proto)


@st.composite
def random_patterns(draw) -> str:
    """A connected random pattern in the text syntax, with shared values and optional nodes."""
    n = draw(st.integers(1, 4))
    lines: list[str] = []
    nodes: list[str] = []
    values = ["a", "b"]
    for i in range(n):
        op = draw(st.sampled_from(sorted(OPS)))
        arity = OPS[op]
        args = []
        for k in range(arity):
            if nodes and (k == 0 or draw(st.booleans())):
                args.append(draw(st.sampled_from(nodes)) if k else nodes[-1] if draw(st.booleans())
                            else draw(st.sampled_from(nodes)))
            else:
                args.append(draw(st.sampled_from(values)))
        optional = ("?" if i > 0 and i < n - 1 and draw(st.integers(0, 4)) == 0 and arity >= 1 and args[0] in nodes
                    else "")
        flags = " ordered" if arity == 2 and draw(st.integers(0, 3)) == 0 else ""
        lines.append(f"p{i}{optional} = {op}({', '.join(args)}){flags}")
        nodes.append(f"p{i}")
    if draw(st.booleans()):
        lines.insert(0, "allow shared")
    return "\n".join(lines) + "\n"


def _keys(matches):
    return sorted((m.graph.path, tuple(sorted(m.nodes.items())), tuple(sorted(m.values.items()))) for m in matches)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=random_models(), text=random_patterns())
def test_anchored_search_equals_whole_graph_vf2(model, text):
    matcher = Matcher(parse_pattern(text))
    anchored = matcher.find(model)
    plain = matcher.find(model, anchored=False)
    assert _keys(anchored) == _keys(plain)
    assert [m.nodes for m in anchored] == [m.nodes for m in plain]  # same deterministic order


def test_the_property_is_not_vacuous():
    # Guards the generators: a simple pattern must match often enough on random models.
    matcher = Matcher(parse_pattern("r = Relu(a)\ns = Sigmoid(r)\n"))
    proto = models.make_model(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Sigmoid", ["r"], ["s"], name="sig")],
        [models.tensor("x", shape=[2])],
        [models.tensor("s", shape=[2])],
    )
    found = matcher.find(Model(proto))
    assert [m.nodes for m in found] == [{"r": "relu", "s": "sig"}]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(model=random_models(), text=random_patterns())
def test_inline_value_binding_accepts_exactly_what_the_general_checks_accept(model, text):
    """The matcher binds simple variants' inputs inline; with that path off, the same matches come out."""
    from unittest import mock

    matcher = Matcher(parse_pattern(text))
    quick = matcher.find(model)
    with mock.patch("graphlens.matching.matcher.quick_bindings", return_value=None):
        general = Matcher(parse_pattern(text)).find(model)
    assert [(m.nodes, m.values) for m in quick] == [(m.nodes, m.values) for m in general]


def test_inline_value_binding_on_the_library_and_the_demo_model():
    from unittest import mock

    from graphlens.core.bundled import demo_model_path
    from graphlens.core.model import load_model
    from graphlens.patterns.library import library

    model = load_model(demo_model_path())
    for name, pattern in library().items():
        quick = Matcher(pattern).find(model)
        with mock.patch("graphlens.matching.matcher.quick_bindings", return_value=None):
            general = Matcher(pattern).find(model)
        assert [(m.nodes, m.values) for m in quick] == [(m.nodes, m.values) for m in general], name
    assert Matcher(library()["conv-bn"]).find(model)  # the comparison is not vacuous
