"""Commands that read a model: ``info``, ``patterns``, ``match``, ``explain``, ``render``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from graphlens.cli.common import EXIT_OK, OVERLAY_METRICS, check_writes, human_bytes, print_json

if TYPE_CHECKING:
    from graphlens.patterns.ir import Pattern
    from graphlens.workspace import Workspace


def _io_line(entry: dict[str, Any]) -> str:
    shape = entry["shape"]
    dims = "?" if shape is None else "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"
    return f"  {entry['name']}  {entry['dtype'] or '?'} {dims}"


def cmd_info(args: argparse.Namespace) -> int:
    from graphlens.core.model import load_model

    model = load_model(args.model)
    info = model.summary()
    if args.json:
        print_json(info)
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
    lines.append(f"initializers  {inits['count']} ({human_bytes(inits['bytes'])})")
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
        print_json({name: p.description for name, p in patterns.items()})
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
    found = workspace.matches.find(pattern, non_overlapping=args.non_overlapping)
    matches = found.matches
    if args.json:
        print_json(found.to_dict(), large=len(matches) > 100)
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
    result = workspace.matches.explain(pattern, at=args.at)
    if args.json:
        print_json(result.to_dict())
        return EXIT_OK
    print(result.message)
    for miss in getattr(result.outcome, "near_misses", []):
        print(f"  at {miss.at}: {miss.message}")
    return EXIT_OK


def cmd_render(args: argparse.Namespace) -> int:
    from graphlens.core.bundled import demo_model_path
    from graphlens.gui.render import render_graph
    from graphlens.patterns.library import resolve_pattern
    from graphlens.workspace import Workspace

    collapse = resolve_pattern(args.collapse) if args.collapse else None  # refused before a large model is read
    check_writes(args, [(args.output, "-o")])
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model or demo_model_path()).model
    check_writes(args, [(args.output, "-o")], model=model)
    select = [s.strip() for s in (args.select or "").split(",") if s.strip()]
    overlay = None
    if args.overlay is not None:
        from graphlens.overlays import attach, load_overlay

        if args.overlay in OVERLAY_METRICS:
            overlay = workspace.overlay.show_metric(args.overlay)
        else:
            overlay = workspace.overlay.show(attach(load_overlay(args.overlay), model))
    collapsed = _collapsed_matches(workspace, collapse) if collapse is not None else None
    written = render_graph(model.graph, args.output, select=select, expand_all=args.expand_all, overlay=overlay,
                           crop=args.crop, shape_ops=args.shape_ops, edge_shapes=args.shapes,
                           collapsed_matches=collapsed, collapse_groups=args.collapse_groups,
                           note=lambda text: print(f"note: {text}", file=sys.stderr))
    print(f"wrote {written}")
    return EXIT_OK


def _collapsed_matches(workspace: Workspace, pattern: Pattern) -> dict[str, str]:
    """Node name -> match key for the matches of ``pattern`` in the main graph (sharing no node), said on stderr."""
    from graphlens.layout.collapse_matches import match_keys

    model = workspace.require_model()
    found = [m for m in workspace.matches.find(pattern, non_overlapping=True).matches if m.graph is model.graph]
    count = f"{len(found)} match{'es' if len(found) != 1 else ''}"
    print(f"note: --collapse: {count} of {pattern.name}, each drawn as one box", file=sys.stderr)
    return match_keys(pattern.name, (m.node_names for m in found))


def add_info(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("info", help="print a model's summary")
    p.add_argument("model", type=Path)
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_info)


def add_patterns(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("patterns", help="list the built-in patterns")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_patterns)


def add_match(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("match", help="find every match of a pattern")
    p.add_argument("model", type=Path)
    p.add_argument("--pattern", "-p", required=True,
                   help="a built-in name (see graphlens patterns), a .pattern/.json file, or pattern text")
    p.add_argument("--non-overlapping", action="store_true",
                   help="keep only matches sharing no node with an earlier one")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_match)


def add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("explain", help="say why a pattern does or does not match")
    p.add_argument("model", type=Path)
    p.add_argument("--pattern", "-p", required=True, help="a built-in name, a .pattern/.json file, or pattern text")
    p.add_argument("--at", help="the node where a match was expected; without it, the closest near misses")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=cmd_explain)


def add_render(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("render", help="draw a model's graph to a PNG or SVG file, without a window")
    p.add_argument("model", type=Path, nargs="?", help="the model (default: the bundled demo)")
    p.add_argument("-o", "--output", type=Path, required=True, help="OUT.png or OUT.svg")
    p.add_argument("--select", help="comma-separated node names to highlight")
    p.add_argument("--crop", action="store_true",
                   help="with --select: draw only the selected nodes and their surroundings, at full size")
    p.add_argument("--overlay", metavar="FILE|METRIC",
                   help="colour nodes by a number per node: a node,value CSV, Model Explorer node data JSON, "
                        f"or one of {', '.join(OVERLAY_METRICS)} (computed from shapes); its scale is the legend")
    p.add_argument("--expand-all", action="store_true", help="draw every node, with no collapsed groups")
    p.add_argument("--collapse-groups", action="store_true",
                   help="draw name scopes (/layers.0/…) as closed groups and runs of identical ones as one ×N box, "
                        "at any size (by default only above 2,000 nodes)")
    p.add_argument("--shape-ops", action="store_true",
                   help="draw shape arithmetic (Shape → Gather → Concat → Reshape chains) as boxes; by default each is "
                        "a 'shape ⟨computed: …⟩' line in the box that uses it")
    p.add_argument("--shapes", action="store_true",
                   help="write tensor shapes on the edges (readable where the picture is drawn at full size)")
    p.add_argument("--collapse", metavar="PATTERN",
                   help="draw every match of PATTERN (a built-in name, a .pattern/.json file, or pattern text) as one "
                        "box named after the pattern")
    p.set_defaults(func=cmd_render)
