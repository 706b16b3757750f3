"""The scale and the mask of an attention match, as the fused ops take them (see :mod:`attention`)."""

from __future__ import annotations

import numpy as np

from graphlens.rewrites.rule import Refusal, Site
from graphlens.rewrites.rules.transformers.attention import edits as edits
from graphlens.rewrites.rules.transformers.attention import shapes as shapes
from graphlens.rewrites.rules.transformers.graph_dims import Dims, dims_of, scalar_value


def scale_of(site: Site, known: dict[str, Dims]) -> float | Refusal:
    """The product of the scale factors on Q, on Kᵀ and on the scores; 1 when there are none."""
    total = 1.0
    for label, value_label, operand in (("q_scaled", "q_scale", "q"), ("kt_scaled", "k_scale", "kt"),
                                        ("scaled", "scale", "scores")):
        node = site.node(label)
        if node is None:
            continue
        tensor = site.tensor(value_label)
        assert tensor is not None
        value = scalar_value(site.graph, tensor, known)
        if value is None:
            constant = site.graph.constant_value(tensor)
            what = "is not constant" if constant is None else f"holds {constant.size} numbers, not one"
            return site.refuse(f"the scale '{tensor}' of {node.label} {what}")
        if node.op_type == "Div":
            if node.inputs[1] != tensor or node.inputs[0] == tensor:
                return site.refuse(f"{node.label} divides '{tensor}' by the {operand}, which is not a scaling")
            if value == 0:
                return site.refuse(f"{node.label} divides by zero")
            value = 1.0 / value
        total *= value
    return total


def mask_of(site: Site, emitted: edits.Emitted) -> tuple[str | None, bool] | Refusal:
    """(additive bias or None, causal): the mask as the fused op takes it."""
    node = site.node("masked")
    if node is None:
        return None, False
    before = site.node("scaled") or site.node("scores")
    assert before is not None
    scores = before.outputs[0]
    graph = site.graph
    if node.op_type == "Add":
        others = [t for t in node.inputs if t != scores]
        if len(others) != 1:
            return site.refuse(f"{node.label} adds the scores to themselves, which is not a mask")
        if shapes.is_causal_bias(graph, others[0]):
            return None, True
        return others[0], False
    slot = node.inputs.index(scores)
    if slot == 0 or len(node.inputs) != 3:
        return site.refuse(f"{node.label} uses the scores as its condition, which is not a mask")
    cond, fill = node.inputs[0], node.inputs[3 - slot]
    fill_value = graph.constant_value(fill)
    if fill_value is None or fill_value.size != 1 or not float(fill_value.reshape(-1)[0]) <= shapes.LARGE_NEGATIVE:
        return site.refuse(f"{node.label} replaces scores by '{fill}', not "
                           "by a large negative constant, so it is not a mask")
    keep_when_true = slot == 1
    if keep_when_true and shapes.is_causal_condition(graph, cond):
        return None, True
    zero = emitted.const(np.zeros((), dtype=fill_value.dtype), "zero")
    branches = [zero, fill] if keep_when_true else [fill, zero]
    return emitted.node("Where", [cond, *branches], "bias"), False


def expand_bias(site: Site, emitted: edits.Emitted, bias: str, query: str, seq_axis: int) -> str | Refusal:
    """The bias with one row per query, as the fused ops want it: [.., seq, keys], not [.., 1, keys].

    Left as it is where its shape shows that already; else expanded to [1, 1, seq, 1] against the
    query's length (Expand keeps a bias that has the rows). One without a value per key is refused.
    """
    bias_dims = shapes.dims(site.graph, bias) or dims_of(site.graph, bias)
    if bias_dims is not None and (not 2 <= len(bias_dims) <= 4 or bias_dims[-1] == 1):
        shape = "[" + ", ".join("?" if d is None else str(d) for d in bias_dims) + "]"
        return site.refuse(f"the mask '{bias}' has shape {shape}, not one value per key, so it does not "
                           f"broadcast to the fused op's [batch, heads, seq, keys]")
    query_dims = dims_of(site.graph, query)  # also through the RotaryEmbedding shape inference does not know
    if bias_dims is not None and len(bias_dims) == 4 and query_dims is not None and len(query_dims) > seq_axis:
        rows, seq = bias_dims[2], query_dims[seq_axis]
        if rows is not None and rows == seq:  # equal sizes, or one symbolic dim
            return bias
    shape = emitted.node("Shape", [query], "query_shape")
    axis = emitted.const(np.array([seq_axis], dtype=np.int64), "seq_axis")
    seq_len = emitted.node("Gather", [shape, axis], "query_length", axis=0)
    ones = emitted.const(np.array([1, 1], dtype=np.int64), "ones")
    one = emitted.const(np.array([1], dtype=np.int64), "one")
    rows = emitted.node("Concat", [ones, seq_len, one], "bias_rows", axis=0)
    return emitted.node("Expand", [bias, rows], "bias_expanded")
