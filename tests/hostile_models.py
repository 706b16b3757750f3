"""Broken and hostile model files: what a careless tool, a bad download or an attacker hands over.

Each case writes its file(s) under a folder and says what loading must do: refuse with one line
matching ``refused`` (exit code 2 on the command line, a dialog in the window), or load.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests import models
from tests.models import init, make_model, tensor

HUGE_SHAPE = [1_000_000, 1_000_000]
"""10^12 elements: 3.64 TiB as float32, far above any machine's memory."""

CHAIN_LENGTH = 20_000
"""Longer than Python's default recursion limit (1,000) many times over."""

IF_DEPTH = 25

HOSTILE_NAMES = [
    "<b>bold</b>",
    "<img src=x onerror=alert(1)>",
    "&amp; &lt;tag&gt;",
    "line one\nline two",
    "\u202eevil\u202c reversed \u05e9\u05dc\u05d5\u05dd",
    "x" * 5000,
]
"""Node names that look like markup, entities, several lines, right-to-left text, or are very long."""


@dataclass(frozen=True)
class Hostile:
    """One bad or hostile file: how to write it and what loading it must do."""

    name: str
    write: Callable[[Path], Path]
    refused: str | None = None
    """A regex the one-line load error matches; None when the model must load."""


# ------------------------------------------------------------------------------ model protos
def huge_constant_of_shape_bn() -> onnx.ModelProto:
    """Conv -> BN whose scale is ConstantOfShape([10^6, 10^6]): 10^12 elements if anyone evaluates it."""
    model = models.conv_bn()
    graph = model.graph
    scale = next(t for t in graph.initializer if t.name == "bn_scale")
    graph.initializer.remove(scale)
    graph.initializer.append(init("huge_shape", np.array(HUGE_SHAPE, np.int64)))
    graph.node.insert(
        0,
        helper.make_node(
            "ConstantOfShape", ["huge_shape"], ["bn_scale"], name="huge_fill",
            value=init("one", np.array([1.0], np.float32)),
        ),
    )
    return model


def constant_declaring_huge_dims() -> onnx.ModelProto:
    """A Constant whose value tensor declares 10^12 elements but holds four bytes (the checker rejects it)."""
    model = models.conv_bn()
    graph = model.graph
    scale = next(t for t in graph.initializer if t.name == "bn_scale")
    graph.initializer.remove(scale)
    liar = TensorProto(name="liar", data_type=TensorProto.FLOAT, dims=HUGE_SHAPE, raw_data=b"\0\0\x80?")
    graph.node.insert(0, helper.make_node("Constant", [], ["bn_scale"], name="liar_const", value=liar))
    return model


def initializer_declaring_huge_dims() -> onnx.ModelProto:
    """A BN scale initializer declaring 10^12 elements but holding four bytes (the checker rejects it)."""
    model = models.conv_bn()
    scale = next(t for t in model.graph.initializer if t.name == "bn_scale")
    scale.ClearField("float_data")
    scale.ClearField("dims")
    scale.dims.extend(HUGE_SHAPE)
    scale.raw_data = b"\0\0\x80?"
    return model


def identity_chain_to_conv_weight(length: int = CHAIN_LENGTH) -> onnx.ModelProto:
    """A Conv whose weight passes through ``length`` Identity nodes, then a BN: foldable in principle."""
    model = models.conv_bn()
    graph = model.graph
    nodes = [helper.make_node("Identity", ["w"], ["w_0"], name="id_0")]
    nodes += [helper.make_node("Identity", [f"w_{k - 1}"], [f"w_{k}"], name=f"id_{k}") for k in range(1, length)]
    graph.node[0].input[1] = f"w_{length - 1}"
    for node in reversed(nodes):
        graph.node.insert(0, node)
    return model


def relu_chain(length: int = CHAIN_LENGTH) -> onnx.ModelProto:
    """x -> Relu -> Relu -> ... -> y, ``length`` nodes deep."""
    nodes = [helper.make_node("Relu", ["x" if k == 0 else f"t{k - 1}"], [f"t{k}"], name=f"relu_{k}")
             for k in range(length)]
    nodes[-1].output[0] = "y"
    return make_model(nodes, [tensor("x", shape=[1, 4])], [tensor("y", shape=[1, 4])])


