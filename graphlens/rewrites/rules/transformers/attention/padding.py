"""An attention bias that is only a padding mask, given to the fused op as the mask itself.

HF builds the attention bias from ``attention_mask [batch, keys]`` through a dozen ops (Unsqueeze, Expand,
Cast, ``(1 - mask) · finfo.min`` or ``Where(mask, 0, -inf)``), which the fused op would then add to every
score. onnxruntime's Attention (``mask_index``) and MultiHeadAttention (``key_padding_mask``) take the mask
itself, ``[batch, keys]`` with 1 where a key is attended, and those ops fall away, as onnxruntime's optimizer
leaves an encoder.

Whether a bias is that function of one graph input is decided by running the bias's own subgraph in
onnxruntime on probe masks: random rows of 0 and 1 with their first key kept, at two batch sizes and
lengths, each twice with the other inputs' values drawn anew. The bias must be 0 wherever the mask is 1
and at most -10⁴ wherever it is 0, for every head and query row, and must not change with the other inputs.
The fused op is told that value (``mask_filter_value``), so it adds to a hidden key what the bias added, and a
query whose every key is hidden comes out as it did. A bias of -inf is not read so: such a row is NaN there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.types import type_of_value_info
from graphlens.numerics.run import ModelRunner

PROBES = ((2, 5), (1, 3))
"""(batch, length) of the probe masks."""
MAX_CONSTANT_BYTES = 1 << 20
"""A subgraph reading more constant data than this computes something other than a mask."""
HIDDEN = -1e4


@dataclass(frozen=True)
class Padding:
    """``bias`` is ``hidden`` where ``mask`` (a graph input, 1 = attend) is 0, and 0 elsewhere."""

    mask: str
    hidden: float


def padding_mask(graph: Graph, bias: str) -> Padding | None:
    """The graph input ``bias`` is the padding mask of, and the value it gives a hidden key; None when it is not
    provably that."""
    sub = _subgraph(graph, bias)
    if sub is None:
        return None
    model, inputs = sub
    candidates = sorted((v for v in inputs if len(type_of_value_info(v).shape or ()) == 2),
                        key=lambda v: "mask" not in v.name.lower())  # attention_mask before input_ids
    if not candidates:
        return None
    session = ModelRunner(model)
    if session.error is not None:  # onnxruntime refuses the piece: it is no mask we can read
        return None
    for candidate in candidates:
        hidden = _probes_pass(session, inputs, candidate)
        if hidden is not None:
            return Padding(candidate.name, hidden)
    return None


def _probes_pass(session: ModelRunner, inputs: list[onnx.ValueInfoProto],
                 mask_input: onnx.ValueInfoProto) -> float | None:
    """The one finite value every probe's bias gives a hidden key; None when a probe shows no padding mask."""
    rng = np.random.default_rng(0)
    hidden: set[float] = set()
    declared = type_of_value_info(mask_input).shape or (None, None)
    for probe in PROBES:  # a dim the model fixes keeps its size
        batch, length = (d if isinstance(d, int) and d > 0 else p for d, p in zip(declared, probe))
        mask = (rng.random((batch, length)) < 0.6).astype(np.int64)
        mask[:, 0] = 1
        results = [_run(session, inputs, mask_input, mask, batch, length, rng) for _ in range(2)]
        if results[0] is None or results[1] is None or not np.array_equal(results[0], results[1]):
            return None
        found = _hidden_value(results[0], mask)
        if found is None:
            return None
        hidden.add(found)
    return hidden.pop() if len(hidden) == 1 else None


def _subgraph(graph: Graph, bias: str) -> tuple[onnx.ModelProto, list[onnx.ValueInfoProto]] | None:
    """The nodes ``bias`` is computed by, as a model of its own, and the graph inputs it reads."""
    needed: set[str] = set()
    frontier: list[str] = [bias]
    inputs: list[onnx.ValueInfoProto] = []
    constants = 0
    declared = {v.name: v for v in graph.proto.input}
    while frontier:
        tensor = frontier.pop()
        found = graph.producer(tensor)
        if found is None:
            if tensor in declared and tensor not in graph.initializers:
                if all(v.name != tensor for v in inputs):
                    inputs.append(declared[tensor])
            elif tensor in graph.initializers:
                constants += int(np.prod(graph.initializers[tensor].dims, dtype=np.int64)) * 4
            else:
                return None  # an outer scope's tensor
            continue
        node = found[0]
        if node.name in needed:
            continue
        if node.domain not in ("", "ai.onnx") or node.proto.attribute and any(
                a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in node.proto.attribute):
            return None
        needed.add(node.name)
        frontier.extend(t for t in node.inputs if t)
    if not inputs or constants > MAX_CONSTANT_BYTES:
        return None
    nodes = [n.proto for n in graph.nodes if n.name in needed]
    read = {t for n in nodes for t in n.input}
    initializers = [graph.initializers[name] for name in read if name in graph.initializers]
    dtype = np.dtype(graph.tensor_type(bias).dtype or "float32")
    output = onnx.helper.make_tensor_value_info(bias, onnx.helper.np_dtype_to_tensor_dtype(dtype), None)
    sub = onnx.helper.make_graph(nodes, "bias", inputs, [output], initializers)
    model = graph.model
    opsets = list(model.proto.opset_import) if model is not None else [onnx.helper.make_opsetid("", 17)]
    proto = onnx.helper.make_model(sub, opset_imports=opsets)
    proto.ir_version = model.proto.ir_version if model is not None else 8
    return proto, inputs


def _run(session: ModelRunner, inputs: list[onnx.ValueInfoProto], mask_input: onnx.ValueInfoProto, mask: np.ndarray,
         batch: int, length: int, rng: np.random.Generator) -> np.ndarray | None:
    """The bias for ``mask``; the other inputs [batch, length] (or [batch]) of random small integers or floats."""
    feeds = {}
    for value in inputs:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(value.type.tensor_type.elem_type))
        if value.name == mask_input.name:
            feeds[value.name] = mask.astype(dtype)
            continue
        dims = type_of_value_info(value).shape or ()
        if len(dims) > 2:
            return None
        shape = tuple(d if isinstance(d, int) and d > 0 else p for d, p in zip(dims, (batch, length)))
        feeds[value.name] = (rng.integers(0, 2, shape) if dtype.kind in "iub" else rng.normal(size=shape)).astype(dtype)
    result = session.run(feeds)
    if result.outputs is None:  # a probe the piece cannot run (shapes tied otherwise): not read as a mask
        return None
    return next(iter(result.outputs.values()))  # the one output: the bias


def _hidden_value(bias: np.ndarray, mask: np.ndarray) -> float | None:
    """The value the bias gives every hidden key, where it is 0 for every attended one, one finite value at most
    -10⁴, over every head and query row; None otherwise (a -inf row of hidden keys would be NaN where the fused op,
    told the value, is not)."""
    batch, length = mask.shape
    if bias.ndim != 4 or bias.shape[-1] != length or bias.shape[0] not in (1, batch) or bias.dtype.kind != "f":
        return None
    full = np.broadcast_to(bias, (batch, bias.shape[1], bias.shape[2], length)).astype(np.float64)
    keys = np.broadcast_to(mask[:, None, None, :].astype(bool), full.shape)
    hidden = np.unique(full[~keys])
    if not np.all(full[keys] == 0) or len(hidden) != 1 or not np.isfinite(hidden[0]) or hidden[0] > HIDDEN:
        return None
    return float(hidden[0])
