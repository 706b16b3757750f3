"""GraphLens: inspect ONNX models, find and explain subgraph patterns, preview fold rewrites."""

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model, load_model

__all__ = ["GraphLensError", "Model", "load_model", "__version__"]
__version__ = "0.1.0"
