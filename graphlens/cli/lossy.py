"""The lossy rewrites: ``quantize`` and ``binarize``."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from graphlens.cli.common import (
    EXIT_FAILED_CHECK,
    EXIT_OK,
    check_output_paths,
    check_writes,
    count_argument,
    write_report,
)
from graphlens.cli.writes import add_force, input_full_check, say
from graphlens.core.errors import GraphLensError
from graphlens.core.names import check_node_names

if TYPE_CHECKING:
    from graphlens.binarize.binarize import BinarizeResult
    from graphlens.core.model import Model
    from graphlens.numerics.samples import CalibrationData
    from graphlens.quantize.quantize import QuantizeResult
    from graphlens.quantize.scoring import Evaluate
    from graphlens.workspace import Workspace


def _names(text: str | None) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip()) if text else ()


def cmd_quantize(args: argparse.Namespace) -> int:
    from graphlens.quantize import QuantConfig
    from graphlens.workspace import Workspace

    config = QuantConfig(
        weight_bits=args.weight_bits or (4 if args.weight_only else 8), per_channel=args.per_channel,
        symmetric_activations=args.symmetric_activations,
        activation_signed=args.int8_activations, narrow_range=args.narrow_range, method=args.method,
        op_types=_names(args.op_types) or QuantConfig().op_types, exclude_nodes=_names(args.exclude),
        exclude_op_types=_names(args.exclude_op_types), exclude_scopes=_names(args.exclude_scope),
        fold_rules=() if args.no_fold else QuantConfig().fold_rules, target_sqnr_db=args.target_sqnr,
        sensitivity=args.sensitivity, seed=args.seed, weight_only=args.weight_only, block_size=args.block_size,
        weight_format=args.weight_format, symmetric_weights=args.symmetric_weights,
        target_score=args.target_score, bias_correction=args.bias_correction, equalize=args.equalize,
        weight_rounding=args.weight_rounding,
    )
    evaluate = _evaluate_hook(args)
    check_output_paths(args)
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model).model
    check_writes(args, [(args.report, "--report")], model=model)  # not the model's weights file either
    check_node_names(config.exclude_nodes, model.graph.by_name, "--exclude", args.model)  # before calibrating
    calibration = _calibration(args, model)
    full_check = input_full_check(args, model)
    result = workspace.quantization.quantize(config, calibration, samples=args.samples, evaluate=evaluate)
    _save_and_report(workspace, args, result, full_check)
    if _missed_target(args, result):  # the best model found is written all the same, as documented
        say(_missed_reason(args, result))
        return EXIT_FAILED_CHECK
    return EXIT_OK


def _evaluate_hook(args: argparse.Namespace) -> Evaluate | None:
    """``--evaluate SCRIPT.py``'s ``evaluate`` function (None without); ``--target-score`` needs it."""
    if args.target_score is not None and args.evaluate is None:
        raise GraphLensError("--target-score needs --evaluate SCRIPT.py (a function that scores a model path)")
    if args.evaluate is None:
        return None
    from graphlens.quantize.scoring import load_evaluate

    return load_evaluate(args.evaluate)


def _missed_target(args: argparse.Namespace, result: QuantizeResult) -> bool:
    """Whether a target was given and not reached (the best model found is written all the same)."""
    target = result.target
    if target is not None and not target.met:
        return True
    return args.target_sqnr is not None and not result.output_sqnr_db >= args.target_sqnr


def _missed_reason(args: argparse.Namespace, result: QuantizeResult) -> str:
    target = result.target
    if target is not None and not target.met:
        unit = " dB" if target.metric == "output SQNR" else ""
        return (f"target {target.metric} {target.target:g}{unit} not reached ({target.reached:.4g}{unit}); "
                f"{args.output} holds the best model found")
    return (f"target SQNR {args.target_sqnr:g} dB not reached ({result.output_sqnr_db:.1f} dB); "
            f"{args.output} holds the best model found")