def nested_if(depth: int = IF_DEPTH) -> onnx.ModelProto:
    """If inside If, ``depth`` levels deep; the innermost then-branch holds a Conv -> BN reading outer weights."""
    params = models.bn_params(4, prefix="deep")
    body = helper.make_graph(
        [
            helper.make_node("Conv", ["x", "w"], ["dc"], name="deep_conv", pads=[1, 1, 1, 1]),
            helper.make_node("BatchNormalization", ["dc", *params], ["out_0"], name="deep_bn"),
        ],
        "level_0", [], [tensor("out_0", shape=[1, 4, 8, 8])],
        [init(k, v) for k, v in params.items()],
    )
    for level in range(1, depth + 1):
        other = helper.make_graph(
            [helper.make_node("Conv", ["x", "w"], [f"else_{level}"], name=f"else_conv_{level}", pads=[1, 1, 1, 1])],
            f"else_{level}", [], [tensor(f"else_{level}", shape=[1, 4, 8, 8])],
        )
        node = helper.make_node("If", ["cond"], [f"out_{level}"], name=f"if_{level}", then_branch=body,
                                else_branch=other)
        body = helper.make_graph([node], f"level_{level}", [], [tensor(f"out_{level}", shape=[1, 4, 8, 8])])
    w = models.rng.normal(0, 0.5, (4, 3, 3, 3)).astype(np.float32)
    model = make_model(
        list(body.node), [tensor("x", shape=[1, 3, 8, 8]), tensor("cond", TensorProto.BOOL, [])],
        [tensor(f"out_{depth}", shape=[1, 4, 8, 8])], [init("w", w)],
    )
    return model


def hostile_names() -> onnx.ModelProto:
    """A Relu chain whose nodes (and tensors) carry :data:`HOSTILE_NAMES`, plus an unnamed and a duplicate node."""
    names = [*HOSTILE_NAMES, "", HOSTILE_NAMES[0]]
    tensors = [f"t:{n[:40]}" if n else "t:empty" for n in names]
    tensors = [f"{t}#{k}" for k, t in enumerate(tensors)]
    nodes = [
        helper.make_node("Relu", ["x" if k == 0 else tensors[k - 1]], [tensors[k]], name=name)
        for k, name in enumerate(names)
    ]
    nodes[-1].output[0] = "y"
    return make_model(nodes, [tensor("x", shape=[1, 4])], [tensor("y", shape=[1, 4])])


def identity_model() -> onnx.ModelProto:
    """No nodes at all: the graph output is the graph input."""
    return make_model([], [tensor("x", shape=[1, 4])], [tensor("x", shape=[1, 4])])


def self_cycle() -> onnx.ModelProto:
    """A node that reads its own output (ONNX forbids cycles)."""
    nodes = [
        helper.make_node("Add", ["x", "loop"], ["loop"], name="self_add"),
        helper.make_node("Relu", ["loop"], ["y"], name="after"),
    ]
    return make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])


def two_node_cycle() -> onnx.ModelProto:
    """a reads b's output and b reads a's."""
    nodes = [
        helper.make_node("Add", ["x", "b_out"], ["a_out"], name="cycle_a"),
        helper.make_node("Relu", ["a_out"], ["b_out"], name="cycle_b"),
        helper.make_node("Neg", ["b_out"], ["y"], name="after"),
    ]
    return make_model(nodes, [tensor("x", shape=[2])], [tensor("y", shape=[2])])


def no_outputs() -> onnx.ModelProto:
    return make_model([], [tensor("x", shape=[1])], [])


def graph_only_header() -> onnx.ModelProto:
    """A valid protobuf ModelProto holding nothing but an IR version."""
    return onnx.ModelProto(ir_version=8)


def external_data_model(folder: Path, location: str) -> onnx.ModelProto:
    """conv_bn with its weight stored externally at ``location`` (relative to the model's folder)."""
    model = models.conv_bn()
    weight = next(t for t in model.graph.initializer if t.name == "w")
    weight.ClearField("raw_data")
    weight.ClearField("float_data")
    weight.data_location = TensorProto.EXTERNAL
    for key, value in (("location", location), ("offset", "0"), ("length", str(4 * 4 * 3 * 3 * 3))):
        entry = weight.external_data.add()
        entry.key, entry.value = key, value
    return model


# ------------------------------------------------------------------ values of the wrong kind
UNKNOWN_ELEMENT_TYPE = 999
"""An element type code ONNX does not define."""


def unknown_element_type_initializer() -> onnx.ModelProto:
    """conv_bn whose Conv weight ``w`` declares element type 999."""
    model = models.conv_bn()
    next(t for t in model.graph.initializer if t.name == "w").data_type = UNKNOWN_ELEMENT_TYPE
    return model


