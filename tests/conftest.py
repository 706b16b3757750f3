"""Test setup: Qt always offscreen, and helpers to write models to disk."""

from __future__ import annotations

import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before anything imports Qt

from pathlib import Path

import onnx
import pytest

from graphlens.core.bundled import demo_model_path


@pytest.fixture
def write_model(tmp_path: Path):
    """Write a ModelProto to a file under tmp_path and return its path."""

    def write(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save(model, path)
        return path

    return write


@pytest.fixture
def demo_path() -> Path:
    return demo_model_path()
