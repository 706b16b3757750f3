"""What fuse-rotary reads off the graph: the Slice bounds, the heads view of x, and where cos and sin come from.

The rotary ops hold only the first half of each table (its even channels when interleaved), so the
rule must prove that the exported cos and sin repeat that half in the other (see :mod:`rotary`):
:func:`trace` follows a table up through the ops that keep such a repetition (Cast, Cos, Sin, a
scalar scaling, rows gathered from a table) to a ``Concat(f, f)``, a repeat-interleave or a constant
that shows it, and says which node stops the proof where none does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.core.types import Dim
from graphlens.rewrites.rules.transformers.graph_dims import (
    dims_of,
    evaluate,
    ints,
    is_last,
    rank_of,
    scaled,
)

INT64_MAX = 2**63 - 1
ELEMENTWISE = ("Cast", "Cos", "Sin", "Neg", "Identity")
"""Ops that keep a table repeating its halves (or pairs) if their input does."""
REPEATED = {False: "its first half in its second", True: "each even channel in the next odd one"}
"""What cos and sin must repeat, rotate-half and interleaved."""


@dataclass
class Table:
    """Where the op's cos (or sin) comes from.

    Exactly one of: ``half``, a tensor holding the [B, S, h] values; ``full``, a [B, S, d] tensor
    proven to repeat its halves (pairs), to be cut; ``value``, constant [B, S, h] values. ``cache``
    [P, h] with ``positions`` is there besides when the table is a Gather from a constant cache.
    """

    half: str | None = None
    full: str | None = None
    value: np.ndarray | None = None
    cache: np.ndarray | None = None
    positions: str | None = None
    head_axis: int | None = None
    """x's head axis the table broadcasts over: 1 ([B, H, S, D]), 2 ([B, S, H, D]), None (3-D x)."""

    def dims(self, graph: Graph) -> tuple[Dim, Dim]:
        """The table's batch and sequence dims."""
        if self.value is not None:
            return self.value.shape[0], self.value.shape[1]
        shape = dims_of(graph, self.half or self.full or "")
        return (shape[0], shape[1]) if shape is not None and len(shape) == 3 else (None, None)


def producer(graph: Graph, tensor: str, *ops: str) -> Node | None:
    found = graph.producer(tensor)
    return found[0] if found is not None and found[0].op_type in ops else None


def axis_of(graph: Graph, node: Node) -> int | None:
    """The single axis of an Unsqueeze (attribute or input), else None."""
    axes = node.attrs.get("axes")
    if axes is None and len(node.inputs) > 1:
        axes = ints(graph, node.inputs[1])
    return int(axes[0]) if axes is not None and len(axes) == 1 else None


def same(a: Dim, b: Dim) -> bool:
    return a is not None and a == b


def cut(graph: Graph, node: Node, rank: int) -> tuple[int, int, int] | str:
    """(start, end, step) of a Slice along the last axis, or the end of a sentence saying why not."""
    if "starts" in node.attrs:  # opset < 10
        bounds = [node.attrs.get(k) for k in ("starts", "ends", "axes")] + [[1]]
    else:
        padded = [*node.inputs, "", "", "", ""]
        bounds = [(ints(graph, t) or _computed_ints(graph, t)) if t else None for t in padded[1:5]]
        for role, t, b in zip(("start", "end", "axis", "step"), padded[1:5], bounds):
            if t and b is None:
                return f"slices with its {role} '{t}', which {graph.why_not_constant(t) or 'is not a small constant'}"
    starts, ends, axes, steps = bounds
    if len(starts) != 1 or len(ends) != 1:
        return "slices more than one axis"
    axis = int(axes[0]) if axes else 0
    if not is_last(axis, rank):
        return f"slices axis {axis}, not the last"
    return int(starts[0]), int(ends[0]), int(steps[0]) if steps else 1


def _computed_ints(graph: Graph, tensor: str) -> list[int] | None:
    """Slice bounds computed from x's dims (TorchScript's ``x.shape[-1] // 2``), where those dims are known."""
    with np.errstate(all="ignore"):
        value = evaluate(graph, tensor)
    if value is None or value.size > 8 or not np.isfinite(value).all():
        return None
    return [int(np.floor(v)) for v in np.clip(value.reshape(-1), -(2**62), 2**62)]


