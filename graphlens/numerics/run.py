"""Running a model with onnxruntime on CPU, as written.

Graph optimizations are disabled (``ORT_DISABLE_ALL``): with them on, onnxruntime folds
batch norms, fuses activations and pre-computes constants itself, so a numeric diff would
measure its rewrites instead of the model's. Quantization's long runs, whose float values are only
summarized or set against quantization error thousands of times larger, may ask for them (``optimize``).
Intermediate tensors are exposed by adding them
as graph outputs on a copy of the protobuf; the caller's model is never changed.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from graphlens.core.io import GraphParts, shell_without, stage_for_session
from graphlens.core.model import Model
from graphlens.core.tensors import add_external_data_to_session, all_tensors, is_external
from graphlens.core.types import tensor_nbytes
from graphlens.numerics.arena import sharing

_ORT_PREFIX = re.compile(r"^\s*\[ONNXRuntimeError\]\s*:\s*\d+\s*:\s*\w+\s*:\s*")
_SOURCE_PREFIX = re.compile(r"^\S*onnxruntime\S*\.(?:cc|h|cpp):\d+\s+.*?\)\s+")
_MID_SOURCE = re.compile(r"(Status Message: )\S*onnxruntime\S*\.(?:cc|h|cpp):\d+ [^)]*\)\s+")
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
    text = _MID_SOURCE.sub(r"\1", text)
    found = _UNREGISTERED.search(text)
    if found:
        domain = found["domain"] or "ai.onnx"
        return (
            f"op '{found['op']}' (domain {domain}) is not registered with onnxruntime; "
            "a custom op needs its implementation loaded"
        )
    return text


def _extra_outputs(model: Model | onnx.ModelProto, proto: onnx.ModelProto,
                   extra: list[str]) -> list[onnx.ValueInfoProto]:
    """The graph outputs that expose ``extra`` (those not outputs already), typed when the type is known."""
    present = {v.name for v in proto.graph.output}
    known = {v.name: v for v in (*proto.graph.value_info, *proto.graph.input)}
    added: list[onnx.ValueInfoProto] = []
    for name in extra:
        if name in present:
            continue
        present.add(name)
        if name in known:
            added.append(known[name])
            continue
        info = onnx.helper.make_empty_tensor_value_info(name)
        if isinstance(model, Model):
            found = model.graph.tensor_type(name)
            if found.dtype is not None:
                elem_type = onnx.helper.np_dtype_to_tensor_dtype(_np_dtype(found.dtype))
                info = onnx.helper.make_tensor_value_info(name, elem_type, None)
        added.append(info)
    return added


STAGE_BYTES = 64 * 2**20
"""Weights above which a model with exposed tensors is handed to onnxruntime as files, not bytes."""


def _worth_staging(proto: onnx.ModelProto) -> bool:
    """Whether the model has external weights, or enough inline ones that serializing them costs memory."""
    total = 0
    for tensor in all_tensors(proto):
        if is_external(tensor):
            return True
        total += tensor_nbytes(tensor)
        if total > STAGE_BYTES:
            return True
    return False


def _np_dtype(name: str) -> np.dtype:
    if name == "bfloat16":
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(onnx.TensorProto.BFLOAT16))
    return np.dtype(name)


SPIN_ELEMENTS = 1 << 14
"""Input elements per sample from which a run is long enough for its session's worker threads to spin
(:func:`session_options`): a detector page, a recognizer's or a classifier's crop, not a 32×32 image."""
OPTIMIZE_ELEMENTS = 1 << 21
"""Input elements over a session's runs from which onnxruntime's graph optimizations (:func:`session_options`)
pay for the time they add to opening it: one PP-OCRv4 detector page (its quantized model 0.088 → 0.067 s a run),
the recognizer's 24 calibration crops (0.78 against 0.93 s); not its one crop of the equalization trial, nor the
classifier's 32 crops (0.045 against 0.040 s), where the opening costs more than the runs save."""


