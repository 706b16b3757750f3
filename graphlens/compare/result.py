"""What comparing two models gives: pairs of nodes with a status, and the numbers per pair.

Typed so that the CLI, scripts and the window read the same fields; ``to_dict()`` is the
``graphlens compare --json`` shape. Lookups by node go through indexes built once, because the
window asks for every box's status on each redraw.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from graphlens.core.model import Model

STATUSES = ("same", "changed", "added", "removed")
"""Every status a pair can have, best first."""

_RANK = {"same": 0, "changed": 1, "added": 2, "removed": 2}

METRICS = {"sqnr_db": ("SQNR", "dB", False), "max_abs": ("Max |Δ|", "", True), "cosine": ("Cosine", "", False)}
"""metric -> (overlay name, unit, higher is worse)."""


def worst_status(statuses: list[str] | tuple[str, ...] | set[str]) -> str:
    """The status a collapsed group shows: its worst member's (``same`` when it has none)."""
    return max(statuses, key=_RANK.__getitem__, default="same")


def _finite(value: float) -> float | None:
    return float(value) if math.isfinite(value) else None


@dataclass
class TensorError:
    """How far B's tensor is from A's on the same inputs; SQNR is ``inf`` when they are equal."""

    tensor_a: str
    tensor_b: str
    max_abs: float
    sqnr_db: float
    cosine: float

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON: infinities and NaNs become null (an infinite SQNR means no error at all)."""
        return {"tensor_a": self.tensor_a, "tensor_b": self.tensor_b, "max_abs": _finite(self.max_abs),
                "sqnr_db": _finite(self.sqnr_db), "cosine": _finite(self.cosine)}

    def value(self, metric: str) -> float:
        return float(getattr(self, metric))


@dataclass
class Pair:
    """Nodes of A and the nodes of B that correspond to them, and what differs.

    One node each for most pairs; several on one side for a rewrite (Conv+BN in A, Conv in B);
    ``a`` empty for a node only B has (added), ``b`` empty for one only A has (removed).
    """

    graph: str
    """Graph path in A (``main``, ``main/If_0:then_branch``); B's own path for a node only B's subgraph has."""
    a: list[str]
    b: list[str]
    status: str
    changes: list[str] = field(default_factory=list)
    """One short sentence per difference: ``attribute pads: [0,0,0,0] → [1,1,1,1]``."""
    how: str = "name"
    """How the pair was found: ``name``, ``structure`` (signature and paired neighbours) or ``group``."""
    error: TensorError | None = None
    graph_b: str | None = None
    """B's graph path when it differs from ``graph`` (subgraphs of renamed If/Loop nodes)."""

    @property
    def path_b(self) -> str:
        return self.graph_b or self.graph

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"graph": self.graph, "a": list(self.a), "b": list(self.b), "status": self.status,
                                "changes": list(self.changes), "how": self.how,
                                "error": self.error.to_dict() if self.error is not None else None}
        if self.graph_b is not None:
            data["graph_b"] = self.graph_b
        return data


