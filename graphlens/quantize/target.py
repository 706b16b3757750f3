"""Mixed precision for a target: rank the layers, then find how many of the first to leave float in a few
verified runs, never ending with nothing quantized.

**Estimate** (one pass of the float and the quantized model side by side, :mod:`~.side_by_side`, on the
first samples within :data:`ESTIMATE_ELEMENTS`, batch by batch). For each quantized tensor ``t``, the noise its
own quantization adds where it sits in the quantized model, relative to the float signal there:

    n_t = ‖DQ(Q(s_t)) − s_t‖² / ‖x_t‖²

(``s_t``: the value reaching ``t``'s QuantizeLinear in the quantized model, ``x_t``: the float
model's value); for a weight or bias ``n_t = ‖Ŵ − W‖² / ‖W‖²``. A layer's share is the sum of its
tensors' ``n_t``, a tensor shared by ``m`` layers counting ``1/m`` in each. Independent noises add,
and a relative noise passes through the layers after it roughly as the signal does, so the output
noise-to-signal ratio with the layers ``S`` quantized is modelled as ``N(S) = g · Σ_{l∈S} share_l``,
the one gain ``g`` fitted to the measured all-quantized ``N``. A layer's ``estimated_db`` is
``−10·log10(g · share_l)``: the output SQNR with it alone quantized, under that model.

**Measured** (what the estimate cannot see: noises that do not add. A quantized layer clips what
reaches it to its calibrated range, so leaving it float can let an earlier layer's rare large errors
through, and a recognizer's output turns on near ties: leaving one layer float can make the output
worse). The :data:`CANDIDATES` layers the estimate ranks first are left float one at a time on top
of those already kept float, on the first samples within :data:`MEASURED_ELEMENTS` input elements;
a layer stays float when the output SQNR rose, its gain the output noise it removed there.

**Order**: the layers kept float by that pass, in turn; then the others by estimated share per
cost, the cost being the layer's share of the quantized layers' multiply-accumulates (what runs in
int8; every layer costs the same when the shapes are unknown), so the layers left float for a
target take as few of them as they can, and the last, the one quantized alone at ``k = n − 1``,
adds the least noise per MAC. The candidates are taken in that same order.

**Search**: ``f(k)`` is the measured value (output SQNR, or the user's score) with the ``k`` layers
ranked first left float. ``f(0)`` comes with the estimate's pass; ``f(n − 1)``, every layer float
but the last, is measured next, taken as what leaving layers float can give. When that misses the
target, fewer layers float are tried, ``k`` doubling from the measured pass's kept layers (or 1), as the
layer left quantized at ``n − 1`` can hold the output below the target by itself; when none of those
reaches it either, the target is out of reach (the floor is the quantization that stays, e.g. of the
model's input), and the search keeps the best model it measured (the highest ``f(k)``, the fewest layers float
among equals; at least one layer stays quantized), the result saying so.
Otherwise the smallest ``k`` with ``f(k) ≥ target`` is bracketed in ``[0, n − 1]``, first split at the
measured pass's kept layers (there ``f`` was seen to rise, past them it need not), and narrowed:
each step picks the ``k`` where the target falls on the line through the bracket's ends, in the
model's coordinates (cumulative gain against noise, or score), halving instead after two steps
that moved the same end. ``f`` need not rise with ``k`` (the measured order is still a guess), so
the chosen ``k`` is the smallest measured one that reached the target.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.task import Task
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats, worst_sqnr_db
from graphlens.numerics.run import ModelRunner
from graphlens.quantize.calibrate import CalibrationData, run_batches
from graphlens.quantize.evaluate import intended_value
from graphlens.quantize.qdq import dequantize
from graphlens.quantize.sensitivity import (
    Gate,
    GatedModel,
    layer_macs,
    mac_tensors,
    open_gated,
    output_sqnr,
)
from graphlens.quantize.side_by_side import side_by_side
from graphlens.quantize.target_result import TargetResult

MAX_RUNS = 12
"""Most measured runs of the search after the floor's (the bracket of 64 layers closes in 6 halvings)."""
CANDIDATES = 16
"""Layers the estimate ranks first that are measured alone float."""
MEASURED_ELEMENTS = 1 << 20
"""Input elements of the first samples the candidates are measured on (at least one sample)."""
MEASURED_BUDGET = 1 << 24
"""Most input elements the measured pass runs in all: fewer candidates than :data:`CANDIDATES` (at least
:data:`LEAST_CANDIDATES`) when one sample is large, as a detector's page is."""
LEAST_CANDIDATES = 4
ESTIMATE_ELEMENTS = 5 << 20
"""Most input elements of the first samples (at least one) the estimate runs on; the measured pass and the
search's runs take the first :data:`MEASURED_ELEMENTS` of them. A search's cost then follows the model, not
how many samples were given: of eight 736×992 detector pages the estimate takes 2 and the runs 1; of 24
recognizer crops, all and 7; of 32 classifier crops, all and all."""


