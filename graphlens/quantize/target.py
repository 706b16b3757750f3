"""Mixed precision for a target: rank the layers from one measuring pass, then find how many of the
worst to leave float in a few verified runs, never ending with nothing quantized.

**Ranking** (one pass over the samples of the gated model of :mod:`~graphlens.quantize.sensitivity`,
every gate off and every gate on, batch by batch). For each quantized tensor ``t``, the noise its
own quantization adds where it sits in the quantized model, relative to the float signal there:

    n_t = ‖DQ(Q(s_t)) − s_t‖² / ‖x_t‖²

(``s_t``: the value reaching ``t``'s QuantizeLinear in the quantized model, ``x_t``: the float
model's value); for a weight or bias ``n_t = ‖Ŵ − W‖² / ‖W‖²``. A layer's share is the sum of its
tensors' ``n_t``, a tensor shared by ``m`` layers counting ``1/m`` in each. Independent noises add,
and a relative noise passes through the layers after it roughly as the signal does, so the output
noise-to-signal ratio with the layers ``S`` quantized is modelled as ``N(S) = g · Σ_{l∈S} share_l``,
the one gain ``g`` fitted to the measured all-quantized ``N``. A layer's ``estimated_db`` is
``−10·log10(g · share_l)``: the output SQNR with it alone quantized, under that model.

**Search**: ``f(k)`` is the measured value (output SQNR, or the user's score) with the ``k`` layers
ranked worst left float. ``f(0)`` comes with the ranking pass. The smallest ``k`` with
``f(k) ≥ target`` is bracketed and narrowed: each step picks the ``k`` where the target falls on the
line through the bracket's ends, in the model's coordinates (cumulative share against noise, or
score), halving instead after two steps that moved the same end. ``k`` stops at ``n − 1``:
at least one layer stays quantized. If no run reaches the target, the best ``k`` run is kept (the
highest value), and the result says the target was not reached.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats
from graphlens.quantize.calibrate import CalibrationData, Cancelled, run_batches
from graphlens.quantize.evaluate import intended_value
from graphlens.quantize.qdq import dequantize
from graphlens.quantize.sensitivity import Gate, GatedModel, GatedRunner, open_gated, output_sqnr

MAX_RUNS = 12
"""Most measured runs of the search after the ranking pass (the bracket of 64 layers closes in 6 halvings)."""


@dataclass
class Ranking:
    """The layers, most to blame first, from one measuring pass; see the module docstring."""

    order: list[str]
    share: dict[str, float]
    """Layer -> its tensors' relative noise ``share_l``."""
    estimated_db: dict[str, float]
    """Layer -> estimated output SQNR with it alone quantized."""
    all_quantized_db: float
    reference: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)
    """The float outputs, batch by batch, for the search's runs."""


@dataclass
class TargetResult:
    """What the search chose and measured."""

    target: float
    metric: str
    """``output SQNR`` (dB) or ``score``."""
    excluded: list[str]
    reached: float
    """The chosen model's value."""
    met: bool
    runs: list[tuple[int, float]] = field(default_factory=list)
    """(layers left float, value) for every measured run, in order."""
    float_value: float | None = None
    """The float model's score (a score target only)."""

    def line(self) -> str:
        unit = " dB" if self.metric == "output SQNR" else ""
        verdict = "reached" if self.met else "NOT reached; kept the best model found,"
        runs = f"{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}"
        floats = ", ".join(self.excluded) if self.excluded else "none"
        return (f"target {self.metric} {self.target:g}{unit} {verdict} {self.reached:.4g}{unit} with "
                f"{len(self.excluded)} layers left float ({runs}): {floats}")

    def to_dict(self) -> dict:
        return {"target": self.target, "metric": self.metric, "reached": _finite(self.reached), "met": self.met,
                "left_float": list(self.excluded), "runs": [[k, _finite(v)] for k, v in self.runs],
                "float_value": None if self.float_value is None else _finite(self.float_value)}


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def rank_layers(gated: GatedModel, data: CalibrationData, batch_size: int,
                cancelled: Cancelled | None = None) -> Ranking:
    """Every layer's estimated share of the output noise, from one pass of the gated model (every gate off,
    then every gate on, on the same batches)."""
    activations = [g for g in gated.gates if g.record.kind == "activation"]
    exposed = list(dict.fromkeys(name for g in activations for name in (g.source, g.switched)))
    runner = open_gated(gated, exposed)
    everything = {g.name for g in gated.gates}
    off, on = GatedRunner(runner, gated.gates, set()), GatedRunner(runner, gated.gates, everything)
    outputs = float_outputs(gated.proto)
    sums = {g.name: np.zeros(3) for g in activations}  # ‖x‖², ‖DQ(Q(s)) − s‖², ‖DQ(Q(s)) − x‖²
    total = ErrorStats()
    reference: list[dict[str, np.ndarray]] = []
    for batch in run_batches([off, on], gated.proto, data, batch_size, cancelled):  # type: ignore[list-item]
        floats, quantized = batch.outputs
        for g in activations:
            x, s, q = (np.ravel(a) for a in (floats[g.source], quantized[g.source], quantized[g.switched]))
            added, accumulated = q - s, q - x
            sums[g.name] += (float(np.dot(x, x)), float(np.dot(added, added)), float(np.dot(accumulated, accumulated)))
        reference.append({n: np.ravel(floats[n]) for n in outputs})
        for n in outputs:
            total.add(floats[n], quantized[n])
    return _ranking(_shares(gated, sums, total.sqnr_db), total.sqnr_db, reference)


