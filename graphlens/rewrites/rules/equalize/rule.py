"""equalize (off by default; ``graphlens fold --rules …,equalize``): cross-layer equalization.

Consecutive Conv/ConvTranspose/Gemm layers, through a Relu, a LeakyRelu, a Clip bounded only at 0
or ±∞, or nothing, get their channels rescaled so both layers' weights quantize well: layer 1's
output channel i is divided by s_i, layer 2's input channel i multiplied by it, and the float
outputs do not change (the math is in :mod:`~graphlens.rewrites.rules.equalize.arithmetic`).
Depthwise-separable pairs (a depthwise Conv then a pointwise one) and grouped layers are handled
through where each weight keeps its channels.

A match is one pair, but the rule equalizes the whole chain the pair belongs to (L0 → L1 → …,
each link a layer whose output feeds only the next), sweep after sweep, as AIMET's CLE does;
the chain is planned from its first pair, and its other pairs say so. Each pair is only
equalized where that lowers its int8 weight error; a chain where none does is refused with the
figures. The weight error is all it can see: a rescaled channel also changes the range of the tensor
between the layers, which only calibration data show, so ``quantize`` does not run it unasked
(docs/quantize.md, "Cross-layer equalization", has the figures).

Bias absorption (the paper's moving part of b1 into b2 through the ReLU) is left out: it is exact
only where the pre-activation is provably above the absorbed amount, which without BN statistics
only calibration data suggest, and a rewrite must not change the outputs of inputs it has not seen.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.graph import Graph
from graphlens.core.node import Node
from graphlens.matching.match import Match
from graphlens.rewrites.edit import GraphEdit, Rescaled
from graphlens.rewrites.rule import Plan, Refusal, Rule, Site, clone_node, fresh_name, initializer, shape_text
from graphlens.rewrites.rules.affine_fold import Layer, read_layer
from graphlens.rewrites.rules.equalize import arithmetic as em

PATTERN = """\
pattern equalize: two Conv, ConvTranspose or Gemm layers in a row, through Relu, LeakyRelu, Clip or nothing
verb equalizing
first = Conv|ConvTranspose|Gemm(x, w1: const, b1?: const) shared
act? = Relu|LeakyRelu|Clip(first, ...) shared
second = Conv|ConvTranspose|Gemm(act, w2: const, b2?: const)
"""

LAYER_OPS = ("Conv", "ConvTranspose", "Gemm")
ACTIVATIONS = ("Relu", "LeakyRelu", "Clip")
SUFFIX = ".equalized"


@dataclass(frozen=True)
class Link:
    """Layer ``first`` feeding layer ``second`` alone, through ``act`` or directly."""

    first: Node
    act: Node | None
    second: Node


def _sole_reader(graph: Graph, tensor: str) -> Node | None:
    """The one node reading ``tensor`` (at input 0), when nothing else sees it; else None."""
    readers = graph.consumers(tensor)
    if len(readers) != 1 or readers[0][1] != 0 or graph.is_graph_output(tensor) or tensor in graph.outer_reads():
        return None
    return readers[0][0]


def _readers_text(graph: Graph, tensor: str, expected: Node) -> str:
    others = [n.label for n, _ in graph.consumers(tensor) if n is not expected]
    if graph.is_graph_output(tensor) or tensor in graph.outer_reads():
        others.insert(0, "the graph's outputs" if graph.is_graph_output(tensor) else "a subgraph")
    return ", ".join(others[:3]) + (", …" if len(others) > 3 else "")


def _bound(graph: Graph, act: Node, slot: int, attr: str) -> float | None:
    """A Clip bound (input ``slot`` from opset 11, attribute ``attr`` before); None when absent,
    NaN when not constant."""
    if slot < len(act.inputs) and act.inputs[slot]:
        value = graph.constant_value(act.inputs[slot])
        return float("nan") if value is None or np.asarray(value).size != 1 else float(np.asarray(value).reshape(-1)[0])
    value = act.attrs.get(attr)
    return None if value is None else float(value)


def activation_problem(graph: Graph, act: Node) -> str | None:
    """Why scaling channels does not commute with ``act``, or None (Relu, LeakyRelu, Clip at 0 and ±∞ only)."""
    if act.domain not in ("", "ai.onnx") or act.op_type not in ACTIVATIONS:
        return f"{act.label} is not a Relu, LeakyRelu or Clip, whose outputs scale with their inputs"
    if act.op_type != "Clip":
        return None
    lo, hi = _bound(graph, act, 1, "min"), _bound(graph, act, 2, "max")
    for name, value, free in (("lower", lo, -np.inf), ("upper", hi, np.inf)):
        if value is None or value == 0.0 or value == free or abs(value) >= float(np.finfo(np.float32).max):
            continue
        said = "is not a constant" if np.isnan(value) else f"is {value:g}"
        return (f"the {name} bound of {act.label} {said}; equalizing needs it divided by each channel's scale, "
                "and a Clip takes one bound for all channels")
    return None


def _layer_kind_problem(first: Node, second: Node) -> str | None:
    if first.op_type == "Gemm" and second.op_type != "Gemm":
        return f"{first.label} writes [N, C], which {second.label} does not read as channels"
    if first.op_type != "Gemm" and second.op_type == "Gemm":
        return f"{second.label} reads [N, K], not the channels of {first.label}'s image output"
    if second.op_type == "Gemm" and int(second.attrs.get("transA", 0)):
        return (f"{second.label} transposes its input (transA), so its input channels are not"
                f" {first.label}'s output channels")
    return None


def link_problem(graph: Graph, link: Link) -> str | None:
    """Why ``link`` cannot be equalized, as one sentence naming the node, or None (weights are checked apart)."""
    first, act, second = link.first, link.act, link.second
    after_first = act or second
    if _sole_reader(graph, first.outputs[0]) is not after_first:
        return (f"the output of {first.label} is also read by {_readers_text(graph, first.outputs[0], after_first)}, "
                "which would see its rescaled channels")
    if act is not None:
        problem = activation_problem(graph, act)
        if problem is not None:
            return problem
        if _sole_reader(graph, act.outputs[0]) is not second:
            return (f"the output of {act.label} is also read by {_readers_text(graph, act.outputs[0], second)}, "
                    "which would see its rescaled channels")
    return _layer_kind_problem(first, second)


def next_link(graph: Graph, node: Node) -> Link | None:
    """The link from layer ``node`` to the layer it alone feeds, when it can be equalized."""
    reader = _sole_reader(graph, node.outputs[0]) if node.outputs else None
    act = reader if reader is not None and reader.op_type in ACTIVATIONS else None
    second = _sole_reader(graph, act.outputs[0]) if act is not None else reader
    if second is None or second.op_type not in LAYER_OPS or second.domain not in ("", "ai.onnx"):
        return None
    link = Link(node, act, second)
    return link if link_problem(graph, link) is None else None


def previous_link(graph: Graph, node: Node) -> Link | None:
    """The link from the layer that alone feeds ``node``, when it can be equalized."""
    found = graph.producer(node.inputs[0]) if node.inputs and node.inputs[0] else None
    if found is None:
        return None
    producer = found[0]
    if producer.op_type in ACTIVATIONS and producer.inputs and producer.inputs[0]:
        found = graph.producer(producer.inputs[0])
        if found is None:
            return None
        producer = found[0]
    if producer.op_type not in LAYER_OPS or producer.graph is not graph:
        return None
    link = next_link(graph, producer)
    return link if link is not None and link.second is node else None


# --------------------------------------------------------------------------------- the rule
@dataclass
class _Chain:
    """The layers of a chain, read once: nodes, parameters, and the links between them."""

    site: Site
    links: list[Link]
    layers: list[Layer]

    @property
    def nodes(self) -> list[Node]:
        return [self.links[0].first] + [n for link in self.links for n in (link.act, link.second) if n is not None]


def _weights(layer: Layer) -> em.LayerWeights:
    return em.LayerWeights(layer.op, layer.weight, layer.bias)


def _chain_text(nodes: list[Node]) -> str:
    shown = [n.label for n in nodes]
    return " → ".join(shown if len(shown) <= 4 else [*shown[:2], "…", shown[-1]])


class Equalize(Rule):
    name = "equalize"
    description = ("rescale the channels between consecutive Conv/ConvTranspose/Gemm layers so their weights "
                   "quantize well, the float outputs unchanged (cross-layer equalization)")
    pattern_texts = (PATTERN,)
    default = False
    full_reasons = True
    """A refusal gives the chain's error before and after one sweep of equalization, made for it alone; the
    quantization's trial, which reads the edits only, takes a copy without (a fifth of planning the detector's
    chains)."""

    def _read_pair(self, site: Site, link: Link) -> tuple[Layer, Layer] | Refusal:
        first, second = read_layer(site, link.first), read_layer(site, link.second)
        if isinstance(first, Refusal):
            return first
        if isinstance(second, Refusal):
            return second
        out, into = _weights(first), _weights(second)
        if out.out_channels != into.in_channels:
            return site.refuse(
                f"{link.first.label} has {out.out_channels} output channels (weight {shape_text(first.weight.shape)}) "
                f"but {link.second.label} reads {into.in_channels} (weight {shape_text(second.weight.shape)})")
        return first, second

    def _chain(self, match: Match) -> _Chain | Refusal:
        """The chain of the match's pair, when the pair is its first; or why the pair is not equalized here."""
        site = Site(match, self)
        first, second, act = site.matched("first"), site.matched("second"), site.node("act")
        link = Link(first, act, second)
        problem = link_problem(site.graph, link)
        if problem is not None:
            return site.refuse(problem)
        pair = self._read_pair(site, link)
        if isinstance(pair, Refusal):
            return pair
        head = first
        seen = {first.name}
        while (before := previous_link(site.graph, head)) is not None and before.first.name not in seen:
            if isinstance(self._read_pair(site, before), Refusal):
                break
            head = before.first
            seen.add(head.name)
        if head is not first:
            return site.refuse(f"{first.label} and {second.label} are equalized with the chain that starts at "
                               f"{head.label}, planned as one")
        links, layers = [link], list(pair)
        seen = {first.name, second.name}
        while (after := next_link(site.graph, links[-1].second)) is not None and after.second.name not in seen:
            more = self._read_pair(site, after)
            if isinstance(more, Refusal):
                break
            links.append(after)
            layers.append(more[1])
            seen.add(after.second.name)
        return _Chain(site, links, layers)

    def plan(self, match: Match) -> Plan | Refusal:
        chain = self._chain(match)
        if isinstance(chain, Refusal):
            return chain
        result = em.equalize_chain([_weights(layer) for layer in chain.layers])
        changed = result.changed
        if not any(changed):
            return chain.site.refuse(self._why_not(chain, result))
        lo = changed.index(True)
        hi = len(changed) - changed[::-1].index(True)  # links lo..hi-1 changed: layers lo..hi
        return self._edit(chain, result, lo, hi)

    def _why_not(self, chain: _Chain, result: em.ChainResult) -> str:
        link = chain.links[0]
        names = f"{link.first.label} and {link.second.label}" if len(chain.links) == 1 else _chain_text(chain.nodes)
        weights = [_weights(layer) for layer in chain.layers]
        scales = [em.equalizing_scales(a, b) for a, b in zip(weights, weights[1:])]
        if not any(em.needs_equalizing(s) for s in scales):
            return f"the channels of {names} are equalized already"
        if not self.full_reasons:
            return f"equalizing {names} would not lower their int8 weight quantization error"
        before, after = _summed(result.before), _errors(_trial(weights))
        return (f"equalizing {names} would not lower their int8 weight quantization error "
                f"(per tensor {100 * before.per_tensor:.3g} % → {100 * after.per_tensor:.3g} %, "
                f"per channel {100 * before.per_channel:.3g} % → {100 * after.per_channel:.3g} %)")

    def _edit(self, chain: _Chain, result: em.ChainResult, lo: int, hi: int) -> Plan:
        graph, site = chain.site.graph, chain.site
        links = chain.links[lo:hi]
        layers, new = chain.layers[lo:hi + 1], result.layers[lo:hi + 1]
        taken: set[str] = set()
        renamed: dict[str, str] = {}
        rescaled: dict[str, Rescaled] = {}
        for k, link in enumerate(links, start=lo):  # the tensors between the layers now carry rescaled channels
            for tensor in [link.first.outputs[0]] + ([link.act.outputs[0]] if link.act is not None else []):
                renamed[tensor] = fresh_name(graph, tensor if tensor.endswith(SUFFIX) else tensor + SUFFIX, taken)
                rescaled[renamed[tensor]] = Rescaled(tensor, np.asarray(result.scales[k], np.float64))
        inits: dict[str, onnx.TensorProto] = {}
        added: list[onnx.NodeProto] = []
        removed: list[str] = []
        nodes = [links[0].first] + [n for link in links for n in (link.act, link.second) if n is not None]
        by_layer = {layer.node.name: (layer, weights) for layer, weights in zip(layers, new)}
        for node in nodes:
            inputs = [renamed.get(t, t) for t in node.inputs]
            if node.name in by_layer:
                layer, weights = by_layer[node.name]
                inputs[1] = _new_init(graph, inits, taken, f"{node.name}.weight{SUFFIX}",
                                      weights.weight, layer.weight.dtype)
                if weights.bias is not None and weights.bias is not layer.bias:
                    inputs[2] = _new_init(graph, inits, taken, f"{node.name}.bias{SUFFIX}",
                                          weights.bias, layer.weight.dtype)
            added.append(clone_node(node, inputs=inputs, outputs=[renamed.get(t, t) for t in node.outputs]))
            removed.append(node.name)
        before, after = _summed(result.before[lo:hi]), _summed(result.after[lo:hi])
        description = (f"equalize {_chain_text(nodes)}: int8 weight error per tensor "
                       f"{100 * before.per_tensor:.3g} % → {100 * after.per_tensor:.3g} %, per channel "
                       f"{100 * before.per_channel:.3g} % → {100 * after.per_channel:.3g} %")
        output = nodes[-1].outputs[0]
        return GraphEdit(graph.path, self.name, description, removed, added, inits, boundary=[(output, output)],
                         site=dict(site.match.nodes), rescaled=rescaled)


def _new_init(graph: Graph, inits: dict[str, onnx.TensorProto], taken: set[str], base: str, value: np.ndarray,
              dtype: np.dtype) -> str:
    name = fresh_name(graph, base, taken)
    inits[name] = initializer(name, value, dtype)
    return name


def _errors(layers: list[em.LayerWeights]) -> em.PairError:
    """The chain's error: the sum of its pairs' (see :mod:`.arithmetic`), per tensor and per channel."""
    return _summed([em.pair_error(a, b) for a, b in zip(layers, layers[1:])])


def _summed(pairs: list[em.PairError]) -> em.PairError:
    return em.PairError(sum(p.per_tensor for p in pairs), sum(p.per_channel for p in pairs))


def _trial(layers: list[em.LayerWeights]) -> list[em.LayerWeights]:
    """The layers with every pair equalized in one sweep, whatever the error: what a refusal reports."""
    current = list(layers)
    for k in range(len(current) - 1):
        current[k], current[k + 1] = em.rescale(current[k], current[k + 1],
                                                em.equalizing_scales(current[k], current[k + 1]))
    return current
