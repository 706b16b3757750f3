"""Commands that rewrite or compare models: ``fold``, ``diff``, ``compare``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from graphlens.cli.common import (
    EXIT_FAILED_CHECK,
    EXIT_OK,
    add_numeric_inputs,
    check_output_paths,
    check_writes,
    count_argument,
    numeric_inputs,
    open_workspace,
    print_json,
    write_report,
)
from graphlens.cli.writes import CheckFailed, add_force, input_full_check, say
from graphlens.core.errors import GraphLensError

if TYPE_CHECKING:
    import numpy as np
    import onnx

    from graphlens.core.model import Model
    from graphlens.numerics.diff import NumericDiff

ModelFile = str | os.PathLike[str] | None


def _numeric_check(a: Model | onnx.ModelProto, b: Model | onnx.ModelProto, args: argparse.Namespace,
                   remember: Model | None = None, files: tuple[ModelFile, ModelFile] = (None, None),
                   names: tuple[str, str] | None = None, inputs: dict[str, np.ndarray] | None = None) -> NumericDiff:
    """A against B on the --inputs file (``inputs``: its arrays, already read), or on random inputs with --dim
    sizes and the other dims searched.

    ``files``: A and B as saved, for onnxruntime to read itself (no copy of their weights in this process).
    """
    from graphlens.numerics import check_models, load_inputs

    given = numeric_inputs(args)
    if given.file is not None:
        arrays = inputs if inputs is not None else load_inputs(given.file, a)
        return check_models(a, b, inputs=arrays, inputs_file=str(given.file), files=files, names=names)
    return check_models(a, b, dims=given.dims, seed=given.seed, remember=remember, files=files, names=names)


def cmd_fold(args: argparse.Namespace) -> int:
    """Fold, check if asked, write. A transformer fusion whose kernel loses more than the check's tolerance is not
    made: when the check fails, the fold is made again without each fusing rule in turn (most sites first), and
    the first that passes is written, its sites left with the reason."""
    from graphlens.rewrites.driver import resolve_rules

    rules = [r.strip() for r in args.rules.split(",") if r.strip()] if args.rules else None
    resolve_rules(rules)  # an unknown name is refused before a large model is read
    check_output_paths(args)
    given = numeric_inputs(args)
    check = args.check or given.file is not None or bool(given.dims)  # inputs to check on: a check was meant
    try:
        return _fold_and_write(args, rules, check)
    except CheckFailed as failed:
        for rule, kind, sites in _fusions_to_drop(failed):
            print(f"the check failed with every fusion made; folding again without {rule}")
            kept = [r.name for r in resolve_rules(rules) if r.name != rule]
            try:
                code = _fold_and_write(args, kept, check)
            except CheckFailed:
                continue
            print(f"{kind}: {sites} site{'s' if sites != 1 else ''} left unfused: with them fused, {failed.failure}")
            return code
        say(str(failed))
        return EXIT_FAILED_CHECK


def _fusions_to_drop(failed: CheckFailed) -> list[tuple[str, str, int]]:
    """(rule, kind, sites) of each transformer fusion the failed run made, most sites first."""
    report = failed.report
    if report is None:
        return []
    sites: dict[tuple[str, str], int] = {}
    for edit in report.edits:
        if edit.site and edit.rule in report.families:
            key = (edit.rule, edit.kind or edit.rule)
            sites[key] = sites.get(key, 0) + 1
    return [(rule, kind, count) for (rule, kind), count in sorted(sites.items(), key=lambda item: -item[1])]


def _fold_and_write(args: argparse.Namespace, rules: list[str] | None, check: bool) -> int:
    from graphlens.workspace import Workspace

    given = numeric_inputs(args)
    workspace = Workspace(keep_history=False)  # one shot: nothing to undo, the replaced weights freed at once
    model = workspace.open(args.model).model
    check_writes(args, [(args.report, "--report")], model=model)
    if given.dims:  # a dim the model does not have is refused before anything is folded or written
        from graphlens.numerics.inputs import check_dim_names

        check_dim_names(model, given.dims)
    inputs = None
    if given.file is not None:  # a wrong file is refused before anything is folded or written
        from graphlens.numerics import load_inputs

        inputs = load_inputs(given.file, model)
    full_check = input_full_check(args, model)
    # The check reads the original's weights from its file; only its structure is kept here, unless the
    # file is about to be overwritten.
    original = None
    if check:
        original = model.to_proto().SerializeToString() if args.in_place else model.weightless_proto()
    report = workspace.fold(rules).report
    for line in report.lines():
        print(line)
    data = report.to_json()

    def check_then_report(staged: Path) -> None:
        """Runs on the written file before it takes its name: a check that fails or cannot run leaves nothing."""
        if original is not None:
            import onnx

            if isinstance(original, bytes):
                before, source = onnx.ModelProto.FromString(original), None
            else:
                before, source = original, args.model
            diff = _numeric_check(before, model, args, remember=model, files=(source, staged), inputs=inputs)
            data["numeric"] = diff.to_json()
            if diff.available and diff.inputs is not None:
                print(diff.inputs.line())
            print("\n".join(diff.summary_lines()))
            if not diff.available:  # as diff: a check that could not run is not a difference found
                raise GraphLensError(f"numeric check not run: {diff.reason}; {args.output} not written")
            failure = diff.failure()
            if failure is not None:
                raise CheckFailed(f"{failure}; {args.output} not written", report=report, failure=failure)
        write_report(args.report, data)

    workspace.save_as(args.output, overwrite_source=args.in_place, full_check=full_check,
                      before_commit=check_then_report)
    print(f"wrote {args.output} ({model.node_count()} nodes)")
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_structure
    from graphlens.numerics.inputs import graph_inputs

    # onnxruntime reads both files itself; here each model's structure is enough, one model read at a time
    a, b = load_structure(args.a), load_structure(args.b)
    names_a = [v.name for v in graph_inputs(a)]
    names_b = [v.name for v in graph_inputs(b)]
    if names_a != names_b:
        raise GraphLensError(f"{args.b}: its inputs ({', '.join(names_b)}) differ "
                             f"from those of {args.a} ({', '.join(names_a)})")
    diff = _numeric_check(a, b, args, files=(args.a, args.b), names=(Path(args.a).name, Path(args.b).name))
    if args.json:
        print_json(diff.to_json())
    elif diff.available:
        if diff.inputs is not None:
            print(diff.inputs.line())
        print("\n".join(diff.summary_lines()))
    if not diff.available:  # a model onnxruntime refuses is bad input, not a difference
        raise GraphLensError(f"numeric diff not available: {diff.reason}")
    failure = diff.failure()
    if failure is not None:
        say(failure)
        return EXIT_FAILED_CHECK
    return EXIT_OK


def cmd_compare(args: argparse.Namespace) -> int:
    result = open_workspace(args, args.a).comparison.run(args.b, numeric=not args.no_numeric)
    if args.json:
        print_json(result.to_dict(), large=len(result.pairs) > 100)
    else:
        print("\n".join(result.summary_lines(limit=args.top or len(result.pairs))))
    unmeasured = None if args.no_numeric else result.numeric_reason
    failure = result.failure()
    if args.check and failure is not None:  # found, whether the numbers could be measured or not
        say(failure + (f"; numbers not measured: {unmeasured}" if unmeasured else ""))
        return EXIT_FAILED_CHECK
    if unmeasured:  # as diff: inputs or a model onnxruntime cannot run are bad input
        raise GraphLensError(f"numbers not measured: {unmeasured} (--no-numeric compares the structure alone)")
    return EXIT_OK


def add_fold(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("fold", help="apply fold rewrites to a fixpoint and save the result")
    p.add_argument("model", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the folded model")
    p.add_argument(
        "--rules",
        help="comma-separated rule names (default fuse-decomposed-bn,fold-bn,fold-affine; "
        "also bn-to-affine, fuse-activations, equalize, fold-constants, the transformer fusions, or the set "
        "'transformers')",
    )
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--check", action="store_true", help="compare outputs with onnxruntime before writing; if they "
                   "differ (or hold NaN or infinities) exit 1 and write nothing (implied by --inputs or --dim)")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    add_force(p)
    add_numeric_inputs(p)
    p.set_defaults(func=cmd_fold)


def add_diff(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("diff", help="compare two models' outputs with onnxruntime")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--json", action="store_true")
    add_numeric_inputs(p)
    p.set_defaults(func=cmd_diff)


def add_compare(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("compare", help="pair two models' nodes (by name, then by structure), say what changed "
                                       "and measure each pair's error with onnxruntime")
    p.add_argument("a", type=Path, help="the reference model")
    p.add_argument("b", type=Path, help="the model compared with it")
    p.add_argument("--json", action="store_true", help="print one JSON object: pairs and counts")
    p.add_argument("--no-numeric", action="store_true", help="structure only: do not run the models")
    p.add_argument("--inputs", type=Path, help="an .npz with one array per graph input of A (default: random)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic dimension for random inputs; dims not given are chosen until A runs")
    p.add_argument("--top", type=count_argument(0), default=50, help="differences to list (0: all; default 50)")
    p.add_argument("--check", action="store_true", help="exit 1 when any node is not the same, or an input or output "
                   "holds NaN or infinities")
    p.set_defaults(func=cmd_compare)
