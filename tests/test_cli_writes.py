"""Commands that write a model write only a valid one, only on success, and say every failure on stderr.

Run as a user runs them (their own process): exit code, the last stderr line, and what is left on disk.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from graphlens.core.bundled import demo_model_path
from tests import models
from tests.test_cli import graphlens


def _node(model: onnx.ModelProto, name: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.name == name)


def _ints(model: onnx.ModelProto, node: str, attr: str, values: list[int]) -> None:
    a = next(a for a in _node(model, node).attribute if a.name == attr)
    del a.ints[:]
    a.ints.extend(values)


def _input_dim(value: int) -> Callable[[onnx.ModelProto], None]:
    def mutate(model: onnx.ModelProto) -> None:
        model.graph.input[0].type.tensor_type.shape.dim[2].dim_value = value
    return mutate


def _short_bn_scale(model: onnx.ModelProto) -> None:
    name = _node(model, "/stage1/block1/pw/bn").input[1]
    k = next(i for i, t in enumerate(model.graph.initializer) if t.name == name)
    short = numpy_helper.to_array(model.graph.initializer[k])[:7]
    model.graph.initializer[k].CopyFrom(numpy_helper.from_array(short, name))


def _no_constant_value(model: onnx.ModelProto) -> None:
    del next(n for n in model.graph.node if n.op_type == "Constant").attribute[:]


def _float16_weight(model: onnx.ModelProto) -> None:
    weight = _node(model, "/stem/conv").input[1]
    next(t for t in model.graph.initializer if t.name == weight).data_type = TensorProto.FLOAT16


MUTANTS: dict[str, Callable[[onnx.ModelProto], None]] = {
    "input-dim-minus-1": _input_dim(-1),
    "input-dim-0": _input_dim(0),
    "bn-scale-7-of-16": _short_bn_scale,
    "strides-0": lambda m: _ints(m, "/stem/conv", "strides", [0, 0]),
    "pads-2**40": lambda m: _ints(m, "/stem/conv", "pads", [2**40] * 4),
    "training-mode": lambda m: _node(m, "/stem/bn").attribute.append(helper.make_attribute("training_mode", 1)),
    "constant-without-value": _no_constant_value,
    "float16-relabelled-weight": _float16_weight,
}
"""The demo, broken as the fuzzer broke it: each fails the ONNX checker's full check, not its plain one."""


def loop_body_of_wrong_arity() -> onnx.ModelProto:
    """A Loop carrying one value, whose body takes two inputs where the iteration count, the condition and the
    value make three."""
    body = helper.make_graph([helper.make_node("Identity", ["cond_in"], ["cond_out"], name="keep"),
                              helper.make_node("Relu", ["v_in"], ["v_out"], name="step")], "body",
                             [models.tensor("cond_in", TensorProto.BOOL, []), models.tensor("v_in", shape=[4])],
                             [models.tensor("cond_out", TensorProto.BOOL, []), models.tensor("v_out", shape=[4])])
    nodes = [helper.make_node("Loop", ["trip", "cond", "x"], ["y"], name="loop", body=body)]
    return models.make_model(nodes, [models.tensor("x", shape=[4])], [models.tensor("y", shape=[4])],
                             [models.init("trip", np.array(2, np.int64)), models.init("cond", np.array(True))])


def _write_mutant(folder: Path, name: str) -> Path:
    path = folder / f"{name}.onnx"
    if name == "loop-body-of-wrong-arity":
        model = loop_body_of_wrong_arity()
    else:
        model = onnx.load(demo_model_path())
        MUTANTS[name](model)
    onnx.checker.check_model(model)  # the plain check lets each one by
    onnx.save(model, path)
    return path


WRITERS = {
    "fold --check": ["fold", "--check"],
    "fold --rules transformers": ["fold", "--rules", "transformers"],
    "quantize": ["quantize", "--samples", "2"],
    "binarize": ["binarize", "--samples", "2"],
}


def _run(writer: str, model: Path, out: Path, *more: str):
    command, *options = WRITERS[writer]
    return graphlens(command, model, "-o", out, *options, *more)


def _last_stderr_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    return lines[-1] if lines else ""


@pytest.mark.parametrize("writer", WRITERS)
@pytest.mark.parametrize("mutant", [*MUTANTS, "loop-body-of-wrong-arity"])
def test_an_input_failing_the_full_check_is_refused_in_one_line_and_nothing_is_written(tmp_path, mutant, writer):
    path = _write_mutant(tmp_path, mutant)
    out = tmp_path / "out.onnx"
    result = _run(writer, path, out)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphlens: {path}: fails the ONNX checker (full check, with "
                                                   "shape inference): "), result.stderr
    assert lines[0].endswith("; nothing written (--force writes the output anyway)")
    assert "PASS" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]  # no output, no staging folder


def test_the_full_check_names_the_node_and_what_is_wrong(tmp_path):
    result = _run("fold --check", _write_mutant(tmp_path, "input-dim-minus-1"), tmp_path / "out.onnx")
    assert ("Conv '/stem/conv': Inferred shape and existing shape differ in dimension 2: (-1) vs (32)"
            in result.stderr)
    result = _run("quantize", _write_mutant(tmp_path, "strides-0"), tmp_path / "out.onnx")
    assert "Conv '/stem/conv': Attribute strides must only contain positive values;" in result.stderr


