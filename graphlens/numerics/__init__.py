"""Numeric diffs: run two models on the same inputs with onnxruntime and judge how far apart they are."""

from graphlens.numerics.diff import TOLERANCES, NumericDiff, TensorDiff, check_models, compare_tensors, diff_models
from graphlens.numerics.dims import DimChoice, InputsUsed
from graphlens.numerics.inputs import load_inputs, make_inputs, parse_dims
from graphlens.numerics.run import RunResult, run_model

__all__ = [
    "TOLERANCES",
    "DimChoice",
    "InputsUsed",
    "NumericDiff",
    "RunResult",
    "TensorDiff",
    "check_models",
    "compare_tensors",
    "diff_models",
    "load_inputs",
    "make_inputs",
    "parse_dims",
    "run_model",
]
