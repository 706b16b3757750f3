"""The one linear-layer predicate and each op's channel layout, checked by running the op.

Scaling a weight's output channels by s must scale the layer's output channels by s (axis 1 of its
output; the last axis of a MatMul's), and scaling its input channels must equal scaling the input's
channels: onnxruntime computes both sides (in float32), so a wrong axis or group layout cannot pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.linear import LINEAR_OP_TYPES, LINEAR_OPS, ConvTranspose, Gemm, LinearOp, linear_layer, linear_op
from graphlens.core.model import load_model


@dataclass(frozen=True)
class Case:
    op_type: str
    x: tuple[int, ...]
    w: tuple[int, ...]
    attrs: dict = field(default_factory=dict)
    channel_axis: int = 1
    """The output's (and the input's) channel axis."""


CASES = [
    Case("Conv", (1, 4, 5, 5), (6, 4, 3, 3)),
    Case("Conv", (1, 4, 5, 5), (6, 2, 3, 3), {"group": 2}),
    Case("ConvTranspose", (1, 4, 3, 3), (4, 3, 2, 2)),
    Case("ConvTranspose", (1, 4, 3, 3), (4, 3, 2, 2), {"group": 2}),
    Case("Gemm", (3, 4), (4, 5)),
    Case("Gemm", (3, 4), (5, 4), {"transB": 1}),
    Case("MatMul", (3, 4), (4, 5)),
    Case("MatMul", (2, 3, 4), (2, 4, 5), channel_axis=-1),
]
IDS = [f"{c.op_type}-{c.attrs}-{len(c.w)}d" for c in CASES]


def _run(case: Case, x: np.ndarray, w: np.ndarray) -> np.ndarray:
    node = helper.make_node(case.op_type, ["x", "w"], ["y"], name="layer", **case.attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(x.shape))],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                              [numpy_helper.from_array(w.astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x.astype(np.float32)})[0].astype(np.float64)


def _op(case: Case) -> LinearOp:
    return LINEAR_OPS[case.op_type](group=case.attrs.get("group", 1), trans_b=case.attrs.get("transB", 0))


def _per_channel(values: np.ndarray, rank: int, axis: int) -> np.ndarray:
    shape = [1] * rank
    shape[axis] = -1
    return values.reshape(shape)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scaling_output_channels_of_the_weight_scales_the_output_channels(case: Case) -> None:
    rng = np.random.default_rng(0)
    x, w = rng.normal(size=case.x), rng.normal(size=case.w)
    op = _op(case)
    y = _run(case, x, w)
    channels = op.output_channels(w.shape)
    assert channels == y.shape[case.channel_axis]
    s = rng.uniform(0.5, 2.0, size=channels)
    scaled = _run(case, x, op.scale_outputs(w, s))
    np.testing.assert_allclose(scaled, y * _per_channel(s, y.ndim, case.channel_axis), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_scaling_input_channels_of_the_weight_equals_scaling_the_input(case: Case) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=case.x), rng.normal(size=case.w)
    op = _op(case)
    in_axis = 1 if case.op_type in ("Conv", "ConvTranspose") else -1
    s = rng.uniform(0.5, 2.0, size=x.shape[in_axis])
    w_in = w * s[op.channel_index(w.shape, "in")]
    np.testing.assert_allclose(_run(case, x, w_in), _run(case, x * _per_channel(s, x.ndim, in_axis), w),
                               rtol=1e-5, atol=1e-5)


def test_the_output_axis_is_the_one_output_channels_index_within_a_group() -> None:
    assert Gemm(trans_b=1).output_axis(2) == 0 and Gemm().output_axis(2) == 1
    assert ConvTranspose(group=2).output_axis(4) == 1 and ConvTranspose(group=2).output_channels((4, 3, 2, 2)) == 6
    assert ConvTranspose(group=2).kernel_groups == 2 and Gemm().kernel_groups == 1


def _model(tmp_path, weight: np.ndarray | None, *, op_type: str = "Conv", domain: str = "", **attrs):
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4, 5, 5])]
    inits = []
    if weight is None:  # the weight is a graph input: not a constant
        inputs.append(helper.make_tensor_value_info("w", TensorProto.FLOAT, [6, 4, 3, 3]))
    else:
        inits.append(numpy_helper.from_array(weight, "w"))
    node = helper.make_node(op_type, ["x", "w"], ["y"], name="layer", domain=domain, **attrs)
    graph = helper.make_graph([node], "g", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid(domain, 1)] if domain else [])
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    graph = load_model(path).graph
    return graph, graph.by_name["layer"]


def test_a_linear_layer_has_a_float_constant_weight_of_a_shape_its_op_accepts(tmp_path) -> None:
    conv = np.ones((6, 4, 3, 3), np.float32)
    graph, node = _model(tmp_path, conv)
    assert type(linear_layer(graph, node)).__name__ == "Conv"
    for weight, attrs in ((None, {}), (conv.astype(np.int8), {}), (np.ones((6, 4), np.float32), {}),
                          (conv, {"group": 4})):
        graph, node = _model(tmp_path, weight, **attrs)
        assert linear_op(node) is not None and linear_layer(graph, node) is None, (weight, attrs)
    graph, node = _model(tmp_path, conv, domain="com.example")
    assert linear_op(node) is None and linear_layer(graph, node) is None
    graph, node = _model(tmp_path, conv, op_type="Relu")
    assert linear_layer(graph, node) is None
    assert LINEAR_OP_TYPES == ("Conv", "ConvTranspose", "Gemm", "MatMul")
