"""Dims that exporters write as expressions of other dims: ``s16 + s62``, ``2*s``, ``(a + 1)*2``.

A decoder with a KV cache takes ``input_ids [s34, s16]``, ``attention_mask [s34, "s16 + s62"]``
and past keys ``[s34, 32, s62, 80]``: the mask's length is the new tokens plus the past ones. Each
such name is parsed into a linear form ``c + Σ kᵢ·nameᵢ`` (sums, differences, products with a whole
number, parentheses; names are identifiers, dots allowed), so its size is computed from the other
dims instead of being chosen on its own. A name that does not parse (``floor(s/2)``, a product of
two names) stays an opaque dim name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_TOKEN = re.compile(r"\s*(?:(?P<int>\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_.]*)|(?P<op>[-+*()]))")
_OPERATOR = re.compile(r"[-+*()]")


@dataclass(frozen=True)
class DimExpression:
    """``constant + Σ coefficient·name``, as written in a model's ``dim_param``."""

    text: str
    terms: tuple[tuple[str, int], ...]
    """(name, coefficient) in first-seen order, no zero coefficients."""
    constant: int = 0

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.terms)

    def value(self, sizes: dict[str, int]) -> int:
        """The size for ``sizes`` of every name in it."""
        return self.constant + sum(k * sizes[name] for name, k in self.terms)

    def solve(self, name: str, target: int, sizes: dict[str, int]) -> int | None:
        """The size of ``name`` that makes the expression equal ``target``, the other names at ``sizes``;
        None when no whole size of 1 or more does."""
        k = dict(self.terms)[name]
        rest = self.constant + sum(c * sizes[n] for n, c in self.terms if n != name)
        size, remainder = divmod(target - rest, k)
        return size if remainder == 0 and size >= 1 else None


def parse_dim_expression(text: str) -> DimExpression | None:
    """The linear form of a dim name that is an expression; None for a plain name or one that does not parse."""
    if not isinstance(text, str) or not _OPERATOR.search(text):
        return None
    tokens = _tokens(text)
    if tokens is None:
        return None
    try:
        parsed, at = _sum(tokens, 0)
    except (IndexError, ValueError):
        return None
    if at != len(tokens):
        return None
    constant = parsed.pop("", 0)
    terms = tuple((name, k) for name, k in parsed.items() if k)
    return DimExpression(text, terms, constant) if terms else None


_Linear = dict[str, int]  # name -> coefficient; "" holds the constant


def _tokens(text: str) -> list[tuple[str, str]] | None:
    tokens, at, text = [], 0, text.rstrip()
    while at < len(text):
        found = _TOKEN.match(text, at)
        if found is None:
            return None
        kind = found.lastgroup or ""
        tokens.append((kind, found[kind]))
        at = found.end()
    return tokens


def _sum(tokens: list[tuple[str, str]], at: int) -> tuple[_Linear, int]:
    total, at = _product(tokens, at)
    while at < len(tokens) and tokens[at] in (("op", "+"), ("op", "-")):
        sign = 1 if tokens[at][1] == "+" else -1
        term, at = _product(tokens, at + 1)
        for name, k in term.items():
            total[name] = total.get(name, 0) + sign * k
    return total, at


def _product(tokens: list[tuple[str, str]], at: int) -> tuple[_Linear, int]:
    result, at = _factor(tokens, at)
    while at < len(tokens) and tokens[at] == ("op", "*"):
        other, at = _factor(tokens, at + 1)
        if set(result) <= {""}:
            result, other = other, result
        if not set(other) <= {""}:
            raise ValueError("a product of two names is not linear")
        scale = other.get("", 0)
        result = {name: k * scale for name, k in result.items()}
    return result, at


def _factor(tokens: list[tuple[str, str]], at: int) -> tuple[_Linear, int]:
    kind, text = tokens[at]
    if kind == "int":
        return {"": int(text)}, at + 1
    if kind == "name":
        return {text: 1}, at + 1
    if (kind, text) == ("op", "-"):
        inner, at = _factor(tokens, at + 1)
        return {name: -k for name, k in inner.items()}, at
    if (kind, text) == ("op", "("):
        inner, at = _sum(tokens, at + 1)
        if at >= len(tokens) or tokens[at] != ("op", ")"):
            raise ValueError("unbalanced parentheses")
        return inner, at + 1
    raise ValueError(f"unexpected '{text}'")
