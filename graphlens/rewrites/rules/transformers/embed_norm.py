"""fuse-embed-layer-norm: BERT's embeddings become onnxruntime's ``EmbedLayerNormalization`` (com.microsoft).

The embeddings of BERT-like encoders (BERT, DistilBERT, RoBERTa) read a word, a position and optionally a
token-type table by ``Gather``, add them and normalize the sum::

    out = LayerNorm(word[ids] + position[positions] + segment[segment_ids]) · γ + β

The fused op reads its ids as int32 (Casts are added before it), uses the positions 0, 1, … S−1 of each
sequence unless it is given ``position_ids``, and adds the token-type table only with its ids. The match's
three Gathers are told apart by their ids: the positions are 0, 1, 2… (a Slice from 0 of a constant holding
0, 1, 2…, as HF reads its ``position_ids`` buffer) or a graph input named for positions; the word ids are the
graph input read by the widest-vocabulary table; the token types are the third.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.rewrites.rule import Refusal, Rule, Site, fresh_name
from graphlens.rewrites.rules.transformers.common import Fused, TargetOp, TransformerFusion, target_op, written_by

_VALUE_KEEPING = ("Cast", "Unsqueeze", "Squeeze", "Identity")
"""Ops a graph input's ids pass through and still are those ids."""


@dataclass(frozen=True)
class _Lookup:
    """One Gather of the match: its table and the ids it reads."""

    table: str
    ids: str
    rows: int
    width: int


class FuseEmbedLayerNorm(TransformerFusion):
    """Gather(word) + Gather(position) [+ Gather(token type)], LayerNormalization → EmbedLayerNormalization."""

    name = "fuse-embed-layer-norm"
    kind = "embed-layer-norm"
    family = "embeddings layer norm"
    fused_ops = ("EmbedLayerNormalization",)
    description = ("fuse BERT's embeddings (word, position and token-type tables added, then LayerNormalization) "
                   "into onnxruntime's EmbedLayerNormalization")
    pattern_names = ("embed-layer-norm",)
    anchor_ops = ("LayerNormalization",)

    def is_site(self, graph: Graph, node: Node) -> bool:
        """A LayerNormalization of a sum of table lookups (Gathers of constants): the embeddings, not a residual."""
        return bool(node.inputs) and written_by(
            graph, node.inputs[0], lambda n: n.op_type == "Gather" and graph.is_constant(n.inputs[0]),
            through=("Add",), steps=2)

    def fuse(self, site: Site) -> Fused | Refusal:
        target = target_op(site, None, "EmbedLayerNormalization")
        assert isinstance(target, TargetOp)
        graph, out = site.graph, site.matched("out")
        lookups = [_lookup(graph, site, label) for label in ("word", "position", "segment") if site.node(label)]
        if any(found is None for found in lookups):
            return site.refuse(f"a table {out.label} adds is not a constant matrix")
        tables = [found for found in lookups if found is not None]
        positions = [t for t in tables if _counts_up(graph, t.ids) or _named_positions(graph, t.ids)]
        if len(positions) != 1:
            return site.refuse(f"none of the {len(tables)} tables added before {out.label} is read at positions "
                               "0, 1, 2… or at a position_ids input, so none is the position embedding")
        position = positions[0]
        rest = sorted((t for t in tables if t is not position), key=lambda t: -t.rows)
        word, segment = rest[0], (rest[1] if len(rest) > 1 else None)
        problem = self._problem(site, [t for t in tables], word) or _read_elsewhere(site)
        if problem is not None:
            return site.refuse(problem)
        epsilon = float(out.attrs.get("epsilon", 1e-5))
        before: list[onnx.NodeProto] = []
        taken: set[str] = set()

        def int32(ids: str, role: str) -> str:
            name = fresh_name(graph, f"{out.name}/{role}_int32", taken)
            before.append(onnx.helper.make_node("Cast", [ids], [name], name=name, to=onnx.TensorProto.INT32))
            return name

        inputs = [int32(word.ids, "input_ids"), int32(segment.ids, "segment_ids") if segment else "",
                  word.table, position.table, segment.table if segment else "",
                  site.value("gamma"), site.value("beta")]
        if not _counts_up(graph, position.ids):  # positions given as an input
            inputs += ["", int32(position.ids, "position_ids")]
        # onnxruntime's type inference wants the mask_index output named, though nothing reads it
        outputs = [out.outputs[0], fresh_name(graph, f"{out.name}/mask_index", taken)]
        # a Shape of a lookup (TorchScript's position count) reads the fused output, which has the same shape
        reroute = [(node.outputs[0], out.outputs[0]) for node in map(site.matched, ("word", "position"))]
        return Fused(target, inputs, {"epsilon": epsilon}, outputs=outputs, before=before, reroute=reroute)

    def _problem(self, site: Site, tables: list[_Lookup], word: _Lookup) -> str | None:
        graph, out = site.graph, site.matched("out")
        gamma = graph.constant_value(site.value("gamma"))
        widths = {t.width for t in tables}
        if gamma is None or gamma.ndim != 1 or widths != {gamma.size}:
            return (f"the tables added before {out.label} are {', '.join(str(w) for w in sorted(widths))} wide and "
                    f"its scale has {'?' if gamma is None else gamma.size} values, not one width")
        axis = int(out.attrs.get("axis", -1))
        if axis not in (-1, 2):
            return f"{out.label} normalizes over axis {axis}, not over the embedding (the last axis)"
        dtype = graph.tensor_type(word.table).dtype
        if dtype not in ("float32", "float16"):
            return f"the word table '{word.table}' is {dtype}, and EmbedLayerNormalization takes float32 or float16"
        ids = graph.tensor_type(word.ids).shape
        if ids is not None and len(ids) != 2:
            return f"the word ids '{word.ids}' have rank {len(ids)}, and EmbedLayerNormalization takes [batch, seq]"
        return None


