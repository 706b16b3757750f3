"""The menu bar built from its one table: every entry reaches a public window method, keys do not clash,
and entries are enabled only when they can do something."""

from __future__ import annotations

import pytest
from PySide6.QtWidgets import QMenu

from graphlens.gui.menus import ACTIONS, TOOLBAR, ActionSpec, make_action
from tests import models


def _menu(window, title: str) -> QMenu:
    found = [a.menu() for a in window.menuBar().actions() if a.text() == title]
    assert len(found) == 1, title
    return found[0]


def test_every_entry_of_the_table_is_in_its_menu_and_calls_a_public_method(window):
    specs = [row for row in ACTIONS if isinstance(row, ActionSpec)]
    for spec in specs:
        action = window.actions_by_name[spec.name]
        assert getattr(window, f"act_{spec.name}") is action
        assert not spec.method.startswith("_") and callable(getattr(type(window), spec.method))
        assert action in _menu(window, spec.menu).actions(), spec.name
    assert {n for n in TOOLBAR if n} <= set(window.actions_by_name)
    file_menu = [a.text() for a in _menu(window, "&File").actions() if not a.isSeparator()]
    assert file_menu[:3] == ["&Open…", "Open &Recent", "Co&mpare with…"] and file_menu[-1] == "&Quit"
    titles = [a.text() for a in window.menuBar().actions()]
    assert titles[0] == "&File" and titles[-1] == "&Help" and "&Patterns" in titles


def test_no_two_actions_of_the_window_share_a_key(window):
    keys = [k.toString() for a in window.actions() for k in a.shortcuts()]
    assert len(keys) > 30 and len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_entries_are_enabled_only_when_they_can_act(window, write_model):
    needs_model = ("save", "save_as", "export", "export_visible")
    assert not any(window.actions_by_name[n].isEnabled() for n in (*needs_model, "undo", "redo", "back"))
    window.open_model(write_model(models.if_with_conv_bn(), "branchy.onnx"))
    assert all(window.actions_by_name[n].isEnabled() for n in needs_model)
    assert not window.act_back.isEnabled() and not window.act_undo.isEnabled()
    window.panel.enter(window.model.graph.node("branch"), "then_branch")
    assert window.act_back.isEnabled()
    window.act_back.trigger()
    assert window.current_graph() is window.model.graph and not window.act_back.isEnabled()


def test_a_checkbox_entry_passes_its_state_to_the_window(window, demo_path):
    window.open_model(demo_path)
    assert window.act_legend.isChecked() and window.canvas.show_legend
    window.act_legend.trigger()
    assert not window.canvas.show_legend
    window.act_minimap.setChecked(False)
    assert not window.canvas.show_minimap
    before = window.canvas.scale
    window.act_zoom_out.trigger()
    assert window.canvas.scale < before


def test_an_entry_may_not_call_a_private_method(window):
    with pytest.raises(ValueError, match="not public"):
        make_action(window, ActionSpec(name="x", text="X", method="_on_saved", menu="&File"))


def test_the_right_click_menu_of_a_node_with_a_subgraph_opens_it(window, write_model):
    window.open_model(write_model(models.if_with_conv_bn(), "branchy.onnx"))
    offered = dict(window.context_actions(window.panel.item_of("branch")))
    assert not any(label.startswith("Why doesn't") for label in offered)  # no pattern has an If node
    offered["Open then_branch"]()
    assert window.current_graph().path == "main/branch:then_branch"
