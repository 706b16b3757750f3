"""The GraphLens window: the only package that imports PySide6.

``MainWindow`` is imported on first use, so ``graphlens render`` (``graphlens.gui.render``) does not
pay for the window's panels, lesson and workflows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from graphlens.gui.main_window import MainWindow

__all__ = ["MainWindow"]


def __getattr__(name: str) -> Any:
    if name == "MainWindow":
        from graphlens.gui.main_window import MainWindow

        return MainWindow
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
