"""The pattern text syntax: what people type in the editor and keep in ``.pattern`` files.

One statement per line; ``#`` starts a comment::

    pattern conv-bn: Conv or ConvTranspose, optional constant bias Add, inference-mode BN
    verb folding
    conv  = Conv|ConvTranspose(x, w: const, b?: const)
    bias? = Add(conv, c: const per_channel)
    bn    = BatchNormalization(bias, scale: const, B: const, mean: const, var: const) where training_mode in [0, absent]

Statements:

- ``LABEL = OPS(ARGS) [FLAGS] [where RULES]`` defines a node; ``LABEL? = ...`` makes it optional
  (skippable: when absent, its users read its first node-fed input instead).
- ``OPS`` is ``Conv``, ``Conv|ConvTranspose``, ``Gelu@com.microsoft`` or ``*`` (any op).
- ``ARGS`` are, in input order: a label defined earlier (``conv``, or ``split.1`` for output 1),
  a new value (``x``, ``_`` for an anonymous one, ``w: const float32 rank=4``), each with a
  trailing ``?`` if the node may lack that input; a final ``...`` allows more inputs.
- Value constraints after ``:``: ``any`` or ``const``, then any of a dtype, ``rank=N``,
  ``shape=[64, ?, 3, 3]``, ``scalar``, ``~0.5`` (scalar within 0.1%), ``per_channel``,
  ``range=[0, 1]`` (every element within; ``?`` leaves an end open).
- ``FLAGS``: ``commutative`` / ``ordered`` (default: commutative for Add, Mul, Sum, Max, Min, And,
  Or, Equal), ``shared`` (this node's output may be used outside the match).
- ``RULES``: ``name = 1``, ``name != 0``, ``name in [0, absent]``, ``name absent``, ``name ~ 1e-5``.
- ``LABEL: SPEC`` declares a value before use; ``allow shared`` relaxes the sole-use rule for the
  whole pattern; ``verb folding`` names what rewriting a match does, for messages; ``anchor Softmax``
  names the ops a site is known by: explain's near misses start only at those.
- ``either`` / ``or`` / ``end`` choose between whole sub-patterns; each branch's last node
  carries the label the rest of the pattern uses. Blocks nest. The choice is ordered: at one site
  the first branch that matches is the match (see :func:`graphlens.matching.variants.site_labels`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.patterns.ir import (
    ABSENT,
    VARIADIC_OPS,
    Arg,
    AttrRule,
    Expr,
    OneOf,
    Op,
    Pattern,
    Value,
    ValueSpec,
)

DTYPES = ("float32", "float16", "float64", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool")
FLAGS = ("commutative", "ordered", "shared")


class PatternSyntaxError(GraphLensError):
    """A pattern that does not parse; carries the 1-based line and column."""

    def __init__(self, message: str, line: int, column: int, source: str = "") -> None:
        self.line, self.column, self.reason = line, column, message
        where = f"{source}: " if source else ""
        super().__init__(f"{where}line {line}, column {column}: {message}")


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
  | (?P<string>"[^"]*")
  | (?P<ellipsis>\.\.\.)
  | (?P<ne>!=)
  | (?P<name>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<punct>[=(),?:|@\[\]~.*])
    """,
    re.VERBOSE,
)


@dataclass
class _Tok:
    kind: str
    text: str
    col: int  # 1-based


