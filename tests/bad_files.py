"""Every kind of bad file a user can hand GraphLens, and what the error must say about it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx

from tests import models

KINDS = ["missing", "folder", "empty", "random", "truncated", "text", "tensor", "undefined"]


def make_bad_file(folder: Path, kind: str) -> tuple[Path, str]:
    """Create the bad input ``kind`` under ``folder``; return its path and a regex its error matches."""
    path = folder / f"{kind}.onnx"
    good = models.conv_bn().SerializeToString()
    content: bytes | None
    if kind == "missing":
        return path, "no such file"
    if kind == "folder":
        path.mkdir()
        return path, "is a directory"
    content, expected = {
        "empty": (b"", "is empty"),
        "random": (np.random.default_rng(0).bytes(4096), "not an ONNX model"),
        "truncated": (good[: len(good) // 2], "not an ONNX model|truncated"),
        "text": (b"These are my notes about the model.\nNothing to see here.\n", "not an ONNX model"),
        "tensor": (onnx.numpy_helper.from_array(np.ones(3, np.float32), "t").SerializeToString(), "not an ONNX model"),
        "undefined": (models.undefined_input().SerializeToString(), "node Add 'add' reads tensor 'ghost'"),
    }[kind]
    path.write_bytes(content)
    return path, expected
