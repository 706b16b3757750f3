"""``python -m graphlens`` is the ``graphlens`` command."""

from graphlens.cli import entry

entry()
