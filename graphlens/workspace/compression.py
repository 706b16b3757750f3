"""The lossy rewrites of the workspace: quantization and binarization, run, previewed and applied.

Mixed into :class:`~graphlens.workspace.Workspace`, whose model, session and events they use. Like
rewrite previews, a quantize or binarize preview is computed on a scratch copy from a request
captured on the owner's thread (:mod:`~graphlens.workspace.quantize_preview`,
:mod:`~graphlens.workspace.binarize_preview`), kept only while the model is at the revision it was
computed for, and applied as one undo step or refused with a sentence.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from graphlens.core.errors import GraphLensError
from graphlens.core.names import check_node_names
from graphlens.core.task import Task

if TYPE_CHECKING:
    from psygnal import SignalInstance

    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.core.model import Model
    from graphlens.quantize import CalibrationData, QuantConfig, QuantizeResult
    from graphlens.rewrites.edit import RewriteSession
    from graphlens.workspace.binarize_preview import BinarizePreview, BinarizeRequest
    from graphlens.workspace.events import WorkspaceEvents
    from graphlens.workspace.jobs import Job
    from graphlens.workspace.quantize_preview import QuantizePreview, QuantizeRequest

_Preview = TypeVar("_Preview", "QuantizePreview", "BinarizePreview")


class CompressionJobs:
    """Quantize and binarize, with their previews (see the module docstring).

    Expects what :class:`~graphlens.workspace.Workspace` provides: ``model``, ``events``,
    ``revision``, ``require_model()`` and ``edit_session()``; and keeps ``quantization``,
    ``quantize_preview``, ``binarization`` and ``binarize_preview``, which opening a model resets.
    """

    quantization: QuantizeResult | None
    quantize_preview: QuantizePreview | None
    binarization: BinarizeResult | None
    binarize_preview: BinarizePreview | None

    if TYPE_CHECKING:
        model: Model | None
        events: WorkspaceEvents

        @property
        def revision(self) -> int: ...
        def require_model(self) -> Model: ...
        def edit_session(self) -> RewriteSession: ...
        def _job(self, kind: str, what: str, request: Any, compute: Callable[..., Any],
                 keep: Callable[[Any], Any] | None = None, *, reads_live: bool = False) -> Job[Any, Any]: ...

    # ================================================================ quantization
    def quantize(
        self,
        config: QuantConfig | None = None,
        calibration: CalibrationData | str | os.PathLike[str] | None = None,
        samples: int = 8,
        *,
        task: Task | None = None,
        preprocess: str | None = None,
        evaluate: Callable[[str], float] | None = None,
    ) -> QuantizeResult:
        """Fold, calibrate (an .npz, a folder of images read by ``preprocess``, given samples, or ``samples``
        random ones) and insert QDQ pairs, as :func:`graphlens.quantize.quantize_model` does; one undo
        step. The result stays as ``quantization``.

        ``evaluate(model_path) -> float`` (higher is better) scores the quantized model; with
        ``config.target_score`` the target search uses it in place of the output SQNR."""
        from graphlens.quantize import load_calibration, quantize_model

        model = self.require_model()
        check_node_names(config.exclude_nodes if config is not None else (), model.graph.by_name, "exclude")
        if isinstance(calibration, (str, os.PathLike)):
            calibration = load_calibration(os.fspath(calibration), model, preprocess=preprocess)
        result = quantize_model(model, config, calibration, self.edit_session(), samples=samples, task=task,
                                evaluate=evaluate)
        self.quantization = result
        self.events.quantized.emit(result)
        return result

    def preview_quantize(self, config: QuantConfig | None = None,
                         calibration: CalibrationData | str | os.PathLike[str] | None = None, samples: int = 8,
                         *, task: Task | None = None) -> QuantizePreview:
        """Quantize a scratch copy and keep the result as ``quantize_preview``; the model is not touched."""
        preview: QuantizePreview = self.quantize_job(config, calibration, samples).run(task)
        return preview

    def quantize_job(self, config: QuantConfig | None = None,
                     calibration: CalibrationData | str | os.PathLike[str] | None = None,
                     samples: int = 8, *, preprocess: str | None = None) -> Job[QuantizeRequest, QuantizePreview]:
        """The quantize preview as a :class:`~graphlens.workspace.jobs.Job`: its request captured now, computed
        on a scratch copy anywhere, kept as ``quantize_preview`` only for the model as it still is."""
        from graphlens.workspace.quantize_preview import compute_quantize_preview

        request = self.quantize_request(config, calibration, samples, preprocess=preprocess)
        return self._job("quantize_preview", "the quantization", request, compute_quantize_preview,
                         self.accept_quantize_preview)

    def quantize_request(self, config: QuantConfig | None = None,
                         calibration: CalibrationData | str | os.PathLike[str] | None = None,
                         samples: int = 8, *, preprocess: str | None = None) -> QuantizeRequest:
        """What :func:`compute_quantize_preview` needs, captured now; samples that do not fit (an .npz, or a
        folder of images read by ``preprocess``) raise here."""
        from graphlens.quantize import QuantConfig, load_calibration
        from graphlens.workspace.quantize_preview import QuantizeRequest

        model = self.require_model()
        if isinstance(calibration, (str, os.PathLike)):
            calibration = load_calibration(os.fspath(calibration), model, preprocess=preprocess)
        if samples < 1:
            raise GraphLensError(f"need at least 1 calibration sample, not {samples}")
        config = config or QuantConfig()
        check_node_names(config.exclude_nodes, model.graph.by_name, "exclude")
        return QuantizeRequest(config=config, calibration=calibration, samples=samples,
                               model_bytes=model.to_proto().SerializeToString(), model_path=model.path,
                               revision=model.revision)

    def accept_quantize_preview(self, preview: QuantizePreview | None) -> bool:
        """Keep ``preview`` if the model is still the one it was computed for (None drops the current one)."""
        return self._keep_preview("quantize_preview", self.events.quantize_preview_changed, preview)

    def apply_quantize(self) -> QuantizeResult:
        """Put exactly the previewed quantized model in as one undo step (its nodes and initializers, by
        name; the opset raised with it and lowered by undo), or refuse with a sentence."""
        from graphlens.quantize.opset import OpsetRaise, follow_history, set_opset
        from graphlens.workspace.preview import replace_main_graph
        from graphlens.workspace.quantize_preview import default_opset

        preview = self._previewed(self.quantize_preview, "quantization")
        model, session = self.require_model(), self.edit_session()
        before, after = model.opset("") or 1, default_opset(preview.after)
        with session.group("quantize") as change:
            if after > before:
                set_opset(model, after)
            session.apply([replace_main_graph(model, preview.after, "quantize")])
        if after > before:
            follow_history(session, change, OpsetRaise(before, after, "quantization", False))
        result = preview.result
        result.revision = model.revision
        self.quantization = result
        self.events.quantized.emit(result)
        return result

    # ================================================================ binarization previews
    def binarize_request(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                         samples: int = 4, *, only: list[str] | None = None,
                         scope: str = "every linear layer") -> BinarizeRequest:
        """What :func:`compute_binarize_preview` needs, captured now; ``only`` limits it to those layers."""
        from graphlens.binarize.config import BinarizeConfig
        from graphlens.workspace.binarize_preview import BinarizeRequest

        model = self.require_model()
        if only is not None and not only:
            raise GraphLensError("there is no linear layer with a constant weight to binarize there")
        return BinarizeRequest(config=config or BinarizeConfig(), calibration=calibration, samples=samples,
                               model_bytes=model.to_proto().SerializeToString(), model_path=model.path,
                               revision=model.revision, only=None if only is None else tuple(only), scope=scope)

    def preview_binarize(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                         samples: int = 4, *, only: list[str] | None = None) -> BinarizePreview:
        """Binarize a scratch copy (only the layers ``only`` names, if given); kept as ``binarize_preview``."""
        preview: BinarizePreview = self.binarize_job(config, calibration, samples, only=only).run()
        return preview

    def binarize_job(self, config: BinarizeConfig | None = None, calibration: CalibrationData | None = None,
                     samples: int = 4, *, only: list[str] | None = None,
                     scope: str = "every linear layer") -> Job[BinarizeRequest, BinarizePreview]:
        """The binarize preview as a :class:`~graphlens.workspace.jobs.Job` (see :meth:`quantize_job`)."""
        from graphlens.workspace.binarize_preview import compute_binarize_preview

        request = self.binarize_request(config, calibration, samples, only=only, scope=scope)
        return self._job("binarize_preview", "the binarization", request, compute_binarize_preview,
                         self.accept_binarize_preview)

    def accept_binarize_preview(self, preview: BinarizePreview | None) -> bool:
        """Keep ``preview`` if the model is still the one it was computed for (None drops the current one)."""
        return self._keep_preview("binarize_preview", self.events.binarize_preview_changed, preview)

    def apply_binarize(self) -> BinarizeResult:
        """Put exactly the previewed binarized model in as one undo step, or refuse with a sentence."""
        from graphlens.workspace.binarize_preview import apply_preview

        preview = self._previewed(self.binarize_preview, "binarization")
        apply_preview(self.require_model(), self.edit_session(), preview)
        result = preview.result
        result.revision = self.revision
        self.binarization = result
        self.events.binarized.emit(result)
        return result

    # ================================================================ shared
    def _keep_preview(self, attribute: str, signal: SignalInstance,
                      preview: QuantizePreview | BinarizePreview | None) -> bool:
        if preview is not None and (self.model is None or preview.revision != self.model.revision):
            return False
        setattr(self, attribute, preview)
        signal.emit(preview)
        return True

    def _previewed(self, preview: _Preview | None, what: str) -> _Preview:
        """``preview`` if it can be applied to the model as it is; else a sentence saying why not."""
        if preview is None:
            raise GraphLensError(f"there is no previewed {what} to apply; press Run first")
        if preview.revision != self.revision:
            raise GraphLensError(f"the model changed after this {what} was previewed; run it again")
        return preview

    # ================================================================ binarization
    def binarize(
        self,
        config: BinarizeConfig | None = None,
        calibration: CalibrationData | str | os.PathLike[str] | None = None,
        samples: int = 4,
        *,
        task: Task | None = None,
    ) -> BinarizeResult:
        """Fold and binarize the weights (K bits per kernel or per tensor) as
        :func:`graphlens.binarize.binarize.binarize_model` does, measuring the output SQNR on the samples (an .npz,
        given samples, or ``samples`` random ones); one undo step. The result stays as ``binarization``."""
        from graphlens.binarize.binarize import binarize_model

        model = self.require_model()
        result = binarize_model(model, config, self.edit_session(), calibration=calibration, samples=samples,
                                task=task)
        self.binarization = result
        self.events.binarized.emit(result)
        return result
