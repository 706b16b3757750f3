"""Random token ids stay inside the embedding tables they index, so transformers run on random inputs."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from graphlens.numerics.inputs import index_bounds, make_inputs
from tests.models import init, make_model, tensor


def _embedding_model():
    """ids -> Gather(table of 4 rows); role ids pass through a Cast and an Unsqueeze first."""
    nodes = [
        helper.make_node("Gather", ["table", "ids"], ["emb"], name="embed"),
        helper.make_node("Cast", ["roles"], ["roles64"], name="cast", to=TensorProto.INT64),
        helper.make_node("Gather", ["roles_table", "roles64"], ["role_emb"], name="roles_embed"),
        helper.make_node("Add", ["emb", "role_emb"], ["y"], name="add"),
    ]
    inits = [init("table", np.ones((50, 8), np.float32)), init("roles_table", np.ones((4, 8), np.float32))]
    return make_model(nodes,
                      [tensor("ids", TensorProto.INT64, [1, "seq"]), tensor("roles", TensorProto.INT32, [1, "seq"])],
                      [tensor("y", shape=[1, "seq", 8])], inits)


def test_ids_are_bounded_by_the_smallest_table_they_index():
    model = _embedding_model()
    assert index_bounds(model) == {"ids": 10, "roles": 4}
    arrays = make_inputs(model, {"seq": 64}, seed=1)
    assert arrays["roles"].max() == 3 and arrays["roles"].min() == 0
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    assert session.run(None, arrays)[0].shape == (1, 64, 8)
