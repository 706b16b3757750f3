"""The cyclic garbage collector settings GraphLens's entry points use; library code never changes them.

Building 100,000 nodes allocates millions of container objects. With the collector running, each
allocation burst makes it rescan the growing heap, which doubles load time and makes it erratic.
But the collector switch is process-wide, so only the programs that own the process change it:
the ``graphlens`` command enters :func:`collector_deferred` for one command, and the window
collects from its event loop instead (``graphlens.gui.app``). A script or notebook that loads
large models may enter :func:`collector_deferred` itself; :func:`load_model` and the rest do not.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_deferred(*, keep: bool = False) -> Iterator[None]:
    """No cyclic collection inside the block; the collector is left as it was found afterwards.

    For one command's run: its objects live until the process ends anyway, and the few cycles it
    drops are not worth a pass over a heap holding a 100,000-node model. Everything allocated in
    the block is still young when the collector comes back on, so its first pass would scan it
    all (0.7 s for such a model); with ``keep``, it is frozen instead, for a process about to exit.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if keep:
            keep_built()
        if was_enabled:
            gc.enable()


def keep_built() -> None:
    """Move every object that exists now out of the collector's sight (``gc.freeze``), e.g. a loaded model."""
    gc.freeze()


def release_kept() -> None:
    """Let the collector see frozen objects again, e.g. after closing a model."""
    gc.unfreeze()
