"""Every command on broken and hostile files, run as a user runs them: exit codes and one-line errors.

0 success, 1 a check that found a difference, 2 bad input (one line naming the file), 3 a bug.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from onnx import helper

from graphlens import cli
from tests import hostile_models as hm
from tests import models
from tests.test_cli import graphlens

COMMANDS = ["info", "match", "explain", "fold", "render", "diff"]


def command_line(command: str, path: Path, out: Path) -> list[str | Path]:
    return {
        "info": ["info", path],
        "match": ["match", path, "-p", "conv-bn"],
        "explain": ["explain", path, "-p", "conv-bn"],
        "fold": ["fold", path, "-o", out / "folded.onnx"],
        "render": ["render", path, "-o", out / "drawn.svg"],
        "diff": ["diff", path, path],
    }[command]


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", hm.REFUSED, ids=lambda c: c.name)
def test_every_command_refuses_a_bad_file_with_one_line_and_exit_2(tmp_path, case, command):
    path = case.write(tmp_path)
    result = graphlens(*command_line(command, path, tmp_path))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"graphlens: {path}: "), result.stderr
    assert re.search(case.refused, lines[0]) and result.stdout == ""


@pytest.mark.parametrize("command", COMMANDS)
@pytest.mark.parametrize("case", hm.LOADED, ids=lambda c: c.name)
def test_every_command_finishes_on_a_hostile_but_valid_file(tmp_path, case, command):
    path = case.write(tmp_path)
    result = graphlens(*command_line(command, path, tmp_path))
    declaring = ("constant-declaring-huge-dims", "initializer-declaring-huge-dims")
    if command == "diff" and case.name in ("names", "huge-constant-of-shape", *declaring):
        # onnxruntime refuses these models (duplicate names, a shape it cannot infer, short tensors)
        assert result.returncode == 2 and "onnxruntime cannot run" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        return
    if command == "fold" and case.name in ("huge-constant-of-shape", *declaring):
        # the input fails the ONNX checker's full check (a BN scale of rank 2, tensors shorter than their dims):
        # refused in one line, nothing written
        assert result.returncode == 2 and "fails the ONNX checker" in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "folded.onnx").exists()
        return
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr


def test_fold_and_explain_say_a_constant_is_too_large_to_evaluate(tmp_path):
    path = hm.BY_NAME["huge-constant-of-shape"].write(tmp_path)
    too_large = ("input 1 (scale) of BatchNormalization 'bn' is a constant of 1,000,000,000,000 elements (3.64 TiB), "
                 "too large to evaluate (the limit is 256 MiB)")
    fold = graphlens("fold", path, "-o", tmp_path / "out.onnx", "--force")  # its BN scale has rank 2: invalid
    assert fold.returncode == 0 and f"BatchNormalization 'bn' left in place: {too_large}" in fold.stdout
    explained = graphlens("explain", path, "-p", "conv-bn", "--at", "bn")
    assert explained.returncode == 0 and too_large in explained.stdout


def test_render_escapes_hostile_names_in_svg(tmp_path):
    path = hm.BY_NAME["names"].write(tmp_path)
    result = graphlens("render", path, "-o", tmp_path / "names.svg", "--expand-all")
    assert result.returncode == 0, result.stderr
    svg = (tmp_path / "names.svg").read_text()
    assert "<img" not in svg and "<b>" not in svg
    assert "&lt;img src=x onerror=alert(1)&gt;" in svg and "&amp;amp; &amp;lt;tag&amp;gt;" in svg


def test_a_reader_that_stops_early_ends_the_command_quietly(tmp_path):
    path = hm.BY_NAME["relu-chain"].write(tmp_path)
    pattern = tmp_path / "relu.pattern"
    pattern.write_text("pattern relu: every Relu\nr = Relu(x)\n")
    for extra in ([], ["--json"]):  # 20,000 matches: far more than a pipe holds
        process = subprocess.Popen([sys.executable, "-m", "graphlens", "match", str(path), "-p", str(pattern), *extra],
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        assert process.stdout is not None and process.stderr is not None
        process.stdout.readline()
        process.stdout.close()  # as `| head -1` does
        error = process.stderr.read().decode()
        assert process.wait(timeout=120) == 0
        assert error == ""


def test_a_reader_that_stops_early_does_not_stop_the_files_being_written(tmp_path, demo_path):
    """`graphlens overlay … --csv OUT | head -1` still writes OUT: only the listing is cut short."""
    out = tmp_path / "flops.csv"
    process = subprocess.Popen([sys.executable, "-m", "graphlens", "overlay", str(demo_path), "--metric", "flops",
                                "--top", "0", "--csv", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # the reader left before the first line
    error = process.stderr.read().decode()
    assert process.wait(timeout=120) == 0 and error == ""
    assert out.read_text().startswith("node,")


def test_an_internal_error_is_one_line_and_exit_3(monkeypatch, capsys, demo_path):
    def broken(args):
        raise ZeroDivisionError("division by zero\nsecond line")

    from graphlens.cli import inspect as inspect_commands

    monkeypatch.setattr(inspect_commands, "cmd_info", broken)
    assert cli.main(["info", str(demo_path)]) == cli.EXIT_INTERNAL == 3
    err = capsys.readouterr().err
    assert err.strip() == ("graphlens: internal error: ZeroDivisionError: division by zero second line "
                           "(rerun with --debug for details)")


# ------------------------------------------------------------- hostile values, refused where first read
def _one_line(result) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr and "internal error" not in result.stderr
    return lines[0]


def _value_commands(path: Path, out: Path) -> dict[str, list[str | Path]]:
    return {
        "info": ["info", path], "match": ["match", path, "-p", "conv-bn"],
        "render": ["render", path, "-o", out / "r.svg"],
        "fold": ["fold", path, "-o", out / "f.onnx"], "fold --check": ["fold", path, "-o", out / "f.onnx", "--check"],
        "quantize": ["quantize", path, "-o", out / "q.onnx"], "binarize": ["binarize", path, "-o", out / "b.onnx"],
        "compare": ["compare", path, path], "diff": ["diff", path, path],
    }


@pytest.mark.parametrize("where", ["initializer", "input"])
def test_every_command_refuses_an_element_type_onnx_does_not_define_in_the_same_line(tmp_path, where):
    build = hm.unknown_element_type_initializer if where == "initializer" else hm.unknown_element_type_input
    path = tmp_path / "dtype.onnx"
    path.write_bytes(build().SerializeToString())
    said = {"initializer": "initializer 'w'", "input": "graph input 'x'"}[where]
    for command, line in _value_commands(path, tmp_path).items():
        result = graphlens(*line)
        assert _one_line(result) == f"graphlens: {path}: {said} has element type 999, which ONNX does not define", \
            command
    assert not any(tmp_path.glob("[fqbr].*"))


def test_compare_names_the_constant_whose_data_does_not_fit_its_dims(tmp_path):
    misfit, fitting = tmp_path / "misfit.onnx", tmp_path / "fitting.onnx"
    misfit.write_bytes(hm.constant_data_not_fitting_dims().SerializeToString())
    fitting.write_bytes(models.conv_bn_params_behind_constants().SerializeToString())
    for numeric in ([], ["--no-numeric"]):
        assert _one_line(graphlens("compare", misfit, fitting, *numeric)) == (
            f"graphlens: {misfit}: node Constant 'scale_const': attribute 'value': tensor 's' holds 4 values, where "
            "its dims [7] call for 7")


@pytest.mark.parametrize("command", ["diff", "quantize", "binarize"])
def test_a_negative_seed_is_refused_with_the_arguments(tmp_path, demo_path, command):
    line = {"diff": ["diff", demo_path, demo_path], "quantize": ["quantize", demo_path, "-o", tmp_path / "q.onnx"],
            "binarize": ["binarize", demo_path, "-o", tmp_path / "b.onnx"]}[command]
    result = graphlens(*line, "--seed", "-1")
    said = f"graphlens {command}: argument --seed: -1 is less than 0 (see graphlens {command} --help)"
    assert _one_line(result) == said
    assert result.stdout == "" and not any(tmp_path.iterdir())


def test_a_rule_list_naming_nothing_is_refused_as_an_empty_one_is(tmp_path, demo_path):
    said = "graphlens: an empty argument after '--rules'; give it a value"
    for given in (["--rules", ""], ["--rules", ",,,"], ["--rules", " , "], ["--rules="], ["--rules=,"]):
        result = graphlens("fold", demo_path, "-o", tmp_path / "out.onnx", *given)
        assert _one_line(result) == said, given
    assert not (tmp_path / "out.onnx").exists()


def test_a_name_list_with_an_empty_name_is_refused(tmp_path, demo_path):
    """``--rules fold-bn,,`` (a typo) ran fold-bn and exited 0; every comma list says which list holds the gap."""
    for given in (["--rules", "fold-bn,,"], ["--rules=,fold-bn"], ["--rules", "fold-bn, ,fold-affine"]):
        result = graphlens("fold", demo_path, "-o", tmp_path / "out.onnx", *given)
        assert result.returncode == 2 and "has an empty name between its commas" in _one_line(result), given
    assert not (tmp_path / "out.onnx").exists()


@pytest.mark.parametrize("path", ["/dev/zero", "fifo"])
def test_a_path_that_is_no_regular_file_is_refused_before_reading(tmp_path, path):
    if path == "fifo":
        path = str(tmp_path / "model.onnx")
        os.mkfifo(path)
    elif not os.path.exists(path):
        pytest.skip("no /dev/zero here")
    for command in ("info", "render"):
        line = [command, path] + (["-o", tmp_path / "r.svg"] if command == "render" else [])
        assert _one_line(graphlens(*line)) == (f"graphlens: {path}: is not a regular file (a device, a pipe or a "
                                               "socket), not an ONNX model file")


def test_too_deep_nesting_is_named_as_such(tmp_path):
    path = tmp_path / "deep.onnx"
    path.write_bytes(hm.nested_if_bytes(300))
    assert _one_line(graphlens("info", path)) == (f"graphlens: {path}: nests graphs too deeply to be read (subgraphs "
                                                  "inside subgraphs beyond protobuf's limit of 100 levels)")


def test_a_second_producer_and_a_later_producer_are_named_as_what_they_are(tmp_path):
    twice, late = tmp_path / "twice.onnx", tmp_path / "late.onnx"
    twice.write_bytes(hm.duplicate_producer().SerializeToString())
    late.write_bytes(hm.if_reading_a_later_tensor().SerializeToString())
    assert _one_line(graphlens("info", twice)) == (
        f"graphlens: {twice}: tensor 'c' is produced twice, by node Conv 'conv' and again by node Relu "
        "'second_writer'; each tensor must have one producer")
    assert "which node Abs 'late_abs' produces only after If 'the_if'" in _one_line(graphlens("info", late))


def test_names_are_printed_with_bidi_controls_and_stray_bytes_escaped(tmp_path):
    bidi = models.conv_bn()
    bidi.graph.node[1].name = "bn\u202eevil"
    bidi.graph.node.insert(1, helper.make_node("Relu", ["x"], ["c"], name="again\u202e"))
    twice = tmp_path / "bidi.onnx"
    twice.write_bytes(bidi.SerializeToString())
    line = _one_line(graphlens("info", twice))
    assert line.endswith("again by node Relu 'again\\u202e'; each tensor must have one producer")
    assert "\u202e" not in line
    del bidi.graph.node[1]
    matched = tmp_path / "matched.onnx"
    matched.write_bytes(bidi.SerializeToString())
    result = graphlens("match", matched, "-p", "conv-bn")
    assert result.returncode == 0 and "bn=bn\\u202eevil" in result.stdout and "\u202e" not in result.stdout
    not_utf8 = tmp_path / "not-utf8.onnx"
    not_utf8.write_bytes(hm.node_name_not_utf8())
    result = graphlens("explain", not_utf8, "-p", "conv-bn", "--at", "bn\\xf3(")
    assert result.returncode == 0 and "BatchNormalization 'bn\\xf3('" in result.stdout and "b'" not in result.stdout
