"""Text and JSON are two spellings of one pattern; errors point at line and column."""

from __future__ import annotations

import json

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.patterns import ir
from graphlens.patterns.ir import ABSENT, OneOf, Op, Value
from graphlens.patterns.jsonform import dumps, loads, pattern_from_json, pattern_to_json
from graphlens.patterns.library import builtin_text, library
from graphlens.patterns.syntax import PatternSyntaxError, format_pattern, parse_pattern

EVERYTHING = """pattern kitchen-sink: every construct of the language
verb folding
allow shared
x: any float32
conv = Conv|ConvTranspose(x, w: const float16 rank=4 shape=[8, ?, 3, 3], b?: const)
bias? = Add(conv, c: const per_channel) ordered
either
  act = Relu(bias)
or
  act = Clip(bias, lo: const ~0, hi: const ~6.0) shared
end
cat = Concat(act, x, ...) where axis = 1, mode != "x", group in [1, absent], alpha ~ 0.5, beta absent
custom = Gelu@com.microsoft(cat, _, _?: const scalar)
any_op = *(custom)
split = Split(any_op)
sum = Sum(split.1, split)
"""


def test_every_construct_parses_into_the_objects_it_names():
    p = parse_pattern(EVERYTHING)
    assert (p.name, p.description, p.verb, p.allow_shared) == ("kitchen-sink", "every construct of the language",
                                                               "folding", True)
    ops = {o.label: o for o in p.ops()}
    conv = ops["conv"]
    assert conv.ops == ("Conv", "ConvTranspose")
    x, w, b = (a.expr for a in conv.inputs)
    assert isinstance(x, Value) and x.spec.dtype == "float32" and not x.spec.constant
    assert w.spec == ir.ValueSpec(constant=True, dtype="float16", rank=4, shape=(8, None, 3, 3))
    assert conv.inputs[2].optional and b.spec.constant
    assert ops["bias"].optional and ops["bias"].commutative is False
    assert ops["bias"].inputs[1].expr.spec.per_channel
    choice = ops["cat"].inputs[0].expr
    assert isinstance(choice, OneOf) and [a.ops for a in choice.alternatives] == [("Relu",), ("Clip",)]
    assert choice.alternatives[1].shared and choice.alternatives[1].inputs[1].expr.spec.approx == 0.0
    cat = ops["cat"]
    assert cat.variadic and cat.inputs[1].expr is x  # the same value object, so it binds one tensor
    kinds = {r.name: (r.kind, r.values) for r in cat.attrs}
    assert kinds == {
        "axis": ("eq", (1,)), "mode": ("ne", ("x",)), "group": ("in", (1, ABSENT)),
        "alpha": ("approx", (0.5,)), "beta": ("absent", ()),
    }
    assert ops["custom"].domain == "com.microsoft" and ops["custom"].inputs[2].optional
    assert ops["any_op"].ops is None
    assert ops["sum"].inputs[0].output == 1 and ops["sum"].is_commutative


def test_text_round_trips():
    text = format_pattern(parse_pattern(EVERYTHING))
    assert format_pattern(parse_pattern(text)) == text


@pytest.mark.parametrize("name", list(library()))
def test_builtins_round_trip_through_text_and_json(name):
    pattern = library()[name]
    text = format_pattern(pattern)
    assert format_pattern(parse_pattern(text)) == text
    data = pattern_to_json(pattern)
    assert json.loads(json.dumps(data)) == data
    assert format_pattern(pattern_from_json(data)) == text
    assert format_pattern(loads(dumps(pattern))) == text
    assert builtin_text(name).startswith(f"pattern {name}:")


def test_python_api_builds_the_same_pattern_as_text():
    x = ir.value("x")
    conv = ir.op("Conv|ConvTranspose", x, ir.const("w"), ir.maybe(ir.const("b")), label="conv")
    bn = ir.op(
        "BatchNormalization", conv, ir.const("scale"), ir.const("B"), ir.const("mean"), ir.const("var"),
        label="bn", attrs=[ir.attr_in("training_mode", 0, ABSENT)],
    )
    built = ir.pattern("conv-bn", bn, verb="folding")
    text = ("pattern conv-bn\nverb folding\nconv = Conv|ConvTranspose(x, w: const, b?: const)\n"
            "bn = BatchNormalization(conv, scale: const, B: const, mean: const, var: const)"
            " where training_mode in [0, absent]\n")
    assert format_pattern(built) == format_pattern(parse_pattern(text)) == text


def test_python_predicates_cannot_be_written_as_text_or_json():
    p = ir.pattern("p",
                   ir.op("Conv", ir.value("x"), ir.const("w", predicate=lambda a: a.ndim == 4, predicate_name="4-D")))
    with pytest.raises(GraphLensError, match="4-D"):
        format_pattern(p)
    with pytest.raises(GraphLensError, match="Python predicate"):
        pattern_to_json(p)


@pytest.mark.parametrize(
    ("text", "line", "column", "expected"),
    [
        ("conv = Conv(x, w: cnst)", 1, 19, "expected 'any' or 'const' but found 'cnst'"),
        ("conv = Conv(x, w", 1, 17, "expected ')' or ','"),
        ("a = Relu(x)\nb = Add(a, y) where alpha in [1, 2", 2, 35, "expected ']' or ','"),
        ("x = ", 1, 4, "expected an op type"),
        ("a = Relu(x)\na = Relu(a)", 2, 1, "label 'a' is already defined"),
        ("a = Relu(x) where", 1, 18, "expected an attribute name"),
        ("a = Relu(x) $", 1, 13, "unexpected character '$'"),
        ("either\n a = Relu(x)\nend", 3, 1, "'either' needs at least one 'or'"),
        ("either\n a = Relu(x)\nor\n b = Relu(x)\nend", 5, 1, "same label"),
        ("a = Relu(x)\neither\n b = Relu(a)\nor\n b = Sigmoid(a)", 2, 1, "not closed"),
        ("# only a comment\n", 1, 1, "defines no nodes"),
        ("a = Relu(x) where k ~ big", 1, 23, "expected a number"),
    ],
)
def test_errors_name_line_column_and_what_was_expected(text, line, column, expected):
    with pytest.raises(PatternSyntaxError) as info:
        parse_pattern(text, source="my.pattern")
    err = info.value
    assert (err.line, err.column) == (line, column), str(err)
    assert expected in str(err)
    assert str(err).startswith(f"my.pattern: line {line}, column {column}: ")


def test_malformed_json_is_one_clear_error():
    with pytest.raises(GraphLensError, match="not a GraphLens pattern"):
        loads('{"format": "something-else"}')
    with pytest.raises(GraphLensError, match="does not parse: line 1"):
        loads("{nope")
    with pytest.raises(GraphLensError, match="malformed"):
        loads('{"format": "graphlens-pattern", "exprs": [{"kind": "op"}]}')


def test_comments_and_blank_lines_are_ignored_but_hash_in_strings_is_kept():
    p = parse_pattern('# header\n\na = Cast(x) where to = "#1"  # trailing\n')
    (op,) = p.ops()
    assert isinstance(op, Op) and op.attrs[0].values == ("#1",)
