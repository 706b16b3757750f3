"""The "Learn BN folding" lesson: one fold, one channel, with the rewrite's own numbers.

Everything shown comes from the fold-bn rule's ``details`` and ``plan``, so the
lesson can never disagree with what ``graphlens fold`` writes; the arithmetic itself is in
:mod:`graphlens.rewrites.bn_math`. The sample outputs are the BN's output tensor in the original
model and the same tensor (now written by the folded layer) in the model the preview produces.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.matching.match import Match
from graphlens.numerics import compare_tensors
from graphlens.numerics.dims import failure_reason, search_dims
from graphlens.numerics.run import ModelRunner
from graphlens.rewrites.lesson_text import number, operand
from graphlens.rewrites.preview import preview_edit
from graphlens.rewrites.rule import FoldDetails, Plan, Refusal
from graphlens.rewrites.rules import RULES

LAYER_LABELS = ("conv", "gemm", "matmul")
WEIGHT_EXAMPLES = 3


@dataclass
class Samples:
    """The BN's whole output tensor before and after the fold, for one seeded input; ``reason`` when missing.

    Kept apart from :class:`BnLesson` because the inputs do not depend on the channel: a viewer runs
    the models once per match and slices per channel.
    """

    tensor: str
    before: np.ndarray | None
    after: np.ndarray | None
    reason: str | None


@dataclass
class BnLesson:
    """What the lesson shows for one channel of one fold."""

    details: FoldDetails
    channel: int
    formula_lines: list[str]
    scale_factors: np.ndarray
    sample_before: np.ndarray | None
    sample_after: np.ndarray | None
    max_abs_difference: float | None
    unavailable_reason: str | None
    within_tolerance: bool | None = None
    """Whether the difference is within the dtype's rounding tolerance (see graphlens.numerics.diff)."""


def _fold_plan(match: Match) -> Plan:
    """fold-bn's plan for ``match``; ValueError with the reason when there is none."""
    if "bn" not in match.nodes or not any(label in match.nodes for label in LAYER_LABELS):
        raise ValueError(
            f"a '{match.pattern}' match is not a linear layer followed by a BatchNormalization; "
            "the lesson needs a conv-bn, gemm-bn or matmul-bn match"
        )
    plan = RULES["fold-bn"].plan(match)
    if isinstance(plan, Refusal):
        raise ValueError(plan.reason)
    return plan


def _layer_node(match: Match) -> Node:
    return match.graph.node(next(match.nodes[label] for label in LAYER_LABELS if label in match.nodes))


@dataclass(frozen=True)
class WeightEntry:
    """One weight that produces a channel, before and after the fold."""

    index: tuple[int, ...]
    before: float
    after: float


@dataclass(frozen=True)
class WeightExamples:
    """A few of a channel's weights, and how many it has in all."""

    entries: list[WeightEntry]
    total: int


def weight_entries(details: FoldDetails, channel: int, count: int = WEIGHT_EXAMPLES) -> WeightExamples:
    """The first ``count`` weights that produce ``channel``.

    Which entries belong to a channel is found by scaling a weight of ones by the channel numbers
    with the layer op's :meth:`~graphlens.core.linear.LinearOp.scale_outputs`, so the axis is by
    construction the one the rewrite scales.
    """
    owner = details.op.scale_outputs(np.ones(details.weight_before.shape),
                                     np.arange(details.channels, dtype=np.float64))
    where = np.argwhere(owner == channel)
    chosen = [tuple(int(i) for i in index) for index in where[:count]]
    return WeightExamples(
        [WeightEntry(i, float(details.weight_before[i]), float(details.weight_after[i])) for i in chosen], len(where)
    )


def bias_note(match: Match) -> str | None:
    """What b stands for when it is not simply the layer's own bias."""
    node = _layer_node(match)
    add = match.nodes.get("bias_add")
    has_bias = len(node.inputs) > 2 and bool(node.inputs[2])
    if add is not None:
        return f"b includes the constant added by Add '{add}'" + ("" if has_bias else " (the layer has no bias)")
    if not has_bias:
        return "b = 0: the layer has no bias"
    if node.op_type == "Gemm":
        c = match.graph.constant_value(node.inputs[2])
        full = c is not None and c.ndim >= 2
        return "b is the Gemm's bias β·C" + (", averaged over its rows" if full else "")
    return None


def formula_lines(details: FoldDetails, channel: int, note: str | None = None) -> list[str]:
    """The fold's formulas for one channel, filled in with the numbers of ``details``; ``note`` explains b."""
    p, c = details.params, channel
    assert p.gamma is not None and p.beta is not None and p.mean is not None and p.var is not None and p.std is not None
    gamma, beta, mean, var, std, s = (float(a[c]) for a in (p.gamma, p.beta, p.mean, p.var, p.std, p.scale))
    eps = float(p.epsilon or 0.0)
    b, b_new = float(details.bias_before[c]), float(details.bias_after[c])
    lines = [
        f"channel {c}:  γ = {number(gamma)}   β = {number(beta)}   "
        f"μ = {number(mean)}   σ² = {number(var)}   ε = {number(eps)}",
        f"σ = √(σ² + ε) = √({number(var)} + {number(eps)}) = {number(std)}",
        f"scale s = γ / σ = {operand(gamma)} / {number(std)} = {number(s)}",
    ]
    examples = weight_entries(details, c)
    lead = "w' = w · s   e.g. "
    for k, entry in enumerate(examples.entries):
        where = ",".join(str(i) for i in entry.index)
        prefix = lead if k == 0 else " " * len(lead)
        lines.append(f"{prefix}w[{where}] = {number(entry.before)} → {operand(entry.before)} · {operand(s)} = "
                     f"{number(entry.after)}")
    if examples.total > len(examples.entries):
        lines.append(" " * len(lead) + f"(and so on for all {examples.total} weights of channel {c})")
    lines.append(f"b' = (b − μ) · s + β = ({number(b)} − {operand(mean)}) "
                 f"· {operand(s)} + {operand(beta)} = {number(b_new)}")
    if note:
        lines.append(" " * len("b' = ") + f"({note})")
    return lines


