"""How much memory a run may take, and an estimate of what a run at given dim sizes needs.

A dims search on a large language model must stop before a try that cannot fit, not be killed
by the system half-way: before each try the bytes of the random inputs and of the largest
activation (from the shapes the model declares, with the sizes substituted) are added up and
compared with :func:`memory_limit`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx

from graphlens.core.model import Model

MEMORY_FRACTION = 0.5
"""Share of the memory available when a search starts (the reference session's weights already
loaded) that one try may take."""
MEMORY_LIMIT_VARIABLE = "GRAPHLENS_MEMORY_LIMIT"
"""Environment variable that sets the limit in bytes instead."""
ACTIVATIONS_ALIVE = 3
"""A node's inputs and output are alive together: the largest activation counts this many times."""
_FALLBACK_AVAILABLE = 4 << 30


def memory_limit() -> int:
    """Bytes one try may need: ``GRAPHLENS_MEMORY_LIMIT`` when set, else a share of MemAvailable."""
    given = os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip()
    if given:
        try:
            return max(int(float(given)), 0)
        except ValueError:
            pass
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
    """The end of a refusal's line: ``would need 3.2 GB of memory, over the limit of 2.0 GB (set …)``."""
    return (f"would need {gigabytes(need)} of memory, over the limit of {gigabytes(limit)} "
            f"(set {MEMORY_LIMIT_VARIABLE} in bytes to change it)")


def gigabytes(size: int) -> str:
    """``3.2 GB``; small sizes in MB so they do not read as 0."""
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.1f} MB"


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
    from graphlens.numerics.inputs import structure

    graph = structure(model).graph
    initialized = {t.name for t in graph.initializer}
    inputs = [v for v in graph.input if v.name not in initialized]
    return inputs, [*graph.value_info, *graph.output]


def run_bytes(tensors: tuple[list[onnx.ValueInfoProto], list[onnx.ValueInfoProto]],
              size: Callable[[str], int | None]) -> int:
    """Estimated bytes a run needs beyond the weights: the inputs, and the largest declared activation
    whose size depends on the dims, :data:`ACTIVATIONS_ALIVE` times. ``size(dim_param or input[axis] label)``
    sizes a dynamic dim; tensors with a dim it does not know are left out."""

    def size_of(dim: onnx.TensorShapeProto.Dimension, label: str) -> int | None:
        if dim.HasField("dim_value") and dim.dim_value >= 0:
            return int(dim.dim_value)
        return size(dim.dim_param or label)

    def labelled(name: str) -> Callable[[onnx.TensorShapeProto.Dimension, int], int | None]:
        """An unnamed dim of input ``name`` is sized by its ``name[axis]`` label."""
        return lambda dim, axis: size_of(dim, f"{name}[{axis}]")

    inputs, activations = tensors
    total = sum(_bytes(v, labelled(v.name)) or 0 for v in inputs)
    largest = max((_bytes(v, lambda d, a: size_of(d, "")) or 0 for v in activations), default=0)
    return total + ACTIVATIONS_ALIVE * largest
