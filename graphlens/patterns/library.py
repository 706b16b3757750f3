"""The built-in pattern library (``resources/patterns/*.pattern``) and loading patterns by name or file."""

from __future__ import annotations

import difflib
import functools
from pathlib import Path

from graphlens.core.bundled import resource_path
from graphlens.core.errors import GraphLensError
from graphlens.patterns.ir import Pattern
from graphlens.patterns.jsonform import loads as pattern_from_json_text
from graphlens.patterns.syntax import parse_pattern

BUILTIN_ORDER = (
    "conv-bn", "gemm-bn", "matmul-bn", "decomposed-bn", "conv-mul-add",
    "silu", "hard-swish", "gelu", "layer-norm", "leaky-relu",
    # transformers
    "attention", "attention-block", "attention-block-packed", "sdpa",
    "rms-norm", "rms-norm-plain", "skip-norm", "skip-layer-norm", "skip-rms-norm",
    "rotary-embedding", "rotary-interleaved", "rotary-partial",
    "bias-gelu", "bias-gelu-ms", "fast-gelu", "silu-mlp",
)


def library_dir() -> Path:
    return resource_path("patterns")


@functools.cache
def _files() -> dict[str, Path]:
    """Name -> file of every built-in, in the documented order."""
    found = {p.stem: p for p in library_dir().glob("*.pattern")}
    names = [n for n in BUILTIN_ORDER if n in found] + sorted(set(found) - set(BUILTIN_ORDER))
    return {name: found[name] for name in names}


@functools.cache
def _parsed(name: str) -> Pattern:
    """A built-in, parsed the first time it is asked for: a command that folds batch norms parses its four
    patterns, not the library's 26 (the classifier's first quantization in a process: 20 ms less)."""
    path = _files()[name]
    return parse_pattern(path.read_text(encoding="utf-8"), name=name, source=path.name)


def library() -> dict[str, Pattern]:
    """Name -> pattern for every built-in, in the documented order."""
    return {name: _parsed(name) for name in _files()}


def builtin_text(name: str) -> str:
    """The text of a built-in pattern, as shipped (for the editor to start from)."""
    get_pattern(name)
    return (library_dir() / f"{name}.pattern").read_text(encoding="utf-8")


def get_pattern(name: str) -> Pattern:
    """A built-in by name; an unknown name lists the known ones."""
    if name in _files():
        return _parsed(name)
    names = list(_files())
    close = difflib.get_close_matches(name, names, n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    raise GraphLensError(f"unknown pattern '{name}'{hint}; built-in patterns: {', '.join(names)}")


def load_pattern(spec: str) -> Pattern:
    """A built-in name, a ``.pattern`` text file or a ``.json`` pattern file."""
    path = Path(spec)
    if spec in _files() or not (path.suffix in (".pattern", ".json", ".txt") or path.exists()):
        return get_pattern(spec)
    if not path.is_file():
        raise GraphLensError(f"{path}: no such pattern file")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise GraphLensError(f"{path}: cannot be read as a pattern ({exc})") from exc
    if path.suffix == ".json":
        try:
            return pattern_from_json_text(text)
        except GraphLensError as exc:
            raise GraphLensError(f"{path}: {exc}") from exc
    return parse_pattern(text, name=path.stem, source=str(path))


def resolve_pattern(spec: str | Pattern) -> Pattern:
    """What a pattern argument means everywhere (command line, window, scripts).

    A :class:`Pattern` as it is; a built-in name; a ``.pattern``/``.json`` file (or any existing
    file); otherwise, when it reads as pattern text (it has a line with ``=``), that text parsed.
    Anything else is an unknown name, answered with the built-in ones.
    """
    if isinstance(spec, Pattern):
        return spec
    if spec in _files():
        return _parsed(spec)
    looks_like_text = "\n" in spec or ("=" in spec and "(" in spec)
    if looks_like_text and Path(spec).suffix not in (".pattern", ".json"):
        return parse_pattern(spec)
    return load_pattern(spec)


def patterns_for_op(op_type: str, domain: str = "") -> list[Pattern]:
    """The built-ins with a node that can be a ``op_type`` node (a wildcard does not count), those known by it
    first (its anchors: attention on a Softmax), then in the documented order: what "Why not here?" offers on it."""
    fitting = [p for p in library().values() if p.can_hold(op_type, domain)]
    return sorted(fitting, key=lambda p: op_type not in p.anchors)