def unknown_element_type_input() -> onnx.ModelProto:
    """conv_bn whose graph input ``x`` declares element type 999."""
    model = models.conv_bn()
    model.graph.input[0].type.tensor_type.elem_type = UNKNOWN_ELEMENT_TYPE
    return model


def bn_scale_as_strings(channels: int = 4) -> onnx.ModelProto:
    """conv_bn whose BN scale is a tensor of strings."""
    model = models.conv_bn(channels)
    scale = next(t for t in model.graph.initializer if t.name == "bn_scale")
    scale.CopyFrom(helper.make_tensor("bn_scale", TensorProto.STRING, [channels], [b"a"] * channels))
    return model


EPSILONS: dict[str, object] = {
    "bytes": b"1e-5",
    "tensor": init("eps", np.array([1e-5, 2e-5], np.float32)),
    "ints": [1, 2],
}
"""``epsilon`` stored as something other than the float BatchNormalization declares."""


def epsilon_as(kind: str) -> onnx.ModelProto:
    """conv_bn whose BN ``epsilon`` attribute is :data:`EPSILONS` [kind]."""
    model = models.conv_bn()
    bn = model.graph.node[1]
    del bn.attribute[:]
    bn.attribute.append(helper.make_attribute("epsilon", EPSILONS[kind]))
    return model


def constant_data_not_fitting_dims() -> onnx.ModelProto:
    """BN parameters behind Constants, the scale Constant's tensor declaring 7 values but holding 4."""
    model = models.conv_bn_params_behind_constants()
    model.graph.node[0].attribute[0].t.dims[:] = [7]
    return model


def duplicate_producer() -> onnx.ModelProto:
    """conv_bn with a Relu 'second_writer' that also writes the Conv's output ``c``."""
    model = models.conv_bn()
    model.graph.node.insert(1, helper.make_node("Relu", ["x"], ["c"], name="second_writer"))
    return model


def if_reading_a_later_tensor() -> onnx.ModelProto:
    """An If whose then-branch reads ``late``, which the main graph produces only after the If."""
    then = helper.make_graph([helper.make_node("Relu", ["late"], ["t_out"], name="reads_late")], "then", [],
                             [tensor("t_out", shape=[2])])
    other = helper.make_graph([helper.make_node("Neg", ["x"], ["e_out"], name="neg")], "else", [],
                              [tensor("e_out", shape=[2])])
    nodes = [helper.make_node("If", ["cond"], ["branch"], name="the_if", then_branch=then, else_branch=other),
             helper.make_node("Abs", ["x"], ["late"], name="late_abs"),
             helper.make_node("Add", ["branch", "late"], ["y"], name="add")]
    return make_model(nodes, [tensor("x", shape=[2]), tensor("cond", TensorProto.BOOL, [])], [tensor("y", shape=[2])])


def _field(message: type[onnx.ModelProto | onnx.GraphProto | onnx.NodeProto | onnx.AttributeProto], name: str,
           payload: bytes) -> bytes:
    """``payload`` framed as field ``name`` of ``message``: protobuf's tag, then its length."""
    number = message.DESCRIPTOR.fields_by_name[name].number
    length, head = len(payload), bytearray([(number << 3) | 2])
    while True:
        byte, length = length & 0x7F, length >> 7
        head.append(byte | 0x80 if length else byte)
        if not length:
            return bytes(head) + payload


def nested_if_bytes(depth: int) -> bytes:
    """If inside If ``depth`` levels deep, as bytes: protobuf's Python library refuses to build a message nested
    past its limit, so each level is framed by hand around the serialized one inside it."""
    inner = helper.make_graph([helper.make_node("Relu", ["x"], ["out_0"], name="deep_relu")], "level_0", [],
                              [tensor("out_0", shape=[2])]).SerializeToString()
    for level in range(1, depth + 1):
        attribute = onnx.AttributeProto(name="then_branch", type=onnx.AttributeProto.GRAPH).SerializeToString()
        attribute += _field(onnx.AttributeProto, "g", inner)
        node = helper.make_node("If", ["cond"], [f"out_{level}"], name=f"if_{level}").SerializeToString()
        node += _field(onnx.NodeProto, "attribute", attribute)
        graph = helper.make_graph([], f"level_{level}", [] if level < depth else [
            tensor("x", shape=[2]), tensor("cond", TensorProto.BOOL, [])], [tensor(f"out_{level}", shape=[2])])
        inner = graph.SerializeToString() + _field(onnx.GraphProto, "node", node)
    shell = make_model([], [], [])
    shell.ClearField("graph")
    return shell.SerializeToString() + _field(onnx.ModelProto, "graph", inner)