class _Line:
    """Tokens of one line with a cursor; every ``expect`` failure names line and column."""

    def __init__(self, text: str, number: int, source: str) -> None:
        self.number, self.source, self.text = number, source, text
        self.toks: list[_Tok] = []
        pos = 0
        while pos < len(text):
            m = _TOKEN.match(text, pos)
            if m is None:
                raise PatternSyntaxError(f"unexpected character {text[pos]!r}", number, pos + 1, source)
            if m.lastgroup != "ws":
                self.toks.append(_Tok(m.lastgroup or "", m.group(), pos + 1))
            pos = m.end()
        self.i = 0

    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def text_at(self, offset: int = 0) -> str | None:
        """The text of the token ``offset`` ahead; None past the end of the line."""
        tok = self.peek(offset)
        return None if tok is None else tok.text

    def kind_at(self, offset: int = 0) -> str | None:
        """The kind of the token ``offset`` ahead; None past the end of the line."""
        tok = self.peek(offset)
        return None if tok is None else tok.kind

    def at(self, text: str) -> bool:
        return self.text_at() == text

    def take(self) -> _Tok:
        tok = self.peek()
        if tok is None:
            raise self.error("unexpected end of line")
        self.i += 1
        return tok

    def accept(self, text: str) -> bool:
        if self.at(text):
            self.i += 1
            return True
        return False

    def expect(self, text: str, what: str | None = None) -> _Tok:
        if not self.at(text):
            raise self.error(f"expected {what or repr(text)}")
        return self.take()

    def name(self, what: str) -> str:
        return self.name_token(what).text

    def name_token(self, what: str) -> _Tok:
        """The name under the cursor, taken; an error naming ``what`` was expected otherwise."""
        tok = self.peek()
        if tok is None or tok.kind != "name":
            raise self.error(f"expected {what}")
        self.i += 1
        return tok

    def done(self) -> bool:
        return self.i >= len(self.toks)

    def error(self, message: str) -> PatternSyntaxError:
        tok = self.peek()
        col = tok.col if tok else len(self.text.rstrip()) + 1
        found = f" but found {tok.text!r}" if tok else " but the line ended" if "expected" in message else ""
        if message == "unexpected end of line":
            found = ""
        return PatternSyntaxError(message + found, self.number, col, self.source)


class _Scope:
    """Labels visible at a point of the text; either-branches get a child scope."""

    def __init__(self, parent: _Scope | None = None) -> None:
        self.parent = parent
        self.names: dict[str, Expr] = {}

    def get(self, label: str) -> Expr | None:
        scope: _Scope | None = self
        while scope is not None:
            if label in scope.names:
                return scope.names[label]
            scope = scope.parent
        return None


def parse_pattern(text: str, *, name: str = "custom", source: str = "") -> Pattern:
    """Parse pattern text into a :class:`Pattern`; raises :class:`PatternSyntaxError`."""
    parser = _Parser(source)
    return parser.parse(text, name)