def span(start: int, end: int, step: int, width: int) -> str:
    """x[..., start:end:step] as Python writes it (an end past the width left out)."""
    return f"x[..., {start}:{'' if end >= width else end}{'' if step == 1 else f':{step}'}]"


def heads_view(graph: Graph, x: str, head_axis: int | None, readers: set[str]) -> tuple[str, list[Node]] | None:
    """(flat, the view's nodes) where x is only a view of a 3-D ``flat`` [B, S, H·D] with its heads split:
    Reshape to [B, S, H, D] (head_axis 2), then Transpose to [B, H, S, D] (head_axis 1); else None.

    Only the nodes named in ``readers`` may read x, and nothing but the view the Reshape's output:
    then a rotation of ``flat`` followed by the same view replaces the view and the rotation.
    """
    view: list[Node] = []
    tensor = x
    if head_axis == 1:
        transpose = producer(graph, x, "Transpose")
        if transpose is None or list(transpose.attrs.get("perm", ())) != [0, 2, 1, 3]:
            return None
        view.append(transpose)
        tensor = transpose.inputs[0]
    elif head_axis != 2:
        return None
    reshape = producer(graph, tensor, "Reshape")
    if reshape is None:
        return None
    view.append(reshape)
    allowed = [readers, {view[0].name}]
    for node, names in zip(view, allowed):
        output = node.outputs[0]
        if graph.is_graph_output(output) or any(r.name not in names for r, _ in graph.consumers(output)):
            return None
    flat, split = reshape.inputs[0], dims_of(graph, reshape.outputs[0])
    flat_dims = dims_of(graph, flat)
    if flat_dims is None or len(flat_dims) != 3 or split is None or len(split) != 4:
        return None
    heads, size = split[2], split[3]
    target = ints(graph, reshape.inputs[1])
    copied = target is not None and target[:2] == [0, 0] and not reshape.attrs.get("allowzero", 0)
    tokens_kept = copied or (same(flat_dims[0], split[0]) and same(flat_dims[1], split[1]))
    if not (isinstance(heads, int) and isinstance(size, int) and tokens_kept):
        return None
    return (flat, view) if flat_dims[2] is None or flat_dims[2] == heads * size else None


