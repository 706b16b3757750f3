"""Model-provided strings (node, tensor and file names) shown as text, never as markup.

Qt guesses whether a label's, message box's or tooltip's string is rich text; a node named
``<b>x</b>`` would be drawn bold and one named ``<img src=...>`` would ask for an image. Labels
that show such strings set ``Qt.TextFormat.PlainText``; tooltips, which have no such switch, and
labels that mix markup with names use :func:`escaped`.
"""

from __future__ import annotations

import html


def escaped(text: str) -> str:
    """``text`` as HTML that displays it literally (line breaks kept)."""
    return html.escape(text, quote=False).replace("\n", "<br>")


def tooltip(text: str) -> str:
    """A tooltip showing ``text`` literally: forced to rich text, with the text itself escaped."""
    return f"<p style='white-space:pre-wrap'>{html.escape(text, quote=False)}</p>"
