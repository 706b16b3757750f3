"""The pattern language's one meaning, as Python objects.

A pattern is a small expression DAG: :class:`Value` holes (any tensor, or a constant with
constraints), :class:`Op` nodes (op types with alternatives, attribute rules, ordered or
commutative inputs, optionally skippable) and :class:`OneOf` choices between whole
sub-patterns. Text (:mod:`graphlens.patterns.syntax`) and JSON (:mod:`graphlens.patterns.jsonform`)
are two spellings of the same objects. The matcher compiles a pattern into flat variants.

The factories (:func:`op`, :func:`value`, :func:`const`, :func:`one_of`, :func:`maybe`) read like
TVM's dataflow patterns::

    x = value("x")
    conv = op("Conv|ConvTranspose", x, const("w"), maybe(const("b")), label="conv")
    bn = op("BatchNormalization", conv, const("scale"), const("B"), const("mean"), const("var"),
            label="bn", attrs=[attr_in("training_mode", 0, ABSENT)])
    pattern = Pattern("conv-bn", (bn,))
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

COMMUTATIVE_OPS = frozenset({"Add", "Mul", "Sum", "Max", "Min", "And", "Or", "Equal"})
"""Ops whose inputs may match in any order unless a pattern says ``ordered``."""
VARIADIC_OPS = frozenset({"Concat", "Sum", "Max", "Min", "Mean"})


class _Absent:
    """Marks "attribute not set" in attribute rules (``training_mode in [0, absent]``)."""

    def __repr__(self) -> str:
        return "absent"

    def __reduce__(self) -> str:
        """One marker, compared by identity: a pickled pattern (the variant cache) reads back this one."""
        return "ABSENT"


ABSENT = _Absent()


# ----------------------------------------------------------------------------- attribute rules
@dataclass(frozen=True)
class AttrRule:
    """A constraint on one attribute: ``eq``, ``ne``, ``in``, ``absent``, ``approx`` or a Python ``pred``."""

    name: str
    kind: str
    values: tuple[Any, ...] = ()
    func: Callable[[Any], bool] | None = field(default=None, compare=False)
    func_name: str = ""

    def holds(self, attrs: Any) -> bool:
        present = self.name in attrs
        actual = attrs[self.name] if present else ABSENT
        if self.kind == "absent":
            return not present
        if self.kind == "eq":
            return present and _same(actual, self.values[0])
        if self.kind == "ne":
            return not present or not _same(actual, self.values[0])
        if self.kind == "in":
            return any((v is ABSENT and not present) or (present and v is not ABSENT and _same(actual, v))
                       for v in self.values)
        if self.kind == "approx":
            return (present and isinstance(actual, (int, float))
                    and math.isclose(actual, self.values[0], rel_tol=1e-3, abs_tol=1e-6))
        if self.kind == "pred":
            assert self.func is not None
            return bool(self.func(None if not present else actual))
        raise ValueError(f"unknown attribute rule kind {self.kind!r}")

    def expected(self) -> str:
        """What the rule wants, for messages: ``training_mode absent or 0``."""
        if self.kind == "absent":
            return f"{self.name} absent"
        if self.kind == "eq":
            return f"{self.name}={_lit(self.values[0])}"
        if self.kind == "ne":
            return f"{self.name}!={_lit(self.values[0])}"
        if self.kind == "in":
            return f"{self.name} " + " or ".join("absent" if v is ABSENT else _lit(v) for v in self.values)
        if self.kind == "approx":
            return f"{self.name}≈{_lit(self.values[0])}"
        return f"{self.name} satisfying {self.func_name or 'a condition'}"


def _same(actual: Any, wanted: Any) -> bool:
    if isinstance(actual, np.ndarray) or isinstance(wanted, np.ndarray):
        return bool(np.array_equal(np.asarray(actual), np.asarray(wanted)))
    if isinstance(actual, (list, tuple)) and isinstance(wanted, (list, tuple)):
        return list(actual) == list(wanted)
    if isinstance(actual, float) or isinstance(wanted, float):
        try:
            return math.isclose(float(actual), float(wanted), rel_tol=1e-6, abs_tol=1e-12)
        except (TypeError, ValueError):
            return False
    return bool(actual == wanted)


def _lit(v: Any) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_lit(x) for x in v) + "]"
    return repr(v)


def attr_eq(name: str, v: Any) -> AttrRule:
    """Attribute ``name`` is set and equals ``v``."""
    return AttrRule(name, "eq", (v,))


def attr_ne(name: str, v: Any) -> AttrRule:
    """Attribute ``name`` is absent or differs from ``v``."""
    return AttrRule(name, "ne", (v,))


def attr_in(name: str, *vs: Any) -> AttrRule:
    """Attribute ``name`` is one of ``vs``; include :data:`ABSENT` to accept it unset."""
    return AttrRule(name, "in", tuple(vs))


def attr_absent(name: str) -> AttrRule:
    """Attribute ``name`` is not set."""
    return AttrRule(name, "absent")


def attr_approx(name: str, v: float) -> AttrRule:
    """Attribute ``name`` is a number within 0.1% of ``v``."""
    return AttrRule(name, "approx", (float(v),))


def attr_pred(name: str, func: Callable[[Any], bool], description: str = "") -> AttrRule:
    """Attribute ``name`` (None when unset) satisfies ``func``; Python-only, not expressible as text. Reasons
    name it by ``description``, else by the function's name in words (``is_even`` reads "is even")."""
    return AttrRule(name, "pred", (), func, description or in_words(getattr(func, "__name__", "")))