NOT_UTF8 = b"bn\xf3("
"""A node name that is not UTF-8: protobuf hands it over as bytes."""


def node_name_not_utf8() -> bytes:
    """conv_bn, its BN named :data:`NOT_UTF8` (written as bytes: protobuf refuses to set such a name)."""
    model = models.conv_bn()
    model.graph.node[1].name = "bnQQ"
    return model.SerializeToString().replace(b"bnQQ", NOT_UTF8)


# ------------------------------------------------------------------------------- writers
def _proto(name: str, build: Callable[[], onnx.ModelProto]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / f"{name}.onnx"
        path.write_bytes(build().SerializeToString())
        return path

    return write


def _bytes(name: str, content: Callable[[], bytes]) -> Callable[[Path], Path]:
    def write(folder: Path) -> Path:
        path = folder / f"{name}.onnx"
        path.write_bytes(content())
        return path

    return write


def _truncated(fraction: float) -> Callable[[], bytes]:
    def content() -> bytes:
        data = models.conv_bn(16).SerializeToString()
        return data[: int(len(data) * fraction)]

    return content


def _zip() -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("model.onnx", models.conv_bn().SerializeToString())
    return buffer.getvalue()


def _external_outside(folder: Path) -> Path:
    secret = folder / "secret.bin"
    secret.write_bytes(bytes(4 * 4 * 3 * 3 * 3))
    inner = folder / "models"
    inner.mkdir()
    path = inner / "outside.onnx"
    path.write_bytes(external_data_model(inner, "../secret.bin").SerializeToString())
    return path


def _external_absolute(folder: Path) -> Path:
    path = folder / "absolute.onnx"
    path.write_bytes(external_data_model(folder, "/etc/passwd").SerializeToString())
    return path


def _external_missing(folder: Path) -> Path:
    path = folder / "external-missing.onnx"
    path.write_bytes(external_data_model(folder, "weights.bin").SerializeToString())
    return path


REFUSED = [
    Hostile("truncated-10", _bytes("truncated-10", _truncated(0.1)), "not an ONNX model|truncated"),
    Hostile("truncated-50", _bytes("truncated-50", _truncated(0.5)), "not an ONNX model|truncated"),
    Hostile("truncated-90", _bytes("truncated-90", _truncated(0.9)), "not an ONNX model|truncated"),
    Hostile("truncated-last-byte", _bytes("truncated-last-byte", _truncated(0.9999)), "not an ONNX model|truncated"),
    Hostile("garbage", _bytes("garbage", lambda: np.random.default_rng(7).bytes(65536)), "not an ONNX model"),
    Hostile("zip", _bytes("zip", _zip), "not an ONNX model"),
    Hostile("html", _bytes("html", lambda: b"<!DOCTYPE html><html><body><h1>404 Not Found</h1></body></html>\n"),
            "not an ONNX model"),
    Hostile("header-only", _proto("header-only", graph_only_header), "holds no graph"),
    Hostile("no-outputs", _proto("no-outputs", no_outputs), "no outputs"),
    Hostile("dangling", _proto("dangling", models.undefined_input), "reads tensor 'ghost'"),
    Hostile("self-cycle", _proto("self-cycle", self_cycle), "cycle.*'self_add'"),
    Hostile("two-node-cycle", _proto("two-node-cycle", two_node_cycle), "cycle.*'cycle_[ab]'"),
    Hostile("external-missing", _external_missing, "external data file 'weights.bin'.*missing"),
    Hostile("external-outside", _external_outside, "outside the model's folder"),
    Hostile("external-absolute", _external_absolute, "outside the model's folder|absolute"),
]

LOADED = [
    Hostile("identity", _proto("identity", identity_model)),
    Hostile("names", _proto("names", hostile_names)),
    Hostile("huge-constant-of-shape", _proto("huge-constant-of-shape", huge_constant_of_shape_bn)),
    Hostile("constant-declaring-huge-dims", _proto("constant-declaring-huge-dims", constant_declaring_huge_dims)),
    Hostile("initializer-declaring-huge-dims",
            _proto("initializer-declaring-huge-dims", initializer_declaring_huge_dims)),
    Hostile("identity-chain", _proto("identity-chain", identity_chain_to_conv_weight)),
    Hostile("relu-chain", _proto("relu-chain", relu_chain)),
    Hostile("nested-if", _proto("nested-if", nested_if)),
]

ALL = REFUSED + LOADED
BY_NAME = {case.name: case for case in ALL}
