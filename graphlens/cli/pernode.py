"""Numbers per node: ``profile`` (onnxruntime's profiler) and ``overlay`` (FLOPs, parameters, bytes, files)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from graphlens.cli.common import (
    EXIT_OK,
    OVERLAY_METRICS,
    add_numeric_inputs,
    check_writes,
    count_argument,
    open_workspace,
)

if TYPE_CHECKING:
    from graphlens.core.model import Model
    from graphlens.overlays import Overlay


def _print_overlay(overlay: Overlay, top: int, ops: dict[str, str]) -> None:
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


def _op_types(model: Model) -> dict[str, str]:
    return {n.name: n.op_type for g in model.graphs() for n in g.nodes}


def _write_overlay(overlay: Overlay, args: argparse.Namespace) -> None:
    from graphlens.overlays import to_csv, to_model_explorer_json

    if args.csv is not None:
        print(f"wrote {to_csv(overlay, args.csv)}")
    if args.json is not None:
        print(f"wrote {to_model_explorer_json(overlay, args.json)} (Model Explorer node data)")


def _check_overlay_writes(args: argparse.Namespace, model: Model | None = None) -> None:
    check_writes(args, [(args.csv, "--csv"), (args.json, "--json")], model=model)


def cmd_profile(args: argparse.Namespace) -> int:
    from graphlens.overlays import format_value

    _check_overlay_writes(args)
    workspace = open_workspace(args, args.model)
    _check_overlay_writes(args, workspace.require_model())
    result = workspace.overlay.run_profile(args.runs, seed=args.seed)
    _print_overlay(result.overlay, args.top, _op_types(workspace.require_model()))
    print("by op: " + ", ".join(f"{op} {format_value(us, 'µs')}" for op, us in list(result.op_us.items())[:6]))
    print(f"a whole run, as onnxruntime timed it with the profiler on: {format_value(result.run_us, 'µs')}")
    _write_overlay(result.overlay, args)
    return EXIT_OK


def cmd_overlay(args: argparse.Namespace) -> int:
    from graphlens.overlays import attach, load_overlay

    _check_overlay_writes(args)
    workspace = open_workspace(args, args.model)
    model = workspace.require_model()
    _check_overlay_writes(args, model)
    if args.source is not None:
        overlay = attach(load_overlay(args.source), model)
        workspace.overlay.show(overlay)
    else:
        overlay = workspace.overlay.show_metric(args.metric)
    _print_overlay(overlay, args.top, _op_types(model))
    _write_overlay(overlay, args)
    return EXIT_OK


def add_overlay_outputs(p: argparse.ArgumentParser) -> None:
    p.add_argument("--top", type=count_argument(0), default=20,
                   help="how many nodes to list, worst first (0: all; default 20)")
    p.add_argument("--csv", type=Path, metavar="OUT.csv", help="also write node,value rows")
    p.add_argument("--json", type=Path, metavar="OUT.json", help="also write Model Explorer's per-node data JSON")


def add_profile(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("profile", help="time every node with onnxruntime's profiler (graph optimizations off)")
    p.add_argument("model", type=Path)
    p.add_argument("--runs", type=count_argument(1), default=10, help="timed runs after one warm-up (default 10)")
    add_overlay_outputs(p)
    add_numeric_inputs(p)
    p.set_defaults(func=cmd_profile)


def add_overlay(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("overlay", help="a number per node: FLOPs, parameters or output bytes, or a CSV/JSON file's")
    p.add_argument("model", type=Path)
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--metric", choices=OVERLAY_METRICS, help="computed from shapes")
    what.add_argument("--from", dest="source", type=Path, metavar="FILE",
                      help="a node,value CSV or Model Explorer node data JSON, checked against the model's names")
    p.add_argument("--dim", action="append", metavar="NAME=VALUE",
                   help="size of a dynamic input dimension (default: batch 1, others 224 or the last that ran)")
    add_overlay_outputs(p)
    p.set_defaults(func=cmd_overlay)
