"""A failed binding names the node where the search got furthest, whichever side a commutative bias is on."""

from __future__ import annotations

import pytest

from graphlens.core.model import Model
from graphlens.matching.explain import explain
from graphlens.patterns.library import get_pattern
from tests.matching import attention_block_models as abm


@pytest.mark.parametrize("bias_first", [True, False], ids=["Add(bias, MatMul)", "Add(MatMul, bias)"])
def test_k_and_v_from_different_tensors_fail_at_v(bias_first):
    proto = abm.build(abm.form(kv_input="v_from_memory", bias_first=bias_first))
    softmax = next(n.name for n in proto.graph.node if n.op_type == "Softmax")
    result = explain(get_pattern("attention-block"), Model(proto), at=softmax)
    assert not result.matched and result.failure is not None
    assert result.failure.node == "v_proj", result.message
