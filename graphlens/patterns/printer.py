"""Printing patterns in the text syntax that :mod:`graphlens.patterns.syntax` parses.

The printed text is canonical: parsing it gives back the same pattern, and printing that gives
the same text. Values used by one node print inline; values used by several are declared first.
"""

from __future__ import annotations

from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.patterns.ir import ABSENT, COMMUTATIVE_OPS, VARIADIC_OPS, AttrRule, OneOf, Op, Pattern, Value, ValueSpec


def format_pattern(pattern: Pattern) -> str:
    """The canonical text of a pattern; parsing it gives back the same pattern.

    Python-only predicates have no text form and raise :class:`GraphLensError`.
    """
    uses: dict[int, int] = {}
    for e in pattern.exprs():
        if isinstance(e, Op):
            for a in e.inputs:
                uses[id(a.expr)] = uses.get(id(a.expr), 0) + 1
    lines: list[str] = []
    if pattern.name or pattern.description:
        lines.append(f"pattern {pattern.name}" + (f": {pattern.description}" if pattern.description else ""))
    if pattern.verb != "rewriting":
        lines.append(f"verb {pattern.verb}")
    if pattern.anchors:
        lines.append("anchor " + " ".join(pattern.anchors))
    if pattern.allow_shared:
        lines.append("allow shared")
    printed: set[int] = set()
    declared: set[str] = set()
    for e in pattern.exprs():  # values used more than once are declared up front
        if isinstance(e, Value) and uses.get(id(e), 0) > 1 and e.label not in declared:
            lines.append(f"{e.label}: {_spec_text(e.spec)}")
            declared.add(e.label)
            printed.add(id(e))
    homes = _homes(pattern)
    order = pattern.exprs()

    def emit(scope: tuple[tuple[int, int], ...], indent: str) -> None:
        for e in order:
            if isinstance(e, Value) or id(e) in printed or homes[id(e)] != scope:
                continue  # values print inline at their use; other scopes' nodes print there
            printed.add(id(e))
            if isinstance(e, OneOf):
                lines.append(indent + "either")
                for k in range(len(e.alternatives)):
                    if k:
                        lines.append(indent + "or")
                    emit(scope + ((id(e), k),), indent + "  ")
                lines.append(indent + "end")
            else:
                assert isinstance(e, Op)
                lines.append(indent + _op_text(e, printed, declared))

    emit((), "")
    return "\n".join(lines) + "\n"


def _homes(pattern: Pattern) -> dict[int, tuple[tuple[int, int], ...]]:
    """Where each expression is printed: the innermost either-branch every use of it lies in.

    A node used by two branches of one choice goes outside it, since a label defined in a branch is
    seen only there; nested choices give nested branches.
    """
    homes: dict[int, tuple[tuple[int, int], ...]] = {}
    uses: dict[int, list[tuple[tuple[int, int], ...]]] = {id(o): [()] for o in pattern.outputs}
    for e in reversed(pattern.exprs()):  # users before what they use
        paths = uses.get(id(e), [()])
        home = paths[0]
        for path in paths[1:]:
            common = 0
            while common < min(len(home), len(path)) and home[common] == path[common]:
                common += 1
            home = home[:common]
        homes[id(e)] = home
        if isinstance(e, Op):
            for a in e.inputs:
                uses.setdefault(id(a.expr), []).append(home)
        elif isinstance(e, OneOf):
            for k, alt in enumerate(e.alternatives):
                uses.setdefault(id(alt), []).append(home + ((id(e), k),))
    return homes


def _op_text(node: Op, printed: set[int], declared: set[str]) -> str:
    args = []
    for a in node.inputs:
        e = a.expr
        if isinstance(e, Value) and id(e) not in printed:
            printed.add(id(e))
            anonymous = e.label.startswith("_")
            name = "_" if anonymous else e.label
            spec = ("" if (e.spec == ValueSpec() and not anonymous) or (anonymous and e.spec == ValueSpec())
                    else f": {_spec_text(e.spec)}")
            text = name + ("?" if a.optional else "") + spec
        else:
            text = e.label + (f".{a.output}" if a.output else "") + ("?" if a.optional else "")
        args.append(text)
    if node.variadic and not (node.ops and all(o in VARIADIC_OPS for o in node.ops) and not node.inputs):
        args.append("...")
    head = f"{node.label}{'?' if node.optional else ''} = {node.op_text}({', '.join(args)})"
    flags = []
    if node.commutative is not None and node.commutative != (
        node.ops is not None and all(o in COMMUTATIVE_OPS for o in node.ops)
    ):
        flags.append("commutative" if node.commutative else "ordered")
    if node.shared:
        flags.append("shared")
    if flags:
        head += " " + " ".join(flags)
    if node.attrs:
        head += " where " + ", ".join(_rule_text(r) for r in node.attrs)
    return head


def _spec_text(spec: ValueSpec) -> str:
    if spec.predicate is not None:
        raise GraphLensError(f"a value predicate ({spec.predicate_name or 'Python function'}) has no text form")
    parts = ["const" if spec.constant else "any"]
    if spec.dtype:
        parts.append(spec.dtype)
    if spec.rank is not None:
        parts.append(f"rank={spec.rank}")
    if spec.shape is not None:
        parts.append("shape=[" + ", ".join("?" if d is None else str(d) for d in spec.shape) + "]")
    if spec.scalar:
        parts.append("scalar")
    if spec.approx is not None:
        parts.append(f"~{spec.approx!r}")
    if spec.per_channel:
        parts.append("per_channel")
    if spec.range is not None:
        parts.append("range=[" + ", ".join("?" if b is None else repr(b) for b in spec.range) + "]")
    return " ".join(parts)


def _rule_text(rule: AttrRule) -> str:
    if rule.kind == "pred":
        raise GraphLensError(f"attribute predicate on '{rule.name}' ({rule.func_name}) has no text form")
    if rule.kind == "absent":
        return f"{rule.name} absent"
    if rule.kind == "in":
        return f"{rule.name} in [" + ", ".join("absent" if v is ABSENT else _literal_text(v) for v in rule.values) + "]"
    symbol = {"eq": "=", "ne": "!=", "approx": "~"}[rule.kind]
    return f"{rule.name} {symbol} {_literal_text(rule.values[0])}"


def _literal_text(v: Any) -> str:
    if isinstance(v, str):
        return f'"{v}"'
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_literal_text(x) for x in v) + "]"
    return repr(v)
