"""Generate large synthetic Conv/BatchNormalization ONNX models for benchmarks.

The model is a plain stack of residual blocks, each of four nodes::

    x -> Conv(3x3, pad 1, bias) -> BatchNormalization -> Relu -> Add(x) -> ...

named ``/stage{s}/block{b}/{conv,bn,relu,add}`` with ``blocks_per_stage``
blocks per stage, so a 100,000-node model holds 25,000 foldable Conv->BN
sites. Every Conv and every BN owns its initializers, as in a real network,
which makes the file size (~10.4 KB per block at 16 channels) realistic too.

Usage::

    python benchmarks/synthetic.py --nodes 100000 -o /tmp/big.onnx
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

OPSET = 17
IR_VERSION = 8
NODES_PER_BLOCK = 4
INPUT_NAME = "x"
OUTPUT_NAME = "y"
SPATIAL = 8
BN_EPSILON = 1e-5


def _add_initializer(graph: onnx.GraphProto, name: str, array: np.ndarray) -> None:
    """Append a float32 initializer in place.

    Filling the repeated field directly avoids the per-tensor overhead of
    ``numpy_helper.from_array`` and the copy ``make_graph`` would make, which
    dominates build time at 125,000 initializers.
    """
    tensor = graph.initializer.add()
    tensor.name = name
    tensor.data_type = TensorProto.FLOAT
    tensor.dims.extend(array.shape)
    tensor.raw_data = array.tobytes()


def _add_node(
    graph: onnx.GraphProto,
    op_type: str,
    name: str,
    inputs: Sequence[str],
    output: str,
    attributes: Sequence[onnx.AttributeProto] = (),
) -> None:
    """Append a node in place, reusing prebuilt attributes (see ``_add_initializer``)."""
    node = graph.node.add()
    node.op_type = op_type
    node.name = name
    node.input.extend(inputs)
    node.output.append(output)
    node.attribute.extend(attributes)


def make_conv_bn_model(
    target_nodes: int,
    channels: int = 16,
    seed: int = 0,
    *,
    blocks_per_stage: int = 100,
) -> onnx.ModelProto:
    """Return a residual Conv->BN->Relu->Add model of about ``target_nodes`` nodes.

    The node count is rounded to a whole number of 4-node blocks (at least
    one). Conv weights are He-normal scaled by ``1/num_blocks``: ReLU gives
    every residual branch a positive mean, so the stream grows roughly like
    ``exp(k * scale * num_blocks)`` and only depth-inverse scaling keeps the
    output finite for 25,000 blocks. BN statistics are non-trivial so folding
    really changes the weights.
    """
    if target_nodes < 1:
        raise ValueError(f"target_nodes must be positive, got {target_nodes}")
    if channels < 1 or blocks_per_stage < 1:
        raise ValueError("channels and blocks_per_stage must be positive")

    num_blocks = max(1, round(target_nodes / NODES_PER_BLOCK))
    c = channels
    rng = np.random.default_rng(seed)

    # Draw all parameters in a few vectorised calls; per-block tensors are
    # contiguous slices of these arrays.
    fan_in = c * 9
    weight_std = math.sqrt(2.0 / fan_in) / num_blocks
    weights = rng.standard_normal((num_blocks, c, c, 3, 3), dtype=np.float32)
    weights *= np.float32(weight_std)
    conv_bias = rng.standard_normal((num_blocks, c), dtype=np.float32) * np.float32(0.01)
    gamma = rng.uniform(0.5, 1.5, (num_blocks, c)).astype(np.float32)
    beta = rng.normal(0.0, 0.2, (num_blocks, c)).astype(np.float32)
    mean = rng.normal(0.0, 0.5, (num_blocks, c)).astype(np.float32)
    var = rng.uniform(0.5, 2.0, (num_blocks, c)).astype(np.float32)

    shape = [1, c, SPATIAL, SPATIAL]
    # Create the model first and fill its graph in place: make_graph/make_model
    # would deep-copy every node and initializer.
    model = helper.make_model(
        helper.make_graph(
            [],
            f"synthetic_conv_bn_{num_blocks}",
            inputs=[helper.make_tensor_value_info(INPUT_NAME, TensorProto.FLOAT, shape)],
            outputs=[helper.make_tensor_value_info(OUTPUT_NAME, TensorProto.FLOAT, shape)],
        ),
        producer_name="graphlens-synthetic",
        doc_string=(
            f"Synthetic benchmark: {num_blocks} residual Conv->BatchNormalization->Relu->Add "
            f"blocks, {c} channels, seed {seed}."
        ),
        opset_imports=[helper.make_opsetid("", OPSET)],
        ir_version=IR_VERSION,
    )
    graph = model.graph
    conv_attrs = [
        helper.make_attribute("kernel_shape", [3, 3]),
        helper.make_attribute("pads", [1, 1, 1, 1]),
        helper.make_attribute("strides", [1, 1]),
    ]
    bn_attrs = [helper.make_attribute("epsilon", BN_EPSILON)]

    x = INPUT_NAME
    for i in range(num_blocks):
        stage, block = divmod(i, blocks_per_stage)
        scope = f"/stage{stage + 1}/block{block + 1}"
        prefix = f"stage{stage + 1}.block{block + 1}"
        w_name, b_name = f"{prefix}.conv.weight", f"{prefix}.conv.bias"
        bn_names = [f"{prefix}.bn.{k}" for k in ("weight", "bias", "running_mean", "running_var")]

        _add_initializer(graph, w_name, weights[i])
        _add_initializer(graph, b_name, conv_bias[i])
        for name, values in zip(bn_names, (gamma[i], beta[i], mean[i], var[i]), strict=True):
            _add_initializer(graph, name, values)

        conv_out, bn_out, relu_out = f"{scope}/conv_output_0", f"{scope}/bn_output_0", f"{scope}/relu_output_0"
        add_out = OUTPUT_NAME if i == num_blocks - 1 else f"{scope}/add_output_0"
        _add_node(graph, "Conv", f"{scope}/conv", [x, w_name, b_name], conv_out, conv_attrs)
        _add_node(graph, "BatchNormalization", f"{scope}/bn", [conv_out, *bn_names], bn_out, bn_attrs)
        _add_node(graph, "Relu", f"{scope}/relu", [bn_out], relu_out)
        _add_node(graph, "Add", f"{scope}/add", [relu_out, x], add_out)
        x = add_out

    return model


def _self_test() -> None:
    """Validate a small instance with the (slow) checker and, if present, onnxruntime."""
    model = make_conv_bn_model(1000, channels=8, seed=1, blocks_per_stage=50)
    onnx.checker.check_model(model, full_check=True)
    assert len(model.graph.node) == 1000
    try:
        import onnxruntime as ort
    except ImportError:
        print("self-test: checker passed; onnxruntime not installed, inference skipped")
        return
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((1, 8, SPATIAL, SPATIAL)).astype(np.float32)
    (y,) = session.run([OUTPUT_NAME], {INPUT_NAME: x})
    assert np.all(np.isfinite(y)), "non-finite output"
    print(f"self-test: checker passed; onnxruntime output finite, max |y| = {np.abs(y).max():.3g}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write a synthetic Conv/BatchNormalization ONNX model.")
    parser.add_argument("--nodes", type=int, default=100_000, help="approximate node count (default: 100000)")
    parser.add_argument("--channels", type=int, default=16, help="channels per conv (default: 16)")
    parser.add_argument("--seed", type=int, default=0, help="RNG seed (default: 0)")
    parser.add_argument("--blocks-per-stage", type=int, default=100, help="blocks per /stageN scope (default: 100)")
    parser.add_argument("-o", "--output", type=Path, help="destination .onnx file")
    parser.add_argument("--self-test", action="store_true", help="check a small model instead of writing one")
    args = parser.parse_args(argv)

    if args.self_test:
        _self_test()
        return 0
    if args.output is None:
        parser.error("-o/--output is required unless --self-test is given")

    start = time.perf_counter()
    model = make_conv_bn_model(args.nodes, args.channels, args.seed, blocks_per_stage=args.blocks_per_stage)
    built = time.perf_counter()
    args.output.parent.mkdir(parents=True, exist_ok=True)
    onnx.save_model(model, args.output)
    saved = time.perf_counter()
    print(
        f"wrote {args.output}: {len(model.graph.node)} nodes, "
        f"{args.output.stat().st_size / 1e6:.1f} MB; built in {built - start:.2f} s, "
        f"saved in {saved - built:.2f} s"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
