"""Applying rules until none applies, then tidying up: what ``graphlens fold`` runs.

Identity nodes and Casts to the type their input has are bypassed first, so that none splits a pattern.
Each round matches every rule's patterns (non-overlapping), checks each match, plans the ones
that pass and applies them together; rounds repeat until a round changes nothing (a fused
decomposed BN can then fold into its conv, and so on). Then each rule's final whole-model edits run
(a tidy-up of what fusions left), ``Identity`` nodes and Casts to the type their input has are bypassed, dead nodes and
unused initializers removed. The whole run is one undo step. Every
BatchNormalization left in place is reported with the reason: the rule's refusal, or explain's.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.model import Model
from graphlens.core.task import Task, task_or_idle
from graphlens.matching.matcher import Matcher
from graphlens.patterns.library import get_pattern
from graphlens.rewrites.edit import EditHistory, GraphEdit
from graphlens.rewrites.layers import LayerCounts, layer_of
from graphlens.rewrites.rule import Refusal, passes_through
from graphlens.rewrites.rules import DEFAULT_RULES, RULE_SETS, RULES, Rule
from graphlens.rewrites.rules.naming import distinct_node_names
from graphlens.rewrites.sites_left import SiteLeft, sites_left

MAX_ROUNDS = 10


NOT_RUN = "fold-bn was not among the rules run"
"""How the reason of a BatchNormalization that fold-bn would take starts when fold-bn was not run: true of the run,
not of the model, so the report's lines leave it out (its JSON keeps it)."""

BN_RULES = ("fold-bn", "bn-to-affine")
"""The rules that take BatchNormalization nodes: the report's lines say why each BN stayed only when one of them ran
(a transformer fusion run on a CNN says nothing about its BNs)."""

_WENT = {"fold-constants": "folded into initializers", "tidy": "tidied away"}
"""What the nodes a whole-model rule removes became, in the headline's words."""


