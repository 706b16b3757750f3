"""The right question at the right node: "Why not here?" with the patterns that fit the node, and the lessons.

The right-click menu on a node offers the patterns one of whose nodes can be that op (attention and sdpa on a
Softmax, conv-bn on a BatchNormalization), the pattern being worked on first; the menu bar's Explain menu offers
the same for the selected node, beside the three lessons. Mixed into :class:`~graphlens.gui.workflows.Workflows`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

from PySide6.QtWidgets import QMenu

from graphlens.gui.window_api import WindowBase
from graphlens.patterns.ir import Pattern
from graphlens.patterns.library import patterns_for_op
from graphlens.workspace.results import LESSON_PATTERNS

if TYPE_CHECKING:
    from graphlens.gui.binarize_panel import BinarizePanel
    from graphlens.gui.quantize_panel import QuantizePanel
    from graphlens.matching.match import Match

Entry = tuple[str, Callable[[], object]]
DIRECT_ENTRIES = 5
"""Patterns offered in the right-click menu itself; the others that fit go in its "Other patterns" submenu."""


class ExplainMenu(WindowBase):
    """"Why not here?" fitted to a node, and the lessons, for the right-click menu and the Explain menu."""

    explain_menu: QMenu

    if TYPE_CHECKING:
        quantize_panel: QuantizePanel
        binarize_panel: BinarizePanel

        @property
        def matches(self) -> list[Match]: ...
        def current_pattern(self) -> Pattern: ...
        def show_lesson(self, match_index: int = 0, *, background: bool = False) -> Any: ...
        def raise_panel(self, widget: Any, share: float | None = None) -> None: ...

    def why_not_entries(self, node_name: str) -> list[Entry]:
        """One "Why doesn't P match here?" per pattern that can sit on the node: the current pattern first (when
        it can), then the built-ins known by this op, then the others with a node of its type."""
        graph = self.panel.graph
        if graph is None or node_name not in graph.by_name:
            return []
        node = graph.by_name[node_name]
        current = self.current_pattern()
        chosen = [current] if current.can_hold(node.op_type, node.domain) else []
        chosen += [p for p in patterns_for_op(node.op_type, node.domain) if p.name != current.name]
        return [(f"Why doesn't {p.name} match here?", partial(self.workspace.matches.explain, p, node_name))
                for p in chosen]

    def selected_node(self) -> str | None:
        """The selected node's name (the first, when several are), None when no node is selected."""
        view = self.panel.view
        if view is None:
            return None
        for index in sorted(self.canvas.marks.selected):
            item = view.items[index]
            if item.kind == "node" and item.node is not None:
                return item.node
        return None

    def _build_explain_menu(self) -> QMenu:
        """Explain: Why Not Here? for the selected node, near misses of the current pattern, the three lessons."""
        menu = QMenu("E&xplain", self)
        why = menu.addMenu("&Why Not Here?")
        why.aboutToShow.connect(lambda: self._fill_why_menu(why))
        menu.addAction("Where Does the Pattern Almost &Match?",
                       lambda: self.workspace.matches.explain(self.current_pattern()))
        menu.addSeparator()
        menu.addAction("Learn &BN Folding", self.learn_bn_folding)
        menu.addAction("Learn Fake &Quantization", self.learn_fake_quantization)
        menu.addAction("Learn Bi&narization", self.learn_binarization)
        self.explain_menu = menu
        return menu

    def _fill_why_menu(self, menu: QMenu) -> None:
        menu.clear()
        name = self.selected_node()
        entries = self.why_not_entries(name) if name is not None else []
        if not entries:
            placeholder = menu.addAction("Select a node first" if name is None else "No pattern has a node of this op")
            placeholder.setEnabled(False)
        for label, callback in entries:
            menu.addAction(label, callback)

    # ================================================================ lessons
    def learn_bn_folding(self) -> Any:
        """The BN-folding lesson on the pair holding the selected node (a Conv, Gemm or MatMul with its
        BatchNormalization), else on the model's first pair; returns the match index it opened, None if none."""
        if self.model is None:
            return None
        selected = self.selected_node()  # before matching, which selects the first match's node
        current = self.workspace.matches.result
        if current is None or not current.lesson_available or not current.matches:
            for name in LESSON_PATTERNS:  # conv-bn, then gemm-bn, then matmul-bn
                if self.workspace.matches.find(name).matches:
                    break
        if not self.matches:
            self.show_error("this model has no Conv, Gemm or MatMul followed by a BatchNormalization to fold")
            return None
        index = next((i for i, m in enumerate(self.matches) if selected in m.node_names), 0)
        self.show_lesson(index, background=True)
        return index

    def learn_fake_quantization(self) -> None:
        """The fake-quantization lesson on the Quantize panel's selected layer; without a preview yet, the panel
        and what to do first."""
        self._learn_in(self.quantize_panel, "Quantize")

    def learn_binarization(self) -> None:
        """The binarization lesson on the Binarize panel's selected layer; without a preview yet, the panel and
        what to do first."""
        self._learn_in(self.binarize_panel, "Binarize")

    def _learn_in(self, panel: QuantizePanel | BinarizePanel, title: str) -> None:
        self.raise_panel(panel, share=0.45)
        if panel.learn_button.isEnabled():
            panel.learn()
        else:
            self.statusBar().showMessage(f"{title} panel: press Run for a preview, pick a layer in its table, then "
                                         f"{panel.LEARN_TEXT}", 10000)
