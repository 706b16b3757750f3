"""Rule names other packages apply by default, without importing the rules themselves."""

from __future__ import annotations

BN_FOLD_RULES = ("fuse-decomposed-bn", "fold-bn", "fold-affine")
"""The batch-norm folds quantize and binarize run first: a BN scale quantized or binarized on its own is what
sinks onnxruntime's PaddleOCR models."""
