"""Where a rule could have applied and did not, each with why: the fold report's "left" list.

A rule names the ops that mark its sites (:attr:`Rule.anchor_ops`: Softmax for attention,
LayerNormalization for the skip norms). After a fold, such a node still in the model is a site
left when the rule refused a match there, or when it looks like one of the rule's sites
(:meth:`Rule.is_site`: a Softmax over Q·Kᵀ, not over a classifier's logits; a SiLU of a projection,
not the Swish after a Conv). Its reason is the rule's own refusal, else explain's account of the
closest attempt of the rule's patterns at that node: the partial match and the node or edge where
it failed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.rewrites.rule import Refusal, Rule


@dataclass(frozen=True)
class SiteLeft:
    """One site a rule left: the anchor node, its graph, and the one-sentence reason."""

    kind: str
    rule: str
    node: str
    graph: str
    reason: str
    failed_node: str | None = None
    """The node where the attempt failed (explain's), when the reason comes from explain."""
    pattern: str = ""
    """The pattern that explains the site on the graph (*Why not here?*): the refused match's, or explain's
    closest attempt's."""

    def to_json(self) -> dict[str, Any]:
        data = {"kind": self.kind, "rule": self.rule, "node": self.node, "graph": self.graph, "reason": self.reason}
        if self.failed_node is not None:
            data["failed_node"] = self.failed_node
        return data

    def line(self) -> str:
        where = "" if self.graph == "main" else f" [{self.graph}]"
        return f"{self.kind} left at '{self.node}'{where}: {self.reason}"


def sites_left(model: Model, rules: list[Rule], refused: list[Refusal]) -> list[SiteLeft]:
    """Every anchor node of ``rules`` still in ``model``, with the refusal or explain's reason."""
    by_rule_node: dict[tuple[str, str, str], Refusal] = {}
    for refusal in refused:
        for name in refusal.nodes.values():
            by_rule_node.setdefault((refusal.rule, refusal.graph, name), refusal)
    left: list[SiteLeft] = []
    seen: set[tuple[str, str]] = set()
    for rule in rules:
        if not rule.anchor_ops:
            continue
        kind = rule.kind or rule.name
        for graph in model.graphs():
            for node in graph.nodes:
                if node.op_type not in rule.anchor_ops or (kind, node.name) in seen:
                    continue
                seen.add((kind, node.name))
                found = by_rule_node.get((rule.name, graph.path, node.name))
                if found is not None:
                    pattern = found.pattern or _first_pattern(rule)
                    left.append(SiteLeft(kind, rule.name, node.name, graph.path, found.reason, pattern=pattern))
                elif rule.is_site(graph, node):
                    left.append(_explained(kind, rule, graph, node))
    left.extend(_refused_without_anchor(model, rules, refused, left))
    return left


def _refused_without_anchor(model: Model, rules: list[Rule], refused: list[Refusal],
                            listed: list[SiteLeft]) -> list[SiteLeft]:
    """Refused matches of a rule that reports its sites (one with a kind or anchor ops), with no anchor op of any rule
    in them (a residual Add and a layer norm in pieces, an RMS norm on a rank-4 tensor; a Tanh is fuse-fast-gelu's to
    report), and still in the model: each a site left at the match's ``out`` node. Nothing a rule refused is silent."""
    by_name = {rule.name: rule for rule in rules if rule.anchor_ops or rule.kind}
    from graphlens.rewrites.rules import RULES  # the rules import this module's package

    anchors = {op for rule in RULES.values() for op in rule.anchor_ops}
    taken = {(site.graph, site.node) for site in listed}
    left = []
    for refusal in refused:
        rule = by_name.get(refusal.rule)
        names = list(refusal.nodes.values())
        if rule is None or not names:
            continue
        graph = model.graph_at(refusal.graph)
        out = refusal.nodes.get("out", names[-1])
        present = [name for name in names if name in graph.by_name]  # a skipped optional node names no node
        if out not in graph.by_name or any((refusal.graph, name) in taken or graph.by_name[name].op_type in anchors
                                           for name in present):
            continue  # rewritten since by another rule, already a site left, or an anchor's site
        taken.update((refusal.graph, name) for name in names)
        left.append(SiteLeft(rule.kind or rule.name, rule.name, out, refusal.graph, refusal.reason,
                             pattern=refusal.pattern or _first_pattern(rule)))
    return left


def _explained(kind: str, rule: Rule, graph: Graph, node: Node) -> SiteLeft:
    """Explain's best attempt over the rule's patterns at ``node`` (the one that placed the most nodes)."""
    from graphlens.matching.explain import Explanation, explain  # only when a site is left

    best: Explanation | None = None
    for pattern in rule.patterns():
        result = explain(pattern, graph, at=node.name)
        if isinstance(result, Explanation) and (
            best is None or (len(result.mapping), result.score) > (len(best.mapping), best.score)
        ):
            best = result
    if best is None:
        return SiteLeft(kind, rule.name, node.name, graph.path,
                        f"no pattern of {rule.name} could start at {node.label}", pattern=_first_pattern(rule))
    reason = best.message
    if best.matched:
        reason = f"the {best.pattern} pattern matches here, but the match was not rewritten: {reason}"
    return SiteLeft(kind, rule.name, node.name, graph.path, reason,
                    failed_node=best.failure.node if best.failure is not None else None, pattern=best.pattern)


def _first_pattern(rule: Rule) -> str:
    return rule.pattern_names[0] if rule.pattern_names else ""