def in_words(identifier: str) -> str:
    """A Python name as words for a reason (``is_power_of_two``: "is power of two"); a lambda or no name:
    "a condition"."""
    words = identifier.strip("_").replace("_", " ")
    return words if words and identifier.isidentifier() else "a condition"


# ------------------------------------------------------------------------------- value holes
@dataclass(frozen=True)
class ValueSpec:
    """What a tensor bound to a :class:`Value` must be. All fields optional."""

    constant: bool = False
    dtype: str | None = None
    rank: int | None = None
    shape: tuple[int | None, ...] | None = None
    approx: float | None = None
    scalar: bool = False
    per_channel: bool = False
    range: tuple[float | None, float | None] | None = None
    """Every element within [low, high] (None: open end)."""
    predicate: Callable[[np.ndarray], bool] | None = field(default=None, compare=False)
    predicate_name: str = ""

    @property
    def needs_value(self) -> bool:
        return (
            self.approx is not None or self.scalar or self.per_channel or self.range is not None
            or self.predicate is not None
        )

    def describe(self) -> str:
        parts = ["constant" if self.constant else "any value"]
        if self.dtype:
            parts.append(self.dtype)
        if self.rank is not None:
            parts.append(f"rank {self.rank}")
        if self.shape is not None:
            parts.append("shape [" + ", ".join("?" if d is None else str(d) for d in self.shape) + "]")
        if self.scalar:
            parts.append("scalar")
        if self.approx is not None:
            parts.append(f"≈ {self.approx:g}")
        if self.per_channel:
            parts.append("per-channel")
        if self.range is not None:
            parts.append(f"in {_range_text(self.range)}")
        if self.predicate is not None:
            parts.append(f"satisfying {self.predicate_name or 'a predicate'}")
        return " ".join(parts)


def _range_text(bounds: tuple[float | None, float | None]) -> str:
    return "[" + ", ".join("?" if b is None else f"{b:g}" for b in bounds) + "]"


class Expr:
    """A pattern expression: a :class:`Value`, an :class:`Op` or a :class:`OneOf`."""

    label: str