class _Parser:
    def __init__(self, source: str) -> None:
        self.source = source
        self.used: set[int] = set()  # ids of exprs consumed by some node: the rest are outputs
        self.defined: list[Expr] = []

    def parse(self, text: str, default_name: str) -> Pattern:
        name, description, verb, allow_shared = default_name, "", "rewriting", False
        anchors: tuple[str, ...] = ()
        scope = _Scope()
        stack: list[tuple[_Scope, list[Expr], _Line]] = []  # open either-blocks: outer scope, branch roots
        last_in_branch: Expr | None = None
        saw_statement = False
        for number, raw in enumerate(text.splitlines(), start=1):
            line_text = _strip_comment(raw)
            if not line_text.strip():
                continue
            stripped = line_text.strip()
            if stripped.startswith("pattern ") and not saw_statement:
                head, _, desc = stripped[len("pattern ") :].partition(":")
                if not re.fullmatch(r"[A-Za-z0-9_.\-]+", head.strip()):
                    raise PatternSyntaxError("expected a pattern name after 'pattern'", number, 9, self.source)
                name, description = head.strip(), desc.strip()
                continue
            line = _Line(line_text, number, self.source)
            first = line.peek()
            assert first is not None
            if first.text == "verb" and line.kind_at(1) == "name" and line.peek(2) is None:
                verb = line.toks[1].text
                continue
            if first.text == "anchor" and len(line.toks) > 1 and all(t.kind == "name" for t in line.toks[1:]):
                anchors = tuple(t.text for t in line.toks[1:])
                continue
            if first.text == "allow" and line.text_at(1) == "shared" and line.peek(2) is None:
                allow_shared = True
                continue
            if first.text == "either" and len(line.toks) == 1:
                stack.append((scope, [], line))
                scope = _Scope(stack[-1][0])
                last_in_branch = None
                continue
            if first.text in ("or", "end") and len(line.toks) == 1:
                if not stack:
                    raise PatternSyntaxError(f"'{first.text}' without 'either'", number, first.col, self.source)
                outer, roots, opener = stack[-1]
                if last_in_branch is None or isinstance(last_in_branch, Value):
                    raise PatternSyntaxError("an either-branch must end with a node", number, first.col, self.source)
                roots.append(last_in_branch)
                self.used.add(id(last_in_branch))
                if first.text == "or":
                    scope = _Scope(outer)
                    last_in_branch = None
                    continue
                stack.pop()
                labels = {r.label for r in roots}
                if len(roots) < 2:
                    raise PatternSyntaxError("'either' needs at least one 'or'", number, first.col, self.source)
                if len(labels) != 1:
                    raise PatternSyntaxError(
                        "every either-branch must end with a node of the same label (found "
                        + ", ".join(sorted(labels)) + ")",
                        number, first.col, self.source,
                    )
                choice = OneOf(tuple(roots))
                scope = outer
                self._define(scope, choice.label, choice, line, first)
                last_in_branch = choice
                saw_statement = True
                continue
            last_in_branch = self._statement(line, scope)
            saw_statement = True
        if stack:
            opener = stack[-1][2]
            raise PatternSyntaxError("'either' block is not closed with 'end'", opener.number, 1, self.source)
        outputs = tuple(e for e in self.defined if isinstance(e, (Op, OneOf)) and id(e) not in self.used)
        if not outputs:
            raise PatternSyntaxError("the pattern defines no nodes", max(1, len(text.splitlines())), 1, self.source)
        built = Pattern(name, outputs, description, allow_shared, verb, anchors)
        known = {o for op in built.ops() if op.ops is not None for o in op.ops}
        unknown = [a for a in anchors if a not in known]
        if unknown:
            raise PatternSyntaxError(f"anchor '{unknown[0]}' is not an op of the pattern", 1, 1, self.source)
        return built

    def _define(self, scope: _Scope, label: str, expr: Expr, line: _Line, tok: _Tok) -> None:
        if label in scope.names:
            raise PatternSyntaxError(f"label '{label}' is already defined", line.number, tok.col, self.source)
        scope.names[label] = expr
        self.defined.append(expr)

    def _statement(self, line: _Line, scope: _Scope) -> Expr:
        label_tok = line.name_token("a label")
        label = label_tok.text
        if line.accept(":"):  # value declaration
            spec = self._value_spec(line)
            if not line.done():
                raise line.error("expected end of line")
            expr: Expr = Value(label, spec)
            self._define(scope, label, expr, line, label_tok)
            return expr
        optional = line.accept("?")
        line.expect("=", "'=' or ':'")
        ops, domain = self._ops(line)
        line.expect("(", "'('")
        args, variadic = self._args(line, scope)
        line.expect(")", "')' or ','")
        commutative: bool | None = None
        shared = False
        while line.text_at() in FLAGS:
            flag = line.take().text
            if flag == "shared":
                shared = True
            else:
                commutative = flag == "commutative"
        rules: list[AttrRule] = []
        if line.accept("where"):
            rules.append(self._rule(line))
            while line.accept(","):
                rules.append(self._rule(line))
        if not line.done():
            raise line.error("expected 'where', a flag or end of line")
        if ops is not None and all(o in VARIADIC_OPS for o in ops) and not variadic and not args:
            variadic = True
        node = Op(label, ops, tuple(args), domain, tuple(rules), optional, commutative, variadic, shared)
        for a in args:
            self.used.add(id(a.expr))
        self._define(scope, label, node, line, label_tok)
        return node

    def _ops(self, line: _Line) -> tuple[tuple[str, ...] | None, str]:
        if line.accept("*"):
            return None, ""
        names = [line.name("an op type or '*'")]
        domain = ""
        while line.accept("|"):
            names.append(line.name("an op type after '|'"))
        if line.accept("@"):
            parts = [line.name("a domain after '@'")]
            while line.accept("."):
                parts.append(line.name("a domain part"))
            domain = ".".join(parts)
        return tuple(names), domain

    def _args(self, line: _Line, scope: _Scope) -> tuple[list[Arg], bool]:
        args: list[Arg] = []
        if line.at(")"):
            return args, False
        while True:
            if line.accept("..."):
                return args, True
            args.append(self._arg(line, scope, len(args)))
            if not line.accept(","):
                return args, False

    def _arg(self, line: _Line, scope: _Scope, index: int) -> Arg:
        tok = line.name_token("an input: a label, a new value or '...'")
        label = tok.text
        output = 0
        if line.at(".") and line.kind_at(1) == "number":
            line.take()
            output = int(line.take().text)
        optional = line.accept("?")
        if line.accept(":"):
            spec = self._value_spec(line)
            if label == "_":
                return Arg(Value(f"_{id(spec)}_{index}", spec), 0, optional)
            if scope.get(label) is not None:
                raise PatternSyntaxError(f"label '{label}' is already defined", line.number, tok.col, self.source)
            value = Value(label, spec)
            self._define(scope, label, value, line, tok)
            return Arg(value, 0, optional)
        if label == "_":
            return Arg(Value(f"_{line.number}_{index}_{tok.col}"), 0, optional)
        found = scope.get(label)
        if found is None:
            found = Value(label)
            self._define(scope, label, found, line, tok)
        elif output and isinstance(found, Value):
            raise PatternSyntaxError(f"'{label}' is a value and has no output {output}",
                                     line.number, tok.col, self.source)
        return Arg(found, output, optional)

    def _value_spec(self, line: _Line) -> ValueSpec:
        kind = line.name("'any' or 'const'")
        if kind not in ("any", "const"):
            raise PatternSyntaxError(f"expected 'any' or 'const' but found {kind!r}", line.number,
                                     line.toks[line.i - 1].col, self.source)
        spec: dict[str, Any] = {"constant": kind == "const"}
        while True:
            tok = line.peek()
            if tok is None or tok.text in (",", ")"):
                break
            if tok.text in DTYPES:
                spec["dtype"] = line.take().text
            elif tok.text == "rank":
                line.take()
                line.expect("=")
                spec["rank"] = self._int(line)
            elif tok.text == "shape":
                line.take()
                line.expect("=")
                line.expect("[", "'['")
                dims: list[int | None] = []
                if not line.at("]"):
                    while True:
                        dims.append(None if line.accept("?") else self._int(line))
                        if not line.accept(","):
                            break
                line.expect("]", "']'")
                spec["shape"] = tuple(dims)
            elif tok.text == "~":
                line.take()
                spec["approx"] = self._number(line)
            elif tok.text in ("scalar", "per_channel"):
                spec[line.take().text] = True
            elif tok.text == "range":
                line.take()
                line.expect("=")
                line.expect("[", "'['")
                low = None if line.accept("?") else float(self._number(line))
                line.expect(",", "','")
                high = None if line.accept("?") else float(self._number(line))
                line.expect("]", "']'")
                spec["range"] = (low, high)
            else:
                raise line.error("expected a value constraint (a dtype, rank=, "
                                 "shape=, scalar, ~N, per_channel, range=)")
        return ValueSpec(**spec)

    def _rule(self, line: _Line) -> AttrRule:
        name = line.name("an attribute name")
        if line.accept("absent"):
            return AttrRule(name, "absent")
        if line.accept("="):
            return AttrRule(name, "eq", (self._literal(line),))
        if line.accept("!="):
            return AttrRule(name, "ne", (self._literal(line),))
        if line.accept("~"):
            return AttrRule(name, "approx", (self._number(line),))
        if line.accept("in"):
            line.expect("[", "'['")
            values = [self._literal(line, allow_absent=True)]
            while line.accept(","):
                values.append(self._literal(line, allow_absent=True))
            line.expect("]", "']' or ','")
            return AttrRule(name, "in", tuple(values))
        raise line.error("expected '=', '!=', 'in', '~' or 'absent'")

    def _literal(self, line: _Line, allow_absent: bool = False) -> Any:
        tok = line.peek()
        if tok is None:
            raise line.error("expected a value")
        if tok.text == "absent" and allow_absent:
            line.take()
            return ABSENT
        if tok.kind == "number":
            return self._number(line)
        if tok.kind == "string":
            return line.take().text[1:-1]
        if tok.text == "[":
            line.take()
            items: list[Any] = []
            if not line.at("]"):
                items.append(self._literal(line))
                while line.accept(","):
                    items.append(self._literal(line))
            line.expect("]", "']' or ','")
            return items
        raise line.error("expected a number, a string or a list")

    def _number(self, line: _Line) -> int | float:
        tok = line.peek()
        if tok is None or tok.kind != "number":
            raise line.error("expected a number")
        line.take()
        text = tok.text
        return float(text) if any(c in text for c in ".eE") else int(text)

    def _int(self, line: _Line) -> int:
        tok = line.peek()
        value = self._number(line)
        if not isinstance(value, int):
            raise PatternSyntaxError("expected a whole number", line.number, tok.col if tok else 1, self.source)
        return value


def _strip_comment(line: str) -> str:
    out, in_string = [], False
    for ch in line:
        if ch == '"':
            in_string = not in_string
        if ch == "#" and not in_string:
            break
        out.append(ch)
    return "".join(out)


from graphlens.patterns.printer import format_pattern  # noqa: E402  (the way back, for callers of this module)

__all__ = ["PatternSyntaxError", "format_pattern", "parse_pattern"]