def session_options(*, arena: bool = False, spin: bool = False, optimize: bool = False) -> Any:
    """onnxruntime options for every run here: no graph optimizations (the model's own nodes run), quiet;
    ``arena``: keep freed blocks for the next tensors (for models whose weights are small); ``spin``: worker
    threads spin between operators instead of sleeping (runs of :data:`SPIN_ELEMENTS` or more); ``optimize``:
    onnxruntime's graph optimizations on (fused, blocked-layout kernels, as a deployed float model runs), with
    every Q/DQ pair still run as written (no int8 kernels: their rounding is not the model's)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = (ort.GraphOptimizationLevel.ORT_ENABLE_ALL if optimize
                                        else ort.GraphOptimizationLevel.ORT_DISABLE_ALL)
    if optimize:
        options.add_session_config_entry("session.disable_quant_qdq", "1")
    options.log_severity_level = 4  # failures come back as values; retries must not flood stderr
    # Idle worker threads sleep instead of spinning unless asked: several sessions live at once here (float and
    # quantized, before and after), and on a small machine one's spinning after many short runs starves the
    # others and the Python around them (a 37-node model quantized 30 % faster). Long runs are another matter:
    # waking the threads at every operator cost the PP-OCRv4 detector's calibration pages 14 % (the same
    # outputs to the bit either way), and a run's few milliseconds of spinning after it are nothing beside it.
    options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin else "0")
    # Kernels read the weights where they are (mapped from the file, or in the serialized model) instead
    # of keeping a repacked copy of every MatMul/Conv weight: a check runs a few small feeds, and a
    # second copy of 1.3 GB of weights is what made a decoder's check twice its weights' size.
    options.add_session_config_entry("session.disable_prepacking", "1")
    # Without ``arena``, intermediate tensors go back to the system when freed rather than to an arena that
    # only grows: a decoder exported with Transpose(W) before each MatMul otherwise keeps every transposed weight.
    options.enable_cpu_mem_arena = arena
    if arena and sharing():  # the job's one arena (:mod:`graphlens.numerics.arena`)
        options.add_session_config_entry("session.use_env_allocators", "1")
    # No memory pattern: onnxruntime plans one from the first run and allocates it whole on the second, which on
    # a large input costs more than the run (a 736×992 detector page: 2.2 s against 0.4 s), and sessions here
    # run a few large feeds or many differently shaped ones, not the same shape thousands of times.
    options.enable_mem_pattern = False
    return options


class ModelRunner:
    """One onnxruntime session for a model, run on as many feeds as needed.

    Creating a session (graph checks, kernel selection) costs far more than a run of a small
    input, and for dynamic-shape models it does not depend on the feed: searching for input
    sizes that run opens the session once and only re-runs it.
    """

    def __init__(self, model: Model | onnx.ModelProto, extra_outputs: Sequence[str] = (), *,
                 file: str | os.PathLike[str] | None = None, extra_nodes: Sequence[onnx.NodeProto] = (),
                 spin: bool = False, optimize: bool = False) -> None:
        """``file``: a saved copy of ``model`` exactly as it is; onnxruntime then reads it itself and maps its
        external weights lazily, instead of taking the serialized model and a copy of every weight.
        ``extra_nodes``: nodes added to the session's copy of the main graph (reductions of the tensors a caller
        wants only summarized), whose outputs ``extra_outputs`` may name. ``spin``: for long runs
        (:func:`session_options`). ``optimize``: graph optimizations on (:func:`session_options`) for a model
        whose weights are small (optimizing copies some of them; a larger one runs as written); a model they fail
        on runs as written too."""
        self.error: str | None = None
        """Why the session could not be created; every run then returns it."""
        self._spin = spin
        self._optimize = optimize
        self._session: Any = None
        self._names: list[str] = []
        self._wanted: set[str] = set()
        self._open(model, list(dict.fromkeys(extra_outputs)), file, list(extra_nodes))

    def _open(self, model: Model | onnx.ModelProto, extra: list[str], file: str | os.PathLike[str] | None,
              nodes: list[onnx.NodeProto]) -> None:
        parts: tuple[onnx.ModelProto, GraphParts] | None = None
        if isinstance(model, Model) and _worth_staging(model.proto):
            # staged from its live nodes and initializers: writing an edited graph into its protobuf would add a
            # copy of every weight that protobuf's arena keeps as long as the model lives
            proto, parts = model.weightless_proto(), (model.proto, model.live_parts())
        else:
            proto = model.to_proto() if isinstance(model, Model) else model
        self._wanted = {v.name for v in proto.graph.input}
        if file is not None and not extra:
            self._open_file(file)
            return
        outputs: list[onnx.ValueInfoProto] = []
        if extra:
            available = main_graph_tensors(proto) | {t for node in nodes for t in node.output}
            missing = [name for name in extra if name not in available]
            if missing:
                self.error = f"no tensor '{missing[0]}' in the main graph to expose as an output"
                return
            try:
                outputs = _extra_outputs(model, proto, extra)
            except (TypeError, ValueError, KeyError) as exc:
                self.error = f"cannot expose intermediate tensors ({one_line(exc)})"
                return
        if (parts is not None or _worth_staging(proto)) and self._open_staged(proto, outputs, parts, nodes):
            return
        if parts is not None:
            proto = model.to_proto() if isinstance(model, Model) else model  # the data files cannot be staged
        if outputs or nodes:
            exposed = onnx.ModelProto()
            exposed.CopyFrom(proto)
            exposed.graph.node.extend(nodes)
            exposed.graph.output.extend(outputs)
            proto = exposed
        self._open_bytes(proto)

    def _open_bytes(self, proto: onnx.ModelProto) -> None:
        """A session on ``proto`` handed over serialized (its weights are small, or cannot be staged)."""
        try:
            import onnxruntime as ort
        except ImportError as exc:
            self.error = f"onnxruntime is not installed ({exc})"
            return
        # weights this small leave the memory arena nothing large to keep: reusing its blocks saves a
        # detector's runs the system's allocation of every large intermediate tensor
        small = not _worth_staging(proto)
        try:
            data = proto.SerializeToString()
        except ValueError as exc:
            self.error = f"the model cannot be serialized for onnxruntime ({one_line(exc)})"
            return
        for optimize in dict.fromkeys((self._optimize and small, False)):
            options = session_options(arena=small, spin=self._spin, optimize=optimize)
            self._external_data = add_external_data_to_session(options, proto, data)  # mapped, kept for the session
            try:
                self._session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
            except Exception as exc:  # onnxruntime raises its own pybind classes for every load failure
                self.error = one_line(exc)
                continue
            self.error = None
            self._names = [o.name for o in self._session.get_outputs()]
            return

    def _open_staged(self, proto: onnx.ModelProto, outputs: list[onnx.ValueInfoProto],
                     parts: tuple[onnx.ModelProto, GraphParts] | None = None,
                     nodes: Sequence[onnx.NodeProto] = ()) -> bool:
        """Open a session on ``proto`` plus ``outputs`` written as files (see
        :func:`~graphlens.core.io.stage_for_session`); False, leaving no session, when they cannot be written.
        ``parts``: a model's own protobuf and its live graph, written instead of ``proto`` (its structure)."""
        if parts is None:
            parts = proto, GraphParts(shell_without(proto.graph, {"node", "initializer"}), list(proto.graph.node),
                                      list(proto.graph.initializer))
        source, live = parts
        shell = onnx.GraphProto()
        shell.CopyFrom(live.shell)
        shell.output.extend(outputs)
        staged = stage_for_session(source, GraphParts(shell, [*live.nodes, *nodes], live.initializers))
        if staged is None:
            return False
        try:
            self._open_file(staged.file)  # onnxruntime has mapped what it needs once the session exists
        finally:
            staged.remove()
        return True

    def _open_file(self, file: str | os.PathLike[str]) -> None:
        try:
            import onnxruntime as ort

            self._session = ort.InferenceSession(os.fspath(file), session_options(spin=self._spin),
                                                 providers=["CPUExecutionProvider"])
        except Exception as exc:  # onnxruntime raises its own pybind classes for every load failure
            self.error = one_line(exc)
            return
        self._names = [o.name for o in self._session.get_outputs()]

    @property
    def outputs(self) -> list[str]:
        """The names every run returns: the graph outputs, then the exposed tensors."""
        return list(self._names)

    def only(self, names: Sequence[str]) -> ModelRunner:
        """This session asked for ``names`` alone (of its outputs): onnxruntime hands back no other tensor."""
        view, have = copy.copy(self), set(self._names)
        view._names = [n for n in names if n in have]
        return view

    def run(self, inputs: dict[str, np.ndarray]) -> RunResult:
        """Outputs by name, or an error line; feeds the model does not declare are left out."""
        if self._session is None:
            return RunResult(None, self.error or "no onnxruntime session")
        import onnxruntime as ort

        options = ort.RunOptions()
        options.log_severity_level = 4
        feed = {k: v for k, v in inputs.items() if k in self._wanted}
        try:
            values = self._session.run(self._names, feed, options)
        except Exception as exc:  # as above, for shape/type mismatches and kernel failures at run time
            return RunResult(None, one_line(exc))
        return RunResult({name: np.asarray(value) for name, value in zip(self._names, values)}, None)


def run_model(
    model: Model | onnx.ModelProto,
    inputs: dict[str, np.ndarray],
    extra_outputs: Sequence[str] = (),
) -> RunResult:
    """Outputs (graph outputs, then ``extra_outputs``) by name, or an error line; never raises for onnxruntime."""
    return ModelRunner(model, extra_outputs).run(inputs)