def _calibration(args: argparse.Namespace, model: Model) -> CalibrationData | None:
    """The ``--calibration`` samples (an .npz, or a folder of images read by ``--preprocess``), or
    None for random ones."""
    if args.calibration is None:
        if args.preprocess:
            raise GraphLensError("--preprocess: give the images with --calibration DIR")
        return None
    from graphlens.quantize import load_calibration

    return load_calibration(args.calibration, model, preprocess=args.preprocess)


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
        binarize_activations=args.activations, only_nodes=only,
        fold_rules=() if args.no_fold else BinarizeConfig().fold_rules,
    )
    check_output_paths(args)
    workspace = Workspace(keep_history=False)
    model = workspace.open(args.model).model
    check_writes(args, [(args.report, "--report")], model=model)
    calibration = _calibration(args, model)
    full_check = input_full_check(args, model)
    result = workspace.binarization.binarize(config, calibration, samples=args.samples)
    if result.output_sqnr_db is None:  # as quantize: a model onnxruntime cannot run is bad input
        why = next((w for w in result.warnings if "not measured" in w), "output SQNR not measured")
        raise GraphLensError(f"{why}; {args.output} not written")
    _save_and_report(workspace, args, result, full_check)
    return EXIT_OK


PREPROCESS_HELP = (
    "how images in a --calibration folder become the input: comma-separated size=WIDTHxHEIGHT (default the "
    "input's fixed size), resize=stretch|fit (fit keeps the aspect ratio, pads with 0), scale=1/255, "
    "mean=M or M1/M2/M3, std=D or D1/D2/D3 (value = (pixel * scale - mean) / std), layout=NCHW|NHWC, "
    "order=rgb|bgr; e.g. \"size=640x640,mean=0.485/0.456/0.406,std=0.229/0.224/0.225\" (docs/quantize.md)")


