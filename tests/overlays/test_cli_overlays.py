"""graphlens profile and graphlens overlay."""

from __future__ import annotations

from graphlens.cli import main
from graphlens.overlays import from_csv, from_model_explorer_json


def test_profile_prints_the_slowest_nodes_and_writes_both_formats(demo_path, tmp_path, capsys):
    code = main(["profile", str(demo_path), "--runs", "2", "--top", "3",
                 "--csv", str(tmp_path / "lat.csv"), "--json", str(tmp_path / "lat.json")])
    out = capsys.readouterr().out
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("Latency (µs): ")
    assert sum(1 for line in lines if line.lstrip()[:2] in ("1.", "2.", "3.")) == 3
    assert "graph optimizations off" in out
    assert from_csv(tmp_path / "lat.csv").values == from_model_explorer_json(tmp_path / "lat.json").values


def test_overlay_metric_and_conversion_of_a_file(demo_path, tmp_path, capsys):
    assert main(["overlay", str(demo_path), "--metric", "flops", "--top", "0", "--csv", str(tmp_path / "f.csv")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Compute (FLOPs): 31 nodes") and "/stem/conv" in out
    assert main(["overlay", str(demo_path), "--from", str(tmp_path / "f.csv"), "--json", str(tmp_path / "f.json")]) == 0
    assert from_model_explorer_json(tmp_path / "f.json").values == from_csv(tmp_path / "f.csv").values


def test_a_bad_file_is_one_line_and_exit_2(demo_path, tmp_path, capsys):
    bad = tmp_path / "bad.csv"
    bad.write_text("node,value\n/stem/conv,slow\n")
    assert main(["overlay", str(demo_path), "--from", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"graphlens: {bad}: line 2: 'slow' is not a finite number (node '/stem/conv')"
    assert main(["profile", str(demo_path), "--runs", "0"]) == 2


def test_dims_are_read_one_way_by_every_command_and_a_dim_the_model_lacks_is_refused(demo_path, capsys):
    for command in (["overlay", str(demo_path), "--metric", "bytes"], ["profile", str(demo_path), "--runs", "1"],
                    ["compare", str(demo_path), str(demo_path)]):
        assert main([*command, "--dim", "batch=2"]) == 2, command
        assert "dimension 'batch' is not a dynamic dimension" in capsys.readouterr().err
        assert main([*command, "--dim", "batch"]) == 2, command
        assert "--dim 'batch': expected NAME=VALUE" in capsys.readouterr().err
