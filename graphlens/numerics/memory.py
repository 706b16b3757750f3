"""How much memory a run may take, and an estimate of what a run at given dim sizes needs.

A dims search on a large language model must stop before a try that cannot fit, not be killed
by the system half-way: before each try the bytes of the random inputs and of the largest
activation (from the shapes ONNX infers with the inputs at the sizes tried, see :class:`RunEstimate`)
are added up and compared with :func:`memory_limit`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.core.io import shell_without, weightless_graph, weightless_model
from graphlens.core.model import Model
from graphlens.numerics.inputs import structure

MEMORY_FRACTION = 0.5
"""Share of the memory available when a search starts (the reference session's weights already
loaded) that one try may take."""
MEMORY_LIMIT_VARIABLE = "GRAPHLENS_MEMORY_LIMIT"
"""Environment variable that sets the limit in bytes instead."""
ACTIVATIONS_ALIVE = 3
"""A node's inputs and output are alive together: the largest activation counts this many times."""
_FALLBACK_AVAILABLE = 4 << 30


def memory_limit() -> int:
    """Bytes one try may need: ``GRAPHLENS_MEMORY_LIMIT`` when set (a positive number, ``4e9`` too; anything else
    is one line of error rather than a limit silently dropped or read as 0), else a share of MemAvailable."""
    given = os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    if given:
        try:
            limit = float(given)
        except ValueError:
            limit = math.nan
        if not (math.isfinite(limit) and limit >= 1):
            raise GraphLensError(f"{MEMORY_LIMIT_VARIABLE}={given!r}: not a number of bytes (such as 4e9); "
                                 "unset it for half the memory available")
        return int(limit)
    return int(_available_bytes() * MEMORY_FRACTION)


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return _FALLBACK_AVAILABLE


def over_limit(need: int, limit: int) -> str:
    """The end of a refusal's line: ``would need 3.2 GB of memory, over the limit of 2.0 GB (set …)``; both in
    bytes when they would read the same."""
    said, allowed = byte_size(need), byte_size(limit)
    if said == allowed:
        said, allowed = f"{need:,} bytes", f"{limit:,} bytes"
    return (f"would need {said} of memory, over the limit of {allowed} "
            f"(set {MEMORY_LIMIT_VARIABLE} in bytes to change it)")


def byte_size(size: int) -> str:
    """``3.2 GB``, ``512 MB``, ``98.3 KB``, ``640 bytes``: the largest unit the size rounds to at least 1 of, to
    three figures (one decimal in GB and TB), so a small limit does not read as 0."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if size >= scale * 0.9995:  # 999.6 KB reads 1 MB, not 1000 KB
            value = size / scale
            if unit in ("TB", "GB"):
                return f"{value:.1f} {unit}"
            return f"{value:.0f} {unit}" if value >= 99.95 else f"{value:.3g} {unit}"
    return f"{size} bytes"


def _itemsize(elem_type: int) -> int:
    try:
        return int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)).itemsize)
    except (KeyError, TypeError, ValueError):
        return 4


def _bytes(value: onnx.ValueInfoProto, size_of: Callable[[onnx.TensorShapeProto.Dimension, int], int | None],
           ) -> int | None:
    """Bytes of one tensor value whose shape has a dynamic dim; None when it has none (a weight, a table:
    its size does not change with the dims) or a dim's size is unknown."""
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return None
    count, dynamic = 1, False
    for axis, dim in enumerate(value.type.tensor_type.shape.dim):
        dynamic = dynamic or not (dim.HasField("dim_value") and dim.dim_value >= 0)
        size = size_of(dim, axis)
        if size is None:
            return None
        count *= size
    return count * _itemsize(value.type.tensor_type.elem_type) if dynamic else None


def run_tensors(model: Model | onnx.ModelProto) -> tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]]:
    """The graph inputs a caller feeds, and every other tensor whose type the model declares."""
    graph = structure(model).graph
    initialized = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initialized]
    return inputs, [*graph.value_info, *graph.output]


def run_bytes(tensors: tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]],
              size: Callable[[str], int | None], inferred_largest: int = 0) -> int:
    """Estimated bytes a run needs beyond the weights: the inputs (fixed ones too: they are made for every run,
    and a [100000, 100000, 100] input is 7 TB), and the largest activation whose size depends on the dims,
    :data:`ACTIVATIONS_ALIVE` times. ``size(dim_param or input[axis] label)``
    sizes a dynamic dim; declared tensors with a dim it does not know are left out. ``inferred_largest``: the
    largest activation's bytes by the shapes inferred at these sizes (:class:`RunEstimate`), when larger."""
    inputs, activations = tensors
    total = sum(_bytes(v, _input_dims(v.name, size)) or _static_bytes(v) for v in inputs)
    largest = max((_bytes(v, lambda d, a: _dim_size(d, "", size)) or 0 for v in activations), default=0)
    return total + ACTIVATIONS_ALIVE * max(largest, inferred_largest)


def _dim_size(dim: onnx.TensorShapeProto.Dimension, label: str, size: Callable[[str], int | None]) -> int | None:
    """A dim's size: its value, else its name's size, else (no name, or Paddle2ONNX's '?') its label's."""
    if dim.HasField("dim_value") and dim.dim_value >= 0:
        return int(dim.dim_value)
    named = dim.dim_param not in ("", "?")
    return size(dim.dim_param) if named else size(label) if label else None


def _input_dims(name: str, size: Callable[[str], int | None]) -> Callable[[onnx.TensorShapeProto.Dimension, int],
                                                                         int | None]:
    """An unnamed dim of input ``name`` is sized by its ``name[axis]`` label."""
    return lambda dim, axis: _dim_size(dim, f"{name}[{axis}]", size)