@dataclass(eq=False)
class Value(Expr):
    """A hole a graph tensor binds to. Used twice in a pattern, it binds the same tensor both times."""

    label: str
    spec: ValueSpec = ValueSpec()

    def __repr__(self) -> str:
        return f"Value({self.label!r}, {self.spec.describe()})"


@dataclass(frozen=True)
class Arg:
    """One input of an :class:`Op`: which expression feeds it, from which output, and whether it may be missing."""

    expr: Expr
    output: int = 0
    optional: bool = False


@dataclass(eq=False)
class Op(Expr):
    """A node with op type ``ops`` (None: any op), its inputs in order, and its rules."""

    label: str
    ops: tuple[str, ...] | None
    inputs: tuple[Arg, ...] = ()
    domain: str = ""
    attrs: tuple[AttrRule, ...] = ()
    optional: bool = False
    commutative: bool | None = None
    variadic: bool = False
    shared: bool = False

    @property
    def is_commutative(self) -> bool:
        if self.commutative is not None:
            return self.commutative
        return self.ops is not None and all(o in COMMUTATIVE_OPS for o in self.ops)

    @property
    def op_text(self) -> str:
        if self.ops is None:
            return "*"
        suffix = f"@{self.domain}" if self.domain else ""
        return "|".join(o + suffix for o in self.ops)

    @property
    def op_words(self) -> str:
        """The op types in words, as reasons name them: ``Conv or ConvTranspose``, ``any op`` for a wildcard."""
        if self.ops is None:
            return "any op"
        suffix = f" (domain {self.domain})" if self.domain else ""
        return " or ".join(o + suffix for o in self.ops)

    def accepts_op(self, op_type: str, domain: str) -> bool:
        if self.ops is None:
            return True
        if op_type not in self.ops:
            return False
        return (domain or "ai.onnx") == (self.domain or "ai.onnx")

    def passthrough(self) -> Arg:
        """The input a skipped (optional) node is replaced by: its first node-fed input, else input 0."""
        for arg in self.inputs:
            if not isinstance(arg.expr, Value):
                return arg
        return self.inputs[0]

    def __repr__(self) -> str:
        return f"Op({self.label!r}, {self.op_text})"


@dataclass(eq=False)
class OneOf(Expr):
    """Alternative sub-patterns; each alternative's root carries the same label."""

    alternatives: tuple[Expr, ...]
    label: str = field(init=False, repr=False)
    """The alternatives' root label (the first's; :func:`one_of` gives them all one)."""

    def __post_init__(self) -> None:
        self.label = self.alternatives[0].label


@dataclass(eq=False)
class Pattern:
    """A named pattern: its output expressions and how strictly matches must stand alone.

    ``allow_shared`` relaxes the sole-use rule (values inside a match used only inside it) for the
    whole pattern; ``verb`` names what a rewrite of it does, for messages ("so folding would
    change 'side'"); ``anchors`` are the ops a site is known by (Softmax for attention): explain's
    near misses start only there, not at every op the pattern shares with the rest of the model.
    """

    name: str
    outputs: tuple[Expr, ...]
    description: str = ""
    allow_shared: bool = False
    verb: str = "rewriting"
    anchors: tuple[str, ...] = ()

    def can_hold(self, op_type: str, domain: str = "") -> bool:
        """Whether one of the pattern's nodes, a wildcard aside, can be a ``op_type`` node: the patterns "Why not
        here?" offers on a node."""
        return any(isinstance(e, Op) and e.ops is not None and e.accepts_op(op_type, domain) for e in self.exprs())

    def exprs(self) -> list[Expr]:
        """Every expression, inputs before their users, each once (one-of alternatives included)."""
        seen: dict[int, Expr] = {}
        order: list[Expr] = []

        def visit(e: Expr) -> None:
            if id(e) in seen:
                return
            seen[id(e)] = e
            if isinstance(e, Op):
                for a in e.inputs:
                    visit(a.expr)
            elif isinstance(e, OneOf):
                for alt in e.alternatives:
                    visit(alt)
            order.append(e)

        for out in self.outputs:
            visit(out)
        return order

    def ops(self) -> Iterator[Op]:
        return (e for e in self.exprs() if isinstance(e, Op))

    def required_ops(self) -> list[tuple[str, ...]]:
        """The op alternatives every match has a node of: nodes that are not optional, reached from the outputs
        through such nodes, or through an ``either`` by every one of its branches. A model with no node of one
        of them has no match."""
        memo: dict[int, dict[int, Op]] = {}

        def required(e: Expr) -> dict[int, Op]:
            if id(e) in memo:
                return memo[id(e)]
            found: dict[int, Op] = {}
            if isinstance(e, OneOf):  # only what every branch requires
                branches = [required(alt) for alt in e.alternatives]
                found = {k: v for k, v in branches[0].items() if all(k in b for b in branches[1:])} if branches else {}
            elif isinstance(e, Op):
                if not e.optional and e.ops is not None:
                    found[id(e)] = e
                for a in e.inputs:
                    found.update(required(a.expr))
            memo[id(e)] = found
            return found

        everything: dict[int, Op] = {}
        for out in self.outputs:
            everything.update(required(out))
        return [op.ops for op in everything.values() if op.ops is not None]

    def labels(self) -> list[str]:
        out: list[str] = []
        for e in self.exprs():
            if not isinstance(e, OneOf) and e.label not in out:
                out.append(e.label)
        return out