@dataclass
class Ranking:
    """The layers, the first to leave float first; see the module docstring."""

    order: list[str]
    share: dict[str, float]
    """Layer -> its tensors' relative noise ``share_l``."""
    estimated_db: dict[str, float]
    """Layer -> estimated output SQNR with it alone quantized."""
    all_quantized_db: float
    reference: list[dict[str, np.ndarray]] = field(default_factory=list, repr=False)
    """The float outputs, batch by batch, for the search's runs."""
    measured_samples: int = 0
    """The first samples the measured pass ran on, as the search's runs do."""
    measured_db: float = math.nan
    """The output SQNR with every layer quantized on those samples."""
    steady: int = 0
    """How many of ``order``'s first layers the measured pass kept float, each raising the output SQNR."""
    gain: dict[str, float] = field(default_factory=dict)
    """Layer -> what the order weighs: the measured noise removed, or the estimated share."""
    macs: dict[str, float] = field(default_factory=dict)
    """Layer -> its share of the quantized layers' multiply-accumulates (empty: shapes unknown)."""
    outputs_db: dict[str, float] = field(default_factory=dict)
    """Each output's SQNR with every layer quantized."""
    samples: int = 0
    """The samples the estimate ran on."""


def rank_layers(gated: GatedModel, data: CalibrationData, batch_size: int,
                task: Task | None = None, runner: ModelRunner | None = None) -> Ranking:
    """The layers in the order to leave them float: every layer's estimated share of the output noise from
    one pass of the float and quantized model side by side, the first :data:`CANDIDATES` measured alone
    float; see the module docstring."""
    activations = [g for g in gated.gates if g.record.kind == "activation"]
    both = side_by_side(gated, mac_tensors(gated))
    combined = ModelRunner(both.proto, spin=data.long_runs)
    shell = onnx.ModelProto()  # what batching needs, the inputs; the combined graph's weights go with its proto
    shell.graph.input.extend(both.proto.graph.input)
    both.proto = shell
    if combined.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the gated model: {combined.error}")
    shapes: dict[str, list[int]] = {}
    sums = {g.name: np.zeros(3) for g in activations}  # ‖x‖², ‖DQ(Q(s)) − s‖², ‖DQ(Q(s)) − x‖²
    each, head = dict[str, ErrorStats](), dict[str, ErrorStats]()
    first, head_done = data.first(MEASURED_ELEMENTS).samples, 0  # the measured pass's samples
    reference: list[dict[str, np.ndarray]] = []
    for batch in run_batches([combined], shell, data, batch_size, task):
        got = batch.outputs[0]
        shapes = shapes or {t: [int(d) for d in got[out]] for t, out in both.shapes.items()}
        for g in activations:
            names = both.sums[g.name]
            sums[g.name] += [float(got[n]) for n in (names.x2, names.added2, names.accumulated2)]
        reference.append({n: np.ravel(got[n]) for n in both.outputs})
        for n, twin in both.outputs.items():
            each.setdefault(n, ErrorStats()).add(got[n], got[twin])
            if batch.done <= first:
                head.setdefault(n, ErrorStats()).add(got[n], got[twin])
        head_done = batch.done if batch.done <= first else head_done
    del combined
    all_db = worst_sqnr_db(each.values())
    ranking = _ranking(_shares(gated, sums, all_db), all_db, reference)
    ranking.outputs_db, ranking.samples = {n: stats.sqnr_db for n, stats in each.items()}, data.samples
    # the gated model's, all gates on
    ranking.measured_db = worst_sqnr_db(head.values()) if head_done == first else math.nan
    _measure(gated, ranking, data, layer_macs(gated, shapes), batch_size, task, runner)
    return ranking


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
                noise = gains[g.name] * _over(added, signal)
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
    relative = {g.name: (_over(sums[g.name][2], sums[g.name][0]), _over(sums[g.name][1], sums[g.name][0]))
                for g in acts.values()}
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


def _over(noise: float, signal: float) -> float:
    """A relative noise power; 0 where the float32 sums overflowed (activations past 1e19 square to inf): the
    estimate then leaves that tensor out of the order and the verified runs decide."""
    if not (0 < signal < math.inf) or not math.isfinite(noise):
        return 0.0
    return float(noise / signal)


def _spread(parents: list[str], incoming: float, gain: float, relative: dict[str, tuple[float, float]],
            gains: dict[str, float]) -> None:
    total = sum(relative[p][0] for p in parents)
    if total > 0:
        for p in parents:
            gains[p] += incoming / total * gain


def _nearest(tensor: str, acts: dict[str, Gate], producer: dict[str, onnx.NodeProto]) -> list[str]:
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


