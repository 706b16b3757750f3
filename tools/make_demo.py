"""Build the small "GraphLens demo" CNN shipped as ``resources/demo.onnx``.

The model is hand-built with ``onnx.helper`` so that it is tiny, deterministic
and still exercises the patterns a viewer (and its Conv/BatchNormalization
folding) has to cope with in real exported networks:

* a stem ``Conv -> BatchNormalization -> Relu``;
* a depthwise ``Conv`` (``group == channels``) followed by BN and Relu;
* residual ``Add`` skip connections;
* a stride-2 ``ConvTranspose`` upsampling followed by BN;
* a bias-less ``Conv`` whose bias is applied by a separate ``Add`` of a
  ``[C, 1, 1]`` initializer before the BN;
* a BN that must *not* be folded, because its Conv output also feeds a side
  branch (``/stage2/block1/bn``);
* a BN whose parameters come from ``Constant`` nodes instead of initializers
  (``/stage2/block2/bn``);
* a classifier head ``GlobalAveragePool -> Flatten -> Gemm -> BatchNormalization``.

Run ``python tools/make_demo.py`` to regenerate ``resources/demo.onnx``.
``build_demo_model()`` is import-safe and has no side effects.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
IR_VERSION = 8
SEED = 20240517
INPUT_NAME = "image"
OUTPUT_NAME = "logits"
INPUT_SHAPE = (1, 3, 32, 32)
NUM_CLASSES = 10
BN_EPSILON = 1e-5

DEFAULT_OUTPUT = Path(__file__).resolve().parents[1] / "resources" / "demo.onnx"

DOC_STRING = (
    "GraphLens demo: a small deterministic CNN classifier (3x32x32 image -> 10 "
    "logits) with a depthwise-separable residual block, a bias-less conv with a "
    "separate bias Add, a conv whose output feeds both a BatchNormalization and a "
    "side branch (so the BN cannot be folded), a BatchNormalization fed by "
    "Constant nodes, a stride-2 ConvTranspose decoder with a skip connection, "
    "and a GlobalAveragePool/Gemm/BatchNormalization head. Weights are random "
    "(fixed seed); the model is meant for viewing and graph-rewrite tests, not "
    "for accuracy."
)


def _param_prefix(scope: str) -> str:
    """Map a node scope to a PyTorch-style parameter prefix.

    Initializers get dotted names (``stage1.block2.conv.weight``) the way
    exporters emit ``state_dict`` keys, which keeps them distinct from the
    slash-scoped node names.
    """
    return scope.strip("/").replace("/", ".")


class _GraphBuilder:
    """Accumulates nodes and initializers in creation (= topological) order."""

    def __init__(self, rng: np.random.Generator) -> None:
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []

    # -- primitives ---------------------------------------------------------

    def initializer(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.ascontiguousarray(array), name))
        return name

    def node(
        self,
        op_type: str,
        name: str,
        inputs: Sequence[str],
        output: str | None = None,
        **attrs: Any,
    ) -> str:
        """Append a single-output node; outputs are named like exporters do."""
        out = output if output is not None else f"{name}_output_0"
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=name, **attrs))
        return out

    def constant(self, name: str, array: np.ndarray) -> str:
        tensor = numpy_helper.from_array(np.ascontiguousarray(array), f"{name}_value")
        return self.node("Constant", name, [], value=tensor)

    # -- random parameters --------------------------------------------------

    def he_normal(self, shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        std = math.sqrt(2.0 / fan_in)
        return (self.rng.standard_normal(shape) * std).astype(np.float32)

    def small_bias(self, shape: tuple[int, ...]) -> np.ndarray:
        return (self.rng.standard_normal(shape) * 0.1).astype(np.float32)

    def bn_stats(self, channels: int) -> dict[str, np.ndarray]:
        """Non-trivial inference statistics so that folding changes the weights."""
        rng = self.rng
        return {
            "weight": rng.uniform(0.5, 1.5, channels).astype(np.float32),
            "bias": rng.normal(0.0, 0.2, channels).astype(np.float32),
            "running_mean": rng.normal(0.0, 0.5, channels).astype(np.float32),
            "running_var": rng.uniform(0.5, 2.0, channels).astype(np.float32),
        }

    # -- layers ---------------------------------------------------------------

    def conv(
        self,
        scope: str,
        x: str,
        cin: int,
        cout: int,
        kernel: int,
        *,
        stride: int = 1,
        group: int = 1,
        bias: bool = True,
    ) -> str:
        prefix = _param_prefix(scope)
        w = self.he_normal((cout, cin // group, kernel, kernel), fan_in=(cin // group) * kernel * kernel)
        inputs = [x, self.initializer(f"{prefix}.weight", w)]
        if bias:
            inputs.append(self.initializer(f"{prefix}.bias", self.small_bias((cout,))))
        pad = kernel // 2
        return self.node(
            "Conv",
            scope,
            inputs,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
            dilations=[1, 1],
            group=group,
        )

    def conv_transpose(self, scope: str, x: str, cin: int, cout: int, *, stride: int = 2) -> str:
        prefix = _param_prefix(scope)
        # With kernel == stride every output pixel sees exactly one tap per input channel.
        w = self.he_normal((cin, cout, stride, stride), fan_in=cin)
        b = self.small_bias((cout,))
        return self.node(
            "ConvTranspose",
            scope,
            [x, self.initializer(f"{prefix}.weight", w), self.initializer(f"{prefix}.bias", b)],
            kernel_shape=[stride, stride],
            strides=[stride, stride],
        )

    def batch_norm(
        self,
        scope: str,
        x: str,
        channels: int,
        *,
        via_constants: bool = False,
        output: str | None = None,
    ) -> str:
        """Emit a BN whose params are initializers, or ``Constant`` outputs as some exporters do."""
        stats = self.bn_stats(channels)
        prefix = _param_prefix(scope)
        params: list[str] = []
        for i, key in enumerate(("weight", "bias", "running_mean", "running_var")):
            if via_constants:
                suffix = "" if i == 0 else f"_{i}"
                params.append(self.constant(f"{scope}/Constant{suffix}", stats[key]))
            else:
                params.append(self.initializer(f"{prefix}.{key}", stats[key]))
        return self.node(
            "BatchNormalization",
            scope,
            [x, *params],
            output=output,
            epsilon=BN_EPSILON,
            momentum=0.9,
        )

    def relu(self, name: str, x: str) -> str:
        return self.node("Relu", name, [x])

    def max_pool(self, name: str, x: str, kernel: int, stride: int) -> str:
        pad = (kernel - stride) // 2
        return self.node(
            "MaxPool",
            name,
            [x],
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad, pad, pad, pad],
        )


def build_demo_model(*, with_shapes: bool = True) -> onnx.ModelProto:
    """Build the demo model (37 nodes, ~40 KB) deterministically.

    ``with_shapes`` stores inferred intermediate shapes as ``value_info`` so a
    viewer can label edges without running shape inference itself.
    """
    g = _GraphBuilder(np.random.default_rng(SEED))

    # Stem: 3x32x32 -> 16x16x16.
    x = g.conv("/stem/conv", INPUT_NAME, 3, 16, 3)
    x = g.batch_norm("/stem/bn", x, 16)
    x = g.relu("/stem/relu", x)
    stem_out = g.max_pool("/stem/maxpool", x, kernel=2, stride=2)

    # Stage 1, block 1: depthwise-separable residual block.
    x = g.conv("/stage1/block1/dw/conv", stem_out, 16, 16, 3, group=16, bias=False)
    x = g.batch_norm("/stage1/block1/dw/bn", x, 16)
    x = g.relu("/stage1/block1/dw/relu", x)
    x = g.conv("/stage1/block1/pw/conv", x, 16, 16, 1, bias=False)
    x = g.batch_norm("/stage1/block1/pw/bn", x, 16)
    x = g.node("Add", "/stage1/block1/add", [x, stem_out])
    x = g.relu("/stage1/block1/relu", x)

    # Stage 1, block 2: bias-less conv, bias applied by a separate broadcast Add.
    x = g.conv("/stage1/block2/conv", x, 16, 16, 3, bias=False)
    bias = g.initializer("stage1.block2.conv.bias", g.small_bias((16, 1, 1)))
    x = g.node("Add", "/stage1/block2/bias_add", [x, bias])
    x = g.batch_norm("/stage1/block2/bn", x, 16)
    stage1_out = g.relu("/stage1/block2/relu", x)

    # Stage 2, block 1: the conv output is tapped by a side branch, so its BN
    # cannot be folded into the conv without changing what the tap sees.
    conv_out = g.conv("/stage2/block1/conv", stage1_out, 16, 16, 3, stride=2)
    x = g.batch_norm("/stage2/block1/bn", conv_out, 16)
    x = g.relu("/stage2/block1/relu", x)
    tap = g.max_pool("/stage2/block1/tap/maxpool", conv_out, kernel=3, stride=1)
    x = g.node("Concat", "/stage2/block1/concat", [x, tap], axis=1)

    # Stage 2, block 2: BN parameters delivered by Constant nodes.
    x = g.conv("/stage2/block2/conv", x, 32, 32, 1, bias=False)
    x = g.batch_norm("/stage2/block2/bn", x, 32, via_constants=True)
    x = g.relu("/stage2/block2/relu", x)

    # Decoder: stride-2 transposed conv back to 16x16, plus a skip from stage 1.
    x = g.conv_transpose("/up/convtranspose", x, 32, 16, stride=2)
    x = g.batch_norm("/up/bn", x, 16)
    x = g.relu("/up/relu", x)
    x = g.node("Add", "/up/add", [x, stage1_out])

    # Head: 1x1 conv (no BN), pooling, classifier, and a BN on the 2-D logits.
    x = g.conv("/head/conv", x, 16, 32, 1)
    x = g.relu("/head/relu", x)
    x = g.node("GlobalAveragePool", "/head/gap", [x])
    x = g.node("Flatten", "/head/flatten", [x], axis=1)
    fc_w = g.initializer("head.fc.weight", g.he_normal((NUM_CLASSES, 32), fan_in=32))
    fc_b = g.initializer("head.fc.bias", g.small_bias((NUM_CLASSES,)))
    x = g.node("Gemm", "/head/fc", [x, fc_w, fc_b], alpha=1.0, beta=1.0, transB=1)
    g.batch_norm("/head/bn", x, NUM_CLASSES, output=OUTPUT_NAME)

    graph = helper.make_graph(
        g.nodes,
        "graphlens_demo",
        inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, list(INPUT_SHAPE))],
        outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, [1, NUM_CLASSES])],
        initializer=g.initializers,
    )
    model = helper.make_model(
        graph,
        producer_name="graphlens-demo",
        producer_version="1.0",
        doc_string=DOC_STRING,
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )
    helper.set_model_props(
        model,
        {
            "purpose": "GraphLens demo model for viewing and Conv/BatchNormalization folding",
            "generator": "tools/make_demo.py",
            "seed": str(SEED),
        },
    )
    if with_shapes:
        model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    return model


def _run_with_onnxruntime(model: onnx.ModelProto) -> np.ndarray | None:
    """Run one inference; returns ``None`` when onnxruntime is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    image = np.random.default_rng(0).standard_normal(INPUT_SHAPE).astype(np.float32)
    (logits,) = session.run([OUTPUT_NAME], {INPUT_NAME: image})
    return np.asarray(logits)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write the GraphLens demo ONNX model.")
    parser.add_argument(
        "-o", "--output", type=Path, default=DEFAULT_OUTPUT, help=f"destination (default: {DEFAULT_OUTPUT})"
    )
    args = parser.parse_args(argv)

    model = build_demo_model()
    onnx.checker.check_model(model, full_check=True)

    logits = _run_with_onnxruntime(model)
    if logits is None:
        print("onnxruntime not installed; skipped the inference self-check", file=sys.stderr)
    elif logits.shape != (1, NUM_CLASSES) or not np.all(np.isfinite(logits)):
        print(f"self-check failed: logits shape {logits.shape}, values {logits}", file=sys.stderr)
        return 1

    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, args.output)
    print(
        f"wrote {args.output} ({args.output.stat().st_size} bytes, "
        f"{len(model.graph.node)} nodes, {len(model.graph.initializer)} initializers)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