@dataclass
class Comparison:
    """The outcome of :func:`graphlens.compare.compare_models`: every node of A and of B in one pair."""

    a: Model
    b: Model
    pairs: list[Pair]
    counts: dict[str, int]
    numeric_reason: str | None = None
    """Why there are no numbers (``--no-numeric``, a model onnxruntime cannot run); None when there are."""
    inputs_line: str = ""
    """Which inputs and dynamic dims the numbers were measured on."""
    numeric_problems: list[str] = field(default_factory=list)
    """Inputs or graph outputs holding NaN or infinities, each named with its counts: the numbers prove nothing."""
    _index_a: dict[tuple[str, str], Pair] = field(default_factory=dict, init=False, repr=False, compare=False)
    _index_b: dict[tuple[str, str], Pair] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.reindex()

    def reindex(self) -> None:
        """Rebuild the node lookups (after changing :attr:`pairs` by hand)."""
        self._index_a = {(p.graph, n): p for p in self.pairs for n in p.a}
        self._index_b = {(p.path_b, n): p for p in self.pairs for n in p.b}

    def pair_of_a(self, graph: str, node: str) -> Pair | None:
        """The pair holding node ``node`` of A's graph ``graph``."""
        return self._index_a.get((graph, node))

    def pair_of_b(self, graph: str, node: str) -> Pair | None:
        """The pair holding node ``node`` of B's graph ``graph`` (B's own graph path)."""
        return self._index_b.get((graph, node))

    def status_of(self, side: Literal["a", "b"], graph: str, node: str) -> str:
        """A node's status on its own side; ``same`` for a name neither model has (a stale view)."""
        found = self.pair_of_a(graph, node) if side == "a" else self.pair_of_b(graph, node)
        return found.status if found is not None else "same"

    def status_of_group(self, side: Literal["a", "b"], graph: str, nodes: list[str]) -> str:
        """A collapsed name-scope group's status: the worst of its members'."""
        return worst_status([self.status_of(side, graph, n) for n in nodes])

    def overlay(self, metric: str = "sqnr_db", side: Literal["a", "b"] = "a") -> dict[str, float]:
        """Node of ``side`` -> the metric of its pair's tensor, for ``Overlay.of`` (see :data:`METRICS`).

        Every node of a group gets the group's number; nodes without one are left out. Node names
        of the main graph and of subgraphs share one namespace here, as on the canvas.
        """
        if metric not in METRICS:
            raise ValueError(f"unknown metric '{metric}'; metrics: {', '.join(METRICS)}")
        values: dict[str, float] = {}
        for pair in self.pairs:
            if pair.error is None:
                continue
            value = pair.error.value(metric)
            for name in pair.a if side == "a" else pair.b:
                values[name] = value
        return values

    def as_overlay(self, metric: str = "sqnr_db", side: Literal["a", "b"] = "a") -> Any:
        """:meth:`overlay` as a :class:`~graphlens.overlays.Overlay`, with the right scale direction."""
        from graphlens.overlays.overlay import Overlay

        name, unit, worse = METRICS[metric]
        return Overlay.of(f"{name} vs {self.b.name if side == 'a' else self.a.name}", self.overlay(metric, side),
                          unit, higher_is_worse=worse, source="graphlens compare", notes=[self.inputs_line])

    def differences(self) -> list[Pair]:
        """The pairs that are not ``same``, in graph order."""
        return [p for p in self.pairs if p.status != "same"]

    def summary_lines(self, limit: int = 50) -> list[str]:
        """Counts per status, then each changed, added or removed pair with what changed."""
        counts = self.counts
        lines = [f"A: {self.a.name} ({self.a.node_count()} nodes)   B: {self.b.name} ({self.b.node_count()} nodes)",
                 "pairs: " + ", ".join(f"{counts.get(s, 0)} {s}" for s in STATUSES)]
        hows = {h: sum(1 for p in self.pairs if p.how == h and p.a and p.b) for h in ("name", "structure", "group")}
        lines.append("paired by " + ", ".join(f"{h} {n}" for h, n in hows.items()))
        if self.numeric_reason:
            lines.append(f"numbers: none ({self.numeric_reason})")
        elif self.inputs_line:
            lines.append(self.inputs_line)
        shown = self.differences()
        for pair in shown[:limit]:
            lines.append(_pair_line(pair))
            lines += [f"      {c}" for c in pair.changes]
        if len(shown) > limit:
            lines.append(f"... and {len(shown) - limit} more (--json lists them all)")
        if not shown:
            lines.append("no structural differences: every node pairs as same")
        lines += [f"numbers not finite: {problem}" for problem in self.numeric_problems]
        return lines

    def failure(self) -> str | None:
        """Why ``compare --check`` fails, in one line: the pairs that differ and the NaN or infinities in the inputs
        or outputs; None when there is nothing."""
        parts = []
        if self.differences():
            counts = ", ".join(f"{self.counts.get(s, 0)} {s}" for s in STATUSES[1:] if self.counts.get(s, 0))
            parts.append(f"the models differ ({counts})")
        parts += self.numeric_problems
        return "; ".join(parts) or None

    def to_dict(self) -> dict[str, Any]:
        return {"a": str(self.a.path or self.a.name), "b": str(self.b.path or self.b.name),
                "pairs": [p.to_dict() for p in self.pairs], "counts": dict(self.counts),
                "numeric_reason": self.numeric_reason, "inputs": self.inputs_line,
                "numeric_problems": list(self.numeric_problems)}


def _pair_line(pair: Pair) -> str:
    where = "" if pair.graph == "main" else f"  [{pair.graph}]"
    a = " + ".join(pair.a) if pair.a else "-"
    b = " + ".join(pair.b) if pair.b else "-"
    error = ""
    if pair.error is not None:
        sqnr = pair.error.sqnr_db
        error = f"  (max |Δ| {pair.error.max_abs:.3g}, SQNR {sqnr:.1f} dB)"
    return f"  {pair.status:<8} {a} ↔ {b}{where}{error}"


def count_statuses(pairs: list[Pair]) -> dict[str, int]:
    """Pairs per status, every status present."""
    counts = dict.fromkeys(STATUSES, 0)
    for pair in pairs:
        counts[pair.status] += 1
    return counts
