"""Binarize a model's weights: fold, replace each weight by its K-bit Ŵ, measure; one undo step.

:func:`binarize_model` runs, in order: the fold rules (``config.fold_rules``), the
choice of layers (a Conv, ConvTranspose, Gemm or MatMul whose input 1 is a constant float weight
of 2 or more dims, not excluded), one :class:`~graphlens.rewrites.edit.GraphEdit` per layer, and
the output SQNR: the float model (after folding) against the binarized one, both in
onnxruntime, on the calibration samples or seeded random ones. Ŵ is computed by
:func:`graphlens.binarize.bits.binarize`, whose docstring states the math; a weight read by
several layers is binarized once.

The two forms, for a weight ``W`` of layer ``L``:

- ``emulated``: ``L`` reads a new initializer ``<W>_binarized`` = Ŵ in W's dtype;
- ``structured``: ``<W>_bits`` (int8 ±1, ``(K, *W.shape)``, 0 where a bit map gives no bit) and
  ``<W>_alpha`` (``(K, 1, …, kernels, …, 1)`` in W's dtype; for a grouped ConvTranspose
  ``(K, C, M/g, 1, …)``, each output channel's αᵢ repeated over its group's rows) are stored, and
  ``Cast → Mul → ReduceSum(axis 0)`` rebuilds ``<W>_binarized`` in the graph for ``L``.

With ``binarize_activations`` each binarized Conv/ConvTranspose reads ``Where(Greater(x, 0), 1, −1)``
of its input instead of ``x`` (sign(0) = −1, as for the weights).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from graphlens.binarize.bits import Binarized, binarize, random_bit_map
from graphlens.binarize.config import OP_TYPES, BinarizeConfig
from graphlens.core.errors import GraphLensError
from graphlens.core.graph import Graph
from graphlens.core.linear import LinearOp, LinearWeight, linear_op, nothing_found, read_weight
from graphlens.core.model import Model
from graphlens.core.names import check_node_names
from graphlens.core.node import Node
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.inputs import float_outputs
from graphlens.numerics.metrics import ErrorStats, finite, sqnr_db, worst_sqnr_db
from graphlens.numerics.run import ModelRunner
from graphlens.numerics.samples import (
    CalibrationData,
    load_calibration,
    random_calibration,
    run_batches,
    samples_per_run,
)
from graphlens.rewrites.driver import FoldReport, fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory, GraphEdit
from graphlens.rewrites.rule import clone_node, fresh_name

METRICS = ("sqnr_db", "bits", "distinct_values")
SIGNED_OPS = ("Conv", "ConvTranspose")
"""Layers whose input ``binarize_activations`` replaces by its sign."""


@dataclass
class LayerBits:
    """One binarized layer's weight: K, and how far Ŵ (as stored) is from W."""

    node: str
    tensor: str
    bits: int
    sqnr_db: float
    distinct_values: int
    """The most distinct values of Ŵ in one kernel (the whole weight per tensor): at most 2^K."""
    per_kernel: bool
    op_type: str = ""
    axis: int | None = None
    """The kernel axis of the weight (None per tensor)."""
    mean_bits: float = 0.0
    """The bit map's mean (K without one)."""
    groups: int = 1
    """A grouped ConvTranspose's ``group``: its output channels also split axis 0 (one α per output channel)."""

    def to_dict(self) -> dict[str, Any]:
        return {"node": self.node, "tensor": self.tensor, "op_type": self.op_type, "bits": self.bits,
                "sqnr_db": finite(self.sqnr_db), "distinct_values": self.distinct_values,
                "per_kernel": self.per_kernel, "axis": self.axis, "groups": self.groups, "mean_bits": self.mean_bits}


