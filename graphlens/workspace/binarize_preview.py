"""Previewing a binarization on a scratch copy, and applying exactly that result to the live model.

:func:`compute_binarize_preview` runs anywhere (a worker thread): it binarizes a copy made from
the request's bytes and keeps the float model it started from (folded, when the config folds
first), so the lesson can explain any kernel with the very weights the binarizer saw.
:func:`apply_preview` puts the preview in as one :class:`GraphEdit` on the live main graph, so
Apply puts in exactly what was previewed as one undo step.

A request may be limited to some layers (``only``: the linear nodes of one match, or of every
match), through the config's ``only_nodes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import onnx

from graphlens.binarize.config import OP_TYPES
from graphlens.core.linear import linear_layer
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.rewrites.edit import RewriteSession
from graphlens.workspace.preview import replace_main_graph, scratch_from_bytes

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.core.graph import Graph
    from graphlens.quantize import CalibrationData

@dataclass(frozen=True, kw_only=True)
class BinarizeRequest:
    """What a binarize preview needs, captured from the live model on its owner's thread."""

    config: BinarizeConfig
    calibration: CalibrationData | None
    samples: int
    model_bytes: bytes = field(repr=False)
    model_path: Path | None
    revision: int
    only: tuple[str, ...] | None = None
    """The layers to binarize (node names); None: every linear layer the config allows."""
    scope: str = "every linear layer"
    """Which layers, in words (the panel's heading)."""


@dataclass
class BinarizePreview:
    """A binarization computed for ``revision`` of the model, not applied (dropped once it changes)."""

    result: BinarizeResult
    after: onnx.ModelProto = field(repr=False)
    """The binarized model."""
    float_model: onnx.ModelProto = field(repr=False)
    """The model the binarizer started from (after folding): the float weights the lesson explains."""
    revision: int
    config: BinarizeConfig
    only: tuple[str, ...] | None = None
    scope: str = "every linear layer"

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "scope": self.scope, "only": list(self.only) if self.only else None,
                **self.result.to_dict()}


def linear_nodes(graph: Graph, names: Iterable[str] | None = None, *, first: bool = False) -> list[str]:
    """The nodes among ``names`` (default: all of ``graph``'s) that are linear layers with a constant weight;
    with ``first``, only the first one found (enough to know whether there is any)."""
    wanted = None if names is None else set(names)
    found = []
    for node in graph.nodes:
        if (wanted is None or node.name in wanted) and node.op_type in OP_TYPES \
                and linear_layer(graph, node) is not None:  # the test the binarizer itself starts from
            found.append(node.name)
            if first:
                break
    return found


def restricted(config: BinarizeConfig, only: Iterable[str] | None) -> BinarizeConfig:
    """``config`` binarizing only the layers ``only`` names (None: as it is)."""
    return config if only is None else config.with_changes(only_nodes=tuple(dict.fromkeys(only)))


def compute_binarize_preview(request: BinarizeRequest, task: Task | None = None) -> BinarizePreview:
    """Fold (when the config says so) and binarize a scratch copy; bad settings raise
    :class:`GraphLensError` in one line."""
    from graphlens.binarize.binarize import binarize_model, run_fold_rules

    scratch = scratch_from_bytes(request.model_bytes, request.model_path)
    session = RewriteSession(scratch)
    config = restricted(request.config, request.only)
    fold = None
    if config.fold_first:  # folded here, not inside binarize_model, to keep the folded float model
        fold = run_fold_rules(scratch, session, task)
    folded = onnx.ModelProto()
    folded.CopyFrom(scratch.to_proto())
    result = binarize_model(scratch, config.with_changes(fold_first=False), session, calibration=request.calibration,
                            samples=request.samples, task=task)
    result.config, result.fold = config, fold
    result.revision = request.revision
    after = scratch.to_proto()  # the scratch copy is dropped here: its protobuf needs no second copy
    return BinarizePreview(result, after, folded, request.revision, request.config, request.only, request.scope)


def apply_preview(model: Model, session: RewriteSession, preview: BinarizePreview) -> None:
    """Put ``preview.after`` in as one undo step."""
    with session.group("binarize"):
        session.apply([replace_main_graph(model, preview.after, "binarize")])
