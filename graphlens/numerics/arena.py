"""One onnxruntime memory arena shared by the sessions of a job, given back when the job ends.

Each session normally grows an arena of its own: the memory it maps is new to the process, so every page of it is
faulted in again, session after session, and a quantization opens several on the same model (its calibration, the
equalization trial's two arms, the error report). Within :func:`shared_arena`, sessions that take an arena
(:func:`~graphlens.numerics.run.session_options`) take onnxruntime's environment arena instead, one for the
process, and reuse what the sessions before them freed. When the outermost such block ends, the arena gives the
regions it no longer uses back to the system (onnxruntime's arena shrinkage), so a window that quantized one model
does not keep its memory. The first quantization of the PP-OCRv4 detector in a process (``ws.quantization.quantize``,
three runs each way): 217,000 page faults against 250,000, 1.48–1.50 s against 1.53–1.58 s, peak resident memory
1.05 against 1.14 GB; the recognizer 120,000 against 161,000 faults. (The two full-page activations the error report
sets side by side are most of what is left.)
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

_lock = threading.Lock()
_depth = 0
_registered: bool | None = None
"""Whether the environment arena exists (None: not tried yet; False: onnxruntime refused it)."""


def _register() -> bool:
    """Create onnxruntime's environment CPU arena once per process; False if this onnxruntime cannot."""
    global _registered
    if _registered is None:
        try:
            import onnxruntime as ort

            info = ort.OrtMemoryInfo("Cpu", ort.OrtAllocatorType.ORT_ARENA_ALLOCATOR, 0, ort.OrtMemType.DEFAULT)
            # no limit, the default extension (by powers of two), default chunk sizes: regions shrinkage can free
            ort.create_and_register_allocator(info, ort.OrtArenaCfg(0, -1, -1, -1))
            _registered = True
        except Exception:  # an onnxruntime without environment allocators: every session keeps its own arena
            _registered = False
    return _registered


def sharing() -> bool:
    """Whether a session opened now takes the shared arena."""
    return _depth > 0 and bool(_registered)


@contextlib.contextmanager
def shared_arena() -> Iterator[None]:
    """Sessions opened inside share one arena (see the module docstring); blocks may nest, and only the outermost
    one's end gives the memory back."""
    global _depth
    with _lock:
        _register()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            last = _depth == 0
        if last and _registered:
            # best effort: memory not given back must not turn a finished job into a failure
            with contextlib.suppress(Exception):  # onnxruntime raises its own pybind classes
                release()


def release() -> None:
    """Give the shared arena's unused regions back to the system: a run with onnxruntime's arena shrinkage on, of
    a one-node model in a session on that arena."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    from graphlens.numerics.run import session_options

    graph = onnx.helper.make_graph([onnx.helper.make_node("Identity", ["x"], ["y"])], "release",
                                   [onnx.helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1])],
                                   [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [1])])
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 13)])
    options: Any = session_options(arena=True)
    options.add_session_config_entry("session.use_env_allocators", "1")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    run = ort.RunOptions()
    run.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    session.run(None, {"x": np.zeros(1, np.float32)}, run)