# ----------------------------------------------------------------------------------- factories
InputLike = Expr | Arg | str
_auto = iter(range(1, 1 << 62))


def _arg(x: InputLike) -> Arg:
    if isinstance(x, Arg):
        return x
    if isinstance(x, str):
        return Arg(Value(x))
    return Arg(x)


def value(label: str, **spec: Any) -> Value:
    """Any tensor (a wildcard), optionally constrained: ``value("x", dtype="float32")``."""
    return Value(label, ValueSpec(**spec))


def const(label: str, **spec: Any) -> Value:
    """A constant tensor (initializer, Constant, ConstantOfShape, or shape-only op of those)."""
    return Value(label, ValueSpec(constant=True, **spec))


def maybe(x: InputLike, output: int = 0) -> Arg:
    """An input that may be missing on the node (e.g. Conv's bias); if present it must match ``x``."""
    return Arg(_arg(x).expr, output, optional=True)


def out(expr: Expr, index: int) -> Arg:
    """Output ``index`` of a multi-output node, as an input."""
    return Arg(expr, index)


def op(
    ops: str | Sequence[str] | None,
    *inputs: InputLike,
    label: str | None = None,
    domain: str = "",
    attrs: Iterable[AttrRule] = (),
    optional: bool = False,
    commutative: bool | None = None,
    variadic: bool | None = None,
    shared: bool = False,
) -> Op:
    """A node: ``op("Conv|ConvTranspose", x, const("w"))``; ``"*"`` or None for any op type."""
    if isinstance(ops, str):
        op_tuple: tuple[str, ...] | None = None if ops == "*" else tuple(ops.split("|"))
    else:
        op_tuple = None if ops is None else tuple(ops)
    if variadic is None:
        variadic = False
    return Op(
        label or f"n{next(_auto)}",
        op_tuple,
        tuple(_arg(i) for i in inputs),
        domain,
        tuple(attrs),
        optional,
        commutative,
        variadic,
        shared,
    )


def one_of(*alternatives: Expr, label: str | None = None) -> OneOf:
    """Any one of several sub-patterns; their roots are relabelled to ``label`` (or the first's)."""
    name = label or alternatives[0].label
    for alt in alternatives:
        alt.label = name
    return OneOf(tuple(alternatives))


def pattern(name: str, *outputs: Expr, description: str = "", allow_shared: bool = False,
            verb: str = "rewriting") -> Pattern:
    return Pattern(name, tuple(outputs), description, allow_shared, verb)
