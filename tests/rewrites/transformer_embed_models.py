"""BERT-like embeddings as exporters write them, built with ``onnx.helper``: word, position and token-type tables
read by Gather, added, then LayerNormalization.

TorchScript and dynamo read the positions from HF's ``position_ids`` buffer (a constant [1, P] holding 0, 1, 2…)
by a Slice from 0 to the sequence length, computed from the ids' Shape (BERT) or the word lookup's (DistilBERT).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import init, make_model, tensor

VOCAB, POSITIONS, TYPES, HIDDEN = 30, 16, 2, 8


def embeddings(*, token_types: bool = True, positions: str = "buffer", count_from: str = "ids",
               word_scale: float | None = None, reshape_ids: bool = False) -> onnx.ModelProto:
    """positions: buffer (Slice of 0, 1, 2…) | input (a position_ids graph input) | offset (BART: Range + 2,
    expanded to [batch, seq]) | flat (Range + 2, one row for every sequence); count_from: ids | word (the count
    read off the word lookup's Shape, as DistilBERT and BART); ``word_scale``: BART's √d on the word lookup;
    ``reshape_ids``: the ids reshaped to [-1, seq] before the lookup, as optimum's BART does."""
    rng = np.random.default_rng(3)
    inputs = [tensor("input_ids", TensorProto.INT64, ["batch", "seq"])]
    inits = [init("word_table", rng.normal(0, 1, (VOCAB, HIDDEN)).astype(np.float32)),
             init("position_table", rng.normal(0, 1, (POSITIONS, HIDDEN)).astype(np.float32)),
             init("gamma", rng.uniform(0.5, 1.5, HIDDEN).astype(np.float32)),
             init("beta", rng.normal(0, 0.1, HIDDEN).astype(np.float32))]
    ids = "input_ids"
    nodes: list[onnx.NodeProto] = []
    if reshape_ids:
        inits.append(init("ids_shape", np.array([0, -1], np.int64)))
        nodes.append(helper.make_node("Reshape", ["input_ids", "ids_shape"], ["ids_2d"], name="ids_view"))
        ids = "ids_2d"
    nodes.append(helper.make_node("Gather", ["word_table", ids], ["word_raw" if word_scale else "word"],
                                  name="word_lookup"))
    if word_scale:
        inits.append(init("embed_scale", np.array(word_scale, np.float32)))
        nodes.append(helper.make_node("Mul", ["word_raw", "embed_scale"], ["word"], name="word_scaled"))
    if positions == "input":
        inputs.append(tensor("position_ids", TensorProto.INT64, ["batch", "seq"]))
        position_ids = "position_ids"
    else:
        inits += [init("one", np.array(1, np.int64)), init("zero_axis", np.array([0], np.int64))]
        nodes += [helper.make_node("Shape", ["input_ids" if count_from == "ids" else "word"], ["shape"], name="shape"),
                  helper.make_node("Gather", ["shape", "one"], ["seq_len"], axis=0),
                  helper.make_node("Unsqueeze", ["seq_len", "zero_axis"], ["end"])]
        if positions == "buffer":
            inits += [init("position_buffer", np.arange(POSITIONS, dtype=np.int64).reshape(1, POSITIONS)),
                      init("start", np.array([0], np.int64)), init("axis", np.array([1], np.int64)),
                      init("step", np.array([1], np.int64))]
            nodes.append(helper.make_node("Slice", ["position_buffer", "start", "end", "axis", "step"],
                                          ["position_ids"], name="positions"))
        else:
            inits += [init("zero", np.array(0, np.int64)), init("step1", np.array(1, np.int64)),
                      init("two", np.array(2, np.int64)), init("batch_seq", np.array([0, 1], np.int64))]
            nodes += [helper.make_node("Range", ["zero", "seq_len", "step1"], ["counted"]),
                      helper.make_node("Add", ["counted", "two"], ["offset" if positions == "offset" else
                                                                   "position_ids"], name="positions")]
            if positions == "offset":
                nodes += [helper.make_node("Gather", ["shape", "batch_seq"], ["rows"], axis=0),
                          helper.make_node("Expand", ["offset", "rows"], ["position_ids"], name="per_row")]
        position_ids = "position_ids"
    nodes.append(helper.make_node("Gather", ["position_table", position_ids], ["position"], name="position_lookup"))
    summed = "word"
    if token_types:
        inputs.append(tensor("token_type_ids", TensorProto.INT64, ["batch", "seq"]))
        inits.append(init("type_table", rng.normal(0, 1, (TYPES, HIDDEN)).astype(np.float32)))
        nodes += [helper.make_node("Gather", ["type_table", "token_type_ids"], ["segment"], name="type_lookup"),
                  helper.make_node("Add", ["word", "segment"], ["partial"], name="add_types")]
        summed = "partial"
    nodes += [helper.make_node("Add", [summed, "position"], ["summed"], name="add_positions"),
              helper.make_node("LayerNormalization", ["summed", "gamma", "beta"], ["y"], name="norm", epsilon=1e-12)]
    return make_model(nodes, inputs, [tensor("y", TensorProto.FLOAT, ["batch", "seq", HIDDEN])], inits)
