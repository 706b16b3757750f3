"""fuse-embed-layer-norm: BERT's embeddings into onnxruntime's EmbedLayerNormalization, and what it refuses."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from graphlens.core.model import Model
from graphlens.numerics import make_inputs
from graphlens.rewrites.driver import fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory
from tests.models import init, make_model, tensor
from tests.rewrites import transformer_embed_models as em
from tests.rewrites.checks import assert_rewrite_is_sound, count


def fold(proto: onnx.ModelProto, rules=("fuse-embed-layer-norm",)):
    original = proto.SerializeToString()
    model = Model(onnx.ModelProto.FromString(original))
    session = EditHistory(model)
    return original, model, session, fold_model(model, resolve_rules(list(rules)), session)


FORMS = {
    "BERT: token types, positions from the buffer": {},
    "DistilBERT: no token types, the count read off the word lookup": {"token_types": False, "count_from": "word"},
    "position_ids given": {"positions": "input"},
    "BART: the words scaled by √d, positions offset by 2 per row": {
        "token_types": False, "positions": "offset", "count_from": "word", "word_scale": 2.8284271},
    "BART from optimum: the ids reshaped before the lookup": {
        "token_types": False, "positions": "offset", "count_from": "word", "word_scale": 1.0, "reshape_ids": True},
}


@pytest.mark.parametrize("options", FORMS.values(), ids=FORMS.keys())
def test_embeddings_fuse_into_one_node_that_computes_the_same(options):
    proto = em.embeddings(**options)
    original, model, session, report = fold(proto)
    assert report.fused["embed-layer-norm"] == 1 and report.left == []
    [node] = [n for n in model.graph.nodes if n.op_type == "EmbedLayerNormalization"]
    assert node.attrs["epsilon"] == pytest.approx(1e-12)
    offset = options.get("positions") == "offset"  # BART's positions: Range + 2, computed still
    assert count(model, "LayerNormalization") == 0 and count(model, "Add") == int(offset)
    has_positions = len(node.inputs) > 8 and bool(node.inputs[8])
    assert has_positions == (options.get("positions") in ("input", "offset"))
    assert_rewrite_is_sound(original, model, session, inputs=make_inputs(proto, {"batch": 2, "seq": 7}, seed=1))


def test_the_transformers_set_takes_the_embeddings_before_the_skip_norm_would():
    _, model, _, report = fold(em.embeddings(), rules=("transformers",))
    assert report.fused["embed-layer-norm"] == 1 and count(model, "SkipLayerNormalization") == 0


def test_positions_not_per_token_are_refused_in_one_sentence():
    _, model, _, report = fold(em.embeddings(positions="flat"))
    assert report.fused["embed-layer-norm"] == 0
    assert [site.line() for site in report.left] == [
        "embed-layer-norm left at 'norm': none of the 3 tables added before LayerNormalization 'norm' is read at "
        "positions 0, 1, 2…, at a position_ids input or at positions computed per token, so none is the position "
        "embedding"]


def test_a_norm_of_one_lookup_is_no_embeddings_site_left():
    """Phi-2 normalizes its word lookup alone in its first layer: nothing is there to add, nothing is left."""
    proto = make_model([helper.make_node("Gather", ["table", "ids"], ["word"]),
                        helper.make_node("LayerNormalization", ["word", "gamma", "beta"], ["y"], name="norm")],
                       [tensor("ids", TensorProto.INT64, ["batch", "seq"])], [tensor("y", shape=["batch", "seq", 8])],
                       [init("table", np.ones((10, 8), np.float32)), init("gamma", np.ones(8, np.float32)),
                        init("beta", np.zeros(8, np.float32))])
    _, _, _, report = fold(proto)
    assert report.left == []
