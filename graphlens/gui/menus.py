"""The window's actions, menus, toolbar and right-click menu: what the user can ask for, and its keys."""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenu, QMessageBox

from graphlens.layout.view import collapse_target

if TYPE_CHECKING:
    from graphlens.gui.main_window import MainWindow


def build_window_actions(window: MainWindow) -> None:
    """Every menu action (with its shortcut), the menus and the toolbar."""
    K, S = QKeySequence, QKeySequence.StandardKey
    window.act_open = window._action("&Open…", window._ask_open, K(S.Open), tip="Open an ONNX model")
    window.act_save = window._action("&Save", window.save, K(S.Save))
    window.act_save_as = window._action("Save &As…", window._ask_save_as, K("Ctrl+Shift+S"))
    window.act_export = window._action("&Export Image…", window._ask_export, K("Ctrl+E"))
    window.act_export_visible = window._action("Export &Visible Area as Image…", lambda: window._ask_export(True),
                                               K("Ctrl+Alt+E"), tip="the part of the graph the canvas shows, at full size")
    window.act_quit = window._action("&Quit", window.close, K(S.Quit))
    window.act_compare = window._action("Co&mpare with…", window.comparer.ask, K("Ctrl+Shift+D"),
                                        tip="Show another model beside this one, node by node: what changed, was added or removed")
    window.act_undo = window._action("&Undo", window.undo, K("Ctrl+Z"))
    window.act_redo = window._action("&Redo", window.redo, [K("Ctrl+Shift+Z"), K("Ctrl+Y")])
    window.act_find = window._action("&Find…", window.outline.focus_search, K(S.Find))
    window.act_next = window._action("Find &Next", window.outline.next, K("F3"))
    window.act_prev = window._action("Find &Previous", window.outline.previous, K("Shift+F3"))
    window.act_fit = window._action("&Fit to Window", window.canvas.fit, K("F"))
    window.act_zoom_in = window._action("Zoom &In", lambda: window.canvas.zoom(1.25), [K("Ctrl+="), K("Ctrl++")])
    window.act_zoom_out = window._action("Zoom &Out", lambda: window.canvas.zoom(0.8), K("Ctrl+-"))
    window.act_constants = window._action("Show &Constant Nodes", window.panel.set_show_constants, K("Ctrl+K"), checkable=True)
    window.act_shape_ops = window._action("Show Shape &Arithmetic", window.panel.set_show_shape_ops, K("Ctrl+Shift+K"),
                                          checkable=True, tip="Draw the nodes that compute shapes (Shape → Gather → "
                                                              "Concat → Reshape) as boxes, not as a line in the box using them")
    window.act_expand = window._action("&Expand All Groups", lambda: window.panel.set_expand_all(True), K("Ctrl+Shift+E"))
    window.act_collapse = window._action("&Collapse Groups", lambda: window.panel.set_expand_all(False), K("Ctrl+Shift+C"))
    window.act_back = window._action("&Back to Parent Graph", window.panel.leave, [K("Alt+Left"), K("Backspace")])
    window.act_relayout = window._action("&Relayout", lambda: window.panel.relayout(keep_view=True), K("Ctrl+R"))
    window.act_shapes = window._action("Show Tensor &Shapes on Edges", window._toggle_shapes, K("Ctrl+L"), checkable=True)
    window.act_legend = window._action("Show &Legend", window._toggle_legend, checkable=True, checked=True)
    window.act_minimap = window._action("Show &Minimap", window._toggle_minimap, checkable=True, checked=True)
    window.act_about = window._action("&About GraphLens", lambda: show_about(window))
    window.act_keys = window._action("&Keyboard Shortcuts", lambda: show_shortcuts(window), K("F1"))

    menu = window.menuBar()
    file_menu = menu.addMenu("&File")
    file_menu.addAction(window.act_open)
    window.recent_menu = file_menu.addMenu("Open &Recent")
    file_menu.addSeparator()
    for a in (window.act_compare, *window.comparer.actions()):
        file_menu.addAction(a)
    file_menu.addSeparator()
    for a in (window.act_save, window.act_save_as, window.act_export, window.act_export_visible):
        file_menu.addAction(a)
    file_menu.addSeparator()
    file_menu.addAction(window.act_quit)
    edit = menu.addMenu("&Edit")
    for a in (window.act_undo, window.act_redo, None, window.act_find, window.act_next, window.act_prev):
        edit.addSeparator() if a is None else edit.addAction(a)
    view = menu.addMenu("&View")
    for a in (window.act_fit, window.act_zoom_in, window.act_zoom_out, None, window.act_constants, window.act_shape_ops,
              window.act_expand,
              window.act_collapse, window.act_back, window.act_relayout, None, window.act_shapes, window.act_legend,
              window.act_minimap):
        view.addSeparator() if a is None else view.addAction(a)
    overlay_menu = view.addMenu("O&verlay")  # colour nodes by a number per node; see gui/overlay_panel.py
    for a in window.overlay_panel.menu_actions():
        overlay_menu.addSeparator() if a is None else overlay_menu.addAction(a)
    window.docks_menu = view.addMenu("&Panels")
    for dock in window.findChildren(QDockWidget):
        window.docks_menu.addAction(dock.toggleViewAction())
    help_menu = menu.addMenu("&Help")
    help_menu.addAction(window.act_keys)
    help_menu.addAction(window.act_about)
    toolbar = window.addToolBar("Main")
    toolbar.setObjectName("MainToolbar")
    for a in (window.act_open, window.act_save, None, window.act_undo, window.act_redo, None, window.act_fit,
              window.act_zoom_in, window.act_zoom_out, window.act_back, None, window.act_find):
        toolbar.addSeparator() if a is None else toolbar.addAction(a)
    window._refresh_recent()


