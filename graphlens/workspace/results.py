"""What the workspace's methods return: typed results, each with ``to_dict()`` in the shape the
window's scripting API and ``--json`` outputs have always used."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from graphlens.core.model import Model
    from graphlens.matching.explain import Explanation, NearMisses
    from graphlens.matching.match import Match
    from graphlens.numerics import NumericDiff
    from graphlens.patterns.ir import Pattern
    from graphlens.rewrites.bn_lesson import BnLesson, Samples
    from graphlens.rewrites.driver import FoldReport
    from graphlens.rewrites.edit import GraphEdit


@dataclass(frozen=True)
class Opened:
    """A model became the workspace's model."""

    model: Model
    path: Path | None

    def to_dict(self) -> dict[str, Any]:
        return self.model.summary()


@dataclass(frozen=True)
class MatchesResult:
    """Every match of one pattern, and what can be done with them."""

    pattern: Pattern
    matches: list[Match]
    rules: list[str]
    """The rules that rewrite matches of this pattern (by pattern name)."""
    revision: int

    @property
    def lesson_available(self) -> bool:
        return self.pattern.name in LESSON_PATTERNS

    def to_dict(self) -> dict[str, Any]:
        return {"pattern": self.pattern.name, "count": len(self.matches),
                "matches": [m.to_json() for m in self.matches]}


LESSON_PATTERNS = ("conv-bn", "gemm-bn", "matmul-bn")
"""Patterns whose matches the BN-folding lesson can explain."""


@dataclass(frozen=True)
class ExplainResult:
    """Why a pattern does or does not match at a node, or, without one, the near misses."""

    pattern: Pattern
    at: str | None
    outcome: Explanation | NearMisses
    revision: int

    @property
    def matched(self) -> bool:
        return self.outcome.matched

    @property
    def message(self) -> str:
        return self.outcome.message

    def to_dict(self) -> dict[str, Any]:
        return self.outcome.to_json()


@dataclass(frozen=True, kw_only=True)
class RewritePreviewRequest:
    """Everything a preview needs, captured from the live model on its owner's thread.

    The model travels as serialized bytes: the preview is computed on a scratch copy, so the
    live model is never touched by the worker that computes it.
    """

    rule: str
    match_index: int
    graph: str
    nodes: dict[str, str]
    values: dict[str, str]
    pattern: str
    variant: int
    model_bytes: bytes
    model_path: Path | None
    revision: int
    dims: dict[str, int] = field(default_factory=dict)
    inputs_file: str | None = None
    arrays: dict[str, np.ndarray] | None = field(default=None, repr=False)
    remembered: dict[str, int] | None = None


@dataclass(frozen=True)
class RewritePreview:
    """What one rewrite would do, computed for ``revision`` of the model (dropped once it changes)."""

    rule: str
    match_index: int
    revision: int
    edit: GraphEdit
    numeric: NumericDiff
    after: onnx.ModelProto = field(repr=False)
    parameters: list[dict[str, Any]]
    error: np.ndarray | None = field(default=None, repr=False)
    """|before − after| at the rewrite's boundary, flattened, for the histogram."""

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule,
            "description": self.edit.description,
            "summary": self.edit.summary(),
            "removed": list(self.edit.remove),
            "added": [n.name for n in self.edit.add],
            "numeric": self.numeric.to_json(),
            "inputs": self.numeric.inputs.line() if self.numeric.inputs is not None else "",
            "parameters": self.parameters,
        }


@dataclass(frozen=True)
class Applied:
    """Edits applied as one undo step."""

    label: str
    edits: int
    revision: int

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "edits": self.edits, "revision": self.revision}


@dataclass(frozen=True)
class FoldResult:
    """Rules applied to a fixpoint and tidied up, as ``graphlens fold`` does; one undo step."""

    rules: list[str]
    report: FoldReport
    revision: int

    @property
    def applied(self) -> int:
        return sum(self.report.applied.values())

    @property
    def refused(self) -> int:
        return len(self.report.refused)

    def to_dict(self) -> dict[str, Any]:
        return self.report.to_json()


@dataclass(frozen=True)
class Step:
    """An undo or redo."""

    label: str
    revision: int


@dataclass(frozen=True)
class Saved:
    path: Path


@dataclass(frozen=True)
class BnLessonResult:
    """The BN-folding lesson for one match: the channel shown and the one sample run reused per channel,
    or, for a match the fold refuses, why (``refusal``; no lesson then)."""

    match_index: int
    match: Match
    samples: Samples | None
    lesson: BnLesson | None
    revision: int
    refusal: str | None = None


@dataclass(frozen=True)
class PreviewInputs:
    """What previews run on: dims the user fixed (the rest are chosen), or an .npz file's arrays."""

    dims: dict[str, int] = field(default_factory=dict)
    file: str | None = None
    arrays: dict[str, np.ndarray] | None = field(default=None, repr=False)


@dataclass(frozen=True, kw_only=True)
class TensorLessonRequest:
    """The lesson of one row of a quantize or binarize preview: ``layer`` of ``preview``, ``part`` of it
    (a weight's channel or kernel; None: the one that suffers most) and, for binarization, ``bits``."""

    preview: Any = field(repr=False)
    layer: Any
    part: int | None
    bits: int | None = None