def test_force_writes_the_output_of_an_invalid_input_with_a_warning(tmp_path):
    path, out = _write_mutant(tmp_path, "input-dim-minus-1"), tmp_path / "out.onnx"
    result = graphlens("fold", path, "-o", out, "--force")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith(f"graphlens: warning: {path}: fails the ONNX checker")
    assert result.stderr.strip().endswith("writing the output anyway (--force)")
    onnx.checker.check_model(onnx.load(out))  # still structurally valid


def unknown_custom_op() -> onnx.ModelProto:
    """A Conv -> BN whose output goes through an op of a custom domain: valid for the ONNX checker (it skips custom
    domains) but not runnable, since onnxruntime knows no such op."""
    model = models.conv_bn()
    output = model.graph.output[0]
    model.graph.node.append(helper.make_node("Mystery", [output.name], ["mystery_out"], name="mystery",
                                             domain="example.custom"))
    output.name = "mystery_out"
    model.opset_import.append(helper.make_opsetid("example.custom", 1))
    return model


def test_fold_check_that_cannot_run_writes_nothing_and_says_why_on_stderr(tmp_path):
    path, out = tmp_path / "custom.onnx", tmp_path / "out.onnx"
    onnx.save(unknown_custom_op(), path)
    result = graphlens("fold", path, "-o", out, "--check", "--report", tmp_path / "r.json")
    assert result.returncode == 2
    assert _last_stderr_line(result).startswith("graphlens: numeric check not run: onnxruntime cannot run ")
    assert _last_stderr_line(result).endswith(f"; {out} not written")
    assert len(result.stderr.strip().splitlines()) == 1 and "wrote" not in result.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["custom.onnx"]


def test_binarize_on_a_model_onnxruntime_refuses_exits_2_like_quantize(tmp_path):
    path, out = tmp_path / "custom.onnx", tmp_path / "out.onnx"
    onnx.save(unknown_custom_op(), path)
    result = graphlens("binarize", path, "-o", out, "--samples", "2")
    assert result.returncode == 2, result.stdout + result.stderr
    last = _last_stderr_line(result)
    assert last.startswith("graphlens: output SQNR not measured: ") and last.endswith(f"; {out} not written")
    assert not out.exists()


def _nan_inputs(folder: Path) -> Path:
    path = folder / "nan.npz"
    np.savez(path, image=np.full((1, 3, 32, 32), np.nan, np.float32))
    return path


def test_diff_on_nan_inputs_fails_naming_the_input_and_the_counts(tmp_path):
    demo = demo_model_path()
    result = graphlens("diff", demo, demo, "--inputs", _nan_inputs(tmp_path))
    assert result.returncode == 1 and "PASS" not in result.stdout
    assert _last_stderr_line(result).startswith("graphlens: FAIL: input 'image' holds 3,072 NaN of 3,072 values; "
                                                "'logits': A holds 10 NaN of 10 values, B holds 10 NaN of 10 values")


def test_fold_check_on_nan_inputs_fails_and_writes_nothing(tmp_path):
    out = tmp_path / "out.onnx"
    result = graphlens("fold", demo_model_path(), "-o", out, "--inputs", _nan_inputs(tmp_path))
    assert result.returncode == 1 and "PASS" not in result.stdout
    last = _last_stderr_line(result)
    assert "input 'image' holds 3,072 NaN" in last and last.endswith(f"; {out} not written")
    assert not out.exists()


def test_fold_check_that_passes_writes_the_model(tmp_path):
    out = tmp_path / "out.onnx"
    result = graphlens("fold", demo_model_path(), "-o", out, "--check", "--report", tmp_path / "r.json")
    assert result.returncode == 0 and result.stderr == ""
    assert result.stdout.strip().splitlines()[-1].startswith(f"wrote {out}")
    onnx.checker.check_model(onnx.load(out), full_check=True)
    assert (tmp_path / "r.json").exists()


def test_compare_that_cannot_measure_exits_2_with_the_reason_on_stderr(tmp_path):
    path = tmp_path / "custom.onnx"
    onnx.save(unknown_custom_op(), path)
    result = graphlens("compare", path, path)
    assert result.returncode == 2
    assert "no structural differences" in result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graphlens: numbers not measured: onnxruntime cannot run ")
    assert graphlens("compare", path, path, "--no-numeric").returncode == 0


def test_compare_check_fails_on_nan_and_names_it(tmp_path):
    demo = demo_model_path()
    result = graphlens("compare", demo, demo, "--inputs", _nan_inputs(tmp_path), "--check")
    assert result.returncode == 1
    assert _last_stderr_line(result).startswith("graphlens: input 'image' holds 3,072 NaN of 3,072 values; "
                                                "output 'logits' of A (demo.onnx) holds 10 NaN of 10 values")
    assert "numbers not finite: output 'logits' of B (demo.onnx)" in result.stdout


def test_compare_check_names_the_differences_on_stderr(tmp_path):
    folded = tmp_path / "folded.onnx"
    assert graphlens("fold", demo_model_path(), "-o", folded).returncode == 0
    result = graphlens("compare", demo_model_path(), folded, "--check")
    assert result.returncode == 1
    assert _last_stderr_line(result).startswith("graphlens: the models differ (")
