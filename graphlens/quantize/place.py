"""Where the QuantizeLinear/DequantizeLinear pairs go, in onnxruntime's QDQ layout.

:func:`find_sites` picks the layers (a Conv, ConvTranspose, Gemm or MatMul of float32 with a
constant weight, not excluded) and the activations they need: each layer's activation input,
and, with ``quantize_outputs``, its output, taken after a ReLU or Clip that alone reads it (so
that onnxruntime fuses the activation into the int8 kernel, as its ``QDQRemovableActivation`` does).

:func:`build_edits` writes them as :class:`~graphlens.rewrites.edit.GraphEdit` s, one per node
that changes, so the whole quantization is applied (and undone) by a ``EditHistory``:

- an activation ``T`` becomes ``T → QuantizeLinear → DequantizeLinear → T_dq``, placed right
  after ``T``'s producer (or before its first reader, for a graph input), and every reader of
  ``T`` reads ``T_dq``; a graph output keeps its name, produced by the DequantizeLinear;
- a weight is stored quantized (int8/int4 initializer) and read through a DequantizeLinear
  (per channel along its output-channel axis), as onnxruntime's quantizer stores it;
- a bias (Conv, ConvTranspose, Gemm with a 1-D ``C`` and ``alpha = beta = 1``) is stored as
  int32 with scale ``s_x · s_w`` behind a DequantizeLinear.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.linear import LinearOp, linear_op
from graphlens.core.model import Model
from graphlens.core.node import Node
from graphlens.core.tensors import all_tensors
from graphlens.core.types import TensorType, tensor_nbytes
from graphlens.numerics.metrics import ErrorStats
from graphlens.numerics.run import STAGE_BYTES
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.qdq import (
    QParams,
    QType,
    bias_params,
    dq_node,
    integer_tensor,
    q_node,
    quantize_bias,
    quantize_stored,
    scale_tensor,
    stored_error,
    weight_params,
    zero_point_tensor,
)
from graphlens.rewrites.driver import cleanup_edits
from graphlens.rewrites.edit import EditHistory, GraphEdit
from graphlens.rewrites.rule import clone_node, fresh_name

FUSED_ACTIVATIONS = ("Relu", "Clip")


@dataclass
class Site:
    """One layer to quantize: its activation input, constant weight and bias, and output."""

    node: str
    op_type: str
    activation: str
    weight: str
    weight_slot: int
    weight_axis: int | None
    """The output-channel axis of the weight (None: per tensor)."""
    channels: int
    """Output channels (the bias's length)."""
    bias: str | None = None
    output: str | None = None
    """The activation quantized after the layer (its output, or a fused ReLU/Clip's), if any."""


@dataclass
class Placement:
    """Everything :func:`find_sites` chose: the layers, and the activations to calibrate."""

    sites: list[Site]
    activations: list[str]
    """Every activation to quantize, in graph order."""
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(node, why) for layers of a quantized op type left float."""
    rounded: dict[str, np.ndarray] = field(default_factory=dict)
    """Weights' integers rounded otherwise than to nearest (:mod:`~.rounding`), by weight name, with the scales
    :func:`weight_qparams` gives; every quantized copy of the model takes them."""


@dataclass
class QuantizedTensor:
    """One tensor that was quantized: the report's row before its errors are measured."""

    tensor: str
    kind: str
    """``weight``, ``activation`` or ``bias``."""
    node: str
    """The layer it belongs to (for an activation: the first quantized layer reading it, else its producer)."""
    nodes: list[str]
    """Every quantized layer it belongs to (an activation is one layer's output and the next one's input)."""
    params: QParams
    dequantized: str
    """The tensor the layers read in the quantized model (DequantizeLinear's output)."""
    float_value: np.ndarray | None = None
    """Weights and biases: the float value, for the local error (a bias a layer did not have: None)."""
    quantized_value: np.ndarray | None = None
    correction: np.ndarray | None = None
    """Biases: the mean output shift subtracted before quantizing (bias correction), per output channel."""
    error: ErrorStats | None = None
    """Weights quantized without keeping their values (``keep_values=False``): the stored integers' error against
    the float weight, measured as they were made."""


def _weight_axis(op: LinearOp, weight: np.ndarray) -> int | None:
    """The weight's output-channel axis, as its op places it (:mod:`graphlens.core.linear`); None for a 1-D weight."""
    return None if weight.ndim < 2 else op.output_axis(weight.ndim)


def _channels(op: LinearOp, weight: np.ndarray) -> int:
    return 1 if weight.ndim < 2 else op.output_channels(tuple(weight.shape))


def _is_float32(graph: Graph, tensor: str) -> bool:
    return graph.tensor_type(tensor).dtype == "float32"


def find_sites(graph: Graph, config: QuantConfig) -> Placement:
    """The layers to quantize in ``graph`` (the main graph) and the activations they need."""
    sites: list[Site] = []
    skipped: list[tuple[str, str]] = []
    outer = graph.outer_reads()
    for node in graph.nodes:
        if node.op_type not in config.op_types or node.domain not in ("", "ai.onnx"):
            continue
        if config.excludes(node.name, node.op_type):
            skipped.append((node.name, "excluded"))
            continue
        why = _refusal(graph, node)
        if why is not None:
            skipped.append((node.name, why))
            continue
        weight, op = graph.constant_value(node.inputs[1]), linear_op(node)
        assert weight is not None and op is not None
        bias = None
        if len(node.inputs) > 2 and node.inputs[2] and graph.constant_value(node.inputs[2]) is not None:
            value = graph.constant_value(node.inputs[2])
            plain_gemm = node.op_type != "Gemm" or (node.attr("alpha", 1.0) == 1.0 and node.attr("beta", 1.0) == 1.0)
            if plain_gemm and value is not None and value.ndim == 1 and value.size == _channels(op, weight) > 1:
                bias = node.inputs[2]
        per_channel = config.per_channel
        axis = _weight_axis(op, weight) if per_channel else None
        sites.append(Site(node.name, node.op_type, node.inputs[0], node.inputs[1], 1, axis, _channels(op, weight),
                          bias, _output(graph, node, outer) if config.quantize_outputs else None))
    activations: dict[str, None] = {}
    position = graph.positions()
    wanted = {s.activation for s in sites} | {s.output for s in sites if s.output}

    def order(t: str) -> int:
        found = graph.producer(t)
        return -1 if found is None else position[found[0].name]

    for tensor in sorted(wanted, key=order):
        activations[tensor] = None
    return Placement(sites, list(activations), skipped)


def _refusal(graph: Graph, node: Node) -> str | None:
    if len(node.inputs) < 2 or not node.inputs[0] or not node.inputs[1]:
        return "it has no weight input"
    if graph.constant_value(node.inputs[1]) is None:
        return "its weight is not a constant"
    if graph.constant_value(node.inputs[0]) is not None:
        return "its input is a constant"
    if not (_is_float32(graph, node.inputs[0]) and _is_float32(graph, node.inputs[1])):
        return "it is not float32"
    if node.op_type == "Gemm" and node.attr("transA", 0):
        return "transA=1 is not quantized"
    return None


def _output(graph: Graph, node: Node, outer: frozenset[str]) -> str | None:
    """The layer's output to quantize: after a ReLU/Clip that alone reads it, if there is one."""
    tensor = node.outputs[0]
    for _ in range(2):
        readers = graph.consumers(tensor)
        if graph.is_graph_output(tensor) or tensor in outer or len(readers) != 1:
            break
        reader = readers[0][0]
        if reader.op_type not in FUSED_ACTIVATIONS or readers[0][1] != 0:
            break
        if reader.op_type == "Clip" and any(t and graph.constant_value(t) is None for t in reader.inputs[1:]):
            break
        tensor = reader.outputs[0]
    if not _is_float32(graph, tensor) or tensor in outer:
        return None
    return tensor


class _Names:
    """Fresh tensor and node names, none already in the graph."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.tensors: set[str] = set()
        self.nodes: set[str] = set(graph.by_name)

    def tensor(self, base: str) -> str:
        return fresh_name(self.graph, base, self.tensors)

    def node(self, base: str) -> str:
        name, k = base, 2
        while name in self.nodes:
            name, k = f"{base}_{k}", k + 1
        self.nodes.add(name)
        return name


@dataclass
class _Pending:
    """What :func:`build_edits` collects before writing the edits."""

    records: dict[str, QuantizedTensor] = field(default_factory=dict)
    pre: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    """Node -> nodes inserted before it."""
    post: dict[str, list[onnx.NodeProto]] = field(default_factory=dict)
    inits: dict[str, onnx.TensorProto] = field(default_factory=dict)
    renamed_outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    dq_of: dict[str, str] = field(default_factory=dict)
    """Activation -> the tensor its readers read instead."""
    edited: dict[str, None] = field(default_factory=dict)
    slot_map: dict[str, dict[int, str]] = field(default_factory=dict)
    """Layer -> {input slot: the dequantized weight or bias it reads}."""
    keep_values: bool = True


def build_edits(
    graph: Graph,
    placement: Placement,
    activation_params: dict[str, QParams],
    config: QuantConfig,
    *,
    keep: Callable[[Site], bool] = lambda site: True,
    bias_shift: dict[str, np.ndarray] | None = None,
    keep_values: bool = True,
    memo: WeightMemo | None = None,
) -> tuple[list[GraphEdit], list[QuantizedTensor]]:
    """The edits that insert every pair, and a record of each quantized tensor.

    ``bias_shift``: per layer, the mean output shift its quantization causes (per output channel),
    subtracted from its bias before the bias is quantized; a layer without a bias gets one.
    ``keep_values``: weight records hold the float weight and its integers; else only their error
    (:attr:`QuantizedTensor.error`), so no copy of a weight outlives its quantization; then ``memo`` keeps the
    weights quantized for the next model of the same quantization.
    """
    names = _Names(graph)
    sites = [s for s in placement.sites if keep(s)]
    active = [t for t in placement.activations if t in activation_params and (
        any(s.activation == t or s.output == t for s in sites))]
    pending = _Pending(keep_values=keep_values)
    position = graph.positions()
    for tensor in active:
        _activation_pair(graph, tensor, activation_params[tensor], sites, names, position, pending)
    _weights_and_biases(graph, sites, activation_params, config, bias_shift or {}, placement.rounded, names, pending,
                        memo)
    edits = []
    for name in sorted(pending.edited, key=position.__getitem__):
        node = graph.by_name[name]
        slots = pending.slot_map.get(name, {})
        inputs = [slots.get(i, pending.dq_of.get(t, t) if t else t) for i, t in enumerate(node.inputs)]
        inputs += [slots[i] for i in range(len(inputs), max(slots, default=-1) + 1)]  # a bias it did not have
        outputs = [pending.renamed_outputs.get(name, {}).get(t, t) for t in node.outputs]
        clone = clone_node(node, inputs=inputs, outputs=outputs, name=node.name)
        edits.append(GraphEdit(graph.path, "quantize", f"quantize around {node.op_type} '{name}'", remove=[name],
                               add=[*pending.pre.get(name, []), clone, *pending.post.get(name, [])]))
    dq_of = pending.dq_of
    reroute = [(n.name, slot, dq_of[t]) for n in graph.nodes if n.name not in pending.edited
               for slot, t in enumerate(n.inputs) if t in dq_of and dq_of[t] != t]
    if edits:
        edits[0].initializers.update(pending.inits)
        edits[0].reroute.extend(reroute)
    return edits, list(pending.records.values())


def _activation_pair(graph: Graph, tensor: str, params: QParams, sites: list[Site], names: _Names,
                     position: dict[str, int], pending: _Pending) -> None:
    """``tensor → Q → DQ`` after its producer (before its first reader, for a graph input)."""
    scale, zero = names.tensor(f"{tensor}_scale"), names.tensor(f"{tensor}_zero_point")
    pending.inits[scale], pending.inits[zero] = scale_tensor(scale, params), zero_point_tensor(zero, params)
    quantized = names.tensor(f"{tensor}_quantized")
    found = graph.producer(tensor)
    if graph.is_graph_output(tensor) and found is not None:
        source, dequantized = names.tensor(f"{tensor}_float"), tensor
        pending.renamed_outputs.setdefault(found[0].name, {})[tensor] = source
    else:
        source, dequantized = tensor, names.tensor(f"{tensor}_dequantized")
    pair = [q_node(names.node(f"{tensor}_QuantizeLinear"), [source, scale, zero], quantized),
            dq_node(names.node(f"{tensor}_DequantizeLinear"), [quantized, scale, zero], dequantized, params)]
    if found is not None:
        pending.post.setdefault(found[0].name, []).extend(pair)
        pending.edited[found[0].name] = None
    else:
        first = min((n for n, _ in graph.consumers(tensor)), key=lambda n: position[n.name])
        pending.pre.setdefault(first.name, []).extend(pair)
        pending.edited[first.name] = None
    pending.dq_of[tensor] = dequantized
    readers = [s.node for s in sites if s.activation == tensor]
    producers = [s.node for s in sites if s.output == tensor]
    owner = (readers or producers)[0]
    pending.records[tensor] = QuantizedTensor(tensor, "activation", owner, [*readers, *producers], params,
                                              dequantized)


def weight_qtype(config: QuantConfig) -> QType:
    """The integer type of weights under ``config``."""
    return QType(config.weight_bits, config.weight_signed, config.narrow_range and config.symmetric_weights
                 and config.weight_signed)


def weight_qparams(value: np.ndarray, site: Site, config: QuantConfig) -> QParams:
    """A site's weight's scale and zero point under ``config``."""
    return weight_params(value, weight_qtype(config), symmetric=config.symmetric_weights, axis=site.weight_axis)


@dataclass
class StoredWeight:
    """A weight's integers under one config, with their scale and error."""

    params: QParams
    integers: np.ndarray
    error: ErrorStats


WeightMemo = dict[tuple[str, int | None, tuple[int, ...]], StoredWeight]
"""Weights already quantized in one quantization, by name, axis and shape: the equalization trial's two arms and
the model written share most of theirs (a weight the trial rescales gets a name of its own)."""


def _stored(value: np.ndarray, site: Site, config: QuantConfig, memo: WeightMemo | None) -> StoredWeight:
    key = (site.weight, site.weight_axis, tuple(np.shape(value)))
    found = memo.get(key) if memo is not None else None
    if found is None:
        params = weight_qparams(value, site, config)
        q = quantize_stored(value, params)
        found = StoredWeight(params, q, stored_error(value, q, params))
        if memo is not None:
            memo[key] = found
    return found


def _weights_and_biases(graph: Graph, sites: list[Site], activation_params: dict[str, QParams], config: QuantConfig,
                        bias_shift: dict[str, np.ndarray], rounded: dict[str, np.ndarray], names: _Names,
                        pending: _Pending, memo: WeightMemo | None = None) -> None:
    """Each layer's weight stored as integers behind a DequantizeLinear (one per weight and axis, shared by
    the layers reading it), and its bias as int32 when its input is quantized."""
    weight_dq: dict[tuple[str, int | None], tuple[str, QParams]] = {}
    for site in sites:
        pending.edited[site.node] = None
        key = (site.weight, site.weight_axis)
        if key not in weight_dq:
            value = graph.constant_value(site.weight)
            assert value is not None
            q, error = rounded.get(site.weight), None
            if q is None and not pending.keep_values:
                known = _stored(value, site, config, memo)
                params, q, error = known.params, known.integers, replace(known.error)
            else:
                params = weight_qparams(value, site, config)
                q = quantize_stored(value, params) if q is None else q
            assert q.shape == np.shape(value), f"{site.weight}: rounded {q.shape}, weight {np.shape(value)}"
            stored, scale, zero = (names.tensor(f"{site.weight}_quantized"), names.tensor(f"{site.weight}_scale"),
                                   names.tensor(f"{site.weight}_zero_point"))
            pending.inits[stored], pending.inits[scale], pending.inits[zero] = (
                integer_tensor(stored, q, params.qtype), scale_tensor(scale, params), zero_point_tensor(zero, params))
            dequantized = names.tensor(f"{site.weight}_dequantized")
            pending.pre.setdefault(site.node, []).append(
                dq_node(names.node(f"{site.weight}_DequantizeLinear"), [stored, scale, zero], dequantized, params))
            weight_dq[key] = (dequantized, params)
            record = QuantizedTensor(site.weight, "weight", site.node, [site.node], params, dequantized)
            if pending.keep_values:
                record.float_value, record.quantized_value = np.asarray(value, np.float32), q
            else:
                record.error = error if error is not None else stored_error(value, q, params)
            pending.records[site.weight] = record
            del value, q
        else:
            pending.records[site.weight].nodes.append(site.node)
        dequantized, w_params = weight_dq[key]
        slots = pending.slot_map.setdefault(site.node, {})
        slots[site.weight_slot] = dequantized
        x_params = activation_params.get(site.activation)
        shift = bias_shift.get(site.node)
        if x_params is None or site.activation not in pending.dq_of or (site.bias is None and shift is None):
            continue
        found = _bias(graph, site, names, x_params, w_params, shift)
        if found is not None:
            record, *tensors, bias_dq_node = found
            for init in tensors:
                pending.inits[init.name] = init
            pending.pre.setdefault(site.node, []).append(bias_dq_node)
            slots[2] = record.dequantized
            pending.records[f"{record.tensor}@{site.node}"] = record

def _bias(graph: Graph, site: Site, names: _Names, x_params: QParams, w_params: QParams,
          shift: np.ndarray | None) -> tuple[QuantizedTensor, onnx.TensorProto, onnx.TensorProto, onnx.TensorProto,
                                             onnx.NodeProto] | None:
    """A layer's int32 bias ``round((b − shift) / (s_x·s_w))`` behind a DequantizeLinear; a Conv, ConvTranspose
    or plain Gemm without a bias gets one when there is a shift to correct (``b = 0``); else None."""
    node = graph.by_name[site.node]
    if site.bias is not None:
        value = graph.constant_value(site.bias)
        assert value is not None
        tensor, original = site.bias, np.asarray(value, np.float32)
    elif _takes_new_bias(node, site):
        tensor, original = names.tensor(f"{site.node}_bias"), None
    else:
        return None
    params = bias_params(x_params.scale, w_params, site.channels)
    target = np.zeros(site.channels, np.float64) if original is None else original.astype(np.float64)
    if shift is not None:
        target = target - np.asarray(shift, np.float64).reshape(-1)
    q = quantize_bias(target, params)
    stored, scale, zero = (names.tensor(f"{tensor}_quantized"), names.tensor(f"{tensor}_scale"),
                           names.tensor(f"{tensor}_zero_point"))
    bias_dq = names.tensor(f"{tensor}_dequantized")
    dq = dq_node(names.node(f"{tensor}_DequantizeLinear"), [stored, scale, zero], bias_dq, params)
    record = QuantizedTensor(tensor, "bias", site.node, [site.node], params, bias_dq, original, q,
                             None if shift is None else np.asarray(shift, np.float32).reshape(-1))
    return (record, integer_tensor(stored, q, params.qtype), scale_tensor(scale, params),
            integer_tensor(zero, np.asarray(params.zero_point), params.qtype), dq)


def _takes_new_bias(node: Node, site: Site) -> bool:
    """Whether a bias input can be added: Conv, ConvTranspose, or a Gemm with alpha = beta = 1, of more than one
    channel."""
    if len(node.inputs) > 2 and node.inputs[2] or site.channels < 2:
        return False
    if node.op_type in ("Conv", "ConvTranspose"):
        return True
    return node.op_type == "Gemm" and node.attr("alpha", 1.0) == 1.0 and node.attr("beta", 1.0) == 1.0


def collect_if_large(proto: onnx.ModelProto) -> None:
    """Collect the scratch models and sessions of the step before when ``proto``'s weights are large (else there is
    little to free): a model's graph and nodes refer to each other, so they go only when the cycle collector runs."""
    if sum(tensor_nbytes(t) for t in all_tensors(proto)) > STAGE_BYTES:
        gc.collect()


def scratch_model(proto: onnx.ModelProto, types: dict[str, TensorType] | None = None, *, copy: bool = True) -> Model:
    """A copy of ``proto`` to quantize on the side (a trial, a candidate, a measuring model), shapes inferred;
    ``types``: its main graph's types, known (:meth:`~graphlens.core.model.Model.adopt_types`), not inferred;
    ``copy=False``: ``proto`` itself, the caller's to give away (the model's edits are written into it)."""
    scratch = Model(onnx.ModelProto.FromString(proto.SerializeToString()) if copy else proto)
    if types is None:
        scratch.infer_shapes()
    else:
        scratch.adopt_types(types)
    return scratch


def apply_quantization(model: Model, placement: Placement, activation_params: dict[str, QParams],
                       config: QuantConfig, *, session: EditHistory | None = None,
                       keep: Callable[[Site], bool] = lambda site: True,
                       bias_shift: dict[str, np.ndarray] | None = None,
                       required: bool = False, keep_values: bool = True,
                       memo: WeightMemo | None = None) -> list[QuantizedTensor]:
    """Insert :func:`build_edits`'s pairs into ``model`` (through ``session``, else one without history) and
    tidy what they leave behind; ``required``: nothing to insert is an error (every layer left float);
    ``keep_values`` and ``memo``: as :func:`build_edits`."""
    session = session or EditHistory(model, keep_history=False)
    edits, records = build_edits(model.graph, placement, activation_params, config, keep=keep,
                                 bias_shift=bias_shift, keep_values=keep_values, memo=memo)
    if required and not edits:
        raise GraphLensError("nothing to quantize: every layer was left float")
    session.apply(edits)
    tidy = cleanup_edits(model, Counter())
    if tidy:
        session.apply(tidy)
    return records