def _measure(gated: GatedModel, ranking: Ranking, data: CalibrationData, macs: dict[str, float], batch_size: int,
             task: Task | None, runner: ModelRunner | None) -> None:
    """The first candidates by the estimate measured alone float on the first samples, and the order by gain
    per multiply-accumulate (see the module docstring)."""
    from graphlens.quantize.sensitivity import greedy_float

    total = sum(macs.values())
    ranking.macs = {n: m / total for n, m in macs.items()} if total > 0 and set(macs) >= set(ranking.share) else {}
    estimated = {n: ranking.share[n] * _fitted_gain(ranking) for n in ranking.share}
    ranking.order, ranking.gain = _by_cost(estimated, ranking.macs), estimated
    if len(ranking.order) < 2:
        return
    subset = data.first(MEASURED_ELEMENTS)
    measured = subset.sample_elements * subset.samples
    candidates = max(LEAST_CANDIDATES, min(CANDIDATES, MEASURED_BUDGET // max(measured, 1)))
    known = ranking.all_quantized_db if subset.samples == data.samples else ranking.measured_db
    base, runs, kept = greedy_float(gated, ranking.order[:candidates], subset, ranking.reference, batch_size,
                                    None if math.isnan(known) else known, task, runner)
    ranking.measured_samples, ranking.measured_db = subset.samples, base
    before = [base, *(runs[n] for n in kept)]
    helped = {n: _noise(b) - _noise(runs[n]) for n, b in zip(kept, before, strict=False)}
    rest = {n: g for n, g in estimated.items() if n not in helped}
    ranking.order, ranking.steady = kept + _by_cost(rest, ranking.macs), len(kept)
    ranking.gain = {**helped, **rest}


def _fitted_gain(ranking: Ranking) -> float:
    """``g`` of the noise model: the measured all-quantized noise over the summed shares."""
    total = sum(ranking.share.values())
    return _noise(ranking.all_quantized_db) / total if total > 0 else 0.0


def _noise(db: float) -> float:
    """The relative noise power of an SQNR in dB (0 for an exact output)."""
    return 10 ** (-db / 10) if math.isfinite(db) else 0.0


def _by_cost(gain: dict[str, float], macs: dict[str, float]) -> list[str]:
    """Layers by gain per share of the multiply-accumulates (a layer with none counts a thousandth of its
    fair share), or by gain when the costs are unknown."""
    least = 1e-3 / max(len(macs), 1)
    return sorted(gain, key=lambda n: -gain[n] / (max(macs[n], least) if macs else 1.0))


def search(order: list[str], gain: dict[str, float], target: float, start: float,
           value: Callable[[list[str]], float], *, as_noise: bool, end_value: float | None = None,
           max_runs: int = MAX_RUNS, steady: int = 0) -> TargetResult:
    """The fewest of ``order``'s first layers to leave float for ``value(excluded) ≥ target``; see the module
    docstring. ``gain``: each layer's expected effect, placing the layers along the line the search
    interpolates on. ``as_noise``: the value is an SQNR in dB (interpolated as noise power); else a score
    interpolated as it is, ``end_value`` the float model's. ``steady``: how many first layers were measured
    to raise the value one by one; that ``k`` is measured first, and a bracket within it is searched first."""
    n = len(order)
    runs: list[tuple[int, float]] = [(0, start)]
    metric = "output SQNR" if as_noise else "score"
    if start >= target:
        return TargetResult(target, metric, [], start, True, runs, end_value)
    floor = value(order[:n - 1]) if n > 1 else start
    runs.append((n - 1, floor))
    seen = {0: start, n - 1: floor}
    lo, hi = 0, n - 1
    if floor < target:
        reached = _probe(order, target, value, runs, seen, max_runs, steady)
        if reached is None:  # out of reach even with every layer float but one: the best model measured
            k, best = _best(runs)
            return TargetResult(target, metric, order[:k], best, False, runs, end_value, floor=floor)
        lo, hi = reached
    elif 0 < steady < n - 1:  # the measured prefix: where the value is known to rise
        seen[steady] = value(order[:steady])
        runs.append((steady, seen[steady]))
        if seen[steady] >= target:
            hi = steady
        else:
            lo = steady
    cumulative = np.concatenate([[0.0], np.cumsum([max(gain.get(name, 0.0), 0.0) for name in order])])
    position = cumulative / cumulative[-1] if cumulative[-1] > 0 else np.arange(n + 1) / n

    def u(v: float) -> float:  # the coordinate that falls along the ranked list
        return _noise(v) if as_noise else -v

    u_lo, u_hi = u(seen[lo]), u(seen[hi])
    sides: list[bool] = []
    while hi - lo > 1 and len(runs) - 2 < max_runs:
        k = _next_k(position, lo, hi, u_lo, u_hi, u(target), halve=len(sides) > 1 and sides[-1] == sides[-2])
        v = value(order[:k])
        runs.append((k, v))
        seen[k] = v
        sides.append(v >= target)
        if v >= target:
            hi, u_hi = k, u(v)
        else:  # the line starts from the best value measured up to lo: one lower further on is noise (f need not
            lo, u_lo = k, min(u(seen[j]) for j in seen if j <= k)  # rise with k), not a slope to follow
    return TargetResult(target, metric, order[:hi], seen[hi], True, runs, end_value)


def _best(runs: list[tuple[int, float]]) -> tuple[int, float]:
    """The measured run with the highest value, the fewest layers float among equals (NaN counting lowest)."""
    return max(runs, key=lambda run: (-math.inf if math.isnan(run[1]) else run[1], -run[0]))


def _probe(order: list[str], target: float, value: Callable[[list[str]], float], runs: list[tuple[int, float]],
           seen: dict[int, float], max_runs: int, steady: int) -> tuple[int, int] | None:
    """When every layer float but one misses the target, whether fewer do reach it: ``f`` need not rise with
    ``k``, and the layer left quantized at ``n − 1`` can hold the output below the target by itself, where
    leaving two layers float did not (PP-OCR's classifier: 49.9 dB at ``k = 53``, 55.0 dB at ``k = 2``). ``k``
    doubles from the measured prefix (or 1); the bracket ``(lo, hi)`` around the first that reaches the
    target, or None when none does within the runs."""
    n, lo = len(order), 0
    k = steady if 0 < steady < n - 1 else 1
    while k < n - 1 and len(runs) - 2 < max_runs:
        seen[k] = value(order[:k])
        runs.append((k, seen[k]))
        if seen[k] >= target:
            return lo, k
        lo, k = k, 2 * k
    return None


def _next_k(position: np.ndarray, lo: int, hi: int, u_lo: float, u_hi: float, u_target: float, *,
            halve: bool) -> int:
    """The k in (lo, hi) to measure next: where the target falls on the line through the bracket's ends,
    or the middle when ``halve`` (after two steps that moved the same end, as regula falsi's Illinois
    variant guards against creeping up on one side)."""
    last = hi - 1
    middle = max(lo + 1, min(last, (lo + hi) // 2))
    if halve or u_lo == u_hi:
        return middle
    p_lo, p_hi = position[lo], position[hi]
    wanted = p_lo + (p_hi - p_lo) * (u_lo - u_target) / (u_lo - u_hi)
    k = int(np.searchsorted(position, wanted - 1e-12, side="left"))
    return max(lo + 1, min(last, k))


def sqnr_search(gated: GatedModel, ranking: Ranking, target: float, data: CalibrationData, batch_size: int,
                task: Task | None = None, runner: ModelRunner | None = None) -> TargetResult:
    """:func:`search` measuring the output SQNR with runs of the gated model on the first samples of ``data``
    within :data:`MEASURED_ELEMENTS`, those of the measured pass."""
    runner = runner or open_gated(gated, spin=data.long_runs)
    data = data.first(MEASURED_ELEMENTS)
    outputs: dict[int, dict[str, float]] = {}
    start = ranking.measured_db if ranking.measured_samples == data.samples else math.nan

    def value(excluded: list[str]) -> float:
        each: dict[str, ErrorStats] = {}
        db = output_sqnr(runner, gated, gated.kept(excluded), data, ranking.reference, batch_size, task, each)
        outputs[len(excluded)] = {name: stats.sqnr_db for name, stats in each.items()}
        return db

    if math.isnan(start) or ranking.measured_samples == 0:
        start = value([])
    elif data.samples == ranking.samples:
        outputs[0] = ranking.outputs_db
    result = search(ranking.order, ranking.gain or ranking.share, target, start, value,
                    as_noise=True, steady=ranking.steady)
    result.samples, result.random_samples = data.samples, data.random
    if result.floor is not None:
        inputs = {g.name for g in gated.gates if g.record.kind == "activation" and g.source in graph_inputs(gated)}
        result.input_db = output_sqnr(runner, gated, inputs, data, ranking.reference, batch_size,
                                      task) if inputs else None
    result.int8_macs = int8_share(ranking, result.excluded)
    result.outputs_db = outputs.get(len(result.excluded), {})
    return result


def graph_inputs(gated: GatedModel) -> set[str]:
    """The model's own inputs (the gates are inputs too)."""
    gates = {g.name for g in gated.gates}
    return {v.name for v in gated.proto.graph.input if v.name not in gates}


def int8_share(ranking: Ranking, excluded: list[str]) -> float | None:
    """The share of the quantized layers' multiply-accumulates left in int8 with ``excluded`` float."""
    return 1.0 - sum(ranking.macs[n] for n in excluded) if ranking.macs else None
