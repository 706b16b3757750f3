"""Numeric diffs: run two models on the same inputs with onnxruntime and judge how far apart they are."""

from graphlens.numerics.diff import TOLERANCES, NumericDiff, TensorDiff, compare_tensors, diff_models
from graphlens.numerics.inputs import load_inputs, make_inputs, parse_dims
from graphlens.numerics.run import RunResult, run_model

__all__ = [
    "TOLERANCES",
    "NumericDiff",
    "RunResult",
    "TensorDiff",
    "compare_tensors",
    "diff_models",
    "load_inputs",
    "make_inputs",
    "parse_dims",
    "run_model",
]
