"""Property-based fuzzing: structure-aware mutants of the demo model, a small Conv-BN model and
one inside an If (tests/mutations.py) through every command and through the Workspace, judged by tests/fuzz_judge.py:

exit code 0, 1 (where a check can find a difference) or 2; one line on stderr when a command fails; no
traceback; the input files unchanged; any model written passes the ONNX checker's full check; a failure
leaves nothing behind. NaN or Inf in a model's outputs never passes ``fold --check`` or ``diff``.

One test per mutation, each a bounded, derandomized hypothesis search (no example database): the same
examples on every run. ``tools/fuzz_campaign.py`` runs the same mutations longer, on larger models, as
separate processes.
"""

from __future__ import annotations

import functools
import io
import re
import tempfile
import traceback
from collections.abc import Callable, Sequence
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import onnx
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from graphlens import Workspace, cli
from graphlens.core.bundled import demo_model_path
from graphlens.core.errors import GraphLensError
from tests import models
from tests.fuzz_judge import COMMANDS as CAMPAIGN_COMMANDS
from tests.fuzz_judge import NAN_COMMANDS, observe, outputs_not_finite, violations
from tests.mutations import MUTATIONS, PATH_ONLY, mutate, small_conv_bn, write_mutant

SUITE_MUTATIONS = [name for name in MUTATIONS if name not in PATH_ONLY or name == "directory"]
"""/dev/zero and a named pipe are the campaign's: each costs a timeout or gigabytes when mishandled."""

COMMANDS: dict[str, Callable[[Path, Path, Path], list[str]]] = {
    **CAMPAIGN_COMMANDS,
    "quantize": lambda m, o, out: [*CAMPAIGN_COMMANDS["quantize"](m, o, out), "--samples", "2"],
    "workspace": lambda m, o, out: ["workspace", str(m), str(out / "saved.onnx")],
}
"""The campaign's commands (tests/fuzz_judge.py), quantize on 2 samples for speed, and ``workspace``:
Workspace.open, find_matches, explain, fold and save_as in turn."""

