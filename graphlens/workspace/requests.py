"""What each analysis job needs, captured on the workspace's thread (keyword-only: no argument by position).

The rewrite preview's request is :class:`~graphlens.workspace.results.PreviewRequest`; quantize and
binarize have theirs beside their computations.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.patterns.ir import Pattern


@dataclass(frozen=True, kw_only=True)
class MatchesRequest:
    """Find every match of ``pattern`` in ``model`` (the live model: matching only reads it)."""

    pattern: Pattern
    model: Model = field(repr=False)
    non_overlapping: bool = False


@dataclass(frozen=True, kw_only=True)
class ExplainRequest:
    """Why ``pattern`` does or does not match at node ``at`` (None: the near misses)."""

    pattern: Pattern
    at: str | None
    model: Model = field(repr=False)