INFERRED_NODES = 20_000
"""Main graphs up to this many nodes get their shapes inferred at the sizes of each estimate (a few tens of
milliseconds for a detector's 700); larger ones are estimated from their declared shapes alone."""


class RunEstimate:
    """Bytes one run of a model needs beyond its weights, at given sizes of its dynamic dims.

    A file may declare no intermediate shape at all (an exporter that writes only its inputs and outputs), and
    ONNX shape inference on the symbolic dims leaves every dim after a strided convolution unknown. So the
    inputs' dims are fixed at the sizes asked about and the shapes inferred again, weights left out: every
    activation then has its size. A run's need counts, as with the declared shapes, only tensors whose size
    depends on the dims; :meth:`tensors_bytes` counts any. When that inference fails, the declared shapes alone
    give the estimate."""

    def __init__(self, model: Model | onnx.ModelProto) -> None:
        nodes = len(model.graph.nodes) if isinstance(model, Model) else len(model.graph.node)
        self._weightless: onnx.ModelProto | None = None
        self._static: set[str] = set()
        self._inferred: dict[tuple[int, ...], dict[str, int]] = {}
        """Activation bytes by the inputs' dims they were inferred at (a need and a sum at the same sizes)."""
        if nodes <= INFERRED_NODES:
            self._weightless = model.weightless_proto() if isinstance(model, Model) else _weightless(model)
            self._static = _static_tensors(self._weightless)
        self._tensors = run_tensors(model if self._weightless is None else self._weightless)

    def need(self, size: Callable[[str], int | None]) -> int:
        """Estimated bytes of a run at ``size`` (:func:`run_bytes`)."""
        inferred = self._inferred_bytes(size)
        largest = max((b for tensor, b in inferred.items() if tensor not in self._static), default=0)
        return run_bytes(self._tensors, size, largest)

    def tensors_bytes(self, size: Callable[[str], int | None], names: Iterable[str]) -> int:
        """Bytes of the tensors ``names`` (graph inputs or activations) together at ``size``, by the inferred
        shapes, those whose size does not depend on the dims included (a tensor of unknown size counts 0)."""
        sizes = self._inferred_bytes(size)
        sizes.update((v.name, _bytes(v, _input_dims(v.name, size)) or _static_bytes(v)) for v in self._tensors[0])
        return sum(sizes.get(name, 0) for name in set(names))

    def activation_bytes(self, size: Callable[[str], int | None]) -> dict[str, int]:
        """Each activation's bytes at ``size``, where the shapes inferred there give it whole."""
        return {name: b for name, b in self._inferred_bytes(size).items() if b}

    def _inferred_bytes(self, size: Callable[[str], int | None]) -> dict[str, int]:
        """Bytes of each activation by the shapes inferred at ``size`` (none when they cannot be inferred)."""
        if self._weightless is None:
            return {}
        inputs = [v for v in self._weightless.graph.input if v.type.WhichOneof("value") == "tensor_type"]
        dims = [_dim_size(d, f"{v.name}[{axis}]", size) for v in inputs
                for axis, d in enumerate(v.type.tensor_type.shape.dim)]
        if any(d is None for d in dims):
            return {}
        key = tuple(int(d) for d in dims if d is not None)
        if key not in self._inferred:
            self._inferred[key] = self._infer_at(key)
        return dict(self._inferred[key])

    def _infer_at(self, dims: tuple[int, ...]) -> dict[str, int]:
        """ONNX shape inference on the weightless copy with the inputs' dims, in order, set to ``dims``."""
        assert self._weightless is not None
        fixed = onnx.ModelProto()
        fixed.CopyFrom(self._weightless)
        graph = fixed.graph
        del graph.value_info[:]
        values = iter(dims)
        for value in graph.input:
            if value.type.WhichOneof("value") == "tensor_type":
                for dim in value.type.tensor_type.shape.dim:
                    dim.dim_value = next(values)
        for value in graph.output:  # declared output shapes in other names than the inputs' would conflict
            if value.type.WhichOneof("value") == "tensor_type":
                value.type.tensor_type.ClearField("shape")
        inferred = _inferred(fixed)
        if inferred is None:
            return {}
        return {v.name: _static_bytes(v) for v in [*inferred.graph.value_info, *inferred.graph.output]}


def _inferred(proto: onnx.ModelProto) -> onnx.ModelProto | None:
    try:
        return onnx.shape_inference.infer_shapes(proto, strict_mode=False, data_prop=True)
    except Exception:  # onnx raises many kinds; the declared shapes still give an estimate
        return None


def _static_tensors(proto: onnx.ModelProto) -> set[str]:
    """Tensors whose shape ONNX infers whole on the symbolic dims (a weight's transpose, a table), and Constant
    outputs: their size does not change with the dims, so they count no more than in the declared estimate."""
    inferred = _inferred(proto)
    graph = inferred.graph if inferred is not None else proto.graph
    static = {o for node in graph.node if node.op_type == "Constant" for o in node.output}
    return static | {v.name for v in [*graph.value_info, *graph.output] if _static_bytes(v)}


def _static_bytes(value: onnx.ValueInfoProto) -> int:
    """Bytes of a tensor value whose every dim is known; 0 otherwise."""
    if value.type.WhichOneof("value") != "tensor_type" or not value.type.tensor_type.HasField("shape"):
        return 0
    count = 1
    for dim in value.type.tensor_type.shape.dim:
        if not dim.HasField("dim_value") or dim.dim_value < 0:
            return 0
        count *= dim.dim_value
    return count * _itemsize(value.type.tensor_type.elem_type)


def _weightless(proto: onnx.ModelProto) -> onnx.ModelProto:
    graph = proto.graph
    return weightless_model(proto, weightless_graph(shell_without(graph, {"node", "initializer"}), graph.node,
                                                    graph.initializer))
