"""Operator categories: what colour family a box gets, so a reader spots the kind of op at a glance."""

from __future__ import annotations

CATEGORIES: tuple[str, ...] = (
    "conv",
    "attention",
    "normalization",
    "activation",
    "pooling",
    "shape",
    "math",
    "control",
    "quantization",
    "other",
)

_STANDARD_DOMAINS = frozenset({"", "ai.onnx"})
_ONNXRUNTIME_DOMAIN = "com.microsoft"

ATTENTION_FAMILY = "attention"
"""Fused attention ops: softmax(Q·Kᵀ·scale + mask)·V over heads, a block the eye should find at once."""
_ATTENTION = (
    "Attention", "MultiHeadAttention", "GroupQueryAttention", "PackedAttention", "PackedMultiHeadAttention",
    "DecoderMaskedMultiHeadAttention", "SparseAttention",
)

_TABLE: dict[str, tuple[str, ...]] = {
    # Convolution and linear layers: the ops that hold most weights.
    "conv": (
        "Conv", "ConvTranspose", "ConvInteger", "DeformConv", "Gemm", "MatMul", "MatMulInteger",
    ),
    "normalization": (
        "BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization",
        "LpNormalization", "MeanVarianceNormalization", "LRN", "RMSNormalization",
        "SimplifiedLayerNormalization",  # onnxruntime's RMS norm, registered in the default domain
    ),
    "activation": (
        "Relu", "Sigmoid", "Tanh", "LeakyRelu", "PRelu", "Elu", "Selu", "Celu", "Gelu", "HardSigmoid",
        "HardSwish", "Softmax", "LogSoftmax", "Softplus", "Softsign", "Mish", "ThresholdedRelu", "Clip",
        "Hardmax", "Swish",
    ),
    "pooling": (
        "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool", "GlobalLpPool",
        "MaxRoiPool", "RoiAlign", "MaxUnpool",
    ),
    "shape": (
        "Reshape", "Transpose", "Concat", "Split", "Slice", "Gather", "GatherElements", "GatherND",
        "Squeeze", "Unsqueeze", "Flatten", "Shape", "Size", "Identity", "Cast", "CastLike", "Pad",
        "Expand", "Resize", "Upsample", "Tile", "DepthToSpace", "SpaceToDepth", "Scatter",
        "ScatterND", "ScatterElements", "NonZero", "Compress", "ReverseSequence", "Col2Im",
        "SplitToSequence", "ConcatFromSequence", "SequenceAt", "SequenceConstruct", "SequenceEmpty",
        "SequenceErase", "SequenceInsert", "SequenceLength", "Optional", "OptionalGetElement",
        "OptionalHasElement", "Dropout",
    ),
    "math": (
        "Add", "Sub", "Mul", "Div", "Pow", "Sqrt", "Exp", "Log", "Neg", "Abs", "Reciprocal", "Floor",
        "Ceil", "Round", "Sign", "Erf", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh",
        "Asinh", "Acosh", "Atanh", "Where", "Greater", "Less", "Equal", "GreaterOrEqual",
        "LessOrEqual", "Not", "And", "Or", "Xor", "Max", "Min", "Mean", "Sum", "Mod", "BitShift",
        "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "ArgMax", "ArgMin", "CumSum",
        "Einsum", "IsNaN", "IsInf", "TopK", "Det", "Range", "Trilu", "RotaryEmbedding",
    ),
    "control": ("If", "Loop", "Scan", "SequenceMap"),
    "quantization": ("QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear"),
}

_CATEGORY_OF: dict[str, str] = {
    **{op: category for category, ops in _TABLE.items() for op in ops},
    "Attention": ATTENTION_FAMILY,  # ONNX's own, opset 23
}

_ONNXRUNTIME_TABLE: dict[str, tuple[str, ...]] = {
    # onnxruntime's fused transformer ops; its other contrib ops stay "other".
    ATTENTION_FAMILY: _ATTENTION,
    "normalization": (
        "LayerNormalization", "SimplifiedLayerNormalization", "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization", "EmbedLayerNormalization", "GroupNorm", "SkipGroupNorm",
    ),
    "activation": ("Gelu", "BiasGelu", "FastGelu", "QuickGelu", "BiasSplitGelu"),
    "math": ("RotaryEmbedding",),
}
_ONNXRUNTIME_CATEGORY_OF: dict[str, str] = {
    op: category for category, ops in _ONNXRUNTIME_TABLE.items() for op in ops
}


def op_category(op_type: str, domain: str = "") -> str:
    """The category of an operator; onnxruntime's transformer ops by what they do, ops of other
    custom domains and unknown ops ``"other"``."""
    if domain == _ONNXRUNTIME_DOMAIN:
        return _ONNXRUNTIME_CATEGORY_OF.get(op_type, "other")
    if domain not in _STANDARD_DOMAINS:
        return "other"
    found = _CATEGORY_OF.get(op_type)
    if found is not None:
        return found
    if op_type.startswith("Reduce"):
        return "math"
    if op_type.startswith("QLinear"):
        return "quantization"
    return "other"
