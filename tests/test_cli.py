"""The command line, run as a user runs it: in a separate process (forked from one that has done the
imports, see tests/cli_process.py; test_info_text starts a fresh interpreter)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from onnx import TensorProto

from graphlens.patterns.library import library
from tests import models
from tests.bad_files import KINDS, make_bad_file
from tests.cli_process import run_graphlens


def graphlens(*args: str) -> subprocess.CompletedProcess[str]:
    return run_graphlens(*args)


def test_info_text(demo_path):
    # a fresh interpreter, as the installed command starts: nothing imported beforehand
    result = subprocess.run([sys.executable, "-m", "graphlens", "info", str(demo_path)], capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "demo.onnx" in out and "ir version" in out and "ai.onnx 17" in out
    assert "image  float32 [1, 3, 32, 32]" in out
    assert "BatchNormalization" in out and "initializers" in out


def test_info_json_on_models_with_subgraphs_constants_and_float16(write_model):
    cases = {
        "if.onnx": (models.if_with_conv_bn(), {"If": 1, "Conv": 2, "BatchNormalization": 1}),
        "consts.onnx": (
            models.conv_bn_params_behind_constants(),
            {"Constant": 2, "ConstantOfShape": 1, "Identity": 1, "Cast": 1, "Conv": 1, "BatchNormalization": 1},
        ),
        "half.onnx": (models.conv_bn(dtype=TensorProto.FLOAT16), {"Conv": 1, "BatchNormalization": 1}),
    }
    for name, (proto, expected) in cases.items():
        result = graphlens("info", write_model(proto, name), "--json")
        assert result.returncode == 0, result.stderr
        info = json.loads(result.stdout)
        assert info["op_counts"] == expected, name
        assert info["opsets"] == {"ai.onnx": 17}
        assert [i["name"] for i in info["inputs"]] == [i.name for i in proto.graph.input]
        assert [o["name"] for o in info["outputs"]] == [o.name for o in proto.graph.output]
    assert info["inputs"][0]["dtype"] == "float16"


@pytest.mark.parametrize("kind", KINDS)
def test_bad_input_prints_one_line_and_exits_2(tmp_path, kind):
    path, _ = make_bad_file(tmp_path, kind)
    result = graphlens("info", path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(path) in lines[0] and "Traceback" not in result.stderr
    assert result.stdout == ""


def test_debug_shows_the_traceback(tmp_path):
    path, _ = make_bad_file(tmp_path, "empty")
    result = graphlens("info", path, "--debug")
    assert result.returncode != 0 and "Traceback" in result.stderr


def test_gui_entry_rejects_a_bad_model_before_opening_a_window(tmp_path):
    path, _ = make_bad_file(tmp_path, "text")
    result = graphlens(path)
    assert result.returncode == 2 and str(path) in result.stderr


def test_unknown_command_line_option_is_a_usage_error():
    result = graphlens("info", "m.onnx", "--no-such-flag")
    assert result.returncode == 2
    assert result.stderr == "graphlens: unrecognized arguments: --no-such-flag (see graphlens --help)\n"


def test_patterns_lists_every_builtin_with_a_description():
    result = graphlens("patterns")
    assert result.returncode == 0
    names = [line.split()[0] for line in result.stdout.splitlines()]
    assert names == list(library())
    assert names[:10] == ["conv-bn", "gemm-bn", "matmul-bn", "decomposed-bn", "conv-mul-add",
                          "silu", "hard-swish", "gelu", "layer-norm", "leaky-relu"]
    assert {"attention", "sdpa", "rms-norm", "skip-norm", "rotary-embedding", "bias-gelu", "silu-mlp"} <= set(names)
    assert all(len(line.split(maxsplit=1)) == 2 for line in result.stdout.splitlines())


def test_match_json_on_the_demo(demo_path):
    result = graphlens("match", demo_path, "--pattern", "conv-bn", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["count"] == 6 == len(data["matches"])
    first = data["matches"][0]
    assert first == {"graph": "main", "nodes": {"conv": "/stem/conv", "bn": "/stem/bn"}, "values": first["values"]}
    assert first["values"]["mean"] == "stem.bn.running_mean"
    assert "/stage2/block1/bn" not in {m["nodes"]["bn"] for m in data["matches"]}


def test_match_with_a_pattern_file_and_in_a_subgraph(write_model, tmp_path):
    pattern = tmp_path / "mine.pattern"
    pattern.write_text("c = Conv(x, w: const)\nb = BatchNormalization(c, s: const, o: const, m: const, v: const)\n")
    result = graphlens("match", write_model(models.if_with_conv_bn()), "-p", pattern, "--json")
    data = json.loads(result.stdout)
    assert data["count"] == 1 and data["matches"][0]["graph"] == "main/branch:then_branch"


def test_explain_json_at_the_bn_that_must_not_fold(demo_path):
    result = graphlens("explain", demo_path, "--pattern", "conv-bn", "--at", "/stage2/block1/bn", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["matched"] is False
    assert data["message"] == (
        "the output of Conv '/stage2/block1/conv' has 2 consumers ('/stage2/block1/bn', "
        "'/stage2/block1/tap/maxpool'), so folding would change '/stage2/block1/tap/maxpool'"
    )
    assert data["kind"] == "sole_use" and data["node"] == "/stage2/block1/conv"
    assert data["mapping"] == {"bn": "/stage2/block1/bn", "conv": "/stage2/block1/conv"}


def test_explain_without_at_lists_near_misses(demo_path):
    result = graphlens("explain", demo_path, "-p", "conv-bn")
    assert result.returncode == 0
    assert result.stdout.startswith("conv-bn: 6 matches;")
    assert "  at /stage2/block1/conv: the output of Conv '/stage2/block1/conv' has 2 consumers" in result.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--pattern", "conv-bm"],
         "unknown pattern 'conv-bm' (did you mean 'conv-bn'?); built-in patterns: conv-bn, gemm-bn"),
        (["--pattern", "conv-bn", "--at", "/stem/bm"], "no node named '/stem/bm'; did you mean '/stem/bn'"),
    ],
)
def test_explain_bad_names_get_suggestions(demo_path, args, expected):
    result = graphlens("explain", demo_path, *args)
    assert result.returncode == 2 and expected in result.stderr and len(result.stderr.strip().splitlines()) == 1


def test_malformed_pattern_file_names_line_and_column(demo_path, tmp_path):
    bad = tmp_path / "bad.pattern"
    bad.write_text("conv = Conv(x, w: const)\nbn = BatchNormalization(conv, s: cnst)\n")
    result = graphlens("match", demo_path, "-p", bad)
    assert result.returncode == 2
    assert result.stderr.strip() == f"graphlens: {bad}: line 2, column 34: expected 'any' or 'const' but found 'cnst'"


def test_fold_check_and_report_on_the_demo(demo_path, tmp_path):
    out, report = tmp_path / "folded.onnx", tmp_path / "report.json"
    result = graphlens("fold", demo_path, "-o", out, "--check", "--report", report)
    assert result.returncode == 0, result.stderr
    assert "fold-bn: applied 7 times" in result.stdout
    assert ("BatchNormalization '/stage2/block1/bn' left in place: the output of Conv '/stage2/block1/conv' "
            "has 2 consumers") in result.stdout
    assert "PASS" in result.stdout and "FAIL" not in result.stdout
    data = json.loads(report.read_text())
    assert data["applied"] == {"fold-bn": 7} and data["numeric"]["passed"] is True
    assert [b["node"] for b in data["batchnorm_left"]] == ["/stage2/block1/bn"]
    info = json.loads(graphlens("info", out, "--json").stdout)
    assert info["op_counts"]["BatchNormalization"] == 1
    assert graphlens("diff", demo_path, out).returncode == 0


def test_fold_transformers_on_a_cnn_counts_what_changed_and_says_once_what_is_not_there(demo_path, tmp_path):
    """The demo is a CNN: the headline counts its nodes before and after, one line says which transformer constructs
    it lacks, and no line is about rules that were not run (its BNs, which fold-bn would take)."""
    result = graphlens("fold", demo_path, "-o", tmp_path / "t.onnx", "--rules", "transformers")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("Transformer fusions: ") and " → " in lines[0]
    assert lines[0].endswith("; no site fused, none left")
    [absent] = [line for line in lines if line.startswith("No ")]
    assert absent.endswith(" found in this model") and all(kind in absent for kind in ("attention", "GELU", "rotary"))
    assert "BatchNormalization" not in result.stdout and " left at " not in result.stdout


def test_fold_refuses_to_overwrite_its_input_unless_in_place(write_model):
    path = write_model(models.conv_bn())
    before = path.read_bytes()
    result = graphlens("fold", path, "-o", path)
    assert result.returncode == 2 and "pass --in-place" in result.stderr
    assert path.read_bytes() == before
    assert graphlens("fold", path, "-o", path, "--in-place").returncode == 0
    assert json.loads(graphlens("info", path, "--json").stdout)["op_counts"] == {"Conv": 1}


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--rules", "fold-bn,fold-bm"], "unknown rule 'fold-bm'; rules: "),
        (["--inputs", "missing.npz"], "missing.npz"),
        (["--dim", "N2"], "--dim 'N2': expected NAME=VALUE"),
        (["--dim", "foo=4"], "dimension 'foo' is not a dynamic dimension of the model's inputs"),
    ],
)
def test_fold_bad_arguments_exit_2_with_one_line(demo_path, tmp_path, args, expected):
    result = graphlens("fold", demo_path, "-o", tmp_path / "o.onnx", "--check", *args)
    assert result.returncode == 2, result.stdout
    assert expected in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "o.onnx").exists()  # refused before anything is written


def test_fold_refuses_a_wrong_inputs_file_before_writing_and_checks_on_a_right_one(demo_path, tmp_path):
    """--inputs is read before the fold (no model written for inputs that do not fit) and asks for the check."""
    import numpy as np

    out, bad, good = tmp_path / "o.onnx", tmp_path / "bad.npz", tmp_path / "good.npz"
    np.savez(bad, picture=np.zeros((1, 3, 32, 32), np.float32))
    result = graphlens("fold", demo_path, "-o", out, "--inputs", bad)
    assert result.returncode == 2 and "bad.npz" in result.stderr and "image" in result.stderr
    assert not out.exists()
    np.savez(good, image=np.random.default_rng(0).normal(size=(1, 3, 32, 32)).astype(np.float32))
    result = graphlens("fold", demo_path, "-o", out, "--inputs", good)  # no --check: the inputs ask for it
    assert result.returncode == 0 and "PASS" in result.stdout and out.exists()


def test_diff_with_an_inputs_file_and_mismatched_names(demo_path, tmp_path, write_model):
    import numpy as np

    good = tmp_path / "in.npz"
    np.savez(good, image=np.zeros((1, 3, 32, 32), np.float32))
    assert graphlens("diff", demo_path, demo_path, "--inputs", good).returncode == 0
    bad = tmp_path / "bad.npz"
    np.savez(bad, picture=np.zeros((1, 3, 32, 32), np.float32))
    result = graphlens("diff", demo_path, demo_path, "--inputs", bad)
    assert result.returncode == 2 and "bad.npz" in result.stderr and "image" in result.stderr
    other = write_model(models.conv_bn(), "other.onnx")
    result = graphlens("diff", demo_path, other)
    assert result.returncode == 2 and "differ" in result.stderr


def test_diff_reports_a_real_difference_with_exit_1(write_model):
    a = models.conv_bn()
    b = models.conv_bn()
    w = next(t for t in b.graph.initializer if t.name == "w")
    import numpy as np
    from onnx import numpy_helper

    w.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(w) * np.float32(1.05), "w"))
    result = graphlens("diff", write_model(a, "a.onnx"), write_model(b, "b.onnx"), "--json")
    assert result.returncode == 1
    data = json.loads(result.stdout)
    assert data["passed"] is False and data["outputs"][0]["max_abs"] > 0


def test_ctrl_c_is_one_line_and_exit_130(monkeypatch, capsys):
    from graphlens.cli import lossy

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(lossy, "cmd_quantize", interrupted)
    from graphlens.cli import main

    assert main(["quantize", "m.onnx", "-o", "q.onnx"]) == 130
    assert capsys.readouterr().err.strip().splitlines() == ["graphlens: interrupted"]


def test_no_output_may_overwrite_a_file_the_command_reads(tmp_path, capsys, monkeypatch):
    """``-o`` and ``--report`` naming the calibration samples, an image in their folder, the ``--evaluate`` script
    or ``--inputs`` are refused before any work, exit 2, the file untouched; so is a folder that cannot be
    written (read-only: simulated, since a test may run as root, which every permission lets through)."""
    import numpy as np
    import onnx

    from graphlens.cli import main
    from tests.quantize.test_calibration_images import image_model, write_images

    model = tmp_path / "m.onnx"
    onnx.save(image_model([1, 3, 10, 12]), model)
    npz = tmp_path / "cal.npz"
    np.savez(npz, x=np.random.default_rng(0).normal(size=(2, 1, 3, 10, 12)).astype(np.float32))
    write_images(tmp_path / "imgs", count=2, size=(12, 10))
    script = tmp_path / "score.py"
    script.write_text("def evaluate(path):\n    return 1.0\n")
    image = tmp_path / "imgs" / sorted(p.name for p in (tmp_path / "imgs").iterdir())[0]
    out = str(tmp_path / "q.onnx")
    cases = [
        (["quantize", str(model), "-o", str(npz), "--calibration", str(npz)], npz, "-o"),
        (["quantize", str(model), "-o", out, "--calibration", str(npz), "--report", str(npz)], npz, "--report"),
        (["quantize", str(model), "-o", str(image), "--calibration", str(tmp_path / "imgs"),
          "--preprocess", "size=12x10"], image, "-o"),
        (["quantize", str(model), "-o", str(script), "--calibration", str(npz), "--evaluate", str(script)], script,
         "-o"),
        (["binarize", str(model), "-o", out, "--calibration", str(npz), "--report", str(npz)], npz, "--report"),
        (["fold", str(model), "-o", str(npz), "--inputs", str(npz)], npz, "-o"),
    ]
    for args, victim, option in cases:
        before = victim.read_bytes()
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"graphlens: {option} {victim}: is ") and err.endswith("writing it would destroy it")
        assert "\n" not in err and victim.read_bytes() == before
    assert main(["quantize", str(model), "-o", str(tmp_path / "imgs" / "new.onnx"), "--calibration",
                 str(tmp_path / "imgs"), "--preprocess", "size=12x10"]) == 0  # a new file beside the images is fine
    capsys.readouterr()
    import graphlens.cli.common as common

    real = common.os.access
    monkeypatch.setattr(common.os, "access", lambda p, mode: False if str(p).endswith("locked") else real(p, mode))
    (tmp_path / "locked").mkdir()
    assert main(["quantize", str(model), "-o", str(tmp_path / "locked" / "q.onnx"), "--calibration", str(npz)]) == 2
    assert "cannot be written here (the folder or the file is read-only)" in capsys.readouterr().err
    assert not list((tmp_path / "locked").iterdir())


def test_no_report_csv_json_or_picture_may_overwrite_the_model_or_its_weights(tmp_path, capsys):
    """``--report``, ``--csv``, ``--json`` and ``render -o`` naming the model, its external data file or the
    ``--inputs`` are refused in one line, exit 2, before any work; the files stay as they were."""
    import numpy as np
    import onnx

    from graphlens.cli import main

    path = tmp_path / "m.onnx"
    onnx.save(models.conv_bn(), path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.onnx.data", size_threshold=0)
    data = tmp_path / "m.onnx.data"
    feeds = tmp_path / "in.npz"
    np.savez(feeds, x=np.zeros((1, 3, 8, 8), np.float32))
    picture = tmp_path / "m.png"
    picture.write_bytes(path.read_bytes())
    cases = [
        (["fold", str(path), "-o", str(tmp_path / "f.onnx"), "--report", str(data)], data, "--report",
         "the model's external data"),
        (["overlay", str(path), "--metric", "flops", "--csv", str(path)], path, "--csv", "the input model"),
        (["overlay", str(path), "--metric", "params", "--json", str(data)], data, "--json",
         "the model's external data"),
        (["profile", str(path), "--runs", "1", "--inputs", str(feeds), "--csv", str(feeds)], feeds, "--csv",
         "the --inputs file"),
        (["render", str(picture), "-o", str(picture)], picture, "-o", "the input model"),
    ]
    for args, victim, option, what in cases:
        before = victim.read_bytes()
        assert main(args) == 2, args
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"graphlens: {option} {victim}: is {what} '") and "\n" not in err, err
        assert victim.read_bytes() == before
    assert main(["overlay", str(path), "--metric", "flops", "--csv", str(tmp_path / "missing" / "f.csv")]) == 2
    assert "folder" in capsys.readouterr().err
    assert main(["info", str(path)]) == 0


@pytest.mark.parametrize("args", [["info", ""], ["fold", "m.onnx", "-o", "x.onnx", "--rules", ""],
                                  ["match", "m.onnx", "-p", " "]])
def test_an_empty_argument_is_refused_not_read_as_the_current_folder(args, capsys):
    from graphlens.cli import main

    assert main(args) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("graphlens: an empty argument after '") and "\n" not in err


def test_an_output_that_is_no_regular_file_is_refused_before_the_work(tmp_path, capsys):
    """A FIFO (or /dev/null, as root) would be replaced by the model's file at the end; said before the fold."""
    import os

    from graphlens.cli import main

    path = tmp_path / "m.onnx"
    path.write_bytes(models.conv_bn().SerializeToString())
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    assert main(["fold", str(path), "-o", str(pipe)]) == 2
    assert capsys.readouterr().err.strip().endswith("pipe: is not a regular file (a device, a pipe or a socket); "
                                                    "not writing over it")
    assert pipe.is_fifo()