FUZZ = settings(max_examples=5, deadline=None, derandomize=True, database=None,
                phases=[Phase.explicit, Phase.generate],  # no shrinking: a failure is reported as found, fast
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


BASES = ["demo", "conv-bn", "if-conv-bn"]


@functools.cache
def base_model(name: str) -> onnx.ModelProto:
    """The demo; a Conv -> BN -> Relu -> Softmax with the BN scale behind a Constant; an If whose branch holds
    a Conv -> BN (for the mutations of subgraphs)."""
    if name == "demo":
        return onnx.load(str(demo_model_path()))
    return small_conv_bn() if name == "conv-bn" else models.if_with_conv_bn()


def in_process(args: Sequence[str]) -> tuple[int | None, str, str]:
    """``graphlens ARGS`` through :func:`graphlens.cli.main` in this process, stdout and stderr captured."""
    if args[0] == "workspace":
        return through_workspace(Path(args[1]), Path(args[2]))
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code: int | None = cli.main(list(args))
        except BaseException:  # main lets nothing escape; if something does, the traceback is the finding
            traceback.print_exc(file=err)
            code = -1
    return code, out.getvalue(), err.getvalue()


def through_workspace(path: Path, out: Path) -> tuple[int | None, str, str]:
    """What the window does with a file: a :class:`GraphLensError` is a refusal (exit 2), anything else a bug."""
    workspace = Workspace(keep_history=False)
    try:
        workspace.open(path)
        workspace.matches.find("conv-bn")
        workspace.matches.explain("conv-bn")
        workspace.fold()
        workspace.save_as(out)
    except GraphLensError as exc:
        return 2, "", " ".join(str(exc).split()) + "\n"
    except Exception as exc:
        return 3, "", f"internal error: {type(exc).__name__}: {' '.join(str(exc).split())[:500]}\n"
    return 0, "", ""


def check_mutant(mutation: str, base: str, seed: int) -> None:
    """The mutant through every command; every violation of every command is reported."""
    done = mutate(base_model(base), mutation, seed)
    if done is None:
        return
    draft, description = done
    failures = []
    with tempfile.TemporaryDirectory(prefix="graphlens_fuzz_") as name:
        folder = Path(name)
        (folder / "orig").mkdir()
        original = folder / "orig" / "model.onnx"
        onnx.save(base_model(base), str(original))
        mutant = write_mutant(draft, folder, "model.onnx")
        inputs = [p for p in folder.iterdir() if p.name != "out"]
        not_finite = mutation == "bn-nan" and outputs_not_finite(mutant) is True
        for command, make in COMMANDS.items():
            run = observe(make(mutant, original, folder / "out"), inputs, folder / "out", in_process)
            found = violations(run, nan_inputs=not_finite and command in NAN_COMMANDS, mutation=mutation)
            failures += [f"{command} (exit {run.code}): {kind}: {detail[:300]}" for kind, detail in found]
    assert not failures, f"{base}/{mutation}:{seed} ({description})\n" + "\n".join(failures)


@pytest.mark.parametrize("mutation", SUITE_MUTATIONS)
@FUZZ
@given(base=st.sampled_from(BASES), seed=st.integers(0, 2**31 - 1))
def test_hostile_mutants_are_refused_in_one_line_or_handled(mutation: str, base: str, seed: int) -> None:
    check_mutant(mutation, base, seed)


ISSUE_41 = [
    ("init-dtype", "demo", r"^initializer .*dtype 1 -> 999$"),
    ("init-dtype", "conv-bn", r"^Constant .*dtype 1 -> 999$"),
    ("init-dtype", "demo", r"dtype 1 -> 10$"),
    ("input-dtype", "demo", r"-> 999$"),
    ("input-dims", "demo", r"= -1$"),
    ("input-dims", "demo", r"= 0$"),
    ("input-dims", "conv-bn", r"= 1099511627776$"),
    ("attr-type", "conv-bn", r"epsilon FLOAT -> bytes"),
    ("attr-type", "conv-bn", r"epsilon FLOAT -> STRING"),
    ("attr-type", "conv-bn", r"epsilon FLOAT -> TENSOR"),
    ("attr-type", "conv-bn", r"epsilon FLOAT -> INTS"),
    ("attr-type", "conv-bn", r"^Softmax .*axis INT -> STRING"),
    ("bn-length", "demo", r": 16 -> 7 values"),
    ("bn-string", "conv-bn", r"as STRING b'abc'"),
    ("bn-training", "demo", r"training_mode = 1"),
    ("bn-nan", "conv-bn", r"one value nan"),
    ("conv-values", "demo", r"^Conv .*strides = \[0, 0\]"),
    ("conv-values", "demo", r"^Conv .*pads = \[1099511627776"),
    ("constant-no-value", "demo", r"no value"),
    ("constant-misfit", "demo", r"^Constant .*dims"),
    ("dangling-input", "demo", r"."),
    ("duplicate-producer", "demo", r"^Conv "),
    ("out-of-order", "demo", r"shuffled"),
    ("out-of-order", "if-conv-bn", r"then_branch"),
    ("subgraph-arity", "if-conv-bn", r"."),
    ("deep-if", "conv-bn", r"nested 300 deep"),
    ("name-non-utf8", "demo", r"."),
    ("name-bidi", "demo", r"\\u202e"),
    ("external-data", "conv-bn", r"outside$"),
    ("external-data", "conv-bn", r"missing$"),
    ("external-data", "conv-bn", r"short$"),
    ("truncated", "demo", r"."),
    ("directory", "demo", r"."),
]
"""The causes of internal errors and invalid writes found by fuzzing, each as (mutation, base model, what its
description says): the first seed that makes it, through every command, whatever the hypothesis search above
happens to draw."""


@pytest.mark.parametrize(("mutation", "base", "pattern"), ISSUE_41, ids=lambda v: v if isinstance(v, str) else "")
def test_each_cause_of_issue_41_is_refused_in_one_line_or_handled(mutation: str, base: str, pattern: str) -> None:
    seed = next((s for s in range(2000) if (done := mutate(base_model(base), mutation, s)) is not None
                 and re.search(pattern, done[1])), None)
    assert seed is not None, f"no seed below 2000 makes {mutation} on {base} match {pattern!r}"
    check_mutant(mutation, base, seed)
