"""The window's docks as a person meets them: the canvas first, result panels closed until a job fills them.

Mixed into :class:`~graphlens.gui.main_window.MainWindow`. The first window fits the screen; the Inspector sits
on the right, the Outline / Patterns column on the left only where the window is wide enough for the canvas to
keep most of it (Ctrl+F, a sketch or View › Panels open it); the bottom panels and the Overlay open when a job
fills them, so a saved layout brings back their sizes, not an empty page. A saved layout that leaves the canvas
less than half the window is not restored.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import QResizeEvent, QShowEvent
from PySide6.QtWidgets import QApplication, QDockWidget, QTabBar, QWidget

from graphlens.gui.window_api import WindowBase

if TYPE_CHECKING:
    from graphlens.gui.inspector import Inspector
    from graphlens.gui.overlay_panel import OverlayPanel

WIDE_WINDOW = 1800
"""Windows at least this wide open with the Outline / Patterns column beside the canvas."""
SIDE_WIDTH = 300
MIN_CANVAS_SHARE = 0.5
"""A saved layout leaving the canvas less of the window than this is not restored."""
BOTTOM_SHARES = {"PreviewPanel": 0.42, "QuantizePanel": 0.45, "BinarizePanel": 0.45, "BnLessonView": 0.45,
                 "QuantizeLessonView": 0.45, "BinarizeLessonView": 0.45, "FusionReportPanel": 0.3}
"""The part of the window's height a bottom panel takes when it comes to the front (others, lists and a sentence:
a quarter); the lessons are laid out for 45 % and scroll below it."""


def bottom_share(widget: QWidget) -> float:
    """What a bottom panel's content needs of the window's height: a list a quarter, a lesson 45 %."""
    return BOTTOM_SHARES.get(type(widget).__name__, 0.25)


class WindowLayout(WindowBase):
    """The first size, the default docks, what a saved layout may bring back."""

    _shown_once = False

    if TYPE_CHECKING:
        settings: QSettings
        inspector: Inspector
        overlay_panel: OverlayPanel

        def _dock_of(self, widget: QWidget) -> QDockWidget: ...

    def _size_to_screen(self) -> None:
        """A first window of 1600×1000 at most, the whole available screen on a laptop (a window manager may
        then maximize it; without one, as under Xvfb, it still fits)."""
        screen = self.screen()
        available = screen.availableGeometry() if screen is not None else None
        if available is None or available.width() < 400:
            self.resize(1280, 820)
            return
        width, height = min(available.width(), 1600), min(available.height(), 1000)
        self.resize(width, height)
        self.move(available.left() + (available.width() - width) // 2,
                  available.top() + (available.height() - height) // 2)

    def _restore_layout(self) -> None:
        """The size and docks of the last session, less what no job has filled yet (result panels open when one
        does); the default layout when there is none."""
        geometry, state = self.settings.value("geometry"), self.settings.value("state")
        if isinstance(geometry, QByteArray):
            self.restoreGeometry(geometry)
        if not (isinstance(state, QByteArray) and self.restoreState(state)):
            self.default_layout()
        self._close_empty_docks()

    def default_layout(self) -> None:
        """The canvas first: the Inspector on the right, the Outline and Patterns on the left only where the window
        is wide enough to leave the canvas most of it (Ctrl+F, a sketch or View › Panels open them), every result
        panel closed."""
        for dock in self.findChildren(QDockWidget):
            dock.setFloating(False)
        wide = self.width() >= WIDE_WINDOW
        for dock in self._docks_in(Qt.DockWidgetArea.LeftDockWidgetArea):
            dock.setVisible(wide)
        self._dock_of(self.inspector).show()
        self._dock_of(self.outline).raise_()
        sides = self._docks_in(Qt.DockWidgetArea.LeftDockWidgetArea, Qt.DockWidgetArea.RightDockWidgetArea)
        self.resizeDocks(sides, [SIDE_WIDTH] * len(sides), Qt.Orientation.Horizontal)

    def _docks_in(self, *areas: Qt.DockWidgetArea) -> list[QDockWidget]:
        return [d for d in self.findChildren(QDockWidget) if self.dockWidgetArea(d) in areas and not d.isFloating()]

    def _close_empty_docks(self) -> None:
        """Result panels (the bottom ones, the Overlay) stay closed until a job fills them: none has run yet."""
        for dock in self._docks_in(Qt.DockWidgetArea.BottomDockWidgetArea):
            dock.hide()
        self._dock_of(self.overlay_panel).hide()

    def _open_overlay(self) -> None:
        """The Overlay panel, opened under the Inspector with most of the column: its summary and table need the
        height more than the Inspector's overview does (a panel already open keeps the split the user made)."""
        dock, inspector = self._dock_of(self.overlay_panel), self._dock_of(self.inspector)
        opening = not dock.isVisible()
        dock.show()
        dock.raise_()
        if opening and inspector.isVisible() and not dock.isFloating():
            column = inspector.height() + dock.height()
            self.resizeDocks([inspector, dock], [int(column * 0.35), int(column * 0.65)], Qt.Orientation.Vertical)

    def canvas_share(self) -> float:
        """The part of the window's area the graph gets."""
        window = self.width() * self.height()
        return self.panel.width() * self.panel.height() / window if window else 0.0

    def _keep_canvas_first(self) -> None:
        """A restored layout that leaves the graph less than half the window is replaced by the default one."""
        if self.canvas_share() < MIN_CANVAS_SHARE:
            self.default_layout()

    def resizeEvent(self, event: QResizeEvent) -> None:
        """A window grown back gives the bottom panels in front their share again (Qt gives it all to the canvas)."""
        super().resizeEvent(event)
        if event.size().height() > event.oldSize().height() > 0:
            QTimer.singleShot(0, self._regrow_bottom_panels)

    def _regrow_bottom_panels(self) -> None:
        for dock in self._docks_in(Qt.DockWidgetArea.BottomDockWidgetArea):
            wanted = int(self.height() * bottom_share(dock.widget()))
            if dock.isVisible() and not dock.visibleRegion().isEmpty() and dock.height() < wanted:
                self.resizeDocks([dock], [wanted], Qt.Orientation.Vertical)

    def showEvent(self, event: QShowEvent) -> None:
        super().showEvent(event)
        QTimer.singleShot(0, self.hide_stale_tab_bars)
        if not self._shown_once:
            self._shown_once = True
            QApplication.sendPostedEvents()  # the docks take their sizes before the canvas is measured
            self._keep_canvas_first()

    def hide_stale_tab_bars(self) -> None:
        """Qt leaves behind the tab bar of a dock group's first two tabs when a second group is tabified
        (Qt 6.11): a copy that no longer follows the layout and shows up over the panels. It is the visible bar
        whose tabs begin another, longer visible bar's, or that names a panel now closed (a live bar shows only
        open panels); hidden once, it stays hidden."""
        closed = {d.windowTitle() for d in self.findChildren(QDockWidget) if not d.isVisible()}
        bars = [b for b in self.findChildren(QTabBar) if b.isVisible() and b.parent() is self]
        tabs = {id(b): [b.tabText(i) for i in range(b.count())] for b in bars}
        for bar in bars:
            mine = tabs[id(bar)]
            if closed.intersection(mine) or any(len(tabs[id(o)]) > len(mine) and tabs[id(o)][: len(mine)] == mine
                                                for o in bars if o is not bar):
                bar.hide()
