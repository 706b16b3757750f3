"""The window on broken and hostile files: one-line dialogs that keep the model, names shown as text."""

from __future__ import annotations

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QLabel

from tests import hostile_models as hm


def flat(text: str) -> str:
    """Whitespace as HTML shows it: a name's newline reads as a space."""
    return " ".join(text.split())


def rendered(rich: str) -> str:
    """What a user reads in a rich-text label or text browser."""
    document = QTextDocument()
    document.setHtml(rich)
    return document.toPlainText()


@pytest.mark.parametrize("case", hm.REFUSED, ids=lambda c: c.name)
def test_a_refused_file_shows_one_line_and_keeps_the_model(window, demo_path, tmp_path, case):
    assert window.open_model(demo_path)
    before = window.model
    path = case.write(tmp_path)
    assert not window.open_model(path)
    assert window.model is before and window.windowTitle().startswith("demo.onnx")
    box = window.error_box
    assert box.isVisible() and box.textFormat() == Qt.TextFormat.PlainText
    lines = box.text().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"{path}: ")
    box.close()


@pytest.mark.parametrize("case", hm.LOADED, ids=lambda c: c.name)
def test_a_hostile_but_valid_file_opens_and_every_node_can_be_inspected(window, tmp_path, case, qtbot):
    path = case.write(tmp_path)
    assert window.open_model(path), window.last_error
    qtbot.waitUntil(lambda: window.panel.view is not None, timeout=60000)  # large graphs lay out in the background
    assert len(window.panel.view.items) >= 2 and window.last_error is None
    graph = window.current_graph()
    for node in graph.nodes[:30]:
        window.inspector.show_node(graph, node)
        assert flat(node.name) in flat(window.inspector.text.toPlainText())
        for tensor in node.inputs[:3]:
            if tensor:
                window.inspector.show_tensor(graph, tensor)


def test_nested_ifs_can_be_entered_25_levels_down(window, tmp_path):
    assert window.open_model(hm.BY_NAME["nested-if"].write(tmp_path))
    for level in range(hm.IF_DEPTH, 0, -1):
        window.panel.enter(window.current_graph().node(f"if_{level}"), "then_branch")
    graph = window.current_graph()
    assert graph.depth == hm.IF_DEPTH and "deep_bn" in graph.by_name
    assert window.status_graph.text() == graph.path


def test_markup_in_names_is_shown_as_text_everywhere(window, tmp_path):
    assert window.open_model(hm.BY_NAME["names"].write(tmp_path))
    graph = window.current_graph()
    for name in hm.HOSTILE_NAMES:
        window.inspector.show_node(graph, graph.node(name))
        assert flat(name) in flat(window.inspector.text.toPlainText())
    window.outline.field.setText("<img")
    window.outline.run()
    listed = [window.outline.results.item(k).text() for k in range(window.outline.results.count())]
    assert "Relu   <img src=x onerror=alert(1)>" in listed  # list items are never rich text
    result = window.workspace.matches.explain("conv-bn", at="<b>bold</b>").to_dict()
    sentence = window.why_panel.sentence
    assert "<b>bold</b>" in rendered(sentence.text()) and result["message"] in rendered(sentence.text())
    assert "<b>bold</b>" in window.why_panel.details.toPlainText().splitlines()
    plain_labels = [window.status_graph, window.status_nodes, window.inspector.stats]
    assert all(label.textFormat() == Qt.TextFormat.PlainText for label in plain_labels)
    for label in window.findChildren(QLabel):  # nothing on screen renders a name as markup
        if label.textFormat() != Qt.TextFormat.PlainText and label.text():
            assert "<img" not in label.text() and "<b>bold" not in label.text(), label.text()


def test_a_huge_constant_shows_its_shape_and_why_it_has_no_value(window, tmp_path):
    assert window.open_model(hm.BY_NAME["huge-constant-of-shape"].write(tmp_path))
    graph = window.current_graph()
    window.inspector.show_tensor(graph, "bn_scale")
    text = window.inspector.text.toPlainText()
    assert "too large to evaluate" in text
    result = window.workspace.matches.explain("conv-bn", at="bn").to_dict()
    assert "too large to evaluate" in result["message"]