def context_actions(window: MainWindow, index: int | None) -> list[tuple[str, object]]:
    """What right-clicking item ``index`` offers, as (label, callback); the menu shows these."""
    view, graph = window.panel.view, window.panel.graph
    actions: list[tuple[str, object]] = []
    if view is None or graph is None:
        return []
    if index is None:
        pattern = window.current_pattern()
        return [(f"Where does {pattern.name} almost match? (near misses)", lambda: window.explain(pattern)),
                ("Fit to Window", window.canvas.fit)]
    item = view.items[index]
    if item.kind == "group":
        prefix = item.key.removeprefix("group:")
        actions.append((f"Expand '{prefix}'", lambda: window.panel.toggle_group(prefix)))
    if item.kind == "node" and item.has_subgraph and item.node is not None:
        node = graph.by_name[item.node]
        for attr, bodies in node.subgraphs.items():
            for k in range(len(bodies)):
                label = attr if len(bodies) == 1 else f"{attr}[{k}]"
                actions.append((f"Open {label}", lambda a=attr, i=k: window.panel.enter(node, a, i)))
    target = collapse_target(view, index)
    if target is not None:
        actions.append((f"Collapse '{target}'", lambda: window.panel.toggle_group(target)))
    if item.kind == "node" and item.node is not None:
        pattern = window.current_pattern()
        node = item.node
        actions.insert(0, (f"Why doesn't {pattern.name} match here?", lambda: window.explain(pattern, at=node)))
        quantized = window.quantize_panel.is_quantized(node)  # a quantize preview is on screen
        if quantized is not None:
            label = f"Leave '{node}' float and quantize again" if quantized else f"Quantize '{node}' again"
            actions.append((label, lambda: window.quantize_panel.set_excluded(node, quantized)))
    return actions


def popup_context_menu(window: MainWindow, index: int | None, global_pos) -> None:
    """The right-click menu at ``global_pos``: :func:`context_actions` as menu entries."""
    menu = QMenu(window)
    for label, callback in window.context_actions(index):
        menu.addAction(label, callback)
    if not menu.isEmpty():
        menu.popup(global_pos)


def show_shortcuts(window: MainWindow) -> None:
    """F1: every action with a shortcut, read from the actions themselves so the list never goes stale."""
    rows = [(a.text().replace("&", ""), a.shortcut().toString()) for a in window.actions() if not a.shortcut().isEmpty()]
    text = "\n".join(f"{key:<16} {name}" for name, key in rows)
    text += "\n\nCtrl+wheel      zoom at the cursor\nShift+drag      select with a rubber band\nShift+click     add to the selection\nDouble-click    expand a group / open a subgraph"
    QMessageBox.information(window, "Keyboard shortcuts", text)


def show_about(window: MainWindow) -> None:
    """Help > About."""
    QMessageBox.about(window, "About GraphLens", "GraphLens: inspect ONNX models, find and explain patterns, fold rewrites.")