def _read_elsewhere(site: Site) -> str | None:
    """A lookup read outside the match other than by a Shape: the fused op does not give it."""
    matched = set(site.match.nodes.values())
    for label in ("word", "position", "segment"):
        node = site.node(label)
        if node is None:
            continue
        readers = [r for r, _ in site.graph.consumers(node.outputs[0]) if r.name not in matched]
        other = next((r for r in readers if r.op_type != "Shape"), None)
        if other is not None or site.graph.is_graph_output(node.outputs[0]):
            who = other.label if other is not None else "a graph output"
            return f"the lookup of {node.label} is also read by {who}, which the fused op would not give"
    return None


def _lookup(graph: Graph, site: Site, label: str) -> _Lookup | None:
    node = site.matched(label)
    table = graph.constant_value(node.inputs[0])
    if table is None or table.ndim != 2 or int(node.attrs.get("axis", 0)) != 0:
        return None
    return _Lookup(node.inputs[0], node.inputs[1], int(table.shape[0]), int(table.shape[1]))


def _counts_up(graph: Graph, ids: str) -> bool:
    """ids are 0, 1, 2…: a Slice from 0, step 1, of a constant holding 0, 1, 2… along its one long axis."""
    found = graph.producer(ids)
    if found is None or found[0].op_type != "Slice" or len(found[0].inputs) < 3:
        return False
    node = found[0]
    data = graph.constant_value(node.inputs[0])
    if data is None or data.size == 0 or sum(d > 1 for d in data.shape) > 1:
        return False
    if not np.array_equal(np.asarray(data).reshape(-1), np.arange(data.size)):
        return False
    long_axis = int(np.argmax(data.shape))
    starts = graph.constant_value(node.inputs[1])
    axes = graph.constant_value(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3] else np.array([0])
    steps = graph.constant_value(node.inputs[4]) if len(node.inputs) > 4 and node.inputs[4] else np.array([1])
    if starts is None or axes is None or steps is None or starts.size != 1 or axes.size != 1:
        return False
    axis = int(axes.reshape(-1)[0]) % data.ndim
    return axis == long_axis and int(starts.reshape(-1)[0]) == 0 and int(steps.reshape(-1)[0]) == 1


def _named_positions(graph: Graph, ids: str) -> bool:
    """ids are a graph input named for positions (position_ids), through Casts and the like."""
    tensor = ids
    for _ in range(4):
        if graph.is_graph_input(tensor):
            return "position" in tensor.lower()
        found = graph.producer(tensor)
        if found is None or found[0].op_type not in _VALUE_KEEPING:
            return False
        tensor = found[0].inputs[0]
    return False


RULES: tuple[Rule, ...] = (FuseEmbedLayerNorm(),)

__all__ = ["RULES", "FuseEmbedLayerNorm"]
