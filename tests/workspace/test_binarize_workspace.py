"""Binarize previews in the Workspace: computed on a scratch copy, limited to some layers, dropped when
stale, applied as one undo step."""

from __future__ import annotations

import numpy as np
import pytest

from graphlens.binarize import BinarizeConfig
from graphlens.core.bundled import demo_model_path
from graphlens.core.errors import GraphLensError
from graphlens.workspace import Workspace
from graphlens.workspace.binarize_preview import compute_binarize_preview, linear_nodes

LINEAR = ['/stem/conv', '/stage1/block1/dw/conv', '/stage1/block1/pw/conv', '/stage1/block2/conv',
          '/stage2/block1/conv',
          '/stage2/block2/conv', '/up/convtranspose', '/head/conv', '/head/fc']


@pytest.fixture
def ws() -> Workspace:
    workspace = Workspace()
    workspace.open(demo_model_path())
    return workspace


def test_the_linear_layers_are_those_with_a_constant_weight(ws):
    assert linear_nodes(ws.model.graph) == LINEAR
    assert linear_nodes(ws.model.graph, ["/stem/conv", "/stem/bn", "nothing"]) == ["/stem/conv"]


def test_a_preview_leaves_the_model_alone_and_says_so_with_an_event(ws):
    before = ws.model.to_proto().SerializeToString()
    seen = []
    ws.binarization.events.previewed.connect(seen.append)
    preview = ws.binarization.preview(samples=2)
    assert ws.model.to_proto().SerializeToString() == before and not ws.model.modified
    assert seen == [preview] and ws.binarization.previewed is preview
    assert sorted(layer.node for layer in preview.result.layers) == sorted(LINEAR)
    assert all(layer.distinct_values <= 2 for layer in preview.result.layers)
    assert np.isfinite(preview.result.output_sqnr_db) and preview.result.fold is not None
    folded = {n.op_type for n in preview.float_model.graph.node}  # the float model the lesson reads: folded
    assert {t.name for t in preview.float_model.graph.initializer} >= {layer.tensor for layer in preview.result.layers}
    assert "BatchNormalization" in {n.op_type for n in ws.model.graph.nodes} and "Conv" in folded


def test_only_limits_it_to_those_layers_with_their_own_bits(ws):
    config = BinarizeConfig(bits=2, layer_bits={"/head/fc": 3})
    preview = ws.binarization.preview(config, samples=2, only=["/stem/conv", "/head/fc"])
    bits = {layer.node: layer.bits for layer in preview.result.layers}
    assert bits == {"/stem/conv": 2, "/head/fc": 3} and preview.only == ("/stem/conv", "/head/fc")
    with pytest.raises(GraphLensError, match="no linear layer"):
        ws.binarization.request(only=[])


def test_apply_puts_in_exactly_the_preview_as_one_undo_step_and_undo_restores_the_model(ws):
    before = ws.model.to_proto().SerializeToString()
    preview = ws.binarization.preview(samples=2, only=["/head/fc"])
    result = ws.binarization.apply()
    assert ws.binarization.previewed is None and result is preview.result and result.revision == ws.revision
    live = ws.model.to_proto()
    assert list(live.graph.node) == list(preview.after.graph.node)
    assert {t.name for t in live.graph.initializer} == {t.name for t in preview.after.graph.initializer}
    assert len(ws.session.undo_stack) == 1 and ws.model.modified
    ws.undo()
    assert ws.model.to_proto().SerializeToString() == before and not ws.model.modified


def test_a_preview_computed_before_an_edit_is_dropped_and_apply_refuses_it(ws):
    request = ws.binarization.request(samples=2)
    ws.apply_all("fold-bn")  # the model changes while the preview is computed
    stale = compute_binarize_preview(request)
    assert ws.binarization.accept_preview(stale) is False and ws.binarization.previewed is None
    with pytest.raises(GraphLensError, match="no previewed binarization"):
        ws.binarization.apply()
    ws.binarization.preview(samples=2)
    ws.undo()  # an edit drops the current preview with its event
    assert ws.binarization.previewed is None


def test_the_lesson_reads_the_float_weight_the_binarizer_saw(ws):
    from graphlens.binarize.lesson import layer_lesson

    preview = ws.binarization.preview(BinarizeConfig(bits=3), samples=2, only=["/stem/conv"])
    layer = preview.result.layers[0]
    lesson = layer_lesson(preview, layer)
    binarized = preview.result.weights[layer.tensor]  # the weight as folded, binarized in the preview
    assert lesson.bits == 3 and lesson.axis == layer.axis == 0 and lesson.kernels == binarized.kernels
    assert lesson.alphas == pytest.approx(list(binarized.alphas[:, lesson.kernel]), rel=1e-12)
    assert layer_lesson(preview, layer, kernel=1, bits=1).alphas == pytest.approx([binarized.alphas[0, 1]])


def test_a_model_with_unnamed_nodes_takes_its_binarization_and_undo_restores_it():
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from graphlens.core.model import Model

    weight = numpy_helper.from_array(np.random.default_rng(0).standard_normal((4, 3, 3, 3)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["y"], ["z"])],
        "unnamed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 4, 8, 8])], [weight])
    workspace = Workspace()
    workspace.set_model(Model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])))
    before = workspace.model.to_proto().SerializeToString()
    workspace.binarization.preview(samples=1)
    workspace.binarization.apply()  # every node unnamed in the file: each goes in under the name the graph shows
    assert [n.name for n in workspace.model.graph.nodes][:2] == ["Conv_0", "Relu_1"]
    assert workspace.model.graph.by_name["Conv_0"].inputs[1].endswith("_binarized")
    onnx.checker.check_model(workspace.model.to_proto())
    workspace.undo()
    assert workspace.model.to_proto().SerializeToString() == before
