"""Generate a DenseNet-121-shaped ONNX model for layout benchmarks.

The topology is DenseNet-121's: a stem (Conv 7×7/2, BN, Relu, MaxPool 3×3/2), four dense blocks
of 6, 12, 24 and 16 layers, each layer ``BN -> Relu -> Conv 1×1 -> BN -> Relu -> Conv 3×3``
followed by a Concat with the features so far, three transitions ``BN -> Relu -> Conv 1×1 ->
AveragePool``, and a head ``BN -> Relu -> GlobalAveragePool -> Flatten -> Gemm``. Dense blocks
are what make layered layout slow: every layer's output and every running feature map feed a
Concat several layers further down.

By default each layer concatenates the running feature map with its new channels (``Concat([prev,
new])``, as exporters emit it when the block keeps one growing tensor); ``concat="all"`` instead
concatenates every earlier feature map of the block, as torchvision's ``_DenseBlock`` does, which
gives Concat nodes up to 25 inputs. Channel counts are small (growth 8, bottleneck 2×) to keep
the file small; all parameters are initializers and names are exporter-style scopes such as
``/features/denseblock1/denselayer1/conv1``.

Usage::

    python benchmarks/densenet.py -o /tmp/densenet121.onnx
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
BLOCKS = (6, 12, 24, 16)
INPUT_SHAPE = (1, 3, 64, 64)


class _Builder:
    """Appends nodes and initializers with exporter-style names."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []

    def param(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(array.astype(np.float32), name))
        return name

    def node(self, op: str, name: str, inputs: Sequence[str], **attrs: object) -> str:
        output = f"{name}_output_0"
        self.nodes.append(helper.make_node(op, list(inputs), [output], name=name, **attrs))
        return output

    def conv(self, scope: str, x: str, c_in: int, c_out: int, kernel: int, stride: int = 1) -> str:
        weights = self.rng.standard_normal((c_out, c_in, kernel, kernel)) * np.sqrt(2.0 / (c_in * kernel * kernel))
        w = self.param(f"{scope.strip('/').replace('/', '.')}.weight", weights)
        pad = kernel // 2
        return self.node(
            "Conv", scope, [x, w], kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4
        )

    def bn(self, scope: str, x: str, channels: int) -> str:
        prefix = scope.strip("/").replace("/", ".")
        rng = self.rng
        params = [
            self.param(f"{prefix}.weight", rng.uniform(0.5, 1.5, channels)),
            self.param(f"{prefix}.bias", rng.normal(0.0, 0.1, channels)),
            self.param(f"{prefix}.running_mean", rng.normal(0.0, 0.1, channels)),
            self.param(f"{prefix}.running_var", rng.uniform(0.5, 1.5, channels)),
        ]
        return self.node("BatchNormalization", scope, [x, *params], epsilon=1e-5)

    def bn_relu_conv(self, scope: str, x: str, names: Sequence[str], c_in: int, c_out: int, kernel: int) -> str:
        norm, relu, conv = names
        y = self.bn(f"{scope}/{norm}", x, c_in)
        y = self.node("Relu", f"{scope}/{relu}", [y])
        return self.conv(f"{scope}/{conv}", y, c_in, c_out, kernel)


def make_densenet121(
    seed: int = 0,
    *,
    growth: int = 8,
    bn_size: int = 2,
    num_classes: int = 100,
    concat: str = "running",
    blocks: Sequence[int] = BLOCKS,
) -> onnx.ModelProto:
    """Return a DenseNet-121-shaped model (427 nodes); ``concat`` is ``"running"`` or ``"all"``
    (see the module doc), ``blocks`` the layers per dense block (more for a bigger stress test)."""
    if concat not in ("running", "all"):
        raise ValueError(f"concat must be 'running' or 'all', not {concat!r}")
    b = _Builder(seed)
    channels = 2 * growth
    x = b.conv("/features/conv0", "input", INPUT_SHAPE[1], channels, 7, stride=2)
    x = b.bn("/features/norm0", x, channels)
    x = b.node("Relu", "/features/relu0", [x])
    x = b.node("MaxPool", "/features/pool0", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])

    for number, layers in enumerate(blocks, 1):
        block = f"/features/denseblock{number}"
        features = [x]
        for index in range(1, layers + 1):
            scope = f"{block}/denselayer{index}"
            y = b.bn_relu_conv(scope, x, ("norm1", "relu1", "conv1"), channels, bn_size * growth, 1)
            y = b.bn_relu_conv(scope, y, ("norm2", "relu2", "conv2"), bn_size * growth, growth, 3)
            features.append(y)
            x = b.node("Concat", f"{scope}/concat", [x, y] if concat == "running" else features, axis=1)
            channels += growth
        if number < len(blocks):
            scope = f"/features/transition{number}"
            x = b.bn_relu_conv(scope, x, ("norm", "relu", "conv"), channels, channels // 2, 1)
            x = b.node("AveragePool", f"{scope}/pool", [x], kernel_shape=[2, 2], strides=[2, 2])
            channels //= 2

    x = b.bn("/features/norm5", x, channels)
    x = b.node("Relu", "/relu", [x])
    x = b.node("GlobalAveragePool", "/global_pool", [x])
    x = b.node("Flatten", "/flatten", [x], axis=1)
    weight = b.param("classifier.weight", b.rng.standard_normal((num_classes, channels)) * 0.05)
    bias = b.param("classifier.bias", np.zeros(num_classes))
    b.nodes.append(helper.make_node("Gemm", [x, weight, bias], ["logits"], name="/classifier/Gemm", transB=1))

    graph = helper.make_graph(
        b.nodes,
        "densenet121" if tuple(blocks) == BLOCKS else "densenet",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(INPUT_SHAPE))],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [INPUT_SHAPE[0], num_classes])],
        b.initializers,
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="graphlens-benchmarks"
    )
    model.ir_version = IR_VERSION
    return model


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a DenseNet-121-shaped ONNX model.")
    parser.add_argument("-o", "--output", type=Path, required=True, help="destination .onnx file")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--concat", choices=("running", "all"), default="running")
    parser.add_argument(
        "--blocks", default=",".join(map(str, BLOCKS)), help="layers per dense block (default: 6,12,24,16)"
    )
    args = parser.parse_args(argv)
    model = make_densenet121(args.seed, concat=args.concat, blocks=[int(b) for b in args.blocks.split(",")])
    onnx.checker.check_model(model, full_check=True)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, args.output)
    print(
        f"wrote {args.output}: {len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers, "
        f"{args.output.stat().st_size / 1e6:.2f} MB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
