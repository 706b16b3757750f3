"""The arena a job's sessions share: taken only inside the block, the same outputs, the memory given back at the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.numerics import arena
from graphlens.numerics.run import ModelRunner, session_options


def _wide(rows: int = 4096) -> onnx.ModelProto:
    """x [1, 1024] → x tiled ``rows`` times (4 KB a row), its Relu → their sum: a run that takes large blocks."""
    repeats = helper.make_tensor("repeats", TensorProto.INT64, [2], [rows, 1])
    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "repeats"], ["wide"]), helper.make_node("Relu", ["wide"], ["positive"]),
         helper.make_node("ReduceSum", ["positive"], ["y"])],
        "wide", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1024])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [repeats])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


def _shares(options) -> bool:
    try:
        return options.get_session_config_entry("session.use_env_allocators") == "1"
    except RuntimeError:  # onnxruntime's answer for a key never set
        return False


def test_sessions_take_the_shared_arena_only_inside_the_block(monkeypatch):
    released: list[int] = []
    monkeypatch.setattr(arena, "release", lambda: released.append(1))
    assert not _shares(session_options(arena=True))
    with arena.shared_arena():
        assert _shares(session_options(arena=True)) == bool(arena._registered)
        assert not _shares(session_options(arena=False))  # a large model's session keeps no arena at all
        with arena.shared_arena():
            pass
        assert released == [] and _shares(session_options(arena=True)) == bool(arena._registered)
    assert not _shares(session_options(arena=True))
    assert released == ([1] if arena._registered else [])


def test_runs_in_the_shared_arena_give_the_same_outputs():
    x = {"x": np.random.default_rng(0).normal(size=(1, 1024)).astype(np.float32)}
    alone = ModelRunner(_wide()).run(x).outputs
    with arena.shared_arena():
        shared = ModelRunner(_wide()).run(x).outputs
    assert alone is not None and shared is not None
    np.testing.assert_array_equal(alone["y"], shared["y"])


_GIVEN_BACK = """
import json, numpy as np
from graphlens.numerics import arena
from graphlens.numerics.run import ModelRunner
from tests.numerics.test_arena import _wide

def resident_mb():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * 4096 / 2**20

x = {"x": np.ones((1, 1024), np.float32)}
with arena.shared_arena():
    for rows in (1024, 4096, 16384):
        runner = ModelRunner(_wide(rows))
        assert runner.run(x).outputs is not None
        del runner
    held = resident_mb()
print(json.dumps([bool(arena._registered), held, resident_mb()]))
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads the resident memory from /proc")
def test_the_arena_gives_its_memory_back_when_the_block_ends():
    """Sessions one after the other, each with larger tensors (4, 16 and 64 MB), grow the arena; at the block's
    end the regions it added for them go back to the system. In a process of its own: one whose arena earlier
    work grew already may serve these from regions it keeps."""
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", _GIVEN_BACK], capture_output=True, text=True, cwd=root,
                          timeout=120, check=True)
    registered, held, after = json.loads(done.stdout.strip().splitlines()[-1])
    if not registered:
        pytest.skip("this onnxruntime has no environment arena")
    assert after < held - 64