def _shares(gated: GatedModel, sums: dict[str, np.ndarray], all_db: float) -> dict[str, float]:
    """``share_l``: each of the layer's tensors' relative noise ``n_t`` times its gain to the output ``G_t``
    (see the module docstring), a tensor shared by m layers counting 1/m in each."""
    gains = _gains(gated, sums, 10 ** (-all_db / 10) if math.isfinite(all_db) else 0.0)
    near: dict[str, list[str]] = {}  # layer -> its activation gates, its output's first
    for g in sorted((g for g in gated.gates if g.record.kind == "activation"),
                    key=lambda g: g.record.node in g.record.nodes[:1]):
        for node in g.record.nodes:
            near.setdefault(node, []).append(g.name)
    share: dict[str, float] = {}
    for g in gated.gates:
        nodes = g.record.nodes or [g.record.node]
        for node in nodes:
            if g.record.kind == "activation":
                signal, added, _ = sums[g.name]
                noise = gains[g.name] * added / signal if signal > 0 else 0.0
            else:  # a weight's or bias's noise enters at the layer's output, and travels as that tensor's does
                noise = _weight_noise(g) * (gains[near[node][0]] if near.get(node) else 1.0)
            share[node] = share.get(node, 0.0) + noise / len(nodes)
    return share


def _gains(gated: GatedModel, sums: dict[str, np.ndarray], a_out: float) -> dict[str, float]:
    """``G_t`` for every activation gate: how a relative noise at ``t`` reaches the outputs.

    With ``A_t`` the relative accumulated noise at ``t`` and ``n_t`` its own, the noise that reached ``t``
    from its nearest quantized ancestors ``P(t)`` is ``A_t − n_t = g_t · Σ_{p∈P(t)} A_p``, which gives the
    segment's gain ``g_t``; the outputs likewise (``A_out``). Then ``G_t = Σ_{c: t∈P(c)} g_c · G_c``,
    ``G = 1`` at the outputs, summed from the outputs back.
    """
    acts = {g.record.dequantized: g for g in gated.gates if g.record.kind == "activation"}
    relative = {g.name: (sums[g.name][2] / sums[g.name][0] if sums[g.name][0] > 0 else 0.0,
                         sums[g.name][1] / sums[g.name][0] if sums[g.name][0] > 0 else 0.0) for g in acts.values()}
    producer = {o: n for n in gated.proto.graph.node for o in n.output}
    parents = {g.name: _nearest(g.source, acts, producer) for g in acts.values()}
    out_parents = sorted({p for o in float_outputs(gated.proto) for p in _nearest(o, acts, producer)})
    gains = {name: 0.0 for name in parents}
    _spread(out_parents, a_out, 1.0, relative, gains)
    order = [g.name for g in acts.values()]  # graph order of the gates: children after parents
    for name in reversed(order):
        accumulated, own = relative[name]
        _spread(parents[name], max(accumulated - own, 0.0), gains[name], relative, gains)
    return gains


def _spread(parents: list[str], incoming: float, gain: float, relative: dict[str, tuple[float, float]],
            gains: dict[str, float]) -> None:
    total = sum(relative[p][0] for p in parents)
    if total > 0:
        for p in parents:
            gains[p] += incoming / total * gain


def _nearest(tensor: str, acts: dict, producer: dict) -> list[str]:
    """The activation gates nearest upstream of ``tensor`` (their Where outputs are where the walk stops)."""
    found: dict[str, None] = {}
    seen, stack = set(), [tensor]
    while stack:
        t = stack.pop()
        if t in seen:
            continue
        seen.add(t)
        if t in acts and t != tensor:
            found[acts[t].name] = None
            continue
        node = producer.get(t)
        if node is not None:
            stack.extend(i for i in node.input if i)
    return list(found)


