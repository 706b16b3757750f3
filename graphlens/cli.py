"""The ``graphlens`` command: the GUI with no command, headless subcommands otherwise.

Every user-facing failure is a :class:`GraphLensError` printed as one line with exit code 2;
a bug is one line with exit code 3; tracebacks appear only with ``--debug``. A reader that stops
reading (``| head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from graphlens.core.bulk import collector_deferred
from graphlens.core.errors import GraphLensError

EXIT_OK, EXIT_FAILED_CHECK, EXIT_USAGE, EXIT_INTERNAL = 0, 1, 2, 3
"""Success; a ``--check`` (or ``diff``) that found a difference; bad input, named in one line; a bug in GraphLens."""


def _print_json(data: object, *, large: bool = False) -> None:
    """Indented for people; compact when large, since only compact output uses CPython's fast C encoder."""
    print(json.dumps(data) if large else json.dumps(data, indent=2))


def _human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _io_line(entry: dict) -> str:
    shape = entry["shape"]
    dims = "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    return f"  {entry['name']}  {entry['dtype'] or '?'} {dims}"


def cmd_info(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_model

    model = load_model(args.model)
    info = model.summary()
    if args.json:
        print(json.dumps(info, indent=2))
        return EXIT_OK
    producer = " ".join(p for p in (info["producer"]["name"], info["producer"]["version"]) if p) or "(not set)"
    lines = [
        f"model         {model.name}",
        f"producer      {producer}",
        f"ir version    {info['ir_version']}",
        "opsets        " + ", ".join(f"{d} {v}" for d, v in info["opsets"].items()),
        "inputs",
        *(_io_line(e) for e in info["inputs"]),
        "outputs",
        *(_io_line(e) for e in info["outputs"]),
    ]
    nested = f", {info['subgraph_count']} subgraphs" if info["subgraph_count"] else ""
    lines.append(f"nodes         {info['node_count']}{nested}")
    width = max((len(op) for op in info["op_counts"]), default=0)
    lines += [f"  {op:<{width}}  {count}" for op, count in info["op_counts"].items()]
    inits = info["initializers"]
    lines.append(f"initializers  {inits['count']} ({_human_bytes(inits['bytes'])})")
    listed = info["initializer_inputs"]
    if listed["count"] and listed["overridable"]:
        lines.append(f"              {listed['count']} also listed as graph inputs: defaults callers may override, "
                     "not constants (fold --rules freeze-inputs,... makes them constants)")
    elif listed["count"]:
        lines.append(f"              {listed['count']} also listed as graph inputs, as IR {info['ir_version']} "
                     "requires: constants")
    if info["functions"]:
        lines.append("functions     " + ", ".join(f"{f['domain']}.{f['name']}" for f in info["functions"]))
    for key, value in info["metadata"].items():
        lines.append(f"metadata      {key} = {value}")
    print("\n".join(lines))
    return EXIT_OK


def cmd_patterns(args: argparse.Namespace) -> int:
    from graphlens.patterns.library import library

    patterns = library()
    if args.json:
        print(json.dumps({name: p.description for name, p in patterns.items()}, indent=2))
        return EXIT_OK
    width = max(len(n) for n in patterns)
    for name, pattern in patterns.items():
        print(f"{name:<{width}}  {pattern.description}")
    return EXIT_OK


def cmd_match(args: argparse.Namespace) -> int:
    from graphlens.patterns.library import resolve_pattern
    from graphlens.workspace import Workspace

    pattern = resolve_pattern(args.pattern)  # a bad pattern is refused before a large model is read
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model).model
    found = workspace.find_matches(pattern, non_overlapping=args.non_overlapping)
    matches = found.matches
    if args.json:
        _print_json(found.to_dict(), large=len(matches) > 100)
        return EXIT_OK
    print(f"{found.pattern.name}: {len(matches)} match{'es' if len(matches) != 1 else ''} in {model.name}")
    for k, m in enumerate(matches, 1):
        where = "" if m.graph.path == "main" else f"  [{m.graph.path}]"
        print(f"{k:>4}. " + ", ".join(f"{label}={node}" for label, node in m.nodes.items()) + where)
    return EXIT_OK


