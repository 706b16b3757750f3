"""Judging by the task: a user's evaluate(model_path) -> float scores the quantized model and drives the
target search."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from graphlens.cli import main
from graphlens.core.bundled import demo_model_path
from graphlens.core.model import load_model
from graphlens.quantize import QuantConfig, random_calibration
from graphlens.workspace import Workspace

SCRIPT = '''
import numpy as np
import onnxruntime as ort

FEED = {{k: v[0] for k, v in np.load({feed!r}).items()}}
FLOAT = ort.InferenceSession({model!r}, providers=["CPUExecutionProvider"]).run(None, FEED)[0]


def evaluate(model_path: str) -> float:
    """Agreement with the float model: its output's SNR in dB, computed here from onnxruntime's outputs."""
    out = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, FEED)[0]
    return float(10 * np.log10(np.sum(FLOAT ** 2) / max(np.sum((FLOAT - out) ** 2), 1e-30)))
'''


def _feed(tmp_path: Path) -> Path:
    data = random_calibration(load_model(demo_model_path()), 1, seed=5)
    path = tmp_path / "feed.npz"
    np.savez(path, **data.arrays)
    return path


def _score_of(tmp_path: Path):
    """The same evaluate, as a Python function, and the model paths it was given."""
    feed = {k: v[0] for k, v in np.load(_feed(tmp_path)).items()}
    reference = ort.InferenceSession(str(demo_model_path()), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    seen: list[tuple[str, bool]] = []

    def evaluate(model_path: str) -> float:
        seen.append((model_path, Path(model_path).exists()))
        out = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"]).run(None, feed)[0]
        return float(10 * np.log10(np.sum(reference ** 2) / max(np.sum((reference - out) ** 2), 1e-30)))

    return evaluate, seen


def test_workspace_target_score_searches_by_the_users_score(tmp_path):
    evaluate, seen = _score_of(tmp_path)
    ws = Workspace()
    ws.open(demo_model_path())
    plain = ws.quantization.quantize(QuantConfig(bias_correction=False), evaluate=evaluate).score
    assert plain is not None and seen and all(exists for _, exists in seen)
    ws.undo()
    seen.clear()
    result = ws.quantization.quantize(QuantConfig(bias_correction=False, target_score=plain + 6), evaluate=evaluate)
    assert result.target is not None and result.target.metric == "score" and result.target.met
    assert result.score is not None and result.score >= plain + 6
    assert result.excluded_for_target and len(seen) == len(result.target.runs) + 1  # + the float model
    assert result.target.float_value is not None and result.target.float_value > plain + 6


def test_cli_evaluate_script_reports_the_score(tmp_path, capsys):
    script = tmp_path / "score.py"
    script.write_text(SCRIPT.format(feed=str(_feed(tmp_path)), model=str(demo_model_path())))
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--evaluate", str(script),
                 "--report", str(report)]) == 0
    data = json.loads(report.read_text())
    evaluate, _ = _score_of(tmp_path)
    assert data["score"] == pytest.approx(evaluate(str(out)), abs=1e-3)  # the written model's score
    assert "score:" in capsys.readouterr().out


def test_cli_unreachable_target_score_writes_the_best_and_exits_1(tmp_path):
    script = tmp_path / "score.py"
    script.write_text(SCRIPT.format(feed=str(_feed(tmp_path)), model=str(demo_model_path())))
    out, report = tmp_path / "q.onnx", tmp_path / "r.json"
    assert main(["quantize", str(demo_model_path()), "-o", str(out), "--evaluate", str(script),
                 "--target-score", "1000", "--report", str(report)]) == 1
    data = json.loads(report.read_text())
    assert out.exists() and data["target"]["met"] is False and data["target"]["metric"] == "score"


@pytest.mark.parametrize(("text", "expected"), [
    (None, "no such file"),
    ("def score(path):\n    return 1.0\n", "defines no function 'evaluate"),
    ("def evaluate(path):\n    raise RuntimeError('no OCR here')\n", "raised RuntimeError: no OCR here"),
    ("def evaluate(path):\n    return 'good'\n", "not a number"),
    ("import no_such_module_anywhere\n", "failed to load"),
    ("import sys\nsys.exit(0)\n", "failed to load: called sys.exit(0)"),
    ("def evaluate(path):\n    import sys\n    sys.exit('done')\n", "called sys.exit('done')"),
    ("def evaluate(path):\n    return float('inf')\n", "returned inf, not a finite number"),
    ("def evaluate(path):\n    return True\n", "returned True, not a number"),
])
def test_bad_scripts_are_one_line_and_exit_2(tmp_path, capsys, text, expected):
    script = tmp_path / "score.py"
    if text is not None:
        script.write_text(textwrap.dedent(text))
    code = main(["quantize", str(demo_model_path()), "-o", str(tmp_path / "q.onnx"), "--evaluate", str(script)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0]


def test_target_score_needs_evaluate(tmp_path, capsys):
    assert main(["quantize", str(demo_model_path()), "-o", str(tmp_path / "q.onnx"), "--target-score", "3"]) == 2
    assert "--evaluate" in capsys.readouterr().err


def test_an_evaluate_that_changes_directory_leaves_relative_paths_alone(tmp_path, monkeypatch, capsys):
    """The command's relative ``-o`` and ``--report`` still name the same files after the user's code ``chdir``s."""
    script = tmp_path / "score.py"
    script.write_text("import os\n\ndef evaluate(path):\n    os.chdir(os.path.dirname(path))\n    return 1.0\n")
    (tmp_path / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    assert main(["quantize", str(demo_model_path()), "-o", "out/q.onnx", "--evaluate", "score.py",
                 "--report", "out/r.json"]) == 0
    assert (tmp_path / "out" / "q.onnx").exists() and json.loads((tmp_path / "out" / "r.json").read_text())["score"]


@pytest.mark.parametrize("report", ["model", "output", "missing folder"])
def test_a_report_path_that_would_lose_a_file_is_refused_before_any_work(tmp_path, capsys, report):
    model = tmp_path / "m.onnx"
    model.write_bytes(demo_model_path().read_bytes())
    out = tmp_path / "q.onnx"
    out.write_bytes(b"OLD")
    path = {"model": model, "output": out, "missing folder": tmp_path / "nope" / "r.json"}[report]
    assert main(["quantize", str(model), "-o", str(out), "--report", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and ("does not exist" in err[0] if report == "missing folder" else "--report" in err[0])
    assert out.read_bytes() == b"OLD" and model.read_bytes() == demo_model_path().read_bytes()


@pytest.mark.parametrize(("options", "expected"), [
    (["--target-score", "nan"], "target score must be a finite number, not nan"),
    (["--target-sqnr", "inf"], "target SQNR must be a finite number, not inf"),
    (["--target-score", "-0.05", "--target-sqnr", "60"], "not both"),
])
def test_targets_that_cannot_be_searched_are_one_line(tmp_path, capsys, options, expected):
    script = tmp_path / "score.py"
    script.write_text("def evaluate(path):\n    return 1.0\n")
    code = main(["quantize", str(demo_model_path()), "-o", str(tmp_path / "q.onnx"), "--evaluate", str(script),
                 *options])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and expected in err[0] and not (tmp_path / "q.onnx").exists()


def test_numpy_scores_are_numbers(tmp_path):
    """What a scoring script computes with numpy (a float64, a 0-d array) is a score; only bools and strings are not."""
    script = tmp_path / "score.py"
    script.write_text("import numpy as np\n\ndef evaluate(path):\n    return np.array(np.float32(0.75))\n")
    assert main(["quantize", str(demo_model_path()), "-o", str(tmp_path / "q.onnx"), "--evaluate", str(script)]) == 0


def test_sigterm_during_evaluate_removes_the_candidate_and_writes_nothing(tmp_path):
    """``kill`` while the user's script scores a candidate: one line, exit 143, no temporary folder left and no
    half-done model."""
    import signal
    import subprocess
    import sys
    import time

    marker, out = tmp_path / "candidate.txt", tmp_path / "q.onnx"
    script = tmp_path / "slow.py"
    script.write_text("import pathlib, time\n\ndef evaluate(path):\n"
                      f"    pathlib.Path({str(marker)!r}).write_text(path)\n    time.sleep(120)\n    return 1.0\n")
    process = subprocess.Popen([sys.executable, "-m", "graphlens", "quantize", str(demo_model_path()), "-o", str(out),
                                "--evaluate", str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists() and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
        assert marker.exists(), process.communicate()[1]
        candidate = Path(marker.read_text())
        assert candidate.exists()
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=200)
    finally:
        process.kill()
    assert process.returncode == 143
    assert err.strip().splitlines()[-1] == "graphlens: terminated"
    assert not candidate.parent.exists() and not out.exists()


def test_a_report_naming_an_output_not_yet_written_is_refused(tmp_path, capsys):
    """Neither file exists yet: the model would be written, then replaced by its report."""
    model, out = tmp_path / "m.onnx", tmp_path / "new.onnx"
    model.write_bytes(demo_model_path().read_bytes())
    assert main(["quantize", str(model), "-o", str(out), "--report", str(out)]) == 2
    assert "is the output model (-o)" in capsys.readouterr().err and not out.exists()
