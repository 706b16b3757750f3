"""A fuzz campaign against the ``graphlens`` command line: structure-aware mutants of small real
models, and bad arguments, each run as a process of its own with a timeout, judged by tests/fuzz_judge.py.

    .venv/bin/python tools/fuzz_campaign.py [--seed 0] [--mutants 120] [--runs N] [--commands info,fold-check,...]
        [--large] [--jobs 1] [--timeout 120] [--source DIR [--label TEXT]] [--keep DIR] [--case BASE:MUTATION:SEED ...]
        [--no-arguments]

Mutants come round-robin from every (base model, mutation) pair in a shuffled order, so a campaign of a
hundred covers each mutation on each model; the mutations are tests/mutations.py's. Every mutant goes through
every command (``--commands``); then come the bad-argument cases (tools/fuzz_arguments.py). The totals and
each violation, with the command that reproduces it, go to stdout; progress to stderr.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import onnx  # noqa: E402

from tests.fuzz_judge import COMMANDS, NAN_COMMANDS, Run, observe, outputs_not_finite, violations  # noqa: E402
from tests.mutations import MUTATIONS, PATH_ONLY, mutate, write_mutant  # noqa: E402
from tools.fuzz_arguments import argument_cases  # noqa: E402
from tools.fuzz_report import Finding, printable, report  # noqa: E402

MODELS = Path("/work/models/extracted")
ZOO = Path(onnx.__file__).parent / "backend/test/data/light"
BASES = {
    "demo": ROOT / "resources/demo.onnx",
    "ppocr-cls": MODELS / "rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "silero-vad": MODELS / "silero_vad/data/silero_vad.onnx",
    "zoo-resnet50": ZOO / "light_resnet50.onnx",
}
LARGE = {"rxnmap": MODELS / "chython_rxnmap/rxnmap.onnx"}


FIFO_TIMEOUT = 10.0
"""A named pipe nothing writes to blocks whoever opens it: each command gets this long to refuse it."""

"""On a mutant whose outputs are NaN, these must not pass."""


@dataclass
class Case:
    """One mutant (or argument case) and the runs made on it."""

    label: str
    cause: str
    description: str
    regenerate: str
    mutation: str | None = None
    refusal_expected: bool = False
    """A bad-argument case that must not exit 0."""
    not_finite: bool = False
    """NaN or Inf go in (arguments) or come out (the model): no check may pass."""
    timeout: float | None = None
    """Seconds per run when not the campaign's (a named pipe blocks every command until it times out)."""
    runs: list[tuple[str, Run]] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


