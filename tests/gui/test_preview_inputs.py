"""The rewrite preview on a model with dynamic dims: a verdict, the dims it used, and the Inputs… dialog."""

from __future__ import annotations

import numpy as np
import pytest

from tests.numerics import dynamic_models as dm


@pytest.fixture
def fpn_window(window, write_model):
    assert window.open_model(write_model(dm.fpn(levels=6), "fpn.onnx"))  # runs only at multiples of 64
    return window


def _wait_for_inputs_line(qtbot, w, line: str) -> None:
    """The preview runs again in a worker; wait until the panel shows its result."""
    qtbot.waitUntil(lambda: w.preview_panel.inputs_label.text() == line, timeout=20_000)


def test_preview_gives_a_verdict_and_shows_the_dims_it_chose(fpn_window):
    w = fpn_window
    result = w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    assert result["numeric"]["available"] and result["numeric"]["passed"]
    line = "inputs: random (seed 0); dims N=1 H=64 W=64 (chosen automatically, 2 tries)"
    assert result["inputs"] == line and w.preview_panel.inputs_label.text() == line
    assert w.preview_panel.badge.text() == "PASS"
    again = w.workspace.rewrite.preview("fold-bn", 0).to_dict()  # the working sizes are remembered: no second search
    assert again["numeric"]["inputs"]["dims"]["remembered"] and again["numeric"]["inputs"]["dims"]["tries"] == 1


def test_the_inputs_dialog_sets_dims_and_the_preview_runs_again(fpn_window, qtbot):
    w = fpn_window
    w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    w.preview_panel.inputs_button.click()
    dialog = w.inputs_dialog
    assert {k: s.value() for k, s in dialog.spins.items()} == {"N": 1, "H": 64, "W": 64}
    assert dialog.notes["H"].text() == "x[2], chosen automatically"
    dialog.spins["H"].setValue(128)
    assert dialog.notes["H"].text() == "x[2], set by you" and dialog.notes["W"].text() == "x[3], chosen automatically"
    dialog.accept()
    _wait_for_inputs_line(qtbot, w,
                          "inputs: random (seed 0); dims N=1 H=128 W=64 (N, W chosen automatically, remembered)")
    assert w.preview_panel.badge.text() == "PASS"
    assert w.preview_settings().dims == {"H": 128}


def test_the_inputs_dialog_loads_an_npz_and_keeps_the_old_choice_on_a_bad_one(fpn_window, qtbot, tmp_path):
    w = fpn_window
    w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    dialog = w.edit_preview_inputs()
    bad = tmp_path / "bad.npz"
    np.savez(bad, picture=np.zeros((1, 3, 64, 64), np.float32))
    assert not dialog.load_file(str(bad))
    assert dialog.error.startswith(f"{bad}: has an array for unknown input 'picture'") and "\n" not in dialog.error
    assert dialog.file is None and dialog.source.text() == "Random inputs (seed 0)."
    good = tmp_path / "in.npz"
    np.savez(good, x=np.ones((2, 3, 128, 64), np.float32))
    assert dialog.load_file(str(good))
    assert not dialog.spins["H"].isEnabled() and "[2, 3, 128, 64]" in dialog.source.text()
    dialog.accept()
    _wait_for_inputs_line(qtbot, w, f"inputs: from {good}; dims N=2 H=128 W=64")
    assert w.preview_panel.badge.text() == "PASS"


def test_scripts_set_preview_inputs_and_bad_ones_are_one_line(fpn_window):
    w = fpn_window
    w.workspace.rewrite.preview("fold-bn", 0).to_dict()
    assert not w.set_preview_inputs(dims={"height": 64})
    assert w.last_error.startswith("dimension 'height' is not a dynamic dimension") and w.preview_settings().dims == {}
    assert w.set_preview_inputs(dims={"W": 48})  # no H makes W = 48 run: no verdict, and the reason says why
    numeric = w.pending.to_dict()["numeric"]
    assert not numeric["available"] and "no size tried runs" in numeric["reason"] and "W=48" in numeric["reason"]
    assert w.preview_panel.badge.text() == "no numeric check"
    assert w.set_preview_inputs(dims={})
    assert w.pending.to_dict()["numeric"]["passed"]


def test_the_inputs_dialog_computes_an_expression_dim_from_its_parts(window, write_model):
    """A KV-cache decoder: the past length starts short and the mask's ``s16 + s62`` follows its parts."""
    from graphlens.gui.preview_inputs import PreviewInputsDialog, dim_rows
    from graphlens.workspace.results import PreviewInputs
    from tests.numerics.test_dims_expressions import cached_decoder

    assert window.open_model(write_model(cached_decoder(), "decoder.onnx"))
    rows = {row.label: row for row in dim_rows(window.workspace)}
    assert rows["s62"].value == 4 and rows["s34"].value == 1
    assert rows["s16 + s62"].computed and rows["s16 + s62"].value == rows["s16"].value + 4
    dialog = PreviewInputsDialog(list(rows.values()), PreviewInputs(), lambda path: {})
    assert dialog.notes["s16 + s62"].text().endswith("computed from its parts")
