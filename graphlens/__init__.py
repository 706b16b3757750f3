"""GraphLens: inspect ONNX models, explain pattern matches, fold, fuse, quantize, binarize and compare them."""

from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model

__all__ = ["GraphLensError", "Model", "Workspace", "load_model", "__version__"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """``graphlens.Workspace`` on first use, so commands that need no workspace do not import it."""
    if name == "Workspace":
        from graphlens.workspace import Workspace

        return Workspace
    raise AttributeError(f"module 'graphlens' has no attribute '{name}'")