@dataclass
class BinarizeResult:
    """What :func:`binarize_model` did and measured; ``to_dict()`` is the command line's ``--report``."""

    layers: list[LayerBits]
    output_sqnr_db: float | None
    """Every float graph output of the float model against the binarized one (None: could not run)."""
    fold: FoldReport | None
    form: str
    warnings: list[str] = field(default_factory=list)
    revision: int = -1
    skipped: list[tuple[str, str]] = field(default_factory=list)
    """(node, why) for layers of a binarizable op type left float."""
    config: BinarizeConfig = field(default_factory=BinarizeConfig)
    calibration: str = ""
    samples: int = 0
    weights: dict[str, Binarized] = field(default_factory=dict, repr=False)
    """Each binarized weight's bits and scales, by tensor name (what the lesson explains)."""

    def per_node(self, metric: str = "sqnr_db") -> dict[str, float]:
        """``{node: value}`` over the binarized layers: ``sqnr_db`` (lower is worse), ``bits``, ``distinct_values``."""
        if metric not in METRICS:
            raise GraphLensError(f"unknown metric '{metric}'; metrics: {', '.join(METRICS)}")
        return {layer.node: float(getattr(layer, metric)) for layer in self.layers}

    def worst(self, count: int = 5) -> list[LayerBits]:
        return sorted(self.layers, key=lambda layer: layer.sqnr_db)[:count]

    def lines(self) -> list[str]:
        out = [f"fold: {line}" for line in self.fold.lines()] if self.fold is not None else []
        bits = sorted({layer.bits for layer in self.layers})
        k = str(bits[0]) if len(bits) == 1 else f"{bits[0]}-{bits[-1]}"
        kind = "per kernel" if self.config.per_kernel else "per tensor"
        out.append(f"binarized {len(self.layers)} layers ({self.form}, {k} bit{'s' if bits != [1] else ''}, {kind})")
        if self.skipped:
            out.append(f"left float: {len(self.skipped)} layer{'' if len(self.skipped) == 1 else 's'} (" + "; ".join(
                f"'{n}': {why}" for n, why in self.skipped[:3]) + (", …" if len(self.skipped) > 3 else "") + ")")
        if self.output_sqnr_db is None:
            out.append("output SQNR: not measured")
        else:
            out.append(f"output SQNR: {self.output_sqnr_db:.1f} dB ({self.samples} samples {self.calibration})")
        for layer in self.worst(5):
            out.append(f"  {layer.sqnr_db:6.1f} dB  {layer.bits} bit  {layer.distinct_values:3d} values  "
                       f"{layer.tensor}  ({layer.node})")
        out += [f"warning: {w}" for w in self.warnings]
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "output_sqnr_db": None if self.output_sqnr_db is None else finite(self.output_sqnr_db),
            "layers": [layer.to_dict() for layer in self.layers],
            "form": self.form,
            "per_kernel": self.config.per_kernel,
            "warnings": list(self.warnings),
            "skipped": [{"node": n, "reason": why} for n, why in self.skipped],
            "calibration": {"source": self.calibration, "samples": self.samples},
            "config": self.config.to_dict(),
            "fold": self.fold.to_json() if self.fold is not None else None,
        }


@dataclass
class _Site:
    node: Node
    weight: str
    value: np.ndarray
    axis: int | None
    bits: int
    groups: int = 1


def _weight(graph: Graph, node: Node, op: LinearOp) -> LinearWeight:
    """The layer's weight as :func:`~graphlens.core.linear.read_weight` reads it, and what binarizing adds:
    a weight with values, all finite."""
    weight = read_weight(graph, node, op)
    if weight.problem is not None or weight.value is None:
        return weight
    if weight.value.size == 0:
        return LinearWeight(weight.value, "has an empty weight")
    if not np.isfinite(weight.value).all():
        return LinearWeight(weight.value, "has a weight holding inf or NaN")
    return weight