# ---------------------------------------------------------------------------------------- running graphlens
class Runner:
    """Runs ``graphlens ARGS`` in a folder: forked from a process that has done the imports (tests/cli_process.py)
    with one job, else (or with ``--fresh``) a fresh ``python -m graphlens``."""

    def __init__(self, timeout: float, fresh: bool, source: Path | None) -> None:
        self.timeout, self.fresh = timeout, fresh
        if source is not None:
            os.environ["PYTHONPATH"] = os.pathsep.join([str(source), os.environ.get("PYTHONPATH", "")]).rstrip(
                os.pathsep)

    def __call__(self, args: Sequence[str], cwd: Path, timeout: float | None = None) -> tuple[int | None, str, str]:
        timeout = timeout or self.timeout
        if self.fresh:
            try:
                done = subprocess.run([sys.executable, "-m", "graphlens", *args], cwd=cwd, capture_output=True,
                                      text=True, errors="replace", timeout=timeout, stdin=subprocess.DEVNULL)
            except subprocess.TimeoutExpired:
                return None, "", ""
            return done.returncode, done.stdout, done.stderr
        from tests.cli_process import run_graphlens

        os.chdir(cwd)
        try:
            forked = run_graphlens(*args, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None, "", ""
        finally:
            os.chdir(ROOT)
        return forked.returncode, forked.stdout, forked.stderr


def run_case(case: Case, folder: Path, commands: list[tuple[str, list[str]]], runner: Runner,
             nan: Callable[[str], bool]) -> Case:
    """Run every command of ``case``, its inputs being everything in ``folder`` but ``folder/out``."""
    out = folder / "out"
    inputs = [p for p in folder.iterdir() if p.name != "out"]
    for name, args in commands:
        run = observe(args, inputs, out, lambda a: runner(a, out, case.timeout))
        case.runs.append((name, run))
        for kind, detail in violations(run, nan_inputs=nan(name), mutation=case.mutation,
                                       refusal_expected=case.refusal_expected):
            case.findings.append(Finding(kind, name, case, run, detail))
    shutil.rmtree(out, ignore_errors=True)
    return case


# ---------------------------------------------------------------------------------------- choosing mutants
def plan_mutants(bases: dict[str, onnx.ModelProto], count: int, seed: int) -> list[tuple[str, str, int]]:
    """``count`` (base, mutation, seed) triples that apply, round-robin over the shuffled pairs, plus one
    case of each mutation that replaces the file whatever the model."""
    rng = random.Random(seed)
    pairs = [(b, m) for b in bases for m in MUTATIONS if m not in PATH_ONLY]
    chosen: list[tuple[str, str, int]] = []
    attempts = 0
    while len(chosen) < count and attempts < count * 20:
        if attempts % len(pairs) == 0:
            rng.shuffle(pairs)
        base, name = pairs[attempts % len(pairs)]
        attempts += 1
        mutant_seed = rng.randrange(2**31)
        if mutate(bases[base], name, mutant_seed) is not None:
            chosen.append((base, name, mutant_seed))
    return chosen + [("demo", name, 0) for name in PATH_ONLY]


def parse_case(text: str) -> tuple[str, str, int]:
    base, name, seed = text.split(":")
    if name not in MUTATIONS:
        raise SystemExit(f"fuzz_campaign: unknown mutation '{name}'; mutations: {', '.join(MUTATIONS)}")
    return base, name, int(seed)


def mutant_case(base: str, path: Path, proto: onnx.ModelProto, triple: tuple[str, str, int], folder: Path,
                commands: list[str]) -> tuple[Case, list[tuple[str, list[str]]]]:
    """Write the mutant ``triple`` under ``folder`` beside a copy of its base model; the case and its commands."""
    _, name, seed = triple
    done = mutate(proto, name, seed)
    assert done is not None
    draft, description = done
    (folder / "orig").mkdir(parents=True)
    original = folder / "orig" / path.name
    shutil.copyfile(path, original)
    mutant = write_mutant(draft, folder, path.name)
    regenerate = f"tools/fuzz_campaign.py --case {base}:{name}:{seed} --commands {{command}} --keep DIR"
    case = Case(f"{base}/{name}:{seed}", MUTATIONS[name][0], description, regenerate, mutation=name,
                timeout=FIFO_TIMEOUT if name == "fifo" else None)
    if name == "bn-nan":  # the checks must fail only where the outputs really are NaN or Inf
        case.not_finite = outputs_not_finite(mutant) is True
        case.description += f" (outputs {'not ' if not case.not_finite else ''}NaN/Inf on random inputs)"
    return case, [(c, COMMANDS[c](mutant, original, folder / "out")) for c in commands]


# ---------------------------------------------------------------------------------------- the campaign
def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=0, help="the campaign's seed (default 0)")
    parser.add_argument("--mutants", type=int, default=120, help="mutants to make (default 120)")
    parser.add_argument("--runs", type=int, default=None, help="stop after this many runs")
    parser.add_argument("--commands", default=",".join(COMMANDS), help=f"comma-separated, of {', '.join(COMMANDS)}")
    parser.add_argument("--large", action="store_true", help="also mutate rxnmap (85 MB)")
    parser.add_argument("--jobs", type=int, default=1, help="cases run at once (default 1; more means fresh "
                        "interpreters, about half a second of imports each)")
    parser.add_argument("--fresh", action="store_true", help="a fresh `python -m graphlens` per run, even with 1 job")
    parser.add_argument("--timeout", type=float, default=120, help="seconds per run (default 120)")
    parser.add_argument("--source", type=Path, help="the graphlens checkout to test (default: the installed one)")
    parser.add_argument("--label", default="", help="a note for the report's header (what --source is)")
    parser.add_argument("--keep", type=Path, help="keep every mutant under this folder (default: a temporary one)")
    parser.add_argument("--case", action="append", default=[], metavar="BASE:MUTATION:SEED",
                        help="run only these mutants (no bad-argument cases)")
    parser.add_argument("--no-arguments", action="store_true", help="skip the bad-argument cases")
    args = parser.parse_args(argv)
    unknown = [c for c in args.commands.split(",") if c not in COMMANDS]
    if unknown:
        parser.error(f"unknown command(s) {', '.join(unknown)}; commands: {', '.join(COMMANDS)}")
    return args


