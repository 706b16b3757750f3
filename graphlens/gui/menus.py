"""The window's actions, menus, toolbar and right-click menu: what the user can ask for, and its keys.

:data:`ACTIONS` is the one table of the menu bar: each row names the public window method an entry
calls, its text, keys, tip, whether it is a checkbox and when it is enabled, and the menu it is in
(in order; a separator where ``separated``). :func:`build_window_actions` makes from it the
``QAction``s (``window.actions_by_name[name]``, also ``window.act_<name>``), the menus and the toolbar.
Entries other objects own (the comparison's, the overlays', the recent files, the panels) are
:class:`MenuPart` rows that fill their place in a menu.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING

from PySide6.QtCore import QPoint
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QDockWidget, QMenu

from graphlens.gui.explain_menu import DIRECT_ENTRIES
from graphlens.layout.view import collapse_target

if TYPE_CHECKING:
    from graphlens.gui.main_window import MainWindow

S = QKeySequence.StandardKey
Key = str | QKeySequence.StandardKey


def _has_model(window: MainWindow) -> bool:
    return window.model is not None


def _can_undo(window: MainWindow) -> bool:
    return window.session is not None and bool(window.session.undo_stack)


def _can_redo(window: MainWindow) -> bool:
    return window.session is not None and bool(window.session.redo_stack)


def _in_subgraph(window: MainWindow) -> bool:
    graph = window.current_graph()
    return graph is not None and graph.parent is not None


@dataclass(frozen=True, kw_only=True)
class ActionSpec:
    """One menu entry: the public window method it calls (with the checkbox's state when ``checkable``)."""

    name: str
    """Its key in ``window.actions_by_name`` (and ``window.act_<name>``)."""
    text: str
    method: str
    menu: str
    keys: tuple[Key, ...] = ()
    tip: str = ""
    checkable: bool = False
    checked: bool = False
    enabled: Callable[[MainWindow], bool] | None = None
    """When it may be used; None: always."""
    separated: bool = False
    """A separator before it in its menu."""


@dataclass(frozen=True, kw_only=True)
class MenuPart:
    """A part of a menu filled by ``fill(window, menu)``: a submenu, or actions another object owns."""

    menu: str
    fill: Callable[[MainWindow, QMenu], None]
    separated: bool = False


def _recent_files(window: MainWindow, menu: QMenu) -> None:
    window.recent_menu = menu.addMenu("Open &Recent")


def _comparison(window: MainWindow, menu: QMenu) -> None:
    for action in window.comparer.actions():
        menu.addAction(action)


def _overlays(window: MainWindow, menu: QMenu) -> None:
    overlay_menu = menu.addMenu("O&verlay")  # colour nodes by a number per node; see gui/overlay_panel.py
    for action in window.overlay_panel.menu_actions():
        overlay_menu.addSeparator() if action is None else overlay_menu.addAction(action)


def _panels(window: MainWindow, menu: QMenu) -> None:
    window.docks_menu = menu.addMenu("&Panels")
    for dock in window.findChildren(QDockWidget):
        window.docks_menu.addAction(dock.toggleViewAction())


A = ActionSpec
FILE, EDIT, VIEW, HELP = "&File", "&Edit", "&View", "&Help"
ACTIONS: tuple[ActionSpec | MenuPart, ...] = (
    A(name="open", text="&Open…", method="ask_open", menu=FILE, keys=(S.Open,), tip="Open an ONNX model"),
    MenuPart(menu=FILE, fill=_recent_files),
    A(name="compare", text="Co&mpare with…", method="ask_compare", menu=FILE, keys=("Ctrl+Shift+D",), separated=True,
      tip="Show another model beside this one, node by node: what changed, was added or removed"),
    MenuPart(menu=FILE, fill=_comparison),
    A(name="save", text="&Save", method="save", menu=FILE, keys=(S.Save,), enabled=_has_model, separated=True),
    A(name="save_as", text="Save &As…", method="ask_save_as", menu=FILE, keys=("Ctrl+Shift+S",), enabled=_has_model),
    A(name="export", text="&Export Image…", method="ask_export", menu=FILE, keys=("Ctrl+E",), enabled=_has_model),
    A(name="export_visible", text="Export &Visible Area as Image…", method="ask_export_visible", menu=FILE,
      keys=("Ctrl+Alt+E",), enabled=_has_model, tip="the part of the graph the canvas shows, at full size"),
    A(name="quit", text="&Quit", method="close", menu=FILE, keys=(S.Quit,), separated=True),
    A(name="undo", text="&Undo", method="undo", menu=EDIT, keys=("Ctrl+Z",), enabled=_can_undo),
    A(name="redo", text="&Redo", method="redo", menu=EDIT, keys=("Ctrl+Shift+Z", "Ctrl+Y"), enabled=_can_redo),
    A(name="find", text="&Find…", method="search", menu=EDIT, keys=(S.Find,), separated=True),
    A(name="next", text="Find &Next", method="search_next", menu=EDIT, keys=("F3",)),
    A(name="prev", text="Find &Previous", method="search_previous", menu=EDIT, keys=("Shift+F3",)),
    A(name="fit", text="&Fit to Window", method="fit", menu=VIEW, keys=("F",)),
    A(name="zoom_in", text="Zoom &In", method="zoom_in", menu=VIEW, keys=("Ctrl+=", "Ctrl++")),
    A(name="zoom_out", text="Zoom &Out", method="zoom_out", menu=VIEW, keys=("Ctrl+-",)),
    A(name="constants", text="Show &Constant Nodes", method="show_constants", menu=VIEW, keys=("Ctrl+K",),
      checkable=True, separated=True),
    A(name="shape_ops", text="Show Shape &Arithmetic", method="show_shape_ops", menu=VIEW, keys=("Ctrl+Shift+K",),
      checkable=True, tip="Draw the nodes that compute shapes (Shape → Gather → Concat → Reshape) as boxes, "
                          "not as a line in the box using them"),
    A(name="expand", text="&Expand All Groups", method="expand_groups", menu=VIEW, keys=("Ctrl+Shift+E",)),
    A(name="collapse", text="&Collapse Groups", method="collapse_groups", menu=VIEW, keys=("Ctrl+Shift+C",)),
    A(name="back", text="&Back to Parent Graph", method="back_to_parent", menu=VIEW, keys=("Alt+Left", "Backspace"),
      enabled=_in_subgraph),
    A(name="relayout", text="&Relayout", method="relayout", menu=VIEW, keys=("Ctrl+R",)),
    A(name="shapes", text="Show Tensor &Shapes on Edges", method="show_tensor_shapes", menu=VIEW, keys=("Ctrl+L",),
      checkable=True, separated=True),
    A(name="legend", text="Show &Legend", method="show_legend", menu=VIEW, checkable=True, checked=True),
    A(name="minimap", text="Show &Minimap", method="show_minimap", menu=VIEW, checkable=True, checked=True),
    MenuPart(menu=VIEW, fill=_overlays),
    MenuPart(menu=VIEW, fill=_panels),
    A(name="keys", text="&Keyboard Shortcuts", method="show_shortcuts", menu=HELP, keys=("F1",)),
    A(name="about", text="&About GraphLens", method="show_about", menu=HELP),
)
TOOLBAR: tuple[str | None, ...] = ("open", "save", None, "undo", "redo", None, "fit", "zoom_in", "zoom_out", "back",
                                   None, "find")
"""The toolbar's actions by name (None: a separator)."""


def make_action(window: MainWindow, spec: ActionSpec) -> QAction:
    """The QAction for ``spec``, calling ``window``'s public method of that name; its keys work even when
    the menus are hidden."""
    if spec.method.startswith("_"):
        raise ValueError(f"menu entry '{spec.name}' calls {spec.method}, which is not public")
    slot = getattr(window, spec.method)
    action = QAction(spec.text, window)
    action.setShortcuts([QKeySequence(k) for k in spec.keys])
    action.setStatusTip(spec.tip)
    action.setCheckable(spec.checkable)
    if spec.checkable:
        action.setChecked(spec.checked)
        action.toggled.connect(slot)
    else:
        action.triggered.connect(lambda _checked=False: slot())
    window.addAction(action)
    return action


def build_window_actions(window: MainWindow) -> None:
    """The actions of :data:`ACTIONS` (``window.actions_by_name``, ``window.act_<name>``), the menus and the toolbar."""
    window.actions_by_name = {}
    menus: dict[str, QMenu] = {}
    for row in ACTIONS:
        menu = menus.get(row.menu)
        if menu is None:
            menu = menus[row.menu] = window.menuBar().addMenu(row.menu)
        elif row.separated:
            menu.addSeparator()
        if isinstance(row, MenuPart):
            row.fill(window, menu)
            continue
        action = window.actions_by_name[row.name] = make_action(window, row)
        setattr(window, f"act_{row.name}", action)
        menu.addAction(action)
    toolbar = window.addToolBar("Main")
    toolbar.setObjectName("MainToolbar")
    for name in TOOLBAR:
        toolbar.addSeparator() if name is None else toolbar.addAction(window.actions_by_name[name])
    window.refresh_recent()
    refresh_actions(window)


def refresh_actions(window: MainWindow) -> None:
    """Enable each action whose ``enabled`` rule holds now, disable the others."""
    for row in ACTIONS:
        if isinstance(row, ActionSpec) and row.enabled is not None:
            window.actions_by_name[row.name].setEnabled(row.enabled(window))


ContextEntry = tuple[str, Callable[[], object] | list[tuple[str, Callable[[], object]]]]
"""A right-click entry: its label and what it does, or the entries of a submenu."""


def context_actions(window: MainWindow, index: int | None) -> list[ContextEntry]:
    """What right-clicking item ``index`` offers, as (label, callback); the menu shows these."""
    view, graph = window.panel.view, window.panel.graph
    actions: list[ContextEntry] = []
    if view is None or graph is None:
        return []
    if index is None:
        pattern = window.current_pattern()
        return [(f"Where does {pattern.name} almost match? (near misses)",
                 lambda: window.workspace.matches.explain(pattern)),
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
                actions.append((f"Open {label}", partial(window.panel.enter, node, attr, k)))
    target = collapse_target(view, index)
    if target is not None:
        actions.append((f"Collapse '{target}'", lambda: window.panel.toggle_group(target)))
    if item.kind == "node" and item.node is not None:
        name = item.node
        fitting = window.why_not_entries(name)
        why: list[ContextEntry] = list(fitting[:DIRECT_ENTRIES])
        if len(fitting) > DIRECT_ENTRIES:
            why.append(("Why not here? Other patterns", fitting[DIRECT_ENTRIES:]))
        actions[:0] = why
        quantized = window.quantize_panel.is_quantized(name)  # a quantize preview is on screen
        if quantized is not None:
            label = f"Leave '{name}' float and quantize again" if quantized else f"Quantize '{name}' again"
            actions.append((label, lambda: window.quantize_panel.set_excluded(name, quantized)))
    return actions


def popup_context_menu(window: MainWindow, index: int | None, global_pos: QPoint) -> None:
    """The right-click menu at ``global_pos``: :func:`context_actions` as menu entries (a list: a submenu)."""
    menu = QMenu(window)
    for label, callback in window.context_actions(index):
        if isinstance(callback, list):
            submenu = menu.addMenu(label)
            for sub_label, sub_callback in callback:
                submenu.addAction(sub_label, sub_callback)
        else:
            menu.addAction(label, callback)
    if not menu.isEmpty():
        menu.popup(global_pos)