@dataclass
class FoldReport:
    applied: Counter[str] = field(default_factory=Counter)
    refused: list[Refusal] = field(default_factory=list)
    bn_left: list[dict[str, Any]] = field(default_factory=list)
    fused: Counter[str] = field(default_factory=Counter)
    """Kind (attention, rms-norm, …) -> sites rewritten, for rules that name their kind."""
    left: list[SiteLeft] = field(default_factory=list)
    """Each site of a rule with anchor ops that is still there, and why."""
    cleanup: Counter[str] = field(default_factory=Counter)
    rounds: int = 0
    edits: list[GraphEdit] = field(default_factory=list)
    nodes_before: int = 0
    nodes_after: int = 0
    families: dict[str, str] = field(default_factory=dict)
    """Rule -> the family of sites it looks for (attention, GELU, …), for each rule run that has one."""
    rules: list[str] = field(default_factory=list)
    """The rules run, in order."""
    layers: LayerCounts = field(default_factory=LayerCounts)
    """Per kind, the layers where sites were fused and left."""
    already: dict[str, int] = field(default_factory=dict)
    """Family -> nodes the model had of its fused ops before the run (an exporter that fuses itself)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "applied": dict(self.applied),
            "refused": [r.to_json() for r in self.refused],
            "batchnorm_left": self.bn_left,
            "cleanup": dict(self.cleanup),
            "rounds": self.rounds,
            "fused": dict(self.fused),
            "left": [site.to_json() for site in self.left],
            "nodes": {"before": self.nodes_before, "after": self.nodes_after},
            "not_found": self.not_found(),
            "by_layer": self.layers.to_json(),
            "already_fused": dict(self.already),
        }

    def lines(self) -> list[str]:
        """The report as ``graphlens fold`` prints it: the headline, what the rules did, per kind the sites fused
        and left, the families of sites none of which is in the model (one line), then each site left with why."""
        headline = self.headline()
        out = [headline] if headline is not None else []
        out.extend(self.done_lines())
        out.extend(f"{kind}: {fused} fused, {left} left" for kind, fused, left in self.kind_counts())
        out.extend(self.layers.lines())
        missing = self.not_found_line()
        if missing is not None:
            out.append(missing)
        if self.already:
            out.append(self.already_line())
        out.extend(site.line() for site in self.left)
        for left in self.bn_left if any(rule in self.rules for rule in BN_RULES) else ():
            if left["reason"].startswith(NOT_RUN):
                continue
            where = "" if left["graph"] == "main" else f" [{left['graph']}]"
            out.append(f"BatchNormalization '{left['node']}' left in place{where}: {left['reason']}")
        return out

    def headline(self) -> str | None:
        """``Transformer fusions: 860 → 422 nodes (438 folded into initializers); no site fused, 2 left``: the nodes
        before and after, where the difference went, the sites; None when no rule run looks for sites of a family."""
        if not self.families:
            return None
        went = ", ".join(self._where_nodes_went())
        fused, left = sum(self.fused.values()), len(self.left)
        sites = (f"{fused:,} site{'s' if fused != 1 else ''} fused" if fused else "no site fused") + (
            f", {left:,} left" if left else ", none left")
        return (f"Transformer fusions: {self.nodes_before:,} → {self.nodes_after:,} nodes"
                + (f" ({went})" if went else "") + f"; {sites}")

    def _where_nodes_went(self) -> list[str]:
        net: Counter[str] = Counter()
        for edit in self.edits:
            cause = "merged into fused ops" if edit.rule in self.families else _WENT.get(edit.rule, edit.rule)
            net[cause] += len(edit.remove) - len(edit.add)
        net["no longer read"] += self.cleanup["identity nodes bypassed"] + self.cleanup["dead nodes removed"]
        parts = []
        for cause, count in net.items():
            worded = cause in _WENT.values() or cause in ("merged into fused ops", "no longer read")
            if count > 0:
                parts.append(f"{count:,} {cause}" if worded else f"{count:,} removed by {cause}")
            elif count < 0:
                parts.append(f"{-count:,} added by {cause}")
        return parts

    def done_lines(self) -> list[str]:
        """What the rules did: whole-model rules in their own words (fold-constants: what it stored), the others'
        count of rewrites, unless the per-kind lines count them; the cleanup."""
        summaries = [(edit.rule, edit.description) for edit in self.edits
                     if edit.kind and not edit.site and edit.description]
        worded = {rule for rule, _ in summaries}
        out = [f"{rule}: applied {count} time{'s' if count != 1 else ''}" for rule, count in self.applied.items()
               if rule not in worded and rule not in self.families]
        out.extend(f"{rule}: {text}" for rule, text in summaries)
        if not self.applied and not self.families:
            out.append("no rule applied")
        if self.cleanup:
            out.append("cleanup: " + ", ".join(f"{n} {what}" for what, n in self.cleanup.items()))
        return out

    def kind_counts(self) -> list[tuple[str, int, int]]:
        """(kind, sites fused, sites left) for each kind with either."""
        kinds = sorted(set(self.fused) | {site.kind for site in self.left})
        return [(kind, self.fused[kind], sum(1 for site in self.left if site.kind == kind)) for kind in kinds]

    def not_found(self) -> list[str]:
        """The families of sites the rules looked for and found none of: nothing fused, refused or left."""
        seen = set(self.applied) | {site.rule for site in self.left} | {refusal.rule for refusal in self.refused}
        found = {family for rule, family in self.families.items() if rule in seen} | set(self.already)
        return [family for family in dict.fromkeys(self.families.values()) if family not in found]

    def already_line(self) -> str:
        """``Fused by the exporter already: attention ×32, skip norm ×64``; "" when the model had none."""
        if not self.already:
            return ""
        return "Fused by the exporter already: " + ", ".join(f"{f} ×{n}" for f, n in self.already.items())

    def not_found_line(self) -> str | None:
        """``No rotary embedding, GELU or attention found in this model``: once, for every family."""
        missing = self.not_found()
        if not missing:
            return None
        listed = missing[0] if len(missing) == 1 else f"{', '.join(missing[:-1])} or {missing[-1]}"
        return f"No {listed} found in this model"


def resolve_rules(names: list[str] | None) -> list[Rule]:
    """Rules by name (or a set's name, e.g. ``transformers``), in the driver's order; None gives the default ones."""
    if names is None:
        return [RULES[n] for n in DEFAULT_RULES]
    unknown = [n for n in names if n not in RULES and n not in RULE_SETS]
    if unknown:
        known = ", ".join([*RULES, *RULE_SETS])
        raise GraphLensError(f"unknown rule '{unknown[0]}'; rules: {known}")
    wanted = {rule for name in names for rule in RULE_SETS.get(name, (name,))}
    ordered = [name for name in RULES if name in wanted and not any(name in members for members in RULE_SETS.values())]
    for members in RULE_SETS.values():  # a set runs in its own order, after the single rules
        ordered.extend(m for m in members if m in wanted and m not in ordered)
    return [RULES[name] for name in ordered]


def fold_model(
    model: Model,
    rules: list[Rule] | None = None,
    session: EditHistory | None = None,
    *,
    task: Task | None = None,
) -> FoldReport:
    """Apply ``rules`` (default: the default rules) to a fixpoint, then clean up; one undo step. Cancelling ``task``
    stops it between two searches with :class:`~graphlens.core.task.Cancelled`, the model as it was."""
    rules = resolve_rules(None) if rules is None else rules
    session = session or EditHistory(model)
    task = task_or_idle(task)
    report = FoldReport(nodes_before=model.node_count(), families={r.name: r.family for r in rules if r.family},
                        rules=[rule.name for rule in rules])
    refusals: dict[tuple[str, str, frozenset[str]], Refusal] = {}
    for rule in rules:
        count = sum(rule.already_fused(graph) for graph in model.graphs()) if rule.family else 0
        if count:
            report.already[rule.family] = max(report.already.get(rule.family, 0), count)
    with session.all_or_nothing("fold"):  # a cancel or a failure leaves the model as it was
        for rule in rules:
            _apply_whole(session, report, rule.name, rule.model_edits(model))
        if any(node.op_type in ("Cast", "CastLike") for node in model.graph.nodes):
            model.infer_shapes()  # a Cast is a no-op only where its input's type is known
        early = cleanup_edits(model, report.cleanup)  # a no-op Cast (T5's before its Softmax) splits no pattern
        if early:
            session.apply(early)
        for round_index in range(1, MAX_ROUNDS + 1):
            report.rounds = round_index
            changed = False
            present = {node.op_type for graph in model.graphs() for node in graph.nodes}
            for rule in rules:
                for pattern in rule.patterns():
                    if not all(present.intersection(ops) for ops in pattern.required_ops()):
                        continue  # an op every match needs is not in the model: nothing to compile or match
                    task.check("the fold")
                    edits = []
                    for match in Matcher(pattern).find(model, non_overlapping=True, task=task.quiet()):
                        planned = rule.plan(match)
                        if isinstance(planned, Refusal):
                            refusals[(planned.rule, planned.graph, frozenset(planned.nodes.values()))] = planned
                            continue
                        edits.append(planned)
                    for edit in edits:
                        if edit.kind and edit.site:
                            layer = layer_of(model.graph_at(edit.graph), edit.site.values())
                            report.layers.add(edit.kind, layer, fused=True)
                    if edits:
                        distinct_node_names({e.graph: model.graph_at(e.graph) for e in edits},
                                            [(e.graph, e.add) for e in edits])
                        session.apply(edits)
                        report.applied[rule.name] += len(edits)
                        report.edits.extend(edits)
                        changed = True
                        present = {node.op_type for graph in model.graphs() for node in graph.nodes}
            if not changed:
                break
        for rule in rules:
            _apply_whole(session, report, rule.name, rule.final_edits(model))
        tidy = cleanup_edits(model, report.cleanup)
        if tidy:
            session.apply(tidy)
    report.refused = list(refusals.values())
    report.bn_left = _batchnorms_left(model, report.refused, {rule.name for rule in rules})
    # sites, not whole-model edits
    report.fused = Counter(edit.kind for edit in report.edits if edit.kind and edit.site)
    report.left = sites_left(model, rules, report.refused)
    for site in report.left:
        report.layers.add(site.kind, layer_of(model.graph_at(site.graph), [site.node]), fused=False)
    report.nodes_after = model.node_count()
    return report


def _apply_whole(session: EditHistory, report: FoldReport, rule: str, edits: list[GraphEdit]) -> None:
    """A rule's whole-model edits (before matching, or once no rule applies), counted in the report."""
    if edits:
        session.apply(edits)
        report.applied[rule] += len(edits)
        report.edits.extend(edits)


def cleanup_edits(model: Model, counts: Counter[str]) -> list[GraphEdit]:
    """Bypass pass-through Identity nodes, drop dead nodes and unused initializers, per graph."""
    edits = []
    for graph in model.graphs():
        edit = _cleanup(graph, counts)
        if edit is not None:
            edits.append(edit)
    return edits


def _cleanup(graph: Graph, counts: Counter[str]) -> GraphEdit | None:
    outputs = set(graph.outputs)
    outer = graph.outer_reads()
    alias: dict[str, str] = {}
    bypassed: set[str] = set()
    for node in graph.nodes:
        if passes_through(node, graph):
            out = node.outputs[0]
            if out not in outputs and out not in outer:
                alias[out] = alias.get(node.inputs[0], node.inputs[0])
                bypassed.add(node.name)
    reroute = [(node.name, slot, alias[t]) for node in graph.nodes for slot, t in enumerate(node.inputs) if t in alias]
    reads: Counter[str] = Counter(alias.get(t, t) for node in graph.nodes for t in node.inputs if t)
    reads.update(outputs)
    reads.update(outer)
    dead: list[str] = []
    for node in reversed(graph.nodes):
        if node.name in bypassed or all(not o or reads[o] == 0 for o in node.outputs):
            dead.append(node.name)
            for t in node.inputs:
                if t:
                    reads[alias.get(t, t)] -= 1
    keep_inits = set(graph.inputs) | outputs
    unused = [name for name in graph.initializers if reads[name] <= 0 and name not in keep_inits]
    if not dead and not unused:
        return None
    for what, n in (("identity nodes bypassed", len(bypassed)), ("dead nodes removed", len(dead) - len(bypassed)),
                    ("unused initializers removed", len(unused))):
        if n:
            counts[what] += n
    return GraphEdit(graph.path, "cleanup", f"clean up {graph.path}", remove=dead[::-1], reroute=reroute,
                     drop_initializers=unused)


def _batchnorms_left(model: Model, refused: list[Refusal], ran: set[str]) -> list[dict[str, Any]]:
    """Each BN still in the model, with the refusal that kept it (of a rule that takes BNs), or explain's best
    reason; a BN the fold would take says that fold-bn was not run, rather than that it matches."""
    by_node = {(r.graph, r.nodes.get("bn")): r.reason for r in refused if r.nodes.get("bn")}
    patterns = [get_pattern(n) for n in ("conv-bn", "gemm-bn", "matmul-bn")]
    left = []
    for graph in model.graphs():
        for node in graph.nodes:
            if node.op_type != "BatchNormalization":
                continue
            reason = by_node.get((graph.path, node.name))
            if reason is None:
                # only for a BN left: explain loads networkx's walk
                from graphlens.matching.explain import Explanation, explain

                results = [explain(p, graph, at=node.name) for p in patterns]
                at_node = [e for e in results if isinstance(e, Explanation)]  # all of them: explain was given a node
                best = max(at_node, key=lambda e: (len(e.mapping), e.score))
                reason = best.message
                if best.matched and "fold-bn" not in ran:
                    reason = f"{NOT_RUN} ({best.message})"
            left.append({"node": node.name, "graph": graph.path, "reason": reason})
    return left
