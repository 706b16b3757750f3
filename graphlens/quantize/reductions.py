"""The ReduceMin and ReduceMax nodes a calibration session adds beside the tensors it summarizes.

Every run but those kept for the error report returns each activation's min and max alone, as onnxruntime's own
calibrator does: two scalars from the session instead of the tensor
(:func:`~graphlens.quantize.calibrate.collect_ranges`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx

from graphlens.core.model import Model

REDUCED = "__calibration"
"""The prefix of every name the reductions add."""


def model_opset(model: Model | onnx.ModelProto) -> int:
    proto = model.proto if isinstance(model, Model) else model
    return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), 1)


TWO_STEP_BYTES = 2**18
"""Bytes of a tensor on one sample from which its reductions go in two steps (:func:`reductions`). onnxruntime
shares a reduction among its threads by rows, so one over a whole tensor runs on one core; two steps add two nodes
per tensor, which cost more than they save on small tensors. A detector page's 105 tensors, 8 pages: 0.17 s over
the float runs in one step, 0.11 s in two; the classifier's 4-crop runs (tensors of at most 0.6 MB): 9 ms slower
in two."""


def reductions(tensors: list[str], opset: int, two_steps: set[str], *, per_channel: bool = False,
                ) -> tuple[list[onnx.NodeProto], dict[str, tuple[str, str]]]:
    """A ReduceMin and a ReduceMax of every tensor, over all its elements (``per_channel``: over all but axis 1,
    the tensor seen as [N, C, rest]), and their outputs by tensor. Those in ``two_steps`` (of rank 3 or more; see
    :data:`TWO_STEP_BYTES`) are reduced along the rows of [N, C, rest] first, then over the rows' results: minima and
    maxima are exact in any order, so the bounds are the same."""
    nodes: list[onnx.NodeProto] = []
    names: dict[str, tuple[str, str]] = {}
    tag = "channel" if per_channel else ""
    for k, tensor in enumerate(tensors):
        low, high = f"{tensor}{REDUCED}{tag}_min", f"{tensor}{REDUCED}{tag}_max"
        rows = tensor in two_steps
        source = tensor
        if per_channel or rows:
            source = f"{tensor}{REDUCED}{tag}_nc"
            nodes.append(onnx.helper.make_node("Reshape", [tensor, f"{REDUCED}{tag}_nc_rest"], [source],
                                               name=f"{REDUCED}{tag}_nc_{k}"))
        for op, out in (("ReduceMin", low), ("ReduceMax", high)):
            name = f"{REDUCED}{tag}_{out[-3:]}_{k}"
            if rows:
                by_row = f"{out}_rows"  # [N, C]
                nodes.append(_reduce(op, source, by_row, f"{name}_rows", (2,), opset, tag))
                nodes.append(_reduce(op, by_row, out, name, (0,), opset, tag) if per_channel else
                             onnx.helper.make_node(op, [by_row], [out], name=name, keepdims=0))
            elif per_channel:
                nodes.append(_reduce(op, source, out, name, (0, 2), opset, tag))
            else:
                nodes.append(onnx.helper.make_node(op, [source], [out], name=name, keepdims=0))
        names[tensor] = (low, high)
    return _constants(nodes, tag) + nodes, names


def _reduce(op: str, tensor: str, out: str, name: str, axes: tuple[int, ...], opset: int, tag: str,
            ) -> onnx.NodeProto:
    """``op`` along ``axes``, dropped (from opset 18 the axes are an input: a constant :func:`_constants` adds)."""
    if opset >= 18:
        return onnx.helper.make_node(op, [tensor, _axes_name(axes, tag)], [out], name=name, keepdims=0)
    return onnx.helper.make_node(op, [tensor], [out], name=name, keepdims=0, axes=list(axes))


def _axes_name(axes: tuple[int, ...], tag: str) -> str:
    return f"{REDUCED}{tag}_axes_{'_'.join(map(str, axes))}"


def _constants(nodes: list[onnx.NodeProto], tag: str) -> list[onnx.NodeProto]:
    """The Constant nodes ``nodes`` read: the [N, C, rest] shape, the axes they reduce."""
    read = {t for node in nodes for t in node.input}
    wanted: dict[str, tuple[int, ...]] = {f"{REDUCED}{tag}_nc_rest": (0, 0, -1)}
    wanted.update((_axes_name(axes, tag), axes) for axes in ((0,), (2,), (0, 2)))
    return [_constant(name, np.array(value, np.int64)) for name, value in wanted.items() if name in read]


def in_two_steps(model: Model | onnx.ModelProto, tensors: list[str], sizes: Mapping[str, int]) -> set[str]:
    """The tensors of ``tensors`` reduced in two steps: :data:`TWO_STEP_BYTES` or more on a sample (``sizes``), rank 3
    or more."""
    large = [t for t in tensors if sizes.get(t, 0) >= TWO_STEP_BYTES]
    ranks = _ranks(model, large)
    return {t for t in large if ranks.get(t, 0) >= 3}


def _ranks(model: Model | onnx.ModelProto, tensors: list[str]) -> dict[str, int]:
    """The rank of each of ``tensors`` a model's inferred shapes know (a bare protobuf's: none, so one step)."""
    if not isinstance(model, Model):
        return {}
    shapes = {t: model.graph.tensor_type(t).shape for t in tensors}
    return {t: len(shape) for t, shape in shapes.items() if shape is not None}


def _constant(name: str, value: np.ndarray) -> onnx.NodeProto:
    return onnx.helper.make_node("Constant", [], [name], name=name, value=onnx.numpy_helper.from_array(value, name))
