"""Operator categories used to colour the boxes."""

from __future__ import annotations

import pytest

from graphlens.layout.view import CATEGORIES, op_category


@pytest.mark.parametrize(
    ("op", "category"),
    [
        ("Conv", "conv"), ("ConvTranspose", "conv"), ("Gemm", "conv"), ("MatMul", "conv"),
        ("BatchNormalization", "normalization"), ("LayerNormalization", "normalization"),
        ("InstanceNormalization", "normalization"),
        ("Relu", "activation"), ("Sigmoid", "activation"), ("Tanh", "activation"), ("LeakyRelu", "activation"),
        ("Gelu", "activation"), ("HardSwish", "activation"), ("Softmax", "activation"), ("Clip", "activation"),
        ("MaxPool", "pooling"), ("AveragePool", "pooling"), ("GlobalAveragePool", "pooling"),
        ("Reshape", "shape"), ("Transpose", "shape"), ("Concat", "shape"), ("Split", "shape"), ("Slice", "shape"),
        ("Gather", "shape"), ("Squeeze", "shape"), ("Unsqueeze", "shape"), ("Flatten", "shape"), ("Shape", "shape"),
        ("Identity", "shape"), ("Cast", "shape"), ("Pad", "shape"), ("Expand", "shape"), ("Resize", "shape"),
        ("Add", "math"), ("Sub", "math"), ("Mul", "math"), ("Div", "math"), ("Pow", "math"), ("Sqrt", "math"),
        ("Exp", "math"), ("Log", "math"), ("ReduceMean", "math"), ("ReduceSumSquare", "math"), ("Erf", "math"),
        ("Where", "math"), ("Greater", "math"), ("Max", "math"), ("Min", "math"),
        ("If", "control"), ("Loop", "control"), ("Scan", "control"),
        ("QuantizeLinear", "quantization"), ("DequantizeLinear", "quantization"),
        ("QLinearConv", "quantization"), ("QLinearMatMul", "quantization"), ("DynamicQuantizeLinear", "quantization"),
        ("Constant", "other"), ("NoSuchOp", "other"),
    ],
)
def test_standard_ops(op, category):
    assert op_category(op, "") == category
    assert op_category(op, "ai.onnx") == category


def test_custom_domains_are_other_even_for_familiar_names():
    assert op_category("Conv", "com.example") == "other"
    assert op_category("FusedConv", "com.microsoft") == "other"


def test_every_answer_is_a_known_category():
    assert CATEGORIES[-1] == "other"
    for op in ("Conv", "Relu", "Whatever", "ReduceMax", "QLinearAdd"):
        assert op_category(op, "") in CATEGORIES
