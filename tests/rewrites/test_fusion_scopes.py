"""Fused nodes are named inside the exporter scope of the nodes they replace, so the window's groups and ×N runs
of layers read the same after a fusion as before it."""

from __future__ import annotations

import onnx
import pytest

from graphlens.core.model import Model
from graphlens.layout.scopes import scope_of
from graphlens.layout.view import ViewOptions, build_view
from graphlens.rewrites.rules.naming import replaced_scope
from tests.rewrites import scoped_encoder_models as sm
from tests.rewrites.checks import assert_rewrite_is_sound, count
from tests.rewrites.test_fold_bn import fold


def groups(model) -> list[str]:
    """The group boxes View › Collapse Groups draws, by title."""
    view = build_view(model.graph, ViewOptions(grouping=True))
    return [item.title for item in view.items if item.kind == "group"]


@pytest.mark.parametrize("shared", [False, True], ids=["a module per layer", "one module called per layer"])
def test_groups_and_runs_of_layers_survive_the_transformer_fusions(shared):
    proto = sm.encoder(3, shared=shared)
    original, model, session, report = fold(proto, ("transformers",))
    before = groups(Model(onnx.ModelProto.FromString(original)))
    assert any("×" in title for title in before)
    assert report.fused == {"attention": 3, "skip-layer-norm": 6, "bias-gelu": 3}
    assert groups(model) == before
    assert_rewrite_is_sound(original, model, session)


def test_every_fused_node_is_in_a_scope_the_model_had_with_a_unique_name():
    proto = sm.encoder(2)
    scopes = {scope_of(n.name) for n in proto.graph.node}
    _, model, _, _ = fold(proto, ("transformers",))
    names = [n.name for n in model.graph.nodes]
    assert len(names) == len(set(names))
    fused = [n for n in model.graph.nodes if n.domain == "com.microsoft"]
    assert count(model, "Attention") == 2 and len(fused) == 2 + 4 + 2
    for node in fused:
        assert scope_of(node.name) in scopes and node.name.startswith("/encoder/layer.")
        assert node.name.rsplit("/", 1)[1].startswith(node.op_type)
    layer0 = sorted(n.op_type for n in fused if scope_of(n.name) == "/encoder/layer.0")
    assert layer0 == ["BiasGelu", "SkipLayerNormalization", "SkipLayerNormalization"]


@pytest.mark.parametrize(("names", "scope"), [
    (["/enc/layer.0/Add", "/enc/layer.0/norm1/LayerNormalization"], "/enc/layer.0"),
    (["/enc/layer.0/attn/q/Add", "/enc/layer.0/attn/MatMul", "/enc/layer.0/attn/Softmax"], "/enc/layer.0/attn"),
    (["/enc/a/x/Mul", "/enc/b/y/Add"], "/enc"),
    (["/layer_2/Add", "/layer/norm1_2/LayerNormalization"], "/layer_2"),
    (["p2o.Mul.3", "p2o.Sigmoid.1"], ""),
    (["/a/Mul", "/b/Add"], ""),
])
def test_the_scope_of_a_fusion_is_the_replaced_nodes_nearest_the_root(names, scope):
    assert replaced_scope(names) == scope
