"""Running a model with onnxruntime on CPU, as written.

Graph optimizations are disabled (``ORT_DISABLE_ALL``): with them on, onnxruntime folds
batch norms, fuses activations and pre-computes constants itself, so a numeric diff would
measure its rewrites instead of the model's. Intermediate tensors are exposed by adding them
as graph outputs on a copy of the protobuf; the caller's model is never changed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import onnx

from graphlens.core.model import Model
from graphlens.core.tensors import add_external_data_to_session

_ORT_PREFIX = re.compile(r"^\s*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_SOURCE_PREFIX = re.compile(r"^\S*onnxruntime\S*\.(?:cc|h|cpp):\d+\s+.*?\)\s+")
_UNREGISTERED = re.compile(r"(?P<domain>[\w.\-]*):(?P<op>\w+)\(-?\d+\) is not a registered function/op")


@dataclass
class RunResult:
    """What one run produced; ``error`` says in one line why there are no outputs."""

    outputs: dict[str, np.ndarray] | None
    error: str | None


def main_graph_tensors(proto: onnx.ModelProto) -> set[str]:
    """Names that can become graph outputs: main-graph inputs, initializers and node outputs."""
    graph = proto.graph
    names = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    names.update(t for node in graph.node for t in node.output if t)
    return names


def one_line(exc: BaseException) -> str:
    """An onnxruntime exception as one readable line, without its error-code and source-file prefixes."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    text = _ORT_PREFIX.sub("", text)
    text = _SOURCE_PREFIX.sub("", text)
    found = _UNREGISTERED.search(text)
    if found:
        domain = found["domain"] or "ai.onnx"
        return (
            f"op '{found['op']}' (domain {domain}) is not registered with onnxruntime; "
            "a custom op needs its implementation loaded"
        )
    return text


def _with_outputs(model: Model | onnx.ModelProto, proto: onnx.ModelProto, extra: list[str]) -> onnx.ModelProto:
    """A copy of ``proto`` whose graph also outputs ``extra``, typed when the type is known."""
    copy = onnx.ModelProto()
    copy.CopyFrom(proto)
    present = {v.name for v in copy.graph.output}
    known = {v.name: v for v in (*copy.graph.value_info, *copy.graph.input)}
    for name in extra:
        if name in present:
            continue
        present.add(name)
        if name in known:
            copy.graph.output.append(known[name])
            continue
        info = onnx.helper.make_empty_tensor_value_info(name)
        if isinstance(model, Model):
            found = model.graph.tensor_type(name)
            if found.dtype is not None:
                elem_type = onnx.helper.np_dtype_to_tensor_dtype(_np_dtype(found.dtype))
                info = onnx.helper.make_tensor_value_info(name, elem_type, None)
        copy.graph.output.append(info)
    return copy


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16))
    return np.dtype(name)


def run_model(
    model: Model | onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    extra_outputs: Sequence[str] = (),
) -> RunResult:
    """Outputs (graph outputs, then ``extra_outputs``) by name, or an error line; never raises for onnxruntime."""
    proto = model.to_proto() if isinstance(model, Model) else model
    extra = list(dict.fromkeys(extra_outputs))
    if extra:
        available = main_graph_tensors(proto)
        missing = [name for name in extra if name not in available]
        if missing:
            return RunResult(None, f"no tensor '{missing[0]}' in the main graph to expose as an output")
        try:
            proto = _with_outputs(model, proto, extra)
        except (TypeError, ValueError, KeyError) as exc:
            return RunResult(None, f"cannot expose intermediate tensors ({one_line(exc)})")
    try:
        import onnxruntime as ort
    except ImportError as exc:
        return RunResult(None, f"onnxruntime is not installed ({exc})")
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 3
    external = add_external_data_to_session(options, proto)  # mapped, kept for the session
    try:
        data = proto.SerializeToString()
    except ValueError as exc:
        return RunResult(None, f"the model cannot be serialized for onnxruntime ({one_line(exc)})")
    try:
        session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own pybind classes for every load failure
        return RunResult(None, one_line(exc))
    names = [o.name for o in session.get_outputs()]
    try:
        values = session.run(names, dict(inputs))
    except Exception as exc:  # as above, for shape/type mismatches and kernel failures at run time
        return RunResult(None, one_line(exc))
    return RunResult({name: np.asarray(value) for name, value in zip(names, values)}, None)