def load_bases(large: bool) -> tuple[dict[str, Path], dict[str, onnx.ModelProto], list[str]]:
    paths = {**BASES, **(LARGE if large else {})}
    missing = [f"{name} ({path})" for name, path in paths.items() if not path.is_file()]
    paths = {name: path for name, path in paths.items() if path.is_file()}
    return paths, {name: onnx.load(str(path)) for name, path in paths.items()}, missing


def build_cases(args: argparse.Namespace, paths: dict[str, Path], protos: dict[str, onnx.ModelProto],
                root: Path) -> list[tuple[Case, Path, list[tuple[str, list[str]]]]]:
    commands = args.commands.split(",")
    triples = [parse_case(c) for c in args.case] or plan_mutants(protos, args.mutants, args.seed)
    built = []
    for k, triple in enumerate(triples):
        folder = root / f"{k:04d}-{triple[0]}-{triple[1]}"
        case, runs = mutant_case(triple[0], paths[triple[0]], protos[triple[0]], triple, folder, commands)
        built.append((case, folder, runs))
    if not args.case and not args.no_arguments:
        for k, (label, description, nan, may_pass, make) in enumerate(argument_cases()):
            folder = root / f"args-{k:03d}"
            folder.mkdir(parents=True)
            case = Case(f"arguments/{label}", "bad arguments" if not nan else "NaN", description,
                        "tools/fuzz_campaign.py --mutants 0 --keep DIR (the bad-argument cases)",
                        refusal_expected=not nan and not may_pass, not_finite=nan)
            built.append((case, folder, [(label.split(" ")[0], make(folder, paths["demo"]))]))
    return built


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    paths, protos, missing = load_bases(args.large)
    runner = Runner(args.timeout, args.fresh or args.jobs > 1, args.source)
    root = args.keep or Path(tempfile.mkdtemp(prefix="graphlens_fuzz_"))
    root.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    cases = build_cases(args, paths, protos, root)
    budget = args.runs if args.runs is not None else sum(len(c[2]) for c in cases)
    todo = []
    for case, folder, commands in cases:
        if budget <= 0:
            break
        todo.append((case, folder, commands[:budget]))
        budget -= len(commands)
    def one(item: tuple[Case, Path, list[tuple[str, list[str]]]]) -> Case:
        case, folder, commands = item
        done = run_case(case, folder, commands, runner, lambda cmd: case.not_finite and (
            cmd in NAN_COMMANDS or case.label.startswith("arguments/")))
        codes = Counter("timeout" if r.code is None else r.code for _, r in done.runs)  # -9: killed (memory)
        print(f"[{time.perf_counter() - start:6.0f}s] {printable(done.label)}: {dict(codes)}"
              f"{f', {len(done.findings)} violations' if done.findings else ''}", file=sys.stderr, flush=True)
        return done

    with ThreadPoolExecutor(max(1, args.jobs)) as pool:
        finished = list(pool.map(one, todo))
    report(finished, args=args, paths=paths, missing=missing, seconds=time.perf_counter() - start, root=root,
           kept=args.keep is not None)
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
