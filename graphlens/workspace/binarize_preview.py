"""Previewing a binarization on a scratch copy (:mod:`graphlens.rewrites.lossy`'s pipeline), and applying exactly
that result to the live model.

:func:`apply_preview` puts the preview in as one :class:`GraphEdit` on the live main graph, so
Apply puts in exactly what was previewed as one undo step.

A request may be limited to some layers (``only``: the linear nodes of one match, or of every
match), through the config's ``only_nodes``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import onnx

from graphlens.binarize.config import OP_TYPES, BinarizeConfig
from graphlens.core.linear import linear_layer
from graphlens.core.model import Model
from graphlens.core.task import Task
from graphlens.rewrites.edit import EditHistory
from graphlens.rewrites.lossy import LossyPreview, LossyRequest, compute_lossy_preview, replace_main_graph

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.core.graph import Graph
    from graphlens.numerics.samples import CalibrationData
    from graphlens.rewrites.driver import FoldReport

BinarizeRequest = LossyRequest[BinarizeConfig]
BinarizePreview = LossyPreview[BinarizeConfig, "BinarizeResult"]
"""A binarization's preview: the one lossy-preview type, for the binarizer's settings and result."""


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
    """Fold (with the config's fold rules) and binarize a scratch copy, only the request's layers if it names
    some; bad settings raise :class:`GraphLensError` in one line."""
    from graphlens.binarize.binarize import binarize_model

    config = restricted(request.config, request.only)

    def binarize(scratch: Model, session: EditHistory, folded: onnx.ModelProto, fold: FoldReport | None,
                 task: Task) -> tuple[BinarizeResult, CalibrationData | None]:
        result = binarize_model(scratch, config.with_changes(fold_rules=()), session, calibration=request.calibration,
                                samples=request.samples, task=task)
        result.config, result.fold, result.revision = config, fold, request.revision
        return result, request.calibration

    return compute_lossy_preview(request, config.fold_rules, binarize, "binarization", task)


def apply_preview(model: Model, session: EditHistory, preview: BinarizePreview) -> None:
    """Put ``preview.after`` in as one undo step."""
    with session.group("binarize"):
        session.apply([replace_main_graph(model, preview.after, "binarize")])
