"""Overlays to and from CSV and Model Explorer's node data JSON."""

from __future__ import annotations

import json

import pytest

from graphlens.core.errors import GraphLensError
from graphlens.core.model import load_model
from graphlens.overlays import (
    Overlay,
    attach,
    from_csv,
    from_model_explorer_json,
    load_overlay,
    save_overlay,
    to_csv,
    to_model_explorer_json,
)

VALUES = {"/stem/conv": 1234.5, "/stem/relu": 0.1 + 0.2, "a,name \"quoted\"": 1e-7}


def test_overlay_import_export_round_trip(tmp_path):
    overlay = Overlay("Latency", "µs", VALUES)
    back = from_csv(to_csv(overlay, tmp_path / "latency.csv"))
    assert back.values == VALUES  # exactly: values are written with repr
    assert (back.name, back.unit) == ("Latency", "µs")
    explorer = from_model_explorer_json(to_model_explorer_json(overlay, tmp_path / "latency.json"))
    assert explorer.values == VALUES
    # and through the suffix-driven helpers the window uses
    assert load_overlay(save_overlay(overlay, tmp_path / "x.json")).values == VALUES
    assert load_overlay(save_overlay(overlay, tmp_path / "x.csv")).values == VALUES


def test_model_explorer_json_is_its_node_data_format(tmp_path):
    path = to_model_explorer_json(Overlay("Error", "", {"conv": 0.5, "bn": 2.0}), tmp_path / "nd.json")
    data = json.loads(path.read_text())
    assert data["results"] == {"conv": {"value": 0.5}, "bn": {"value": 2.0}}
    stops = data["gradient"]
    assert stops[0]["stop"] == 0 and stops[-1]["stop"] == 1
    assert all(s["bgColor"].startswith("#") and len(s["bgColor"]) == 7 for s in stops)


def test_model_explorer_per_graph_form_is_read(tmp_path):
    path = tmp_path / "model.json"
    path.write_text(json.dumps({"main": {"results": {"a": {"value": 1}}},
                                "body": {"results": {"b": {"value": 2.5, "bgColor": "red"}}}}))
    assert from_model_explorer_json(path).values == {"a": 1.0, "b": 2.5}


def test_csv_without_a_header_and_with_comments(tmp_path):
    path = tmp_path / "error.csv"
    path.write_text("# per-node error\nconv,0.25\n\nbn,3\n")
    overlay = from_csv(path)
    assert overlay.values == {"conv": 0.25, "bn": 3.0} and overlay.name == "error"


@pytest.mark.parametrize("text, problem", [
    ("node,value\nconv,fast\n", "line 2: 'fast' is not a finite number (node 'conv')"),
    ("conv,1\nconv,2\n", "line 2: node 'conv' is given twice (first on line 1)"),
    ("conv\n", "line 1: expected 'node,value'"),
    ("node,value\n", "no 'node,value' rows"),
    ("node,value\nconv,nan\n", "'nan' is not a finite number"),
])
def test_a_bad_csv_is_one_line_naming_the_file_and_the_problem(tmp_path, text, problem):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    with pytest.raises(GraphLensError) as caught:
        from_csv(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: ") and problem in message and "\n" not in message


@pytest.mark.parametrize("text, problem", [
    ("{not json", "not JSON"),
    ("[1, 2]", "not Model Explorer node data"),
    ('{"results": {"conv": {"value": "slow"}}}', "node 'conv' has no numeric \"value\""),
])
def test_a_bad_model_explorer_file_is_one_line(tmp_path, text, problem):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(GraphLensError, match=problem):
        from_model_explorer_json(path)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(GraphLensError, match="no such file"):
        load_overlay(tmp_path / "nope.csv")


def test_attach_maps_tensor_names_to_their_nodes_and_counts_the_unknown(demo_path):
    model = load_model(demo_path)
    conv = model.graph.by_name["/stem/conv"]
    overlay = attach(Overlay("x", "", {conv.outputs[0]: 5.0, "/stem/relu": 1.0, "ghost": 2.0}), model)
    assert overlay.values == {"/stem/conv": 5.0, "/stem/relu": 1.0}
    assert "1 name matched no node (first: 'ghost')" in overlay.notes
    with pytest.raises(GraphLensError, match="none of its 1 names is a node"):
        attach(Overlay("x", "", {"ghost": 1.0}), model)


def test_the_command_line_names_the_same_metrics_the_overlays_compute():
    from graphlens.cli.common import OVERLAY_METRICS
    from graphlens.overlays import METRICS

    assert tuple(METRICS) == OVERLAY_METRICS
