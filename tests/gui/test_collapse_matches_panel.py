"""The Matches panel's "Collapse matches" button: every match one box on the canvas, and back."""

from __future__ import annotations

import pytest


@pytest.fixture
def demo_window(window, demo_path):
    assert window.open_model(demo_path)
    return window


def _match_boxes(window):
    return [item for item in window.panel.view.items if item.key.startswith("match:")]


def test_collapse_matches_toggles_one_box_per_match(demo_window, qtbot):
    w = demo_window
    button = w.matches_panel.collapse_button
    assert button.isCheckable() and not button.isEnabled()  # nothing to collapse before a run
    found = w.workspace.matches.find("conv-bn").matches
    assert button.isEnabled() and not button.isChecked()
    button.setChecked(True)
    qtbot.waitUntil(lambda: len(_match_boxes(w)) == len(found))
    boxes = _match_boxes(w)
    assert {b.title for b in boxes} == {"conv-bn"}
    assert sorted(n for b in boxes for n in b.members) == sorted(n for m in found for n in m.nodes.values())
    assert all(w.panel.item_of(n) == w.panel.view.index[boxes[0].key] for n in boxes[0].members)
    assert {w.panel.view.items[i].key for i in w.canvas.marks.tints} >= {b.key for b in boxes}  # still tinted

    w.panel.activate(w.panel.view.index[boxes[0].key])  # a double-click opens one match
    qtbot.waitUntil(lambda: len(_match_boxes(w)) == len(found) - 1)
    assert all(w.panel.view.items[w.panel.item_of(n)].kind == "node" for n in boxes[0].members)

    button.setChecked(False)
    qtbot.waitUntil(lambda: not _match_boxes(w))
    assert "/stem/conv" in w.panel.view.node_item and w.panel.view.items[w.panel.item_of("/stem/conv")].kind == "node"


def test_a_new_pattern_run_draws_its_matches_node_by_node(demo_window, qtbot):
    w = demo_window
    w.workspace.matches.find("conv-bn")
    w.matches_panel.collapse_button.setChecked(True)
    qtbot.waitUntil(lambda: bool(_match_boxes(w)))
    w.workspace.matches.find("conv-bn")
    qtbot.waitUntil(lambda: not _match_boxes(w))
    assert not w.matches_panel.collapse_button.isChecked()
    assert w.panel.collapsed_matches == {}
