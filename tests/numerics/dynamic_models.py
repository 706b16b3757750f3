"""Models with dynamic input dims that only run at some sizes, like the ones met in practice.

``fpn`` is a small copy of what PaddleOCR's text detector does: a stride-2 conv chain down by
32, then top-down: the deepest map upsampled ×2 and added to the map at 1/16, that sum upsampled
and added to 1/8, and so on. The Adds only agree when H and W are multiples of 32, so the old
default size for named dims (16) fails.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from tests.models import bn_params, init, make_model, tensor

_rng = np.random.default_rng(77)


def fpn(shape: list | None = None, channels: int = 4, levels: int = 5) -> onnx.ModelProto:
    """x ``shape`` (default ``[N, 3, H, W]``) -> Conv+BN stem -> ``levels`` stride-2 convs -> three top-down merges.

    Runs when H and W are multiples of ``2 ** levels``.
    """
    shape = shape if shape is not None else ["N", 3, "H", "W"]
    params = bn_params(channels)
    inits = [init(k, v) for k, v in params.items()]
    inits.append(init("stem_w", _rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np.float32)))
    nodes = [
        helper.make_node("Conv", ["x", "stem_w"], ["stem"], name="stem/conv", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["stem", *params], ["s0"], name="stem/bn"),
    ]
    for level in range(1, levels + 1):
        weight = f"down{level}_w"
        inits.append(init(weight, _rng.normal(0, 0.3, (channels, channels, 3, 3)).astype(np.float32)))
        nodes.append(helper.make_node("Conv", [f"s{level - 1}", weight], [f"s{level}"], name=f"down{level}",
                                      pads=[1, 1, 1, 1], strides=[2, 2]))
    inits.append(init("scales", np.array([1, 1, 2, 2], np.float32)))
    top = f"s{levels}"
    for level in range(levels - 1, levels - 4, -1):  # top-down: upsample ×2, add the map of the same size
        nodes += [
            helper.make_node("Resize", [top, "", "scales"], [f"up{level}"], name=f"up{level}", mode="nearest"),
            helper.make_node("Add", [f"up{level}", f"s{level}"], [f"p{level}"], name=f"merge{level}"),
        ]
        top = f"p{level}"
    nodes.append(helper.make_node("Identity", [top], ["y"], name="out"))
    return make_model(nodes, [tensor("x", shape=shape)], [tensor("y", shape=["N", channels, "h4", "w4"])], inits,
                      name="fpn")


def shared_seq() -> onnx.ModelProto:
    """Inputs a [batch, seq, 8] and b [seq, 8] added together: 'seq' must get one size."""
    w = init("w", _rng.normal(0, 0.5, (8, 8)).astype(np.float32))
    nodes = [
        helper.make_node("Add", ["a", "b"], ["s"], name="add"),
        helper.make_node("MatMul", ["s", "w"], ["y"], name="proj"),
    ]
    inputs = [tensor("a", shape=["batch", "seq", 8]), tensor("b", shape=["seq", 8])]
    return make_model(nodes, inputs, [tensor("y", shape=["batch", "seq", 8])], [w], name="shared_seq")


def tied_by_the_model() -> onnx.ModelProto:
    """Inputs p [len_p] and q [len_q] under different names, added: the model ties them together."""
    nodes = [helper.make_node("Add", ["p", "q"], ["y"], name="add")]
    inputs = [tensor("p", shape=["len_p"]), tensor("q", shape=["len_q"])]
    return make_model(nodes, inputs, [tensor("y", shape=["len"])], name="tied")


def runs_at_no_size() -> onnx.ModelProto:
    """x [N, 3, H, W] reshaped to [1, 3, 7, 7]: only H = W = 7 runs, a size nobody would try."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="reshape")]
    inits = [init("shape", np.array([1, 3, 7, 7], np.int64))]
    return make_model(nodes, [tensor("x", shape=["N", 3, "H", "W"])], [tensor("y", shape=[1, 3, 7, 7])], inits,
                      name="stubborn")


def recurrent_state() -> onnx.ModelProto:
    """x [N, T] and a state [2, ?, 8] whose middle dim must equal the batch (as in voice-activity models)."""
    nodes = [
        helper.make_node("Shape", ["x"], ["x_shape"], name="shape", start=0, end=1),
        helper.make_node("Concat", ["two", "x_shape", "eight"], ["state_shape"], name="concat", axis=0),
        helper.make_node("Reshape", ["state", "state_shape"], ["y"], name="reshape"),
    ]
    inits = [init("two", np.array([2], np.int64)), init("eight", np.array([8], np.int64))]
    return make_model(nodes, [tensor("x", shape=["N", "T"]), tensor("state", shape=[2, None, 8])],
                      [tensor("y", shape=[2, "N", 8])], inits, name="recurrent")
