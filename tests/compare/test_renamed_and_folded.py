"""Larger models: a renamed copy still pairs by structure, and a folded one groups each BN with its conv."""

from __future__ import annotations

from benchmarks.synthetic import make_conv_bn_model
from graphlens.compare import compare_models
from graphlens.core.model import Model
from graphlens.rewrites.driver import fold_model
from tests.compare.models import copy, rename_everything


def test_a_copy_with_every_node_and_initializer_renamed_pairs_by_structure():
    proto = make_conv_bn_model(400)
    renamed = rename_everything(proto)
    assert not {n.name for n in proto.graph.node} & {n.name for n in renamed.graph.node}
    result = compare_models(Model(proto), Model(renamed), numeric=False)
    paired = sum(len(p.a) for p in result.pairs if p.status == "same" and p.how == "structure")
    assert paired / len(proto.graph.node) >= 0.95
    assert result.counts["same"] == len(proto.graph.node)


def test_the_fold_output_reports_each_bn_with_its_conv_as_changed():
    proto = make_conv_bn_model(200)
    folded = Model(copy(proto))
    fold_model(folded)
    result = compare_models(Model(proto), folded)
    bns = [n.name for n in proto.graph.node if n.op_type == "BatchNormalization"]
    for bn in bns:
        pair = result.pair_of_a("main", bn)
        conv = bn.replace("/bn", "/conv")
        assert pair is not None and pair.a == [conv, bn] and pair.b == [conv], pair
        assert pair.status == "changed" and pair.how == "group"
        assert pair.changes[0] == f"folded BatchNormalization '{bn}' into it"
        assert any(c.startswith("weight ") and "max |Δ|" in c for c in pair.changes)
        assert pair.error is not None and pair.error.cosine > 0.9999
    assert result.counts == {"same": 100, "changed": 50, "added": 0, "removed": 0}


def test_the_folded_and_renamed_model_still_groups_every_bn():
    proto = make_conv_bn_model(200)
    folded = Model(copy(proto))
    fold_model(folded)
    result = compare_models(Model(proto), Model(rename_everything(folded.to_proto())), numeric=False)
    groups = [p for p in result.pairs if p.how == "group"]
    assert len(groups) == 50 and all([Model(proto).graph.by_name[n].op_type for n in p.a] ==
                                     ["Conv", "BatchNormalization"] for p in groups)
    assert result.counts == {"same": 100, "changed": 50, "added": 0, "removed": 0}
