"""Judging a quantized model by the task: a user's function that scores a model file.

``graphlens quantize --evaluate SCRIPT.py`` loads ``SCRIPT.py`` and calls its function

    def evaluate(model_path: str) -> float: ...

on candidate models written to a temporary folder (higher is better: an accuracy, or minus an OCR
character error rate). ``ws.quantization.quantize(..., evaluate=callable)`` takes the function itself. With
``--target-score X`` (``QuantConfig.target_score``) the target search leaves layers float until the
score reaches ``X``; without, the quantized model's score is reported. A script that is missing,
has no ``evaluate``, raises or returns something that is not a number is one line of error.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx

from graphlens.core.errors import GraphLensError
from graphlens.quantize.config import QuantConfig
from graphlens.quantize.place import Placement, apply_quantization, scratch_model
from graphlens.quantize.qdq import QParams

FUNCTION = "evaluate"
Evaluate = Callable[[str], float]


def load_evaluate(path: str | Path) -> Evaluate:
    """The ``evaluate`` function of the Python file ``path``."""
    import importlib.util

    path = Path(path)
    if not path.is_file():
        raise GraphLensError(f"--evaluate: {path}: no such file")
    spec = importlib.util.spec_from_file_location(f"graphlens_evaluate_{path.stem}", path)
    if spec is None or spec.loader is None:
        raise GraphLensError(f"--evaluate: {path}: not a Python file")
    module = importlib.util.module_from_spec(spec)
    try:
        with _kept_directory():
            spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # the user's code: any error is theirs to see, in one line
        raise GraphLensError(f"--evaluate: {path} failed to load: {_what(exc)}") from exc
    function = getattr(module, FUNCTION, None)
    if not callable(function):
        raise GraphLensError(f"--evaluate: {path} defines no function '{FUNCTION}(model_path: str) -> float'")
    found: Evaluate = function
    return found


def score(evaluate: Evaluate, path: str | Path) -> float:
    """``evaluate(path)`` as a float; anything else (a string, a bool, NaN or an infinity), an exception or a
    ``sys.exit()`` is one line of error. The working directory is restored after the call, so relative paths the
    command was given still name the same files."""
    called = f"{_script(evaluate)}evaluate('{path}')"
    try:
        with _kept_directory():
            value = evaluate(str(path))
    except (Exception, SystemExit) as exc:  # the user's code
        raise GraphLensError(f"{called} {_what(exc, 'raised ')}") from exc
    try:  # a bool or a string would convert, and is no score; a 0-d array or a Decimal is one
        if isinstance(value, (bool, np.bool_, str, bytes)):
            raise TypeError
        number = float(value)
    except (TypeError, ValueError):
        raise GraphLensError(f"{called} returned {value!r}, not a number") from None
    if not math.isfinite(number):
        raise GraphLensError(f"{called} returned {number}, not a finite number")
    return number


def _script(evaluate: Evaluate) -> str:
    """``score.py: `` for a function defined in a file (the candidate's path is a temporary one), else nothing."""
    source = getattr(getattr(evaluate, "__code__", None), "co_filename", "")
    return f"{Path(source).name}: " if source and Path(source).is_file() else ""


def _what(exc: BaseException, raised: str = "") -> str:
    """What the user's code did, for one line: ``sys.exit(...)`` or ``raised Error: message``."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({exc.code!r})"
    return f"{raised}{type(exc).__name__}: {exc}"


@contextmanager
def _kept_directory() -> Iterator[None]:
    """The working directory as it was, whatever the user's code does with it."""
    here = os.getcwd()
    try:
        yield
    finally:
        os.chdir(here)


class Candidates:
    """Candidate models of one quantization (some layers left float), written to a temporary folder and scored."""

    def __init__(self, float_proto: onnx.ModelProto, placement: Placement, params: dict[str, QParams],
                 config: QuantConfig, evaluate: Evaluate, bias_shift: dict[str, np.ndarray] | None = None) -> None:
        self.float_proto, self.placement, self.params, self.config = float_proto, placement, params, config
        self.evaluate, self.bias_shift = evaluate, bias_shift
        self._folder = tempfile.TemporaryDirectory(prefix="graphlens-evaluate-")
        self._count = 0

    def float_score(self) -> float:
        return self._score(self.float_proto)

    def __call__(self, excluded: list[str]) -> float:
        """The score of the model quantized with ``excluded`` layers left float."""
        scratch = scratch_model(self.float_proto)
        skip = set(excluded)
        apply_quantization(scratch, self.placement, self.params, self.config,
                           keep=lambda site: site.node not in skip, bias_shift=self.bias_shift)
        return self._score(scratch.to_proto())

    def score_proto(self, proto: onnx.ModelProto) -> float:
        """The score of a model as it is (the quantized model, for the report)."""
        try:
            return self._score(proto)
        finally:
            self.close()

    def _score(self, proto: onnx.ModelProto) -> float:
        self._count += 1
        path = Path(self._folder.name) / f"candidate{self._count}.onnx"
        onnx.save_model(proto, path)
        try:
            return score(self.evaluate, path)
        finally:
            path.unlink(missing_ok=True)

    def close(self) -> None:
        self._folder.cleanup()
