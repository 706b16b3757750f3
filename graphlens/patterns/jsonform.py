"""Patterns as JSON, for saving and for other tools.

The JSON lists every expression once, inputs before users, and refers to them by index, so a
value used twice stays one value. Python-only predicates cannot be saved.
"""

from __future__ import annotations

import json
from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.patterns.ir import ABSENT, Arg, AttrRule, Expr, OneOf, Op, Pattern, Value, ValueSpec

FORMAT = "graphlens-pattern"
VERSION = 1


def pattern_to_json(pattern: Pattern) -> dict[str, Any]:
    exprs = pattern.exprs()
    index = {id(e): i for i, e in enumerate(exprs)}
    items: list[dict[str, Any]] = []
    for e in exprs:
        if isinstance(e, Value):
            if e.spec.predicate is not None:
                raise GraphLensError(f"value '{e.label}' has a Python predicate, which JSON cannot hold")
            spec = {k: v for k, v in vars(e.spec).items()
                    if k not in ("predicate", "predicate_name") and v is not None and v is not False}
            for key in ("shape", "range"):
                if key in spec:
                    spec[key] = list(spec[key])
            items.append({"kind": "value", "label": e.label, "spec": spec})
        elif isinstance(e, Op):
            items.append(
                {
                    "kind": "op",
                    "label": e.label,
                    "ops": None if e.ops is None else list(e.ops),
                    "domain": e.domain,
                    "inputs": [
                        {"ref": index[id(a.expr)], "output": a.output, "optional": a.optional} for a in e.inputs
                    ],
                    "attrs": [_rule_json(r) for r in e.attrs],
                    "optional": e.optional,
                    "commutative": e.commutative,
                    "variadic": e.variadic,
                    "shared": e.shared,
                }
            )
        else:
            assert isinstance(e, OneOf)
            items.append({"kind": "one_of", "alternatives": [index[id(a)] for a in e.alternatives]})
    return {
        "format": FORMAT,
        "version": VERSION,
        "name": pattern.name,
        "description": pattern.description,
        "verb": pattern.verb,
        "allow_shared": pattern.allow_shared,
        "anchors": list(pattern.anchors),
        "exprs": items,
        "outputs": [index[id(o)] for o in pattern.outputs],
    }


def _rule_json(rule: AttrRule) -> dict[str, Any]:
    if rule.kind == "pred":
        raise GraphLensError(f"attribute rule on '{rule.name}' is a Python predicate, which JSON cannot hold")
    return {"name": rule.name, "kind": rule.kind,
            "values": [{"absent": True} if v is ABSENT else v for v in rule.values]}


def pattern_from_json(data: dict[str, Any]) -> Pattern:
    """Build a pattern from :func:`pattern_to_json` output; malformed JSON gives one clear error."""
    try:
        if data.get("format") != FORMAT:
            raise GraphLensError(f"not a GraphLens pattern (format is {data.get('format')!r}, expected {FORMAT!r})")
        built: list[Expr] = []
        for i, item in enumerate(data["exprs"]):
            kind = item["kind"]
            if kind == "value":
                spec = dict(item.get("spec", {}))
                for key in ("shape", "range"):
                    if key in spec:
                        spec[key] = tuple(spec[key])
                built.append(Value(item["label"], ValueSpec(**spec)))
            elif kind == "op":
                inputs = tuple(Arg(_ref(built, a["ref"], i), a.get("output", 0), a.get("optional", False))
                               for a in item["inputs"])
                rules = tuple(
                    AttrRule(r["name"], r["kind"],
                             tuple(ABSENT if isinstance(v, dict) and v.get("absent") else v for v in r["values"]))
                    for r in item.get("attrs", [])
                )
                ops = item["ops"]
                built.append(
                    Op(
                        item["label"], None if ops is None else tuple(ops), inputs, item.get("domain", ""), rules,
                        item.get("optional", False), item.get("commutative"), item.get("variadic", False),
                        item.get("shared", False),
                    )
                )
            elif kind == "one_of":
                built.append(OneOf(tuple(_ref(built, j, i) for j in item["alternatives"])))
            else:
                raise GraphLensError(f"pattern JSON: expression {i} has unknown kind {kind!r}")
        outputs = tuple(_ref(built, j, len(built)) for j in data["outputs"])
        return Pattern(data.get("name", "custom"), outputs, data.get("description", ""),
                       data.get("allow_shared", False), data.get("verb", "rewriting"), tuple(data.get("anchors", ())))
    except (KeyError, TypeError, IndexError) as exc:
        raise GraphLensError(f"pattern JSON is malformed ({type(exc).__name__}: {exc})") from exc


def _ref(built: list[Expr], j: int, at: int) -> Expr:
    if not 0 <= j < min(at, len(built)):
        raise GraphLensError(f"pattern JSON: expression {at} refers to {j}, which is not defined before it")
    return built[j]


def dumps(pattern: Pattern) -> str:
    return json.dumps(pattern_to_json(pattern), indent=2)


def loads(text: str) -> Pattern:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise GraphLensError(f"pattern JSON does not parse: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    return pattern_from_json(data)
