"""The fuzz campaign's report (tools/fuzz_campaign.py): totals, exit codes per command, and every violation
with the command that reproduces it, the distinct ones first."""

from __future__ import annotations

import argparse
import shlex
import subprocess
import unicodedata
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.fuzz_judge import Run

if TYPE_CHECKING:
    from tools.fuzz_campaign import Case


@dataclass
class Finding:
    """One rule one run broke."""

    kind: str
    command: str
    case: Any  # tools.fuzz_campaign.Case
    run: Run
    detail: str


def printable(text: str) -> str:
    """``text`` with control, format (bidi overrides) and unassigned characters escaped: a report line stays one
    line, in order."""
    return "".join(c if c == " " or unicodedata.category(c)[0] not in "CZ" else c.encode("unicode_escape").decode()
                   for c in text)


def command_line(run: Run) -> str:
    return "graphlens " + " ".join(shlex.quote(printable(a)) for a in run.args)


def _source(args: argparse.Namespace) -> str:
    source = args.source or Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(["git", "-C", str(source), "log", "-1", "--format=%h %s"], capture_output=True,
                                text=True, timeout=30).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=30).stdout.strip()
    except OSError:
        commit, dirty = "", ""
    state = f"commit {commit[:90]}" if commit else "not a git checkout"
    return f"{source} ({state}{', with uncommitted changes' if dirty else ''})"


def _exit_table(cases: list[Case]) -> list[str]:
    per: defaultdict[str, Counter[str]] = defaultdict(Counter)
    for case in cases:
        for name, run in case.runs:
            per[name]["timeout" if run.code is None else str(run.code)] += 1
    codes = sorted({c for counter in per.values() for c in counter}, key=lambda c: (c == "timeout", c))
    lines = ["  " + f"{'command':<20}" + "".join(f"{'exit ' + c if c != 'timeout' else c:>10}" for c in codes)]
    for name, counter in per.items():
        lines.append("  " + f"{name:<20}" + "".join(f"{counter.get(c, 0):>10}" for c in codes))
    return lines


def _distinct(findings: list[Finding]) -> list[str]:
    """One entry per (kind, cause): the commands and mutants it was seen on, and one example to reproduce."""
    groups: defaultdict[tuple[str, str], list[Finding]] = defaultdict(list)
    for f in findings:
        groups[(f.kind, f.case.cause)].append(f)
    lines = []
    for (kind, cause), found in sorted(groups.items()):
        first = found[0]
        commands = Counter(f.command for f in found)
        mutants = sorted({f.case.label.split(":")[0] for f in found})
        lines += [f"- [{kind}] {cause}: {len(found)} run(s); commands: "
                  + ", ".join(f"{c} ×{n}" for c, n in commands.most_common()),
                  f"    on: {printable(', '.join(mutants[:8]))}{' ...' if len(mutants) > 8 else ''}",
                  f"    e.g. {first.command} on "
                  f"{printable(first.case.label)}: {printable(first.case.description)[:190]}",
                  f"    says: {printable(first.detail)[:300] or '(nothing)'}",
                  f"    repro: {command_line(first.run)}",
                  f"    regenerate: .venv/bin/python {first.case.regenerate.format(command=first.command)}"]
    return lines


def report(cases: list[Case], *, args: argparse.Namespace, paths: dict[str, Path], missing: list[str],
           seconds: float, root: Path, kept: bool) -> None:
    runs = [run for case in cases for _, run in case.runs]
    mutants = [c for c in cases if not c.label.startswith("arguments/")]
    findings = [f for case in cases for f in case.findings]
    codes = Counter("timeout" if r.code is None else f"exit {r.code}" for r in runs)
    written = sum(1 for r in runs if r.code in (0, 1) for name in r.left if name.endswith(".onnx"))
    by_ort = sum(len(r.judged_by_onnxruntime) for r in runs)
    warned = sum(1 for r in runs if r.code == 0 and r.stderr.strip())
    print(f"GraphLens fuzz campaign, seed {args.seed}, {seconds:.0f} s")
    print(f"source: {_source(args)}{f' [{args.label}]' if args.label else ''}")
    print("bases: " + ", ".join(f"{name} ({path})" for name, path in paths.items()))
    if missing:
        print("bases missing, skipped: " + ", ".join(missing))
    print(f"runs {len(runs)}, mutants {len(mutants)}, bad-argument cases {len(cases) - len(mutants)}")
    print("exit codes: " + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items())))
    print(f"models written by runs that exited 0 or 1: {written}, each checked with "
          f"onnx.checker.check_model(full_check=True); {by_ort} of them with com.microsoft ops, which the ONNX "
          f"checker does not know, also loaded by onnxruntime (its schemas)")
    print(f"runs that exited 0 with something on stderr (warnings; not counted as violations): {warned}")
    print("exit codes per command:")
    print("\n".join(_exit_table(cases)))
    print(f"\nviolations: {len(findings)} in {len({id(f.run) for f in findings})} runs")
    for kind, count in Counter(f.kind for f in findings).most_common():
        print(f"  {kind}: {count}")
    print("by cause (mutation group):")
    for cause, count in Counter(f.case.cause for f in findings).most_common():
        print(f"  {cause}: {count}")
    if findings:
        print("\ndistinct violations (kind, cause), one example each:")
        print("\n".join(_distinct(findings)))
        print("\nevery violation:")
        for f in findings:
            print(f"  [{f.kind}] {printable(f.case.label)} | {command_line(f.run)} | {printable(f.detail)[:200]}")
    print(f"\nmutants {'kept in' if kept else 'were in (deleted)'} {root}")
