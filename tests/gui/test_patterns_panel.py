"""The Patterns panel on its own (offscreen): library, live errors, files, Run, and the sketch editor."""

from __future__ import annotations

import html
import json

import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QTextCharFormat
from PySide6.QtWidgets import QComboBox, QVBoxLayout, QWidget

from graphlens.core.model import load_model
from graphlens.gui.patterns_panel import DESCRIPTION_ROLE, NAME_ROLE, PatternsPanel
from graphlens.matching.matcher import find_matches
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import BUILTIN_ORDER, builtin_text, library
from graphlens.patterns.syntax import parse_pattern

STEM = ["/stem/conv", "/stem/bn", "/stem/relu"]


@pytest.fixture
def panel(qtbot) -> PatternsPanel:
    widget = PatternsPanel()
    qtbot.addWidget(widget)
    widget.resize(320, 800)
    widget.show()
    return widget


@pytest.fixture
def demo(demo_path):
    return load_model(demo_path)


def wavy_marks(panel: PatternsPanel) -> list:
    return [s for s in panel.editor.extraSelections()
            if s.format.underlineStyle() == QTextCharFormat.UnderlineStyle.WaveUnderline]


def node_row(panel: PatternsPanel, label: str) -> int:
    table = panel.sketch_nodes_table
    return next(r for r in range(table.rowCount()) if table.item(r, 0).text() == label)


def kind_combo(panel: PatternsPanel, label: str) -> QComboBox:
    table = panel.sketch_values_table
    row = next(r for r in range(table.rowCount()) if table.item(r, 0).text() == label)
    combo = table.cellWidget(row, 2)
    assert isinstance(combo, QComboBox)
    return combo


def test_library_lists_every_builtin_with_its_description(panel):
    items = [panel.library_list.item(k) for k in range(panel.library_list.count())]
    assert [i.data(NAME_ROLE) for i in items] == list(library()) and len(items) == len(library())
    assert [i.data(NAME_ROLE) for i in items][:10] == list(BUILTIN_ORDER[:10])
    for item in items:
        description = library()[item.data(NAME_ROLE)].description
        assert description and item.data(DESCRIPTION_ROLE) == description and html.escape(description) in item.toolTip()


def test_choosing_a_builtin_loads_its_text_and_it_parses(panel):
    with_signal = []
    panel.pattern_changed.connect(with_signal.append)
    panel.library_list.setCurrentRow(list(BUILTIN_ORDER).index("silu"))
    assert panel.editor.toPlainText() == builtin_text("silu")
    pattern = panel.pattern()
    assert isinstance(pattern, Pattern) and pattern.name == "silu"
    assert panel.error_label.text() == "" and panel.editor.extraSelections() == []
    assert isinstance(with_signal[-1], Pattern)


def test_a_broken_line_is_reported_and_marked_then_cleared_when_fixed(panel, qtbot):
    good = "a = Relu(x)\nb = Sigmoid(a)\nc = Mul(a, b)\n"
    panel.set_text(good)
    changes = []
    panel.pattern_changed.connect(changes.append)
    panel.editor.selectAll()
    panel.editor.insertPlainText("a = Relu(x)\nb = Sigmoid(a)\nc = Mul(a, b,, )\n")  # typed: checked after a pause
    assert panel.error_label.text() == ""
    qtbot.waitUntil(lambda: panel.error_label.text() != "", timeout=2000)
    assert panel.error_label.text() == ("line 3, column 14: "
                                        "expected an input: a label, a new value or '...' but found ','")
    assert changes[-1] is None and panel.pattern() is None
    (mark,) = wavy_marks(panel)
    block = panel.editor.document().findBlockByNumber(2)
    assert mark.cursor.blockNumber() == 2
    assert mark.cursor.selectionStart() - block.position() == 13 and mark.cursor.selectedText() == ","
    tinted = [s for s in panel.editor.extraSelections() if s not in (mark,)]
    assert tinted and tinted[0].cursor.blockNumber() == 2 and tinted[0].format.background().color().alpha() > 0
    panel.editor.selectAll()
    panel.editor.insertPlainText(good)
    panel.check_now()
    assert panel.error_label.text() == "" and wavy_marks(panel) == [] and panel.editor.extraSelections() == []
    assert isinstance(changes[-1], Pattern)