def _weight_noise(gate: Gate) -> float:
    """``‖Ŵ − W‖² / ‖W‖²`` of a weight or bias gate (W: what its integers stand for)."""
    record = gate.record
    value = intended_value(record)
    if value is None or record.quantized_value is None:
        return 0.0
    x = np.asarray(value, np.float64).reshape(-1)
    d = dequantize(record.quantized_value, record.params).reshape(-1).astype(np.float64) - x
    signal = float(np.dot(x, x))
    return float(np.dot(d, d)) / signal if signal > 0 else 0.0


def _ranking(share: dict[str, float], all_db: float, reference: list[dict[str, np.ndarray]]) -> Ranking:
    order = sorted(share, key=lambda n: -share[n])
    measured = 10 ** (-all_db / 10) if math.isfinite(all_db) else 0.0
    gain = measured / sum(share.values()) if sum(share.values()) > 0 else 0.0
    estimated = {n: (-10 * math.log10(gain * s) if gain * s > 0 else math.inf) for n, s in share.items()}
    return Ranking(order, share, estimated, all_db, reference)


def search(order: list[str], share: dict[str, float], target: float, start: float,
           value: Callable[[list[str]], float], *, as_noise: bool, end_value: float | None = None,
           max_runs: int = MAX_RUNS) -> TargetResult:
    """The fewest of ``order``'s first layers to leave float for ``value(excluded) ≥ target``; see the module
    docstring. ``as_noise``: the value is an SQNR in dB (interpolated as noise power, 0 when all float);
    else a score interpolated as it is, ``end_value`` the float model's."""
    n = len(order)
    runs: list[tuple[int, float]] = [(0, start)]
    metric = "output SQNR" if as_noise else "score"
    if start >= target or n <= 1:
        return TargetResult(target, metric, [], start, start >= target, runs, end_value)
    cumulative = np.concatenate([[0.0], np.cumsum([share[name] for name in order])])
    position = cumulative / cumulative[-1] if cumulative[-1] > 0 else np.arange(n + 1) / n

    def u(v: float) -> float:  # the coordinate that falls along the ranked list
        return 10 ** (-v / 10) if as_noise else -v

    lo, u_lo = 0, u(start)
    hi, u_hi = n, (0.0 if as_noise else u(end_value if end_value is not None else target))
    seen = {0: start}
    sides: list[bool] = []
    while hi - lo > 1 and len(runs) - 1 < max_runs:
        k = _next_k(position, lo, hi, u_lo, u_hi, u(target), halve=len(sides) > 1 and sides[-1] == sides[-2])
        v = value(order[:k])
        runs.append((k, v))
        seen[k] = v
        sides.append(v >= target)
        if v >= target:
            hi, u_hi = k, u(v)
        else:
            lo, u_lo = k, u(v)
    if hi < n:
        return TargetResult(target, metric, order[:hi], seen[hi], True, runs, end_value)
    best = max(seen, key=lambda k: (seen[k], -k))
    return TargetResult(target, metric, order[:best], seen[best], False, runs, end_value)


def _next_k(position: np.ndarray, lo: int, hi: int, u_lo: float, u_hi: float, u_target: float, *,
            halve: bool) -> int:
    """The k in (lo, hi) to measure next: where the target falls on the line through the bracket's ends,
    or the middle when ``halve`` (after two steps that moved the same end, as regula falsi's Illinois
    variant guards against creeping up on one side)."""
    last = hi - 1  # hi ≤ n: at least one layer stays quantized
    middle = max(lo + 1, min(last, (lo + hi) // 2))
    if halve or u_lo == u_hi:
        return middle
    p_lo, p_hi = position[lo], position[hi]
    wanted = p_lo + (p_hi - p_lo) * (u_lo - u_target) / (u_lo - u_hi)
    k = int(np.searchsorted(position, wanted - 1e-12, side="left"))
    return max(lo + 1, min(last, k))


def sqnr_search(gated: GatedModel, ranking: Ranking, target: float, data: CalibrationData, batch_size: int,
                cancelled: Cancelled | None = None) -> TargetResult:
    """:func:`search` measuring the output SQNR with runs of the gated model."""
    runner = open_gated(gated)

    def value(excluded: list[str]) -> float:
        return output_sqnr(runner, gated, gated.kept(excluded), data, ranking.reference, batch_size, cancelled)

    return search(ranking.order, ranking.share, target, ranking.all_quantized_db, value, as_noise=True)
