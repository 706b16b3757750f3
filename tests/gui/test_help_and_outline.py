"""Help › Keyboard Shortcuts lists every shortcut in two aligned columns; the Outline's rows keep long scoped names
readable (cut in the middle, the whole name in the row's tooltip)."""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper
from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QTableWidget

LONG_NAMES = ["/model/encoder/layers.11/self_attention_output/dense/Relu",
              "/model/decoder/layers.3/cross_attention/out_proj/Relu_2", "/short/relu"]


def _rows(table: QTableWidget) -> list[tuple[str, str]]:
    return [(table.item(r, 0).text(), table.item(r, 1).text()) for r in range(table.rowCount())]


def test_the_shortcuts_are_a_two_column_table_of_every_action_and_mouse_gesture(window, qtbot):
    window.show_shortcuts()
    dialog = window.shortcuts_dialog
    qtbot.waitExposed(dialog)
    table = dialog.findChild(QTableWidget)
    assert table.columnCount() == 2
    assert [table.horizontalHeaderItem(c).text() for c in range(2)] == ["Action", "Shortcut"]
    rows = _rows(table)
    assert ("Keyboard Shortcuts", "F1") in rows and ("Zoom at the cursor", "Ctrl+wheel") in rows
    listed = {keys for _, keys in rows}
    for action in window.actions():
        if not action.shortcut().isEmpty():
            shown = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
            assert any(shown in keys for keys in listed), action.text()
    lefts = {table.visualItemRect(table.item(r, 1)).left() for r in range(table.rowCount())}
    assert len(lefts) == 1  # every key starts at the same place, whatever the length of its action's name
    widest = max(table.fontMetrics().horizontalAdvance(name) for name, _ in rows)
    assert table.columnWidth(0) >= widest  # no action name cut
    assert not dialog.isModal()  # it can stay open beside the window
    window.show_shortcuts()  # F1 again: one list, not two
    qtbot.waitUntil(lambda: not dialog.isVisible())
    assert window.shortcuts_dialog is not dialog and window.shortcuts_dialog.isVisible()


def _long_names_model(path) -> None:
    nodes, previous = [], "x"
    for i, name in enumerate(LONG_NAMES):
        nodes.append(helper.make_node("Relu", [previous], [f"t{i}"], name=name))
        previous = f"t{i}"
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info(previous, TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


def test_outline_rows_cut_long_names_in_the_middle_and_show_them_whole_in_a_tooltip(window, qtbot, tmp_path):
    _long_names_model(tmp_path / "long.onnx")
    assert window.open_model(tmp_path / "long.onnx")
    outline = window.outline
    window.search()
    outline.field.setText("Relu")
    results = outline.results
    assert results.count() == len(LONG_NAMES)
    for row, name in enumerate(LONG_NAMES):
        tip = results.item(row).toolTip()
        assert name in tip and "Relu" in tip
    qtbot.waitUntil(lambda: results.viewport().width() > 0)
    long_row = results.visualItemRect(results.item(0))
    assert results.fontMetrics().horizontalAdvance(results.item(0).text()) > results.viewport().width()
    assert long_row.width() <= results.viewport().width()  # as wide as the list: the text is elided, not scrolled
    assert results.horizontalScrollBar().maximum() == 0
    assert results.textElideMode() == Qt.TextElideMode.ElideMiddle  # the op type and the name's last parts show