def test_an_error_at_the_end_of_a_line_still_gets_a_mark(panel):
    panel.set_text("a = Relu(x\n")
    assert panel.error_label.text().startswith("line 1, column 11: expected")
    (mark,) = wavy_marks(panel)
    assert mark.cursor.blockNumber() == 0 and mark.cursor.selectedText() == "x"


def test_run_emits_the_parsed_pattern(panel, qtbot):
    panel.library_list.setCurrentRow(0)
    with qtbot.waitSignal(panel.run_requested, timeout=1000) as blocker:
        panel.run()
    assert isinstance(blocker.args[0], Pattern) and blocker.args[0].name == "conv-bn"


def test_a_library_name_typed_alone_runs_that_pattern(panel, qtbot):
    """As the command line and scripts take it; it used to read "line 1, column 5: unexpected character '-'"."""
    panel.set_text("gemm-bn")
    with qtbot.waitSignal(panel.run_requested, timeout=1000) as blocker:
        panel.run()
    assert blocker.args[0].name == "gemm-bn" and not panel.error_label.isVisible()
    assert "Gemm" in panel.editor.toPlainText()


def test_run_on_broken_text_emits_nothing_and_keeps_the_error(panel, qtbot):
    panel.set_text("a = Relu(x))\n")
    with qtbot.assertNotEmitted(panel.run_requested):
        panel.run()
    assert panel.error_label.text().startswith("line 1, column 12:")
    assert panel.editor.textCursor().position() == 11  # the cursor goes to the error