def find_sites(graph: Graph, config: BinarizeConfig) -> tuple[list[_Site], list[tuple[str, str]]]:
    """The layers to binarize in ``graph`` and (node, why) for those left float."""
    sites, skipped = [], []
    for node in graph.nodes:
        op = linear_op(node)
        if op is None or node.op_type not in OP_TYPES:
            continue
        if config.excludes(node.name, node.op_type):
            if not config.only_nodes or node.name in config.only_nodes:
                skipped.append((node.name, "excluded"))
            continue
        weight = _weight(graph, node, op)
        if weight.problem is not None or weight.value is None:
            skipped.append((node.name, weight.problem or "has no weight"))
            continue
        value = weight.value
        axis = op.output_axis(value.ndim) if config.per_kernel else None  # the kernels: one per output channel
        groups = op.kernel_groups if config.per_kernel else 1
        sites.append(_Site(node, node.inputs[1], value, axis, config.bits_of(node.name), groups))
    return sites, skipped


def _check_names(graph: Graph, config: BinarizeConfig) -> None:
    for what, names in (("layer bits", list(config.layer_bits)), ("exclude", config.exclude_nodes),
                        ("layers", config.only_nodes)):
        check_node_names(names, graph.by_name, what)


def binarize_model(
    model: Model,
    config: BinarizeConfig | None = None,
    session: EditHistory | None = None,
    *,
    calibration: CalibrationData | str | Any | None = None,
    samples: int = 4,
    task: Task | None = None,
) -> BinarizeResult:
    """Binarize ``model`` in place (one undo step of ``session``) and measure its output SQNR.

    ``calibration``: samples (a :class:`CalibrationData` or an ``.npz`` path) for the output SQNR;
    default ``samples`` random ones seeded by ``config.seed``. ``task`` is told the fraction done; cancelling it
    stops with :class:`~graphlens.core.task.Cancelled` and leaves the model as it was.
    """
    config = config or BinarizeConfig()
    session = session or EditHistory(model)
    if samples < 1:
        raise GraphLensError(f"need at least 1 sample, not {samples}")
    _check_names(model.graph, config)
    if calibration is not None and not isinstance(calibration, CalibrationData):
        calibration = load_calibration(calibration, model)
    if calibration is not None:
        _refuse_what_would_not_fit(model, calibration)
    if not find_sites(model.graph, config)[0]:
        raise GraphLensError(nothing_found("binarize", model.graph, config.op_types, "float"))
    with session.all_or_nothing("binarize"):  # a failure or a cancel leaves the model as it was
        result = _binarize(model, config, session, calibration, samples, task_or_idle(task))
    result.revision = model.revision
    return result


MEASURE_BATCH = 8
"""Samples the output SQNR's runs stack at most (:func:`~graphlens.numerics.samples.run_batches`)."""


def _refuse_what_would_not_fit(model: Model, data: CalibrationData) -> None:
    """Samples whose runs would need more memory than the limit are refused before any edit: a run of the float
    and of the binarized model, each of as many samples as one run stacks, counted twice (each session keeps its
    run's blocks for the next). RapidOCR's detector on 4 pages: 158 MB estimated, 458 MB peak resident memory with
    the interpreter and onnxruntime (about 130 MB)."""
    from graphlens.numerics.dims import estimate_at, refuse_samples_over_limit

    sample = data.sample(0)
    one = estimate_at(model, sample).need()
    refuse_samples_over_limit(model, sample, "binarizing", 2 * one * samples_per_run(model, data, MEASURE_BATCH))


def _binarize(model: Model, config: BinarizeConfig, session: EditHistory, data: CalibrationData | None,
              samples: int, task: Task) -> BinarizeResult:
    fold = fold_model(model, resolve_rules(list(config.fold_rules)), session, task=task) if config.fold_rules else None
    task.check("binarization")
    float_proto = onnx.ModelProto()
    float_proto.CopyFrom(model.to_proto())
    graph = model.graph
    sites, skipped = find_sites(graph, config)
    if not sites:
        raise GraphLensError("nothing to binarize after folding")
    edits, layers, weights, warnings = _plan(graph, model.opset("") or 1, sites, config, task)
    session.apply(edits)
    task.report(0.5)
    measured, source, count, why = _measure(float_proto, model.to_proto(), data, samples, config.seed, task)
    if why is not None:
        warnings.append(why)
    task.report(1.0)
    return BinarizeResult(layers, measured, fold, config.form, warnings, -1, skipped, config, source, count, weights)