def channel_slice(tensor: np.ndarray, channel: int) -> np.ndarray:
    """What a viewer shows of one channel of an [N, C, ...] output.

    A Gemm/MatMul output [N, C] gives the channel over the batch; a convolution output gives the first
    sample's map (its middle slice along extra leading spatial axes, so the result is 1-D or 2-D).
    """
    if tensor.ndim <= 2:
        return tensor[:, channel] if tensor.ndim == 2 else tensor
    plane: np.ndarray = tensor[0, channel]
    while plane.ndim > 2:
        plane = plane[plane.shape[0] // 2]
    return plane


def run_samples(model: Model, match: Match, seed: int = 0) -> Samples:
    """Run the model and the folded model on the same seeded input, keeping the BN's output."""
    edit = _fold_plan(match)
    tensor = match.graph.node(match.nodes["bn"]).outputs[0]
    if match.graph.path != "main":
        return Samples(tensor, None, None, f"the match is inside subgraph '{match.graph.path}'; "
                                           "onnxruntime can only expose tensors of the main graph")
    try:  # sizes for dynamic dims that run, as the preview and `fold --check` choose them
        search = search_dims(model, ModelRunner(model), seed=seed, remember=model)
    except GraphLensError as exc:
        return Samples(tensor, None, None, str(exc))
    if not search.ran or search.inputs is None:
        return Samples(tensor, None, None, failure_reason(search))
    inputs = search.inputs
    numeric = preview_edit(model, edit, inputs).numeric  # its boundary is the BN output, before and after
    if not numeric.available or not numeric.boundary_values:
        return Samples(tensor, None, None, numeric.reason or "onnxruntime could not compare the boundary")
    before, after = numeric.boundary_values[0]
    return Samples(tensor, before, after, None)


def bn_lesson(model: Model, match: Match, channel: int | None = None, seed: int = 0,
              samples: Samples | None = None) -> BnLesson:
    """The lesson for ``channel`` (default: the one whose scale is farthest from 1, the most telling).

    Raises ValueError with the rule's reason when the match cannot fold, or when ``channel`` does
    not exist. Pass ``samples`` from :func:`run_samples` to reuse one run for every channel.
    """
    _fold_plan(match)
    details = RULES["fold-bn"].details(match)
    assert details is not None  # fold-bn has details for every match it plans
    scales = details.params.scale
    if channel is None:
        channel = int(np.argmax(np.abs(scales - 1.0)))
    if not 0 <= channel < details.channels:
        raise ValueError(f"channel {channel} is out of range: the layer has {details.channels} output channels")
    samples = samples if samples is not None else run_samples(model, match, seed)
    before = after = difference = within = None
    reason = samples.reason
    if samples.before is not None and samples.after is not None:
        before, after = channel_slice(samples.before, channel), channel_slice(samples.after, channel)
        diff = compare_tensors(samples.tensor, before, after)
        difference, within = diff.max_abs, diff.passed
    return BnLesson(details, channel, formula_lines(details, channel, bias_note(match)), scales.copy(),
                  before, after, difference, reason, within)


def explain_text(lesson: BnLesson) -> str:
    """A plain-language paragraph for someone who has never folded a batch norm."""
    d, c = lesson.details, lesson.channel
    s = float(d.params.scale[c])
    layer = f"{d.kind} '{d.layer}'"
    bias = {
        "Gemm": "its bias C", "MatMul": "a new bias (the MatMul becomes a Gemm, which has one)",
    }.get(d.kind, "its bias")
    change = "grow" if abs(s) > 1 else "shrink"
    plus = "" if d.kind == "MatMul" else " plus a bias"
    return (
        f"At inference time the BatchNormalization '{d.bn}' only applies fixed numbers: for each channel c, "
        "y = γ·(x − μ)/σ + β with σ = √(σ² + ε), where μ and σ² are the mean and variance measured during "
        "training and γ, β were learned. That is a per-channel scale and shift, y = s·x + t with s = γ/σ and "
        f"t = β − μ·s. The {layer} before it is linear (each of its {d.channels} output channels is a weighted "
        f"sum of its inputs{plus}), and scaling a linear layer's output by s is the same as scaling its "
        "weights by s; the shift goes into the bias. So the batch norm can be folded away: the weights that "
        f"produce channel c are multiplied by s_c, {bias} becomes b' = (b − μ)·s + β, and '{d.layer}' writes "
        "the batch norm's output itself — the same result up to rounding, one layer less to run. "
        f"Channel {c} below has s = {number(s)}, so its weights {change} by that factor"
        + (" and change sign." if s < 0 else ".")
    )
