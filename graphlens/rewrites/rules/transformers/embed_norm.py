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

from dataclasses import dataclass, replace

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.numerics.inputs import VALUE_PASS_THROUGH
from graphlens.rewrites.rule import Refusal, Rule, Site, fresh_name
from graphlens.rewrites.rules.fusion import Fused, Fusion, TargetOp, target_op
from graphlens.rewrites.rules.transformers.attention.edits import removal
from graphlens.rewrites.rules.transformers.common import written_by
from graphlens.rewrites.rules.transformers.graph_dims import dims_of


@dataclass(frozen=True)
class _Lookup:
    """One Gather of the match: its table and the ids it reads."""

    node: str
    table: str
    ids: str
    rows: int
    width: int
    computed: bool = False
    """Ids computed in the graph (positions other than 0, 1, 2…), passed to the fused op as position_ids."""


class _Emitted:
    """The nodes and initializers the fused op needs: ids cast to int32, a word table scaled as BART scales it."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: dict[str, onnx.TensorProto] = {}
        self.taken: set[str] = set()

    def int32(self, ids: str, role: str) -> str:
        out = self.site.matched("out")
        name = fresh_name(self.site.graph, f"{out.name}/{role}_int32", self.taken)
        self.nodes.append(onnx.helper.make_node("Cast", [ids], [name], name=name, to=onnx.TensorProto.INT32))
        return name

    def scaled_table(self, word: _Lookup) -> str | Refusal:
        """The word table times the constant the match multiplies its lookup by (BART's √d), or the table."""
        scaled = self.site.node("word_scaled")
        if scaled is None:
            return word.table
        graph = self.site.graph
        factor = graph.constant_value(self.site.value("word_scale"))
        if factor is None or factor.size != 1:
            return self.site.refuse(f"{scaled.label} scales the word lookup by more than one number")
        table = graph.constant_value(word.table)
        assert table is not None
        name = fresh_name(graph, f"{word.table}_scaled", self.taken)
        values = (table.astype(np.float64) * float(factor.reshape(-1)[0])).astype(table.dtype)
        self.initializers[name] = onnx.numpy_helper.from_array(values, name)
        return name


class FuseEmbedLayerNorm(Fusion):
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
        """A LayerNormalization of a sum of table lookups (Gathers of constants): the embeddings, not a residual,
        nor the norm of one lookup alone (Phi-2's first layer)."""
        summed = graph.producer(node.inputs[0]) if node.inputs else None
        return summed is not None and summed[0].op_type == "Add" and written_by(
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
        found = _roles(graph, tables)
        if found is None:
            return site.refuse(f"none of the {len(tables)} tables added before {out.label} is read at positions "
                               "0, 1, 2…, at a position_ids input or at positions computed per token, so none is "
                               "the position embedding")
        word, position, segment = found
        problem = self._problem(site, tables, word) or _read_elsewhere(site, keep_lookups=position.computed)
        if problem is not None:
            return site.refuse(problem)
        fused = _Emitted(site)
        scaled = site.node("word_scaled")
        if scaled is not None and word.node != site.matched("word").name:
            return site.refuse(f"{scaled.label} scales the lookup of {site.matched('word').label}, which is not the "
                               "word embedding, and the fused op scales none")
        word_table = fused.scaled_table(word)
        if isinstance(word_table, Refusal):
            return word_table
        inputs = [fused.int32(word.ids, "input_ids"), fused.int32(segment.ids, "segment_ids") if segment else "",
                  word_table, position.table, segment.table if segment else "",
                  site.value("gamma"), site.value("beta")]
        if not _counts_up(graph, position.ids):  # positions given as an input, or computed per token
            inputs += ["", fused.int32(position.ids, "position_ids")]
        # onnxruntime's type inference wants the mask_index output named, though nothing reads it
        outputs = [out.outputs[0], fresh_name(graph, f"{out.name}/mask_index", fused.taken)]
        # a Shape of a lookup (TorchScript's position count) reads the fused output, which has the same shape; not
        # when the positions are computed from it (the fused op would read its own output)
        reroute = [] if position.computed else [(site.matched(label).outputs[0], out.outputs[0])
                                                for label in ("word", "position")]
        return Fused(target, inputs, {"epsilon": float(out.attrs.get("epsilon", 1e-5))}, outputs=outputs,
                     before=fused.nodes, reroute=reroute, initializers=fused.initializers)

    def removed(self, site: Site, fused: Fused, added: list[onnx.NodeProto]) -> list[str] | Refusal:
        """The match, less the lookups a shape computation still reads (BART's positions count the words)."""
        matched = [site.graph.by_name[name] for name in site.match.nodes.values()]
        order = site.graph.positions()
        return sorted(removal(site.graph, matched, added), key=order.__getitem__)

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


def _read_elsewhere(site: Site, keep_lookups: bool = False) -> str | None:
    """A lookup read outside the match other than by a Shape: the fused op does not give it. With
    ``keep_lookups`` (positions computed from the lookups' shape) they stay for that, read by anything."""
    if keep_lookups:
        return None
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
    return _Lookup(node.name, node.inputs[0], node.inputs[1], int(table.shape[0]), int(table.shape[1]))


def _roles(graph: Graph, tables: list[_Lookup]) -> tuple[_Lookup, _Lookup, _Lookup | None] | None:
    """(word, position, token type): the positions count 0, 1, 2… or are an input named for them, else they are
    the one lookup whose ids are computed per token (rank 2) rather than a graph input; the word table is the
    larger of the others."""
    positions = [t for t in tables if _counts_up(graph, t.ids) or _named_positions(graph, t.ids)]
    if not positions:
        computed = [t for t in tables if not _from_input(graph, t.ids)]
        dims = dims_of(graph, computed[0].ids) if len(computed) == 1 else None
        if dims is None or len(dims) != 2:
            return None
        positions = [replace(computed[0], computed=True)]
    if len(positions) != 1:
        return None
    position = positions[0]
    rest = sorted((t for t in tables if t.node != position.node), key=lambda t: -t.rows)
    if not rest:
        return None
    return rest[0], position, (rest[1] if len(rest) > 1 else None)


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
    source = _from_input(graph, ids)
    return source is not None and "position" in source.lower()


def _from_input(graph: Graph, ids: str) -> str | None:
    """The graph input ``ids`` are, through Casts and the like; None when they are computed."""
    tensor = ids
    for _ in range(4):
        if graph.is_graph_input(tensor):
            return tensor
        found = graph.producer(tensor)
        if found is None or found[0].op_type not in VALUE_PASS_THROUGH:
            return None
        tensor = found[0].inputs[0]
    return None


RULES: tuple[Rule, ...] = (FuseEmbedLayerNorm(),)

__all__ = ["RULES", "FuseEmbedLayerNorm"]