def _plan(graph: Graph, opset: int, sites: list[_Site], config: BinarizeConfig,
          task: Task) -> tuple[list[GraphEdit], list[LayerBits], dict[str, Binarized], list[str]]:
    by_weight: dict[str, list[_Site]] = {}
    for site in sites:
        by_weight.setdefault(site.weight, []).append(site)
    taken: set[str] = set()
    node_names = set(graph.by_name)
    edits: list[GraphEdit] = []
    layers: list[LayerBits] = []
    weights: dict[str, Binarized] = {}
    warnings: list[str] = []
    signed = 0
    for index, (weight, group) in enumerate(by_weight.items()):
        task.check("binarization")
        first = group[0]
        bit_map = None
        if config.mean_bits is not None:
            bit_map = random_bit_map(first.value.shape, min(config.mean_bits, first.bits), first.bits,
                                     config.seed + index)
        result = binarize(first.value, first.bits, axis=first.axis, bit_map=bit_map, groups=first.groups)
        weights[weight] = result
        stored = result.approx.astype(first.value.dtype)
        if len(group) > 1:
            warnings.append(f"weight '{weight}' is read by {len(group)} layers; binarized once, with "
                            f"'{first.node.name}''s kernel axis and bits")
        new_weight = fresh_name(graph, f"{weight}_binarized", taken)
        initializers: dict[str, onnx.TensorProto] = {}
        rebuild: list[onnx.NodeProto] = []
        if config.form == "structured":
            initializers, rebuild = _structured(graph, result, first, new_weight, opset, taken, node_names)
        else:
            initializers[new_weight] = numpy_helper.from_array(stored, new_weight)
        mean = float(np.mean(bit_map)) if bit_map is not None else float(first.bits)
        row = (first.bits, sqnr_db(first.value, stored), result.distinct_values(), config.per_kernel, mean)
        for k, site in enumerate(group):
            node = site.node
            extra = list(rebuild) if k == 0 else []
            inputs = list(node.inputs)
            inputs[1] = new_weight
            if config.binarize_activations and node.op_type in SIGNED_OPS and node.inputs[0]:
                inputs[0], sign_nodes, sign_inits = _sign(graph, node, first.value.dtype, taken, node_names)
                extra += sign_nodes
                initializers.update(sign_inits)
                signed += 1
            edit = GraphEdit(graph.path, "binarize", f"binarize '{node.name}'", site={"layer": node.name},
                             initializers=initializers if k == 0 else {})
            if extra:
                edit.remove = [node.name]
                edit.add = [*extra, clone_node(node, inputs=inputs, outputs=list(node.outputs))]
            else:
                edit.reroute = [(node.name, 1, new_weight)]
            edits.append(edit)
            layers.append(LayerBits(node.name, weight, row[0], row[1], row[2], row[3], node.op_type, first.axis,
                                    row[4], first.groups))
        if weight in graph.initializers and _unread_after(graph, weight, {s.node.name for s in group}):
            edits[-len(group)].drop_initializers.append(weight)
        task.report(0.5 * (index + 1) / len(by_weight))
    if signed:
        warnings.append(f"binarized activations: the inputs of {signed} convolution{'s' if signed != 1 else ''} are "
                        "now ±1; without retraining this costs most of a model's accuracy")
    return edits, layers, weights, warnings


def _unread_after(graph: Graph, weight: str, replaced: set[str]) -> bool:
    others = [n for n, _ in graph.consumers(weight) if n.name not in replaced]
    return not others and not graph.is_graph_output(weight) and weight not in graph.outer_reads() \
        and weight not in graph.inputs


