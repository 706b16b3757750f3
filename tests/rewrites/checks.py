"""What every rewrite test checks, in one place."""

from __future__ import annotations

import numpy as np
import onnx

from graphlens.core.full_check import full_check_problem
from graphlens.core.model import Model
from graphlens.numerics import diff_models, make_inputs
from graphlens.rewrites.edit import EditHistory


def io_names(proto: onnx.ModelProto) -> tuple[list[str], list[str]]:
    return [i.name for i in proto.graph.input], [o.name for o in proto.graph.output]


def assert_rewrite_is_sound(original: bytes, model: Model, session: EditHistory, inputs=None) -> None:
    """The ONNX checker passes, input/output names are unchanged, onnxruntime outputs agree within
    the dtype's tolerance, and undo restores the original model byte for byte."""
    before = onnx.ModelProto.FromString(original)
    after = model.to_proto()
    problem = full_check_problem(after.SerializeToString())  # onnx's full check, contrib ops by onnxruntime's schema
    assert problem is None, problem
    assert io_names(after) == io_names(before)
    diff = diff_models(before, model, inputs if inputs is not None else make_inputs(model, seed=3))
    assert diff.available, diff.reason
    assert diff.passed, "\n".join(diff.summary_lines())
    while session.undo_stack:
        session.undo()
    assert model.to_proto().SerializeToString() == original


def op_types(model: Model) -> list[str]:
    return [n.op_type for g in model.graphs() for n in g.nodes]


def count(model: Model, op: str) -> int:
    return op_types(model).count(op)


def array(model: Model, name: str) -> np.ndarray:
    value = model.graph.constant_value(name)
    assert value is not None
    return value
