"""What every command that writes a model shares: the input's full check, ``--force``, failures said on stderr.

A model is written only when it passes the ONNX checker's full check (with shape inference), and only once
the command has succeeded: it is written under a temporary name, checked, run by a numeric check if one
was asked for, and renamed into place last (:meth:`graphlens.core.model.Model.save`'s ``before_commit``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from graphlens.core.errors import GraphLensError
from graphlens.core.model import Model

if TYPE_CHECKING:
    from graphlens.rewrites.driver import FoldReport


class CheckFailed(Exception):
    """A check the command ran found a difference (exit 1); the model is not written. Its text is the reason;
    ``failure`` the check's own line, ``report`` the fold that was checked."""

    def __init__(self, reason: str, *, report: FoldReport | None = None, failure: str = "") -> None:
        super().__init__(reason)
        self.report, self.failure = report, failure or reason


def add_force(p: argparse.ArgumentParser) -> None:
    p.add_argument("--force", action="store_true",
                   help="write the output even though the input fails the ONNX checker's full check (with shape "
                        "inference); the output must still pass its structural check")


_STALE_VALUE_INFO = ("Inferred shape and existing shape differ", "Inferred elem type differs from existing")
"""The checker's words for a value_info entry that contradicts shape inference."""


def input_full_check(args: argparse.Namespace, model: Model | None = None) -> bool:
    """Whether the output must pass the full check: yes, after refusing an input that fails it; with ``--force``
    such an input is a warning and its output is held to the structural check alone.

    An input that fails only because its value_info (the types it states for inner tensors, which onnxruntime
    ignores) contradicts shape inference on a Constant, as onnxruntime-genai's builder writes some, is taken with a
    warning: ``model`` forgets those entries, and its output is held to the full check (which it fails, and is not
    written, if the entries hid another problem)."""
    from graphlens.core.full_check import full_check_problem

    problem = full_check_problem(args.model)
    if problem is None:
        return True
    if model is not None and problem.startswith("Constant '") and any(words in problem for words in _STALE_VALUE_INFO):
        for graph in model.graphs():
            graph.forget_value_info()
        say(f"warning: {args.model}: its value_info contradicts shape inference ({problem}); the written model "
            "leaves the types of inner tensors to inference")
        return True
    if not getattr(args, "force", False):
        raise GraphLensError(f"{args.model}: fails the ONNX checker (full check, with shape inference): {problem}; "
                             "nothing written (--force writes the output anyway)")
    say(f"warning: {args.model}: fails the ONNX checker (full check, with shape inference): {problem}; "
        "writing the output anyway (--force)")
    return False


def say(line: str) -> None:
    """One line on stderr, as the command's failures are said."""
    print(f"graphlens: {' '.join(line.splitlines())}", file=sys.stderr, flush=True)
