"""What a ``graphlens`` run on a hostile file must and must not do, judged the same way by the
property-based test (tests/test_fuzz_hostile.py) and the campaign (tools/fuzz_campaign.py).

Exit 0, 1 (only where a check can find a difference) or 2; on failure one line on stderr; never a traceback;
the input files unchanged; any model written passes ``onnx.checker.check_model(path, full_check=True)``
(models with ``com.microsoft`` ops also onnxruntime's schemas, which the ONNX checker does not know); a run
that fails (exit 2 or more, or a timeout) leaves nothing in its output folder.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx

Execute = Callable[[Sequence[str]], "tuple[int | None, str, str]"]
"""Runs ``graphlens ARGS``; returns (exit code or None on a timeout, stdout, stderr)."""

CONTRIB_DOMAINS = ("com.microsoft",)

RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
"""Control characters (but tab and newline) and bidi controls: printed raw they reorder or hide the line."""

BYTES_REPR = re.compile(r"b'[^']*\\x[0-9a-f]{2}")
"""A name printed as Python bytes (``b'\\xf3...'``) instead of text with the stray bytes escaped."""

MISNAMED = {
    "deep-if": re.compile(r"not an ONNX model|truncated|corrupt"),
    "duplicate-producer": re.compile(r"no node produces|nothing produces|no producer"),
}
"""Refusals that name the wrong thing: deep nesting called a corrupt file, a second producer called a missing one."""

COMMANDS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    "info": lambda m, o, out: ["info", str(m)],
    "render": lambda m, o, out: ["render", str(m), "-o", str(out / "drawn.svg")],
    "match": lambda m, o, out: ["match", str(m), "-p", "conv-bn"],
    "explain": lambda m, o, out: ["explain", str(m), "-p", "conv-bn"],
    "fold-check": lambda m, o, out: ["fold", str(m), "-o", str(out / "folded.onnx"), "--check"],
    "fold-transformers": lambda m, o, out: ["fold", str(m), "-o", str(out / "fused.onnx"), "--rules", "transformers"],
    "quantize": lambda m, o, out: ["quantize", str(m), "-o", str(out / "quantized.onnx")],
    "binarize": lambda m, o, out: ["binarize", str(m), "-o", str(out / "binarized.onnx")],
    "compare": lambda m, o, out: ["compare", str(m), str(o)],
    "diff": lambda m, o, out: ["diff", str(m), str(o)],
}
"""Each command on mutant ``m``; ``o`` is a copy of the unmutated model, ``out`` the run's output folder."""
NAN_COMMANDS = ("fold-check", "diff")
"""The commands whose checks must fail on inputs or outputs that are not finite."""


@dataclass
class Run:
    """One command on one file, and what it did."""

    args: list[str]
    code: int | None
    stdout: str
    stderr: str
    seconds: float
    changed: list[str] = field(default_factory=list)
    """Input files whose bytes changed (or that vanished)."""
    left: list[str] = field(default_factory=list)
    """Files in the output folder after the run."""
    invalid: dict[str, str] = field(default_factory=dict)
    """Model written -> why it is invalid."""
    judged_by_onnxruntime: list[str] = field(default_factory=list)
    """Models written with com.microsoft ops, judged by onnxruntime's schemas as well."""


def exit_1_allowed(args: Sequence[str]) -> bool:
    """Exit 1 means a check found a difference: fold --check (or --inputs/--dim), diff, compare --check,
    quantize --target-sqnr."""
    command = args[0] if args else ""
    if command == "diff":
        return True
    if command == "fold":
        return any(a in args for a in ("--check", "--inputs", "--dim"))
    if command == "compare":
        return "--check" in args
    return command == "quantize" and "--target-sqnr" in args


def snapshot(roots: Iterable[Path]) -> dict[str, str]:
    """sha256 of every regular file under ``roots`` (files or folders); devices and pipes are not read."""
    digests = {}
    for root in roots:
        paths = [root] if root.is_file() else sorted(root.rglob("*")) if root.is_dir() else []
        for path in paths:
            if path.is_file() and not path.is_symlink():
                digests[str(path)] = hashlib.sha256(path.read_bytes()).hexdigest()
    return digests


def _uses_contrib_ops(model: onnx.ModelProto) -> bool:
    pending = [model.graph]
    while pending:
        graph = pending.pop()
        for node in graph.node:
            if node.domain in CONTRIB_DOMAINS:
                return True
            pending += [a.g for a in node.attribute if a.type == onnx.AttributeProto.GRAPH]
            pending += [g for a in node.attribute for g in a.graphs]
    return False


