"""Structure-aware mutations of small real ONNX models: hostile values GraphLens must refuse cleanly, and
their neighbours.

Shared by the property-based test (tests/test_fuzz_hostile.py) and the campaign (tools/fuzz_campaign.py).
A mutation edits a :class:`Draft` (a copy of a model, the files to write beside it, what to do to its bytes)
and says what it did in one line, or returns None when the model has nothing it applies to;
:func:`write_mutant` puts the result on disk. Every choice comes from the ``random.Random`` it is given, so
a mutant is reproduced by its base model, mutation name and seed.
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests import mutations_structure as structure
from tests import mutations_values as values
from tests.mutant_graphs import NON_UTF8_BYTES, NON_UTF8_MARKER, Draft, Mutation

MUTATIONS: dict[str, tuple[str, Mutation]] = {
    "init-dtype": ("dtype", values.init_dtype),
    "input-dtype": ("dtype", values.input_dtype),
    "input-dims": ("dims", values.input_dims),
    "attr-type": ("attribute types", values.attr_type),
    "bn-length": ("BN parameters", values.bn_length),
    "bn-string": ("BN parameters", values.bn_string),
    "bn-training": ("BN parameters", values.bn_training),
    "bn-nan": ("NaN", values.bn_nan),
    "conv-values": ("attribute values", values.conv_values),
    "constant-no-value": ("Constant", values.constant_no_value),
    "constant-misfit": ("Constant", values.constant_misfit),
    "dangling-input": ("structure", structure.dangling_input),
    "duplicate-producer": ("structure", structure.duplicate_producer),
    "out-of-order": ("structure", structure.out_of_order),
    "subgraph-arity": ("structure", structure.subgraph_arity),
    "deep-if": ("structure", structure.deep_if),
    "name-non-utf8": ("names", structure.name_non_utf8),
    "name-bidi": ("names", structure.name_bidi),
    "external-data": ("external data", structure.external_data),
    "truncated": ("file", structure.truncated),
    "directory": ("file", structure.in_place_of_file("directory")),
    "dev-zero": ("file", structure.in_place_of_file("dev-zero")),
    "fifo": ("file", structure.in_place_of_file("fifo")),
}
"""Every mutation by name, with the group of causes it belongs to."""

PATH_ONLY = ("directory", "dev-zero", "fifo")
"""Mutations that replace the file whatever the model: one case each is enough."""


def mutate(model: onnx.ModelProto, name: str, seed: int) -> tuple[Draft, str] | None:
    """A copy of ``model`` with mutation ``name`` applied, chosen by ``seed``; None when it does not apply."""
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    draft = Draft(copy)
    done = MUTATIONS[name][1](draft, random.Random(seed))
    return None if done is None else (draft, done)


def write_mutant(draft: Draft, folder: Path, name: str = "mutant.onnx") -> Path:
    """Write ``draft`` as ``folder/m/name`` (its files beside it, ``../`` ones in ``folder``); return the path
    the commands get."""
    if draft.kind == "dev-zero":
        return Path("/dev/zero")
    inner = folder / "m"
    inner.mkdir(parents=True, exist_ok=True)
    path = inner / name
    if draft.kind == "directory":
        path.mkdir()
        return path
    if draft.kind == "fifo":
        os.mkfifo(path)
        return path
    data = draft.model.SerializeToString().replace(NON_UTF8_MARKER.encode(), NON_UTF8_BYTES)
    if draft.truncate is not None:
        data = data[: int(len(data) * draft.truncate)]
    path.write_bytes(data)
    for relative, content in draft.files.items():
        (inner / relative).write_bytes(content)
    return path


def small_conv_bn() -> onnx.ModelProto:
    """x -> Conv -> BatchNormalization (scale behind a Constant) -> Relu -> Softmax: every kind of target."""
    rng = np.random.default_rng(41)
    channels = 4
    w = rng.normal(0, 0.5, (channels, 3, 3, 3)).astype(np.float32)
    params = [rng.uniform(0.5, 1.5, channels), rng.normal(0, 0.2, channels), rng.normal(0, 0.5, channels),
              rng.uniform(0.5, 2.0, channels)]
    scale, bias, mean, var = (numpy_helper.from_array(p.astype(np.float32), n)
                              for p, n in zip(params, ["scale", "bias", "mean", "var"]))
    graph = helper.make_graph(
        [helper.make_node("Constant", [], ["bn_scale"], name="scale_const", value=scale),
         helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1], strides=[1, 1]),
         helper.make_node("BatchNormalization", ["c", "bn_scale", "bias", "mean", "var"], ["b"], name="bn",
                          epsilon=1e-5),
         helper.make_node("Relu", ["b"], ["r"], name="relu"),
         helper.make_node("Softmax", ["r"], ["y"], name="softmax", axis=1)],
        "small_conv_bn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, channels, 8, 8])],
        [numpy_helper.from_array(w, "w"), bias, mean, var])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="graphlens-fuzz")
    model.ir_version = 8
    return model