# ------------------------------------------------------------------------------ cos and sin
def repeats(value: np.ndarray, d: int, interleaved: bool) -> bool:
    """Whether a constant table of width d repeats its first half in its second (even channels in the odd)."""
    second = value[..., 1::2] if interleaved else value[..., d // 2 :]
    return value.shape[-1] == d and bool(np.array_equal(halve(value, interleaved), second))


def halve(value: np.ndarray, interleaved: bool) -> np.ndarray:
    return value[..., 0::2] if interleaved else value[..., : value.shape[-1] // 2]


def duplicated_from(graph: Graph, tensor: str, interleaved: bool) -> str | None:
    """x when ``tensor`` is Concat(x, x) on the last axis, or x repeat-interleaved by 2 on it (GPT-J)."""
    rank = rank_of(graph, tensor)
    if not interleaved:
        node = producer(graph, tensor, "Concat")
        if node is None or len(node.inputs) != 2 or node.inputs[0] != node.inputs[1]:
            return None
        return node.inputs[0] if is_last(int(node.attrs.get("axis", 0)), rank) else None
    flat = producer(graph, tensor, "Reshape")  # Reshape(Expand|Tile(Unsqueeze(x, -1), [1, .., 2])): repeat_interleave
    paired = producer(graph, flat.inputs[0], "Expand", "Tile") if flat is not None else None
    unsqueeze = producer(graph, paired.inputs[0], "Unsqueeze") if paired is not None else None
    if paired is None or unsqueeze is None:
        return None
    source = unsqueeze.inputs[0]
    source_rank = rank_of(graph, source)
    reps = ints(graph, paired.inputs[1])
    if source_rank is None or rank != source_rank or not is_last(axis_of(graph, unsqueeze), source_rank + 1):
        return None
    return source if reps is not None and reps[-1] == 2 and all(r == 1 for r in reps[:-1]) else None


def why_not_repeating(graph: Graph, tensor: str, d: int, interleaved: bool, depth: int = 0) -> str | None:
    """None when ``tensor`` is known to repeat its halves (pairs), else the end of a sentence naming what stops
    the proof."""
    if duplicated_from(graph, tensor, interleaved) is not None:
        return None
    value = graph.constant_value(tensor)
    if value is not None:
        return None if repeats(value, d, interleaved) else \
            f"{'comes from' if depth else 'is'} a constant that does not repeat {REPEATED[interleaved]}"
    found = graph.producer(tensor)
    node = found[0] if found is not None and depth < 12 else None
    rows = node is not None and node.op_type == "Gather" and int(node.attrs.get("axis", 0)) == 0  # rows of a table
    if node is not None and (node.op_type in ELEMENTWISE or rows or scaled(graph, node)):
        return why_not_repeating(graph, scaled(graph, node) or node.inputs[0], d, interleaved, depth + 1)
    source = (node.label if node is not None
              else f"graph input '{tensor}'" if graph.is_graph_input(tensor) else f"'{tensor}'")
    return f"comes from {source}: nothing shows it to repeat {REPEATED[interleaved]}, as RotaryEmbedding assumes"


def gathered(graph: Graph, tensor: str) -> tuple[np.ndarray, str] | None:
    """(table, position ids) when ``tensor`` is Gather(constant 2-D table, int64 ids) on axis 0, maybe Cast."""
    cast = producer(graph, tensor, "Cast")
    gather = producer(graph, cast.inputs[0] if cast else tensor, "Gather")
    if gather is None or int(gather.attrs.get("axis", 0)) != 0:
        return None
    table = graph.constant_value(gather.inputs[0])
    ids = graph.tensor_type(gather.inputs[1]).dtype
    if table is None or table.ndim != 2 or ids != "int64" or rank_of(graph, gather.inputs[1]) != 2:
        return None
    return table, gather.inputs[1]


def trace(graph: Graph, tensor: str, x_rank: int, d: int, interleaved: bool, dtype: np.dtype) -> Table | str:
    """Where one of cos/sin comes from (see :class:`Table`), or the end of a sentence saying why it cannot be read."""
    value = graph.constant_value(tensor)
    if value is not None:
        return constant_table(value, x_rank, d, interleaved, dtype)
    head_axis, inner, half = None, tensor, None
    if x_rank == 4:
        source = duplicated_from(graph, tensor, interleaved) if interleaved else None
        unsqueeze = producer(graph, source or tensor, "Unsqueeze")
        head_axis = axis_of(graph, unsqueeze) if unsqueeze is not None else None
        head_axis = head_axis + 4 if head_axis is not None and head_axis < 0 else head_axis
        if unsqueeze is None or head_axis not in (1, 2) or rank_of(graph, unsqueeze.inputs[0]) != 3:
            return f"is not a [batch, sequence, {d}] table unsqueezed on the heads' axis (1 or 2)"
        inner = unsqueeze.inputs[0]
        half = inner if source is not None else None
    elif rank_of(graph, tensor) != 3:
        return f"is not a [batch, sequence, {d}] table"
    if half is None:
        half = duplicated_from(graph, inner, interleaved)
    if half is None:
        reason = why_not_repeating(graph, inner, d, interleaved)
        if reason is not None:
            return reason
    found = gathered(graph, half or inner)
    cache = None if found is None else found[0] if half is not None else halve(found[0], interleaved)
    return Table(half=half, full=None if half else inner, head_axis=head_axis,
                 cache=None if cache is None else cache.astype(dtype), positions=found and found[1])


def constant_table(value: np.ndarray, x_rank: int, d: int, interleaved: bool, dtype: np.dtype) -> Table | str:
    """A constant cos/sin as a [B, S, h] table, with the head axis its shape shows."""
    if not repeats(value, d, interleaved):
        return f"is a constant that does not repeat {REPEATED[interleaved]}"
    if value.ndim != x_rank or (x_rank == 4 and value.shape[1] == value.shape[2] == 1):
        return f"is a constant of shape {list(value.shape)}, which does not say which axes of x it spans"
    if x_rank == 4:
        axis = 1 if value.shape[1] == 1 else 2 if value.shape[2] == 1 else None
        if axis is None:
            return f"is a constant of shape {list(value.shape)}, not one table for every head"
        return Table(value=halve(np.squeeze(value, axis), interleaved).astype(dtype), head_axis=axis)
    return Table(value=halve(value, interleaved).astype(dtype))