def cmd_explain(args: argparse.Namespace) -> int:
    from graphlens.patterns.library import resolve_pattern
    from graphlens.workspace import Workspace

    pattern = resolve_pattern(args.pattern)
    workspace = Workspace(keep_history=False)
    workspace.open(args.model)
    result = workspace.explain(pattern, at=args.at)
    if args.json:
        _print_json(result.to_dict())
        return EXIT_OK
    print(result.message)
    for miss in getattr(result.outcome, "near_misses", []):
        print(f"  at {miss.at}: {miss.message}")
    return EXIT_OK


def _numeric_check(a, b, args: argparse.Namespace, remember=None):
    """A against B on the --inputs file, or on random inputs with --dim sizes and the other dims searched."""
    from graphlens.numerics import check_models, load_inputs, parse_dims

    if args.inputs is not None:
        return check_models(a, b, inputs=load_inputs(args.inputs, a), inputs_file=str(args.inputs))
    return check_models(a, b, dims=parse_dims(args.dim or []), seed=args.seed, remember=remember)


def cmd_fold(args: argparse.Namespace) -> int:
    from graphlens.rewrites.driver import resolve_rules
    from graphlens.workspace import Workspace

    rules = [r.strip() for r in args.rules.split(",") if r.strip()] if args.rules else None
    resolve_rules(rules)  # an unknown name is refused before a large model is read
    if args.output.exists() and args.model.exists() and args.output.resolve() == args.model.resolve() and not args.in_place:
        raise GraphLensError(f"{args.output}: is the input model; pass --in-place to overwrite it")
    workspace = Workspace(keep_history=False)  # one shot: nothing to undo, the replaced weights freed at once
    model = workspace.open(args.model).model
    original = model.to_proto().SerializeToString() if args.check else None
    report = workspace.fold(rules).report
    workspace.save_as(args.output, overwrite_source=args.in_place)
    for line in report.lines():
        print(line)
    print(f"wrote {args.output} ({model.node_count()} nodes)")
    data = report.to_json()
    code = EXIT_OK
    if args.check:
        import onnx

        before = onnx.ModelProto.FromString(original)
        diff = _numeric_check(before, model, args, remember=model)
        data["numeric"] = diff.to_json()
        if diff.available and diff.inputs is not None:
            print(diff.inputs.line())
        print("\n".join(diff.summary_lines()))
        if not diff.passed:
            code = EXIT_FAILED_CHECK
    if args.report is not None:
        try:
            args.report.write_text(json.dumps(data, indent=2))
        except OSError as exc:
            raise GraphLensError(f"{args.report}: cannot write the report ({exc.strerror or exc})") from exc
    return code


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()


