"""A lossy rewrite (quantization, binarization) previewed on a scratch copy: one request, one pipeline, one preview.

The request is captured from the live model on its owner's thread: the settings, the samples, the model as bytes
and its revision. :func:`compute_lossy_preview` runs anywhere (a worker thread): it folds a copy made from those
bytes with the config's fold rules, keeps that folded float model, runs the rewrite on the copy and keeps its
result, the rewritten model and the samples it ran on, so a lesson can explain any tensor with the very numbers
the rewrite saw. The workspace keeps a preview only while the model is at the revision it was computed for, and
applies exactly its rewritten model as one undo step.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, Protocol, TypeVar

import onnx

from graphlens.core.model import Model, scratch_from_bytes
from graphlens.core.task import Task, task_or_idle
from graphlens.numerics.samples import CalibrationData
from graphlens.rewrites.driver import FoldReport, fold_model, resolve_rules
from graphlens.rewrites.edit import EditHistory, GraphEdit

C = TypeVar("C")
"""The rewrite's settings (``QuantConfig``, ``BinarizeConfig``)."""


class _Result(Protocol):
    def to_dict(self) -> dict[str, Any]: ...


R = TypeVar("R", bound=_Result)
"""What the rewrite says it did (``QuantizeResult``, ``BinarizeResult``)."""


@dataclass(frozen=True, kw_only=True)
class LossyRequest(Generic[C]):
    """What a lossy preview needs, captured from the live model on its owner's thread."""

    config: C
    calibration: CalibrationData | None
    """Samples (from an .npz or images, read when asked); None: ``samples`` random ones."""
    samples: int
    model_bytes: bytes = field(repr=False)
    model_path: Path | None
    revision: int
    only: tuple[str, ...] | None = None
    """The layers to rewrite (node names); None: every layer the config allows."""
    scope: str = "every linear layer"
    """Which layers, in words (a panel's heading)."""


@dataclass
class LossyPreview(Generic[C, R]):
    """A lossy rewrite computed for ``revision`` of the model, not applied (dropped once the model changes)."""

    result: R
    after: onnx.ModelProto = field(repr=False)
    """The rewritten model."""
    float_model: onnx.ModelProto = field(repr=False)
    """The model after folding, before the rewrite: the float values its errors compare against."""
    calibration: CalibrationData | None = field(repr=False)
    """The samples the rewrite ran on (None where it drew its own)."""
    revision: int
    config: C
    """The settings as asked (before ``only`` narrowed them)."""
    only: tuple[str, ...] | None = None
    scope: str = "every linear layer"

    def to_dict(self) -> dict[str, Any]:
        return {"revision": self.revision, "scope": self.scope, "only": list(self.only) if self.only else None,
                **self.result.to_dict()}


def compute_lossy_preview(
    request: LossyRequest[C],
    fold_rules: Sequence[str],
    rewrite: Callable[[Model, EditHistory, onnx.ModelProto, FoldReport | None, Task],
                      tuple[R, CalibrationData | None]],
    what: str,
    task: Task | None = None,
) -> LossyPreview[C, R]:
    """Fold a scratch copy with ``fold_rules``, then ``rewrite`` it in place (given its session, the folded float
    model and the fold's report; it returns its result and the samples it ran on). Cancelling ``task`` stops it with
    :class:`~graphlens.core.task.Cancelled` (``"<what> was cancelled"``)."""
    task = task_or_idle(task)
    scratch = scratch_from_bytes(request.model_bytes, request.model_path)
    session = EditHistory(scratch)
    fold = fold_model(scratch, resolve_rules(list(fold_rules)), session, task=task) if fold_rules else None
    task.check(what)
    folded = onnx.ModelProto()
    folded.CopyFrom(scratch.to_proto())
    result, data = rewrite(scratch, session, folded, fold, task)
    after = scratch.to_proto()  # the scratch copy is dropped here: its protobuf needs no second copy
    return LossyPreview(result, after, folded, data, request.revision, request.config, request.only, request.scope)


def replace_main_graph(model: Model, after: onnx.ModelProto, label: str) -> GraphEdit:
    """One edit making the live main graph ``after``'s: its nodes, and its initializers where they differ."""
    graph = model.graph
    live = graph.initializers
    wanted = {t.name: t for t in after.graph.initializer}
    changed = {name: t for name, t in wanted.items() if name not in live or live[name] != t}
    return GraphEdit(graph.path, label, label, remove=[n.name for n in graph.nodes],
                     add=_named_nodes(after), initializers=changed,
                     drop_initializers=[name for name in live if name not in wanted])


def _named_nodes(after: onnx.ModelProto) -> list[onnx.NodeProto]:
    """Copies of ``after``'s main-graph nodes, each under the name the graph gives it: a node a file left
    unnamed gets the generated name the live graph shows (nodes named alike would refuse to go in)."""
    nodes = []
    for node in Model(after).graph.nodes:
        copied = _copy(node.proto)
        copied.name = node.name
        nodes.append(copied)
    return nodes


def _copy(node: onnx.NodeProto) -> onnx.NodeProto:
    copied = onnx.NodeProto()
    copied.CopyFrom(node)  # the live graph owns its nodes; the preview keeps its own
    return copied
