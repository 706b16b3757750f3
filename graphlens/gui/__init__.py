"""The GraphLens window: the only package that imports PySide6."""

from graphlens.gui.main_window import MainWindow

__all__ = ["MainWindow"]
