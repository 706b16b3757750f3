"""Every reason "Why not here?" gives reads in plain words: the sentence and the constraint it names carry no
constraint identifier (``sole_use``, ``op_type`` …) and no pattern syntax (``Conv|ConvTranspose``, ``op@domain``)."""

from __future__ import annotations

import inspect
import re
from functools import cache

import numpy as np
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model, load_model
from graphlens.matching.checks import CONSTRAINTS
from graphlens.matching.explain import Explanation, explain
from graphlens.matching.matcher import find_matches
from graphlens.patterns.ir import attr_pred, const, op, pattern, value
from graphlens.patterns.library import library
from graphlens.patterns.syntax import parse_pattern
from tests import models
from tests.matching import pattern_models as pm
from tests.matching.test_ordered_choice import shared_conv_model
from tests.matching.transformer_library_cases import CASES

IDENTIFIER = re.compile(r"\b(?:" + "|".join(k for k in CONSTRAINTS if "_" in k or k == "dtype") + r")\b")
"""The constraint identifiers that are not words (shape, rank, value … are, and reasons use them as words)."""
SYNTAX = re.compile(r"[A-Za-z]\|[A-Za-z]|[A-Za-z]@[a-z]")


def assert_plain(reason: str) -> None:
    assert not IDENTIFIER.search(reason), reason
    assert not SYNTAX.search(reason), reason


def assert_plain_explanation(e: Explanation) -> None:
    assert_plain(e.message)
    if e.failure is not None:
        for text in (e.failure.constraint, e.failure.expected, e.failure.actual):
            assert_plain(text)
        assert e.to_json()["constraint"] == CONSTRAINTS[e.failure.kind]


@cache
def built_models() -> dict[str, Model]:
    """Every model the built-in patterns are tested on, and the transformer forms with their near twins."""
    found = {}
    for name, build in inspect.getmembers(pm, inspect.isfunction):
        if build.__module__ == pm.__name__ and not name.startswith("_") and not inspect.signature(build).parameters:
            found[name] = Model(build())
    for name, (matching, near, _) in CASES.items():
        found[f"{name} (matches)"], found[f"{name} (near)"] = Model(matching()), Model(near())
    return found


def test_every_constraint_is_worded_as_a_sentence():
    for kind, words in CONSTRAINTS.items():
        assert words[0].isupper() and words.endswith(".") and len(words.split()) >= 6, kind
        assert_plain(words)


@pytest.mark.parametrize("name", list(library()))
def test_the_near_misses_of_a_built_in_pattern_read_in_plain_words(name, demo_path):
    built_in, kinds = library()[name], set()
    for model in [load_model(demo_path), *built_models().values()]:
        result = explain(built_in, model)
        assert_plain(result.message)
        for miss in result.near_misses:
            assert_plain_explanation(miss)
            kinds.add(miss.failure.kind)
    assert kinds  # the models do give this pattern near misses to word


def _conv(weight_shape=(4, 3, 1, 1), *, bias: bool = False, outputs=None, after=()) -> Model:
    """x -> Conv 'conv' (1x1 weight 'w') -> c, then the ``after`` nodes; the graph outputs c, or y when it goes on."""
    outputs = outputs or (("y",) if after else ("c",))
    inits = [models.init("w", np.ones(weight_shape, np.float32))]
    if bias:
        inits.append(models.init("b", np.zeros(weight_shape[0], np.float32)))
    nodes = [helper.make_node("Conv", ["x", "w", *(["b"] if bias else [])], ["c"], name="conv"), *after]
    return Model(models.make_model(nodes, [models.tensor("x", shape=[1, 3, 4, 4])],
                                   [models.tensor(o, shape=None) for o in outputs], inits))


def is_even(n) -> bool:
    return n is not None and n % 2 == 0


RELU = helper.make_node("Relu", ["c"], ["y"], name="relu")
CASES_BY_KIND = {
    "input_count": (parse_pattern("c = Conv(x, w: const, b: const)"), _conv(), "conv",
                    "Conv 'conv' has 2 inputs where 3 were expected"),
    "dtype": (parse_pattern("c = Conv(x, w: const float16)"), _conv(), "conv",
              "input 1 (w) of Conv 'conv' has element type float32 where float16 was expected"),
    "rank": (parse_pattern("c = Conv(x, w: const rank=3)"), _conv(), "conv",
             "input 1 (w) of Conv 'conv' has rank 4 where rank 3 was expected"),
    "shape": (parse_pattern("c = Conv(x, w: const shape=[4, 3, 3, 3])"), _conv(), "conv",
              "input 1 (w) of Conv 'conv' has shape [4, 3, 1, 1] where [4, 3, 3, 3] was expected"),
    "value": (pattern("checked", op("Conv", value("x"), const("w", predicate=lambda w: False), label="c")),
              _conv(), "conv", "input 1 (w) of Conv 'conv' does not meet the pattern's condition on it"),
    "attribute": (pattern("even-group", op("Conv", value("x"), const("w"), label="c",
                                           attrs=[attr_pred("group", is_even)])),
                  _conv(), "conv", "Conv 'conv' has no group where group satisfying is even was expected"),
    "op_type": (parse_pattern("c = Conv|ConvTranspose(x, w: const)\nr = Sigmoid|Tanh(c)"), _conv(after=[RELU]),
                "conv", "where Sigmoid or Tanh was expected"),
    "graph_output": (parse_pattern("c = Conv(x, w: const)\nr = Relu(c)"),
                     _conv(after=[RELU], outputs=("y", "c")), "relu", "'c' of Conv 'conv' is a graph output"),
    "sole_use": (parse_pattern("c = Conv(x, w: const)\nr = Relu(c)"),
                 _conv(after=[RELU, helper.make_node("Sigmoid", ["c"], ["s"], name="side")], outputs=("y", "s")),
                 "relu", "so rewriting would change 'side'"),
}


@pytest.mark.parametrize("kind", list(CASES_BY_KIND))
def test_each_kind_of_failure_is_a_plain_sentence_naming_the_node(kind):
    checked, model, at, sentence = CASES_BY_KIND[kind]
    result = explain(checked, model, at=at)
    assert not result.matched and result.failure.kind == kind
    assert sentence in result.message
    assert_plain_explanation(result)


@pytest.mark.parametrize("hole", [const, value])
def test_a_python_condition_on_a_value_is_checked_by_the_matcher_as_by_explain(hole):
    never = pattern("never", op("Conv", value("x"), hole("w", predicate=lambda w: False), label="c"))
    always = pattern("always", op("Conv", value("x"), hole("w", predicate=lambda w: w.ndim == 4), label="c"))
    model = _conv()
    assert find_matches(never, model) == [] and not explain(never, model, at="conv").matched
    assert len(find_matches(always, model)) == 1 and explain(always, model, at="conv").matched


def test_a_shadowed_alternative_is_a_plain_sentence():
    model, shared = shared_conv_model()
    result = explain(shared, model, at="add")
    assert result.failure.kind == "ordered_choice" and "an earlier alternative" in result.message
    assert_plain_explanation(result)


def test_an_op_from_another_domain_is_named_in_words():
    model = Model(models.make_model([helper.make_node("Relu", ["x"], ["y"], name="relu")],
                                    [models.tensor("x", TensorProto.FLOAT, [1, 4])],
                                    [models.tensor("y", TensorProto.FLOAT, [1, 4])]))
    fused = parse_pattern("y = FusedRelu@com.example(x)\nz = Relu(y)")
    result = explain(fused, model, at="relu")
    assert "FusedRelu (domain com.example)" in result.message
    assert_plain_explanation(result)