def cmd_quantize(args: argparse.Namespace) -> int:
    import difflib

    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    config = QuantConfig(
        weight_bits=args.weight_bits, per_channel=args.per_channel, symmetric_activations=args.symmetric_activations,
        activation_signed=args.int8_activations, narrow_range=args.narrow_range, method=args.method,
        op_types=_names(args.op_types) or QuantConfig().op_types, exclude_nodes=_names(args.exclude),
        exclude_op_types=_names(args.exclude_op_types), exclude_scopes=_names(args.exclude_scope),
        fold_rules=() if args.no_fold else QuantConfig().fold_rules, target_sqnr_db=args.target_sqnr,
        sensitivity=args.sensitivity, seed=args.seed,
    )
    if args.output.exists() and args.model.exists() and args.output.resolve() == args.model.resolve() and not args.in_place:
        raise GraphLensError(f"{args.output}: is the input model; pass --in-place to overwrite it")
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model).model
    known = {n.name for n in model.graph.nodes}
    for name in config.exclude_nodes:
        if name not in known:
            close = difflib.get_close_matches(name, sorted(known), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise GraphLensError(f"--exclude: no node named '{name}' in {args.model}{hint}")
    result = workspace.quantize(config, args.calibration, samples=args.samples)
    workspace.save_as(args.output, overwrite_source=args.in_place)
    for line in result.lines():
        print(line)
    print(f"wrote {args.output} ({model.node_count()} nodes)")
    if args.report is not None:
        try:
            args.report.write_text(json.dumps(result.to_dict(), indent=2))
        except OSError as exc:
            raise GraphLensError(f"{args.report}: cannot write the report ({exc.strerror or exc})") from exc
    if args.target_sqnr is not None and not result.output_sqnr_db >= args.target_sqnr:
        return EXIT_FAILED_CHECK
    return EXIT_OK


def _layer_bits(text: str | None, option: str, *, need_bits: bool) -> tuple[tuple[str, ...], dict[str, int]]:
    """``NAME[=K],...`` as (names, {name: K})."""
    names, bits = [], {}
    for item in _names(text):
        name, eq, k = item.rpartition("=")
        if not eq or not k.strip().isdigit():
            if need_bits:
                raise GraphLensError(f"{option}: '{item}' is not NAME=K")
            names.append(item)
            continue
        names.append(name.strip())
        bits[name.strip()] = int(k)
    return tuple(names), bits


def cmd_binarize(args: argparse.Namespace) -> int:
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.workspace import Workspace

    only, bits = _layer_bits(args.layers, "--layers", need_bits=False)
    _, more = _layer_bits(args.layer_bits, "--layer-bits", need_bits=True)
    config = BinarizeConfig(
        bits=args.bits, per_kernel=args.per_kernel, form=args.form, layer_bits={**bits, **more},
        exclude_nodes=_names(args.exclude), exclude_op_types=_names(args.exclude_op_types),
        exclude_scopes=_names(args.exclude_scope), mean_bits=args.mean_bits, seed=args.seed,
        binarize_activations=args.activations, fold_first=not args.no_fold, only_nodes=only,
    )
    if args.output.exists() and args.model.exists() and args.output.resolve() == args.model.resolve() and not args.in_place:
        raise GraphLensError(f"{args.output}: is the input model; pass --in-place to overwrite it")
    if args.samples < 1:
        raise GraphLensError(f"--samples: need at least 1, not {args.samples}")
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model).model
    result = workspace.binarize(config, args.calibration, samples=args.samples)
    workspace.save_as(args.output, overwrite_source=args.in_place)
    for line in result.lines():
        print(line)
    print(f"wrote {args.output} ({model.node_count()} nodes)")
    if args.report is not None:
        try:
            args.report.write_text(json.dumps(result.to_dict(), indent=2))
        except OSError as exc:
            raise GraphLensError(f"{args.report}: cannot write the report ({exc.strerror or exc})") from exc
    return EXIT_OK


