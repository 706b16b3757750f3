"""Files that ship with GraphLens (the demo model, pattern files)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path


def resource_path(name: str) -> Path:
    """Path of a bundled file in ``resources/`` (installed as ``graphlens.resources``)."""
    return Path(str(resources.files("graphlens.resources").joinpath(name)))


def demo_model_path() -> Path:
    """The demo CNN every first run opens."""
    return resource_path("demo.onnx")
