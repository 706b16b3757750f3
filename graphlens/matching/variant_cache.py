"""Compiled variants kept on disk between runs, so a command does not expand the same pattern every time.

Expanding a pattern into its variants (:func:`graphlens.matching.variants.compile_variants`) costs about
0.2 s for the transformer fusions' patterns (attention alone has 768 combinations), a third of a
``graphlens fold`` on a small model. The result depends only on the pattern and on the code that expands it,
so it is kept in ``$XDG_CACHE_HOME/graphlens/variants`` (``~/.cache`` by default) under a key made of the
pattern's JSON form, the expanding code's source and the Python version. A pattern JSON cannot hold (a
Python predicate) is expanded each time; a cache that cannot be read or written is passed over.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from graphlens.core.errors import GraphLensError
from graphlens.matching import variants
from graphlens.patterns import ir
from graphlens.patterns.ir import Pattern
from graphlens.patterns.jsonform import pattern_to_json

Variants = list[variants.Variant]


def cache_folder() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "graphlens" / "variants"


@functools.cache
def _code_key() -> str:
    """What the expansion's result depends on besides the pattern: its code and the interpreter."""
    digest = hashlib.sha256(sys.version.encode())
    for module in (variants, ir):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def _key(pattern: Pattern) -> str | None:
    try:
        form = json.dumps(pattern_to_json(pattern), sort_keys=True, default=repr)
    except GraphLensError:  # a Python predicate: nothing to key it by
        return None
    return hashlib.sha256((_code_key() + form).encode()).hexdigest()


def cached_variants(pattern: Pattern, compile_variants: Callable[[Pattern], Variants]) -> Variants:
    """``compile_variants(pattern)``, read from the cache when an earlier run wrote it, else written there."""
    key = _key(pattern)
    if key is None:
        return compile_variants(pattern)
    path = cache_folder() / f"{key}.pickle"
    try:
        with path.open("rb") as file:
            found = pickle.load(file)
        if isinstance(found, list) and all(isinstance(v, variants.Variant) for v in found):
            return found
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, TypeError, ValueError):
        pass  # no cache yet, or one a different build wrote: expand again
    compiled = compile_variants(pattern)
    _write(path, compiled)
    return compiled


def _write(path: Path, compiled: Variants) -> None:
    """Write atomically (a concurrent run reads a whole file or none), readable by this user only."""
    staged: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        handle, staged = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
        with os.fdopen(handle, "wb") as file:
            pickle.dump(compiled, file, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(staged, path)
        staged = None
    except (OSError, pickle.PicklingError, TypeError, AttributeError):
        pass  # a read-only home: the next run expands again
    finally:
        if staged is not None:
            Path(staged).unlink(missing_ok=True)
