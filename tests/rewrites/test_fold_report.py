"""The fold report a user reads: a headline that counts what changed, sites left only where a rule's construct
is, absent kinds said once, and no lines about rules that were not run."""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import TensorProto, helper

from tests.models import bn_params, init, make_model, tensor
from tests.rewrites import transformer_attention_models as am
from tests.rewrites import transformer_gelu_models as tm
from tests.rewrites.test_fold_bn import fold

TRANSFORMERS = ("transformers",)


def cnn() -> onnx.ModelProto:
    """A small classifier as a CNN exporter writes it: Conv, BN, Swish in pieces (x·sigmoid(x·β), as Paddle writes
    it, and x·sigmoid(x)), a Tanh and a Neg after convolutions, pooling, a linear layer and a Softmax over its
    logits. Transformer rules find none of their constructs in it."""
    rng = np.random.default_rng(3)
    inits = [init("w1", rng.normal(size=(4, 3, 3, 3)).astype(np.float32)),
             init("w2", rng.normal(size=(4, 4, 1, 1)).astype(np.float32)),
             init("beta", np.array(1.0, np.float32)),
             init("fc_w", rng.normal(size=(4, 10)).astype(np.float32)),
             init("fc_b", rng.normal(size=(10,)).astype(np.float32))]
    inits += [init(k, v) for k, v in bn_params(4).items()]
    nodes = [
        helper.make_node("Conv", ["x", "w1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c1", "bn_scale", "bn_bias", "bn_mean", "bn_var"], ["b1"], name="bn"),
        helper.make_node("Mul", ["b1", "beta"], ["scaled"], name="swish_scale"),
        helper.make_node("Sigmoid", ["scaled"], ["gate1"], name="sigmoid1"),
        helper.make_node("Mul", ["b1", "gate1"], ["s1"], name="swish1"),
        helper.make_node("Conv", ["s1", "w2"], ["c2"], name="conv2"),
        helper.make_node("Sigmoid", ["c2"], ["gate2"], name="sigmoid2"),
        helper.make_node("Mul", ["c2", "gate2"], ["s2"], name="swish2"),
        helper.make_node("Tanh", ["s2"], ["t"], name="tanh"),
        helper.make_node("Neg", ["t"], ["n"], name="neg"),
        helper.make_node("GlobalAveragePool", ["n"], ["p"], name="pool"),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("MatMul", ["f", "fc_w"], ["logits0"], name="fc"),
        helper.make_node("Add", ["logits0", "fc_b"], ["logits"], name="fc_bias"),
        helper.make_node("Softmax", ["logits"], ["probs"], name="probs", axis=-1),
    ]
    return make_model(nodes, [tensor("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                      [tensor("probs", TensorProto.FLOAT, [1, 10])], inits, opset=17)


def test_activations_and_softmaxes_of_a_cnn_are_no_transformer_sites_left():
    """A Swish after a Conv is no SiLU-gated MLP, a Softmax over logits no attention, a Tanh no GELU, a Neg no
    rotary embedding: none is listed as a site left, and the report says once that none of them is there."""
    _, _, _, report = fold(cnn(), TRANSFORMERS)
    assert report.left == [] and not report.fused
    lines = report.lines()
    assert not any(" left at " in line for line in lines)
    [absent] = [line for line in lines if line.startswith("No ")]
    for family in ("attention", "GELU", "SiLU-gated MLP", "rotary embedding"):
        assert absent.count(family) == 1
    assert not any(re.match(r"[\w-]+: 0 fused, 0 left", line) for line in lines)


def test_the_gated_mlp_and_attention_are_still_sites_left():
    """The narrowing keeps the real constructs: a SiLU-gated MLP (which no op fuses) and a Softmax over Q·Kᵀ whose
    probabilities are summed are each a site left, with the pattern that draws them."""
    _, _, _, report = fold(tm.silu_mlp(), TRANSFORMERS)
    assert [(site.kind, site.pattern) for site in report.left] == [("silu-mlp", "silu-mlp")]
    proto = am.build(am.variant())
    context = next(n for n in proto.graph.node if n.name == "context")
    context.op_type = "ReduceSum"
    del context.input[1:]
    _, _, _, report = fold(proto, TRANSFORMERS)
    [site] = report.left
    assert (site.kind, site.node, site.pattern) == ("attention", "softmax", "attention")


def test_the_headline_counts_nodes_before_and_after_and_where_they_went():
    proto = am.build(am.variant(mask="add", split_shape="concat", layers=2))
    before = len(proto.graph.node)
    _, model, _, report = fold(proto, TRANSFORMERS)
    after = model.node_count()
    headline = report.lines()[0]
    assert headline == report.headline()
    assert headline.startswith(f"Transformer fusions: {before:,} → {after:,} nodes (")
    assert headline.endswith("; 2 sites fused, none left")
    went = headline[headline.index("(") + 1:headline.index(")")]
    assert "folded into initializers" in went and "merged into fused ops" in went
    assert sum(int(n.replace(",", "")) for n in re.findall(r"\d[\d,]*", went)) == before - after
    assert (report.nodes_before, report.nodes_after) == (before, after) == tuple(report.to_json()["nodes"].values())


def test_what_whole_model_rules_did_is_said_in_words():
    _, _, _, report = fold(am.build(am.variant(split_shape="concat")), TRANSFORMERS)
    [constants] = [line for line in report.lines() if line.startswith("fold-constants:")]
    assert "stored as" in constants and "applied" not in constants


def test_a_batchnorm_left_because_fold_bn_was_not_run_is_no_line_of_the_report():
    """The transformer set does not fold BNs: a BN left says nothing about the model, so no line says it
    (the JSON keeps the reason)."""
    _, model, _, report = fold(cnn(), TRANSFORMERS)
    assert [n.op_type for n in model.graph.nodes].count("BatchNormalization") == 1
    assert report.bn_left and report.bn_left[0]["reason"].startswith("fold-bn was not among the rules run")
    assert not any("BatchNormalization" in line for line in report.lines())


def test_a_fold_without_transformer_rules_keeps_its_plain_report():
    _, _, _, report = fold(cnn(), ("fold-bn",))
    assert report.headline() is None and report.lines()[0] == "fold-bn: applied 1 time"
    assert not any(line.startswith("No ") for line in report.lines())
