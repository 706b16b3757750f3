"""Comparing two models: which nodes correspond, what changed, and the numeric error per pair."""

from graphlens.compare.compare import compare_models
from graphlens.compare.result import METRICS, STATUSES, Comparison, Pair, TensorError, worst_status

__all__ = ["METRICS", "STATUSES", "Comparison", "Pair", "TensorError", "compare_models", "worst_status"]