def _onnxruntime_problem(path: Path) -> str | None:
    """onnxruntime's verdict on a model with contrib ops: only a model it calls invalid counts (a missing
    kernel for a dtype is not the model's fault)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    options.log_severity_level = 4
    try:
        ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    except Exception as exc:
        text = str(exc)
        if "INVALID_GRAPH" in text or "invalid model" in text.lower() or "INVALID_PROTOBUF" in text:
            return f"onnxruntime refuses it: {' '.join(text.split())[:300]}"
    return None


def model_problem(path: Path) -> tuple[str | None, bool]:
    """(why the model at ``path`` is invalid or None, whether onnxruntime judged its contrib ops too)."""
    try:
        onnx.checker.check_model(str(path), full_check=True)
    except Exception as exc:
        return f"fails check_model(full_check=True): {' '.join(str(exc).split())[:300]}", False
    model = onnx.load(str(path), load_external_data=False)
    if _uses_contrib_ops(model):
        return _onnxruntime_problem(path), True
    return None, False


def outputs_not_finite(path: Path) -> bool | None:
    """Whether onnxruntime's outputs of the model at ``path`` hold NaN or Inf on random inputs (unknown dims 1,
    booleans true); None when it cannot run the model. Whether a check on it may pass hangs on this."""
    import numpy as np
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    try:
        session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
        rng = np.random.default_rng(0)
        feeds = {}
        for value in session.get_inputs():
            shape = [d if isinstance(d, int) and d > 0 else 1 for d in value.shape]
            kind = value.type.removeprefix("tensor(").removesuffix(")")
            feeds[value.name] = (np.ones(shape, bool) if kind == "bool" else
                                 rng.normal(size=shape).astype({"float": np.float32, "double": np.float64,
                                                                "float16": np.float16}.get(kind, np.int64)))
        outputs = session.run(None, feeds)
    except Exception:
        return None
    return any(np.issubdtype(np.asarray(o).dtype, np.floating) and not np.isfinite(o).all() for o in outputs)


def observe(args: Sequence[str], inputs: Sequence[Path], out: Path, execute: Execute) -> Run:
    """Run ``args`` with ``out`` emptied first, and record what it did to ``inputs`` and ``out``."""
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    before = snapshot(inputs)
    start = time.perf_counter()
    code, stdout, stderr = execute(list(args))
    run = Run(list(args), code, stdout, stderr, time.perf_counter() - start)
    after = snapshot(inputs)
    run.changed = sorted(p for p, digest in before.items() if after.get(p) != digest)
    run.left = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    if code in (0, 1):
        for name in run.left:
            if name.endswith(".onnx"):
                problem, by_onnxruntime = model_problem(out / name)
                if problem is not None:
                    run.invalid[name] = problem
                if by_onnxruntime:
                    run.judged_by_onnxruntime.append(name)
    return run


def violations(run: Run, *, nan_inputs: bool = False, mutation: str | None = None,
               refusal_expected: bool = False) -> list[tuple[str, str]]:
    """(kind, detail) of every rule ``run`` broke. ``nan_inputs``: NaN went in, so a PASS is wrong; ``mutation``:
    the mutant's (for the refusals that name the wrong thing); ``refusal_expected``: a bad argument, not to be
    accepted."""
    found: list[tuple[str, str]] = []
    lines = run.stderr.strip().splitlines()
    last = lines[-1][:300] if lines else ""
    if run.code is None:
        return [("timeout", f"after {run.seconds:.0f} s")]
    if run.code == 3:
        found.append(("internal error (exit 3)", last))
    elif run.code == 1 and not exit_1_allowed(run.args):
        found.append(("exit 1 from a command with no check", last))
    elif run.code < 0:
        found.append((f"killed by signal {-run.code}" + (" (out of memory?)" if run.code == -9 else ""), last))
    elif run.code not in (0, 1, 2):
        found.append((f"exit {run.code}", last))
    if "Traceback (most recent call last)" in run.stderr + run.stdout:
        found.append(("traceback", last))
    if run.code > 0 and not lines:  # (a process killed by a signal had no chance to say anything)
        found.append(("failure with an empty stderr", run.stdout.strip().splitlines()[-1][:300] if run.stdout.strip()
                      else ""))
    elif run.code > 0 and len(lines) > 1:
        found.append(("failure with more than one line on stderr", f"{len(lines)} lines, last: {last}"))
    if run.changed:
        found.append(("input changed", ", ".join(run.changed)))
    found += [("invalid model written", f"{name}: {why}") for name, why in run.invalid.items()]
    if run.code not in (0, 1) and run.left:
        found.append(("output left after a failure", ", ".join(run.left)))
    if nan_inputs and run.code == 0:
        found.append(("NaN passed a check", last or run.stdout.strip()[-200:]))
    if refusal_expected and run.code == 0:
        found.append(("bad argument accepted (exit 0)", run.stdout.strip()[-200:]))
    found += _message_problems(run, lines, mutation)
    return found


def _message_problems(run: Run, lines: list[str], mutation: str | None) -> list[tuple[str, str]]:
    found = []
    for stream, text in (("stderr", run.stderr), ("stdout", run.stdout)):
        raw = RAW_CONTROL.search(text)
        if raw:
            around = text[max(0, raw.start() - 60): raw.end() + 20]
            found.append(("raw control or bidi character printed", f"{stream}: {around!a}"))
        if BYTES_REPR.search(text):
            found.append(("name printed as Python bytes", f"{stream}: {BYTES_REPR.search(text)[0]!a}"))
    wrong = MISNAMED.get(mutation or "")
    if run.code == 2 and wrong is not None and lines and wrong.search(lines[-1]):
        found.append(("refusal names the wrong problem", lines[-1][:300]))
    return found