def test_ctrl_m_in_the_editor_runs_once_even_when_the_window_binds_it_too(qtbot):
    window = QWidget()
    qtbot.addWidget(window)
    panel = PatternsPanel()
    QVBoxLayout(window).addWidget(panel)
    window_runs = QAction("Run", window, shortcut=QKeySequence("Ctrl+M"))
    window_runs.triggered.connect(panel.run)
    window.addAction(window_runs)
    window.show()
    window.activateWindow()
    qtbot.waitExposed(window)
    panel.set_text("a = Relu(x)\n")
    panel.editor.setFocus()
    runs = []
    panel.run_requested.connect(runs.append)
    qtbot.keyClick(panel.editor, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert len(runs) == 1 and panel.editor.toPlainText() == "a = Relu(x)\n"


@pytest.mark.parametrize("suffix", [".pattern", ".json"])
def test_open_and_save_round_trip(panel, tmp_path, suffix):
    panel.library_list.setCurrentRow(0)
    original = panel.editor.toPlainText()
    target = tmp_path / f"mine{suffix}"
    panel.save_file(target)
    assert panel.error_label.text() == ""
    if suffix == ".pattern":
        assert target.read_text(encoding="utf-8") == original  # verbatim, comments and layout kept
    else:
        assert json.loads(target.read_text(encoding="utf-8"))["format"] == "graphlens-pattern"
    panel.set_text("")
    panel.open_file(target)
    assert panel.error_label.text() == "" and panel.pattern() is not None
    if suffix == ".pattern":
        assert panel.editor.toPlainText() == original
    reopened, builtin = panel.pattern(), library()["conv-bn"]
    assert reopened.name == "conv-bn" and reopened.labels() == builtin.labels()


def test_file_errors_go_to_the_error_label(panel, tmp_path):
    panel.open_file(tmp_path / "missing.pattern")
    assert panel.error_label.text().startswith("cannot open missing.pattern")
    (tmp_path / "bad.json").write_text("{not json", encoding="utf-8")
    panel.open_file(tmp_path / "bad.json")
    assert "pattern JSON does not parse" in panel.error_label.text()
    panel.set_text("a = Relu(\n")
    panel.save_file(tmp_path / "broken.json")
    assert "does not parse" in panel.error_label.text() and not (tmp_path / "broken.json").exists()
    panel.save_file(tmp_path / "no-such-dir" / "x.pattern")
    assert panel.error_label.text().startswith("cannot save x.pattern")


def test_start_sketch_fills_both_tables_and_the_editor(panel, demo):
    assert not panel.sketch_box.isVisible()
    panel.start_sketch(demo.graph, STEM)
    assert panel.sketch_box.isVisible()
    nodes = panel.sketch_nodes_table
    assert [(nodes.item(r, 0).text(), nodes.item(r, 1).text()) for r in range(nodes.rowCount())] == [
        ("conv", "Conv"), ("bn", "BatchNormalization"), ("relu", "Relu"),
    ]
    first_optional = nodes.item(0, 2)
    assert not first_optional.flags() & Qt.ItemFlag.ItemIsUserCheckable  # nothing could stand in for the first node
    values = panel.sketch_values_table
    rows = [(values.item(r, 0).text(), values.item(r, 1).text(),
             kind_combo(panel, values.item(r, 0).text()).currentText()) for r in range(values.rowCount())]
    assert rows[0] == ("image", "image", "wildcard") and ("weight", "stem.conv.weight", "constant") in rows
    assert len(rows) == 7
    text = panel.editor.toPlainText()
    assert "conv = Conv(image, weight: const float32" in text and "relu = Relu(bn)" in text
    assert panel.error_label.text() == ""


def test_sketch_options_regenerate_the_text_and_still_find_the_origin(panel, demo):
    panel.start_sketch(demo.graph, STEM)
    kind_combo(panel, "weight").setCurrentText("wildcard")
    assert "conv = Conv(image, weight, bias: const float32)" in panel.editor.toPlainText()
    panel.sketch_nodes_table.item(node_row(panel, "conv"), 1).setText("Conv|ConvTranspose")
    assert "conv = Conv|ConvTranspose(image, weight," in panel.editor.toPlainText()
    panel.sketch_nodes_table.item(node_row(panel, "bn"), 2).setCheckState(Qt.CheckState.Checked)
    text = panel.editor.toPlainText()
    assert "bn? = BatchNormalization(conv," in text
    pattern = panel.pattern()
    assert pattern is not None and parse_pattern(text).labels() == pattern.labels()
    matches = find_matches(pattern, demo)
    assert any(m.nodes["conv"] == "/stem/conv" and m.nodes.get("bn") == "/stem/bn" for m in matches)


def test_a_non_constant_boundary_value_cannot_be_made_constant(panel, demo):
    panel.start_sketch(demo.graph, STEM)
    combo = kind_combo(panel, "image")
    assert not combo.model().item(1).isEnabled()


def test_an_impossible_op_shows_the_reason_and_keeps_the_last_text(panel, demo):
    panel.start_sketch(demo.graph, STEM)
    before = panel.editor.toPlainText()
    panel.sketch_nodes_table.item(node_row(panel, "relu"), 1).setText("Relu@x")
    assert "'Relu@x' is not an op type name" in panel.error_label.text()
    assert panel.editor.toPlainText() == before


def test_a_disconnected_selection_is_reported_not_raised(panel, demo):
    panel.start_sketch(demo.graph, ["/stem/conv", "/head/fc"])
    assert "separate groups" in panel.error_label.text() and not panel.sketch_box.isVisible()


def test_choosing_a_builtin_closes_the_sketch(panel, demo):
    panel.start_sketch(demo.graph, STEM)
    panel.library_list.setCurrentRow(1)
    assert not panel.sketch_box.isVisible() and panel.editor.toPlainText() == builtin_text("gemm-bn")


def test_ctrl_m_runs_from_anywhere_in_a_standalone_panel(panel, qtbot):
    panel.set_text("a = Relu(x)\n")
    runs = []
    panel.run_requested.connect(runs.append)
    for widget in (panel.editor, panel.library_list):
        qtbot.keyClick(widget, Qt.Key.Key_M, Qt.KeyboardModifier.ControlModifier)
    assert len(runs) == 2