def add_quantize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from graphlens.quantize.config import EQUALIZE_MODES, METHODS, WEIGHT_FORMATS, WEIGHT_ROUNDINGS

    p = sub.add_parser("quantize", help="fold, calibrate and insert QuantizeLinear/DequantizeLinear pairs (QDQ)")
    p.add_argument("model", type=Path)
    p.add_argument("-o", "--output", type=Path, required=True, help="where to write the quantized model")
    p.add_argument("--calibration", type=Path, metavar="DATA.npz|DIR",
                   help="calibration samples: an .npz with one array per graph input, shaped (N, *input dims) with "
                        "the samples along the batch axis, or (samples, *input shape); or a folder of images "
                        "(see --preprocess)")
    p.add_argument("--preprocess", metavar="KEY=VALUE,...", help=PREPROCESS_HELP)
    p.add_argument("--samples", type=count_argument(1), default=8,
                   help="random calibration samples without --calibration (default 8)")
    p.add_argument("--seed", type=int, default=0, help="seed for random samples (default 0)")
    p.add_argument("--per-channel", action=argparse.BooleanOptionalAction, default=True,
                   help="one weight scale per output channel (default; opset 13)")
    p.add_argument("--weight-bits", type=int, choices=(8, 4),
                   help="int8 (default) or int4 weights (opset 21); with --weight-only 4 is the default")
    p.add_argument("--weight-only", action="store_true",
                   help="quantize only MatMul and Gemm weights, in blocks along K; activations stay float "
                        "(transformers)")
    p.add_argument("--block-size", type=int, default=32, metavar="B",
                   help="--weight-only: rows of K per scale, a power of two from 16 (default 32)")
    p.add_argument("--weight-format", choices=WEIGHT_FORMATS, default="qdq",
                   help="--weight-only: qdq, DequantizeLinear with block_size (opset 21, default); matmulnbits, "
                        "onnxruntime's com.microsoft MatMulNBits")
    p.add_argument("--symmetric-weights", action=argparse.BooleanOptionalAction, default=True,
                   help="signed weights, zero point 0 (default); --no-symmetric-weights: unsigned with a zero point "
                        "per channel or block")
    p.add_argument("--narrow-range", action=argparse.BooleanOptionalAction, default=True,
                   help="weights in -127..127 (default)")
    p.add_argument("--symmetric-activations", action="store_true", help="zero point in the middle of the range")
    p.add_argument("--int8-activations", action="store_true", help="int8 activations instead of uint8")
    p.add_argument("--method", choices=METHODS, default="minmax",
                   help="how activation ranges are calibrated (default minmax); entropy: the least KL divergence, "
                        "as TensorRT does; auto: per tensor, the method with the least expected error")
    p.add_argument("--op-types", help="comma-separated op types to quantize (default Conv,ConvTranspose,Gemm,MatMul)")
    p.add_argument("--exclude", help="comma-separated node names to leave float")
    p.add_argument("--exclude-op-types", help="comma-separated op types to leave float")
    p.add_argument("--exclude-scope", help="comma-separated name scopes (/backbone) to leave float")
    p.add_argument("--no-fold", action="store_true", help="do not fold batch norms first")
    p.add_argument("--sensitivity", action="store_true", help="rank the layers (each quantized alone, each left float)")
    p.add_argument("--target-sqnr", type=float, metavar="DB",
                   help="leave the fewest layers float for the output SQNR to reach DB; if it cannot, write the "
                        "best model found and exit 1")
    p.add_argument("--evaluate", type=Path, metavar="SCRIPT.py",
                   help="score models with SCRIPT.py's 'def evaluate(model_path: str) -> float' (higher is better); "
                        "the score is reported, and --target-score searches by it instead of SQNR")
    p.add_argument("--target-score", type=float, metavar="X",
                   help="with --evaluate: leave the fewest layers float for the score to reach X; if it cannot, "
                        "write the best model found and exit 1")
    p.add_argument("--bias-correction", action=argparse.BooleanOptionalAction, default=False,
                   help="move each layer's mean output shift on the calibration samples into its bias "
                        "(off by default: it helped no OCR model's error rate, docs/quantize.md)")
    p.add_argument("--equalize", choices=EQUALIZE_MODES, default="auto",
                   help="cross-layer equalization first: auto (default) keeps it where the quantized output SQNR "
                        "(or the --evaluate score) on the calibration samples rises; on: always; off: never")
    p.add_argument("--weight-rounding", choices=WEIGHT_ROUNDINGS, default="nearest",
                   help="nearest (default): each weight to its nearest level; gptq: each layer's rounding errors "
                        "steered to cancel on the inputs it sees in the calibration samples (one more float pass)")
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    add_force(p)
    p.set_defaults(func=cmd_quantize)


def add_binarize(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    p.add_argument("--calibration", type=Path, metavar="DATA.npz|DIR",
                   help="samples for the output SQNR: an .npz with one array per graph input (as for quantize), or a "
                        "folder of images (see --preprocess)")
    p.add_argument("--preprocess", metavar="KEY=VALUE,...", help=PREPROCESS_HELP)
    p.add_argument("--samples", type=count_argument(1), default=4,
                   help="random samples without --calibration (default 4)")
    p.add_argument("--seed", type=int, default=0, help="seed for the bit maps and random samples (default 0)")
    p.add_argument("--report", type=Path, help="also write the report as JSON")
    p.add_argument("--in-place", action="store_true", help="allow OUTPUT to be MODEL itself")
    add_force(p)
    p.set_defaults(func=cmd_binarize)


def _save_and_report(workspace: Workspace, args: argparse.Namespace,
                     result: QuantizeResult | BinarizeResult, full_check: bool) -> None:
    """Say what was done, write the ``--report`` JSON and the model: the same for every lossy rewrite. The model
    takes its name last, once checked and once the report is written; a failure before leaves neither."""
    lines, data = result.lines(), result.to_dict()
    for line in lines:
        print(line)
    workspace.save_as(args.output, overwrite_source=args.in_place, full_check=full_check,
                      before_commit=lambda _staged: write_report(args.report, data))
    print(f"wrote {args.output} ({workspace.require_model().node_count()} nodes)")
