"""Every command on broken and hostile files, run as a user runs them: exit codes and one-line errors.

0 success, 1 a check that found a difference, 2 bad input (one line naming the file), 3 a bug.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from graphlens import cli
from tests import hostile_models as hm
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
