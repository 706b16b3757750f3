"""Names from a model file as messages show them: text, whatever bytes the file holds, and safe on a terminal.

ONNX names are meant to be UTF-8, but protobuf hands a name that is not as ``bytes``; it is read here as text
with each stray byte written ``\\xf3``. A name may also hold control characters, or bidirectional controls
(U+202E, right-to-left override) that reorder the rest of the line a terminal shows: :func:`printable` writes
each as an escape (``\\u202e``), so the line reads as the characters it holds.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Collection, Iterable

import onnx

from graphlens.core.errors import GraphLensError


def name_text(name: str | bytes) -> str:
    """A name as text: a name that is not UTF-8 (protobuf gives it as bytes) with each stray byte as ``\\xNN``."""
    if isinstance(name, bytes):
        return name.decode("utf-8", errors="backslashreplace")
    return name


def names_as_text(graph: onnx.GraphProto) -> None:
    """Every name of ``graph``'s own nodes, tensors and value infos as text, in the proto itself: a name that is not
    UTF-8 gets its stray bytes as ``\\xNN``, so copying and writing the graph never decodes it again (its inner
    graphs are their own Graph's to rewrite)."""
    for node in graph.node:
        node.name = name_text(node.name)
        for field in (node.input, node.output):
            texts = [name_text(t) for t in field]
            del field[:]
            field.extend(texts)
    for tensor in graph.initializer:
        tensor.name = name_text(tensor.name)
    for info in (*graph.input, *graph.output, *graph.value_info):
        info.name = name_text(info.name)


def quoted(name: str | bytes) -> str:
    """``'name'``, as messages quote a node or tensor."""
    return f"'{name_text(name)}'"


_RUNS = ((0x00, 0x08), (0x0B, 0x1F), (0x7F, 0x9F), (0xAD, 0xAD), (0x600, 0x605), (0x61C, 0x61C), (0x6DD, 0x6DD),
         (0x70F, 0x70F), (0x890, 0x891), (0x8E2, 0x8E2), (0x180E, 0x180E), (0x200B, 0x200F), (0x2028, 0x202E),
         (0x2060, 0x2064), (0x2066, 0x206F), (0xD800, 0xF8FF), (0xFEFF, 0xFEFF), (0xFFF9, 0xFFFB),
         (0x110BD, 0x110BD), (0x110CD, 0x110CD), (0x13430, 0x13438), (0x1BCA0, 0x1BCA3), (0x1D173, 0x1D17A),
         (0xE0001, 0xE0001), (0xE0020, 0xE007F), (0xF0000, 0x10FFFF))
"""The code points shown as escapes, Unicode's categories Cc, Cf, Zl, Zp, Cs and Co: controls (C0, DEL, C1, but
a line's own tab and newline), format characters (the bidi controls among them, zero-width ones, the BOM), line
and paragraph separators, surrogates (a decoding's stray bytes) and private use."""

_UNSAFE = re.compile("[" + "".join(f"\\U{a:08x}-\\U{b:08x}" for a, b in _RUNS) + "]")


def printable(line: str) -> str:
    """``line`` with every control, format (bidi) and separator character written as an escape; tabs and
    newlines stay. The usual line has none and comes back as it is."""
    if line.isascii() and line.isprintable():
        return line
    return _UNSAFE.sub(_escape, line)


def _escape(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def no_such_node(name: str, known: Collection[str], what: str = "", where: object = "") -> GraphLensError:
    """The one sentence for a node name a model does not have: ``<what>: no node named 'x' in <where>; did you mean
    'y'?``, with the closest of the ``known`` names."""
    close = difflib.get_close_matches(name, list(known), n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
    prefix, place = (f"{what}: " if what else ""), (f" in {where}" if where else "")
    return GraphLensError(f"{prefix}no node named '{name}'{place}{hint}")


def check_node_names(names: Iterable[str], known: Collection[str], what: str, where: object = "the model") -> None:
    """Refuse the first of ``names`` that is not among the ``known`` node names (see :func:`no_such_node`)."""
    for name in names:
        if name not in known:
            raise no_such_node(name, known, what, where)