def _structured(graph: Graph, result: Binarized, site: _Site, output: str, opset: int, taken: set[str],
                node_names: set[str]) -> tuple[dict[str, onnx.TensorProto], list[onnx.NodeProto]]:
    """``<W>_bits`` and ``<W>_alpha``, and Cast → Mul → ReduceSum(axis 0) making ``output`` = Ŵ."""
    dtype = site.value.dtype
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    bits = fresh_name(graph, f"{site.weight}_bits", taken)
    alpha = fresh_name(graph, f"{site.weight}_alpha", taken)
    as_float = fresh_name(graph, f"{site.weight}_bits_float", taken)
    scaled = fresh_name(graph, f"{site.weight}_bits_scaled", taken)
    inits = {bits: numpy_helper.from_array(result.signs, bits),
             alpha: numpy_helper.from_array(result.scales().astype(dtype), alpha)}
    layer = site.node.name
    nodes = [helper.make_node("Cast", [bits], [as_float], name=_node_name(f"{layer}/bits_cast", node_names), to=elem),
             helper.make_node("Mul", [as_float, alpha], [scaled], name=_node_name(f"{layer}/bits_scale", node_names))]
    total = _node_name(f"{layer}/bits_sum", node_names)
    if opset >= 13:
        axes = fresh_name(graph, f"{site.weight}_bits_axes", taken)
        inits[axes] = numpy_helper.from_array(np.array([0], np.int64), axes)
        nodes.append(helper.make_node("ReduceSum", [scaled, axes], [output], name=total, keepdims=0))
    else:
        nodes.append(helper.make_node("ReduceSum", [scaled], [output], name=total, axes=[0], keepdims=0))
    return inits, nodes


def _sign(graph: Graph, node: Node, dtype: np.dtype, taken: set[str],
          node_names: set[str]) -> tuple[str, list[onnx.NodeProto], dict[str, onnx.TensorProto]]:
    """``Where(Greater(x, 0), 1, −1)`` of ``node``'s input: the new input, nodes and constants."""
    x = node.inputs[0]
    names = {k: fresh_name(graph, f"{x}_{k}", taken) for k in ("zero", "one", "minus_one", "positive", "sign")}
    inits = {names[k]: numpy_helper.from_array(np.array(v, dtype), names[k])
             for k, v in (("zero", 0), ("one", 1), ("minus_one", -1))}
    nodes = [helper.make_node("Greater", [x, names["zero"]], [names["positive"]],
                              name=_node_name(f"{node.name}/sign_greater", node_names)),
             helper.make_node("Where", [names["positive"], names["one"], names["minus_one"]], [names["sign"]],
                              name=_node_name(f"{node.name}/sign_where", node_names))]
    return names["sign"], nodes, inits


def _node_name(base: str, taken: set[str]) -> str:
    name, k = base, 2
    while name in taken:
        name, k = f"{base}_{k}", k + 1
    taken.add(name)
    return name


def _measure(float_proto: onnx.ModelProto, binarized: onnx.ModelProto, data: CalibrationData | None, samples: int,
             seed: int, task: Task) -> tuple[float | None, str, int, str | None]:
    """Output SQNR of ``binarized`` against ``float_proto`` (every float output together), the samples' source and
    count, and why it was not measured (None when it was)."""
    if data is None:
        try:
            data = random_calibration(float_proto, samples, seed=seed)
        except GraphLensError as exc:
            return None, "", 0, f"output SQNR not measured: {exc}"
    reference, test = ModelRunner(float_proto), ModelRunner(binarized)
    if reference.error is not None:
        return (None, data.source, 0,
                f"output SQNR not measured: onnxruntime cannot run the float model: {reference.error}")
    if test.error is not None:
        raise GraphLensError(f"onnxruntime cannot run the binarized model: {test.error}")
    outputs = float_outputs(float_proto)
    each = {name: ErrorStats() for name in outputs}
    for done, (a, b), _ in run_batches([reference, test], float_proto, data, MEASURE_BATCH):
        task.check("binarization")
        for name in outputs:
            each[name].add(np.asarray(a[name], np.float64), np.asarray(b[name], np.float64))
        task.report(0.5 + 0.5 * done / data.samples)
    value = worst_sqnr_db(each.values())
    return (value if not math.isnan(value) else None), data.source, data.samples, None