def cmd_diff(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_model
    from graphlens.numerics.inputs import graph_inputs

    a, b = load_model(args.a), load_model(args.b)
    names_a = [v.name for v in graph_inputs(a)]
    names_b = [v.name for v in graph_inputs(b)]
    if names_a != names_b:
        raise GraphLensError(f"{args.b}: its inputs ({', '.join(names_b)}) differ from those of {args.a} ({', '.join(names_a)})")
    diff = _numeric_check(a, b, args, remember=a)
    if not diff.available and not args.json:  # a model onnxruntime refuses is bad input, not a difference
        raise GraphLensError(f"numeric diff not available: {diff.reason}")
    if args.json:
        _print_json(diff.to_json())
    else:
        if diff.available and diff.inputs is not None:
            print(diff.inputs.line())
        print("\n".join(diff.summary_lines()))
    if not diff.available:
        return EXIT_USAGE
    return EXIT_OK if diff.passed else EXIT_FAILED_CHECK


def cmd_compare(args: argparse.Namespace) -> int:
    from graphlens.compare import compare_models
    from graphlens.core.model import load_model
    from graphlens.numerics import load_inputs, parse_dims

    a, b = load_model(args.a), load_model(args.b)
    inputs = load_inputs(args.inputs, a) if args.inputs is not None else None
    dims = parse_dims(args.dim or []) or None
    result = compare_models(a, b, numeric=not args.no_numeric, inputs=inputs, dims=dims)
    if inputs is not None and result.numeric_reason is None:
        result.inputs_line = result.inputs_line.replace("given arrays", f"from {args.inputs}", 1)
    if args.json:
        _print_json(result.to_dict(), large=len(result.pairs) > 100)
    else:
        print("\n".join(result.summary_lines(limit=args.top or len(result.pairs))))
    if args.check and result.differences():
        return EXIT_FAILED_CHECK
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    from graphlens.core.bundled import demo_model_path
    from graphlens.core.model import load_model
    from graphlens.gui.render import render_graph

    model = load_model(args.model or demo_model_path())
    select = [s.strip() for s in (args.select or "").split(",") if s.strip()]
    written = render_graph(model.graph, args.output, select=select, expand_all=args.expand_all)
    print(f"wrote {written}")
    return EXIT_OK


def _print_overlay(overlay, top: int, ops: dict[str, str]) -> None:
    """The worst ``top`` nodes of an overlay as a table: value, share of the total, op, node."""
    from graphlens.overlays import format_value

    ranked = overlay.ranked()
    total = sum(v for _, v in ranked)
    shown = ranked[:top] if top > 0 else ranked
    width = max((len(format_value(v, overlay.unit)) for _, v in shown), default=5)
    print(f"{overlay.title}: {len(ranked)} nodes, total {format_value(total, overlay.unit)}")
    for note in overlay.notes:
        print(f"  {note}")
    for k, (node, value) in enumerate(shown, 1):
        share = f"{100 * value / total:5.1f}%" if total > 0 else "     "
        print(f"{k:>4}. {format_value(value, overlay.unit):>{width}}  {share}  {ops.get(node, ''):<18} {node}")
    if len(shown) < len(ranked):
        print(f"      … {len(ranked) - len(shown)} more (--top 0 lists all)")


def _op_types(model) -> dict[str, str]:
    return {n.name: n.op_type for g in model.graphs() for n in g.nodes}


def _write_overlay(overlay, args: argparse.Namespace) -> None:
    from graphlens.overlays import to_csv, to_model_explorer_json

    if args.csv is not None:
        print(f"wrote {to_csv(overlay, args.csv)}")
    if args.json is not None:
        print(f"wrote {to_model_explorer_json(overlay, args.json)} (Model Explorer node data)")


def cmd_profile(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_model
    from graphlens.numerics import load_inputs, parse_dims
    from graphlens.overlays import format_value, profile_model

    model = load_model(args.model)
    dims = parse_dims(args.dim or [])
    arrays = load_inputs(args.inputs, model) if args.inputs is not None else None
    result = profile_model(model, args.runs, dims=dims, inputs=arrays,
                           inputs_file=str(args.inputs) if args.inputs else None, seed=args.seed)
    _print_overlay(result.overlay, args.top, _op_types(model))
    print("by op: " + ", ".join(f"{op} {format_value(us, 'µs')}" for op, us in list(result.op_us.items())[:6]))
    print(f"a whole run, as onnxruntime timed it with the profiler on: {format_value(result.run_us, 'µs')}")
    _write_overlay(result.overlay, args)
    return EXIT_OK


def cmd_overlay(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_model
    from graphlens.numerics import parse_dims
    from graphlens.overlays import attach, load_overlay, metric_overlay

    model = load_model(args.model)
    if args.source is not None:
        overlay = attach(load_overlay(args.source), model)
    else:
        overlay = metric_overlay(model, args.metric, dims=parse_dims(args.dim or []))
    _print_overlay(overlay, args.top, _op_types(model))
    _write_overlay(overlay, args)
    return EXIT_OK


def run_gui(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="graphlens",
        description="Open an ONNX model in the GraphLens window (the bundled demo if none is given). "
        f"Headless commands: {', '.join(sorted(COMMANDS))} (see graphlens COMMAND --help).",
    )
    parser.add_argument("model", nargs="?", type=Path, help="ONNX model to open")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    from graphlens.core.bundled import demo_model_path
    from graphlens.core.model import load_model

    model = load_model(args.model or demo_model_path())  # fail here, with one line, before any window
    from graphlens.gui.app import run

    return run(model)


def _add_info(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("info", help="print a model's summary")
    p.add_argument("model", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)


def _add_patterns(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("patterns", help="list the built-in patterns")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_patterns)


def _add_match(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("match", help="find every match of a pattern")
    p.add_argument("model", type=Path)
    p.add_argument("--pattern", "-p", required=True, help="a built-in name (see graphlens patterns), a .pattern/.json file, or pattern text")
    p.add_argument("--non-overlapping", action="store_true", help="keep only matches sharing no node with an earlier one")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_match)


def _add_explain(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("explain", help="say why a pattern does or does not match")
    p.add_argument("model", type=Path)
    p.add_argument("--pattern", "-p", required=True, help="a built-in name, a .pattern/.json file, or pattern text")
    p.add_argument("--at", help="the node where a match was expected; without it, the closest near misses")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_explain)


def _add_numeric_inputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--inputs", type=Path, help="an .npz with one array per graph input (default: random)")
    p.add_argument(
        "--dim", action="append", metavar="NAME=VALUE",
        help="size of a dynamic dimension for random inputs (an unnamed one as INPUT[AXIS]=VALUE); "
        "dims not given are chosen until onnxruntime runs",
    )
    p.add_argument("--seed", type=int, default=0, help="seed for random inputs (default 0)")


def _add_fold(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("fold", help="apply fold rewrites to a fixpoint and save the result")
    p.add_argument("model", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the folded model")
    p.add_argument(
        "--rules",
        help="comma-separated rule names (default fuse-decomposed-bn,fold-bn,fold-affine; "
        "also bn-to-affine, fuse-activations)",
    )
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--check", action="store_true", help="compare outputs with onnxruntime; exit 1 if they differ")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    _add_numeric_inputs(p)
    p.set_defaults(func=cmd_fold)


def _add_quantize(sub: argparse._SubParsersAction) -> None:
    from graphlens.quantize.config import METHODS

    p = sub.add_parser("quantize", help="fold, calibrate and insert QuantizeLinear/DequantizeLinear pairs (QDQ)")
    p.add_argument("model", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the quantized model")
    p.add_argument("--calibration", type=Path, metavar="DATA.npz",
                   help="calibration samples: one array per graph input, shaped (samples, *input shape)")
    p.add_argument("--samples", type=int, default=8, help="random calibration samples without --calibration (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed for random samples (default 0)")
    p.add_argument("--per-channel", action=argparse.BooleanOptionalAction, default=True,
                   help="one weight scale per output channel (default; opset 13)")
    p.add_argument("--weight-bits", type=int, choices=(8, 4), default=8, help="int8 (default) or int4 weights (opset 21)")
    p.add_argument("--narrow-range", action=argparse.BooleanOptionalAction, default=True,
                   help="weights in -127..127 (default)")
    p.add_argument("--symmetric-activations", action="store_true", help="zero point in the middle of the range")
    p.add_argument("--int8-activations", action="store_true", help="int8 activations instead of uint8")
    p.add_argument("--method", choices=METHODS, default="minmax", help="calibration method (default minmax)")
    p.add_argument("--op-types", help="comma-separated op types to quantize (default Conv,ConvTranspose,Gemm,MatMul)")
    p.add_argument("--exclude", help="comma-separated node names to leave float")
    p.add_argument("--exclude-op-types", help="comma-separated op types to leave float")
    p.add_argument("--exclude-scope", help="comma-separated name scopes (/backbone) to leave float")
    p.add_argument("--no-fold", action="store_true", help="do not fold batch norms first")
    p.add_argument("--sensitivity", action="store_true", help="rank the layers (each quantized alone, each left float)")
    p.add_argument("--target-sqnr", type=float, metavar="DB",
                   help="leave the worst layers float until the output SQNR reaches DB; exit 1 if it cannot")
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    p.set_defaults(func=cmd_quantize)


def _add_binarize(sub: argparse._SubParsersAction) -> None:
    from graphlens.binarize.config import FORMS

    p = sub.add_parser("binarize", help="fold, then replace weights by K-bit binarized ones (CNTK netopt) and "
                                        "measure the output SQNR")
    p.add_argument("model", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the binarized model")
    p.add_argument("--bits", type=int, default=1, metavar="K", help="bits per weight, 1 to 8 (default 1)")
    kind = p.add_mutually_exclusive_group()
    kind.add_argument("--per-kernel", dest="per_kernel", action="store_true", default=True,
                      help="one scale per bit and output channel (default)")
    kind.add_argument("--per-tensor", dest="per_kernel", action="store_false", help="one scale per bit and weight")
    p.add_argument("--form", choices=FORMS, default="emulated",
                   help="emulated: the weight replaced by its binarized value (default); structured: int8 ±1 bits "
                        "and scales stored, the weight rebuilt in the graph")
    p.add_argument("--layers", metavar="NAME[=K],...", help="binarize only these nodes, each with K bits if given")
    p.add_argument("--layer-bits", metavar="NAME=K,...", help="bits for these nodes (the others get --bits)")
    p.add_argument("--exclude", help="comma-separated node names to leave float")
    p.add_argument("--exclude-op-types", help="comma-separated op types to leave float")
    p.add_argument("--exclude-scope", help="comma-separated name scopes (/backbone) to leave float")
    p.add_argument("--mean-bits", type=float, metavar="M",
                   help="a random bit map per weight: round(N(M, 1)) bits per element, 1 to K (seeded)")
    p.add_argument("--activations", action="store_true",
                   help="also binarize each convolution's input to ±1 (costs most of the accuracy)")
    p.add_argument("--no-fold", action="store_true", help="do not fold batch norms first")
    p.add_argument("--calibration", type=Path, metavar="DATA.npz",
                   help="samples for the output SQNR: one array per graph input, shaped (samples, *input shape)")
    p.add_argument("--samples", type=int, default=4, help="random samples without --calibration (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed for the bit maps and random samples (default 0)")
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    p.set_defaults(func=cmd_binarize)


def _add_diff(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("diff", help="compare two models' outputs with onnxruntime")
    p.add_argument("a", type=Path)
    p.add_argument("b", type=Path)
    p.add_argument("--json", action="store_true")
    _add_numeric_inputs(p)
    p.set_defaults(func=cmd_diff)


def _add_compare(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("compare", help="pair two models' nodes (by name, then by structure), say what changed "
                                       "and measure each pair's error with onnxruntime")
    p.add_argument("a", type=Path, help="the reference model")
    p.add_argument("b", type=Path, help="the model compared with it")
    p.add_argument("--json", action="store_true", help="print one JSON object: pairs and counts")
    p.add_argument("--no-numeric", action="store_true", help="structure only: do not run the models")
    p.add_argument("--inputs", type=Path, help="an .npz with one array per graph input of A (default: random)")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic dimension for random inputs; dims not given are chosen until A runs")
    p.add_argument("--top", type=int, default=50, help="differences to list (0: all; default 50)")
    p.add_argument("--check", action="store_true", help="exit 1 when any node is not the same")
    p.set_defaults(func=cmd_compare)


def _add_render(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("render", help="draw a model's graph to a PNG or SVG file, without a window")
    p.add_argument("model", type=Path, nargs="?", help="the model (default: the bundled demo)")
    p.add_argument("-o", "--output", type=Path, required=True, help="OUT.png or OUT.svg")
    p.add_argument("--select", help="comma-separated node names to highlight")
    p.add_argument("--expand-all", action="store_true", help="draw every node, with no collapsed groups")
    p.set_defaults(func=cmd_render)


def _add_overlay_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=int, default=20, help="how many nodes to list, worst first (0: all; default 20)")
    p.add_argument("--csv", type=Path, metavar="OUT.csv", help="also write node,value rows")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write Model Explorer's per-node data JSON")


def _add_profile(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("profile", help="time every node with onnxruntime's profiler (graph optimizations off)")
    p.add_argument("model", type=Path)
    p.add_argument("--runs", type=int, default=10, help="timed runs after one warm-up (default 10)")
    _add_overlay_outputs(p)
    _add_numeric_inputs(p)
    p.set_defaults(func=cmd_profile)


def _add_overlay(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("overlay", help="a number per node: FLOPs, parameters or output bytes, or a CSV/JSON file's")
    p.add_argument("model", type=Path)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--metric", choices=["flops", "params", "bytes"], help="computed from shapes")
    what.add_argument("--from", dest="source", type=Path, metavar="FILE",
                      help="a node,value CSV or Model Explorer node data JSON, checked against the model's names")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic input dimension (default: batch 1, others 224 or the last that ran)")
    _add_overlay_outputs(p)
    p.set_defaults(func=cmd_overlay)


COMMANDS: dict[str, Callable[[argparse._SubParsersAction], None]] = {
    "info": _add_info,
    "patterns": _add_patterns,
    "match": _add_match,
    "explain": _add_explain,
    "fold": _add_fold,
    "diff": _add_diff,
    "compare": _add_compare,
    "quantize": _add_quantize,
    "binarize": _add_binarize,
    "render": _add_render,
    "profile": _add_profile,
    "overlay": _add_overlay,
}


def _command_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="graphlens")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS.values():
        add(sub)
    for action in sub.choices.values():
        action.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure becomes one line on stderr and an exit code (see :data:`EXIT_INTERNAL`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv
    try:
        with collector_deferred():  # the one place a command sets the collector; see core/bulk.py
            if argv and argv[0] in COMMANDS:
                args = _command_parser().parse_args(argv)
                code = int(args.func(args))
            else:
                code = run_gui(argv)
        sys.stdout.flush()  # a closed pipe shows up here, while it can still be handled
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except GraphLensError as exc:
        if debug:
            raise
        _say(f"graphlens: {_one_line(str(exc))}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # a bug, not bad input: still one line unless asked for more
        if debug:
            raise
        _say(f"graphlens: internal error: {type(exc).__name__}: {_one_line(str(exc))} (rerun with --debug for details)")
        return EXIT_INTERNAL


def _one_line(text: str) -> str:
    """Messages quoting a model's names or a library's error may hold newlines; the contract is one line."""
    return " ".join(text.split("\n")).strip() if "\n" in text else text


def _say(line: str) -> None:
    try:
        print(line, file=sys.stderr)
    except (BrokenPipeError, OSError):
        pass  # nowhere left to say it


def _reader_went_away() -> int:
    """The reader of our output closed it (``graphlens match ... | head -1``): stop quietly, as Unix tools do.

    Python would otherwise complain again when it flushes stdout at exit, so point stdout at
    /dev/null first (the recipe in the ``signal`` module's documentation).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced by something without a file descriptor
        pass
    return EXIT_OK


def entry() -> None:
    """The console script: :func:`main`, then exit without tearing the heap down object by object.

    Freeing a 100,000-node model at interpreter exit takes longer than matching it; the output is
    flushed and nothing is left open for writing (saves are atomic and complete), so skip it.
    """
    with collector_deferred(keep=True):  # the process exits next: no last pass over the whole heap
        code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    try:
        sys.stderr.flush()
    except (BrokenPipeError, OSError):
        pass
    os._exit(code)


if __name__ == "__main__":
    entry()
