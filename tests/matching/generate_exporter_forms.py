"""Export small torch modules with torch.onnx and compare them with the forms in ``exporter_forms``.

Not a test (it needs torch, which the suite does not): run it in an environment that has torch,
onnx and onnxscript, from the repository root::

    python -m tests.matching.generate_exporter_forms [--show]

For each module, exporter (TorchScript at opsets 13, 17, 18, 20; dynamo at 18, 20) it prints which
built-in patterns match, and whether the graph still has the structure of the builder that claims
to imitate it (op types, input order, which inputs are constants). A difference means the exporter
changed: update the builder and the pattern together. ``--show`` prints every exported graph.
"""

from __future__ import annotations

import argparse
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

import onnx

from graphlens.core.model import load_model
from graphlens.matching.matcher import find_matches
from graphlens.patterns.library import get_pattern, library
from tests.matching import exporter_forms as ef

Signature = list[tuple[str, tuple[str, ...]]]


def signature(model: onnx.ModelProto) -> Signature:
    """Each computing node as (op type, what feeds each input: 'x', 'const' or the producer's index)."""
    graph = model.graph
    consts = {i.name for i in graph.initializer}
    inputs = {i.name for i in graph.input} - consts
    produced: dict[str, int] = {}
    out: Signature = []
    for node in graph.node:
        if node.op_type == "Constant":
            consts.update(node.output)
            continue
        kinds = tuple("x" if i in inputs else "const" if i in consts else str(produced.get(i, "?")) for i in node.input)
        for o in node.output:
            produced[o] = len(out)
        out.append((node.op_type, kinds))
    return out


def modules() -> list[tuple[str, Callable, tuple[int, ...], dict[tuple[str, int], Callable[[], ef.Form] | None]]]:
    """(name, module factory, input shape, {(exporter, opset): builder of the same structure, or None})."""
    import torch
    from torch import nn

    class Affine(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = nn.Conv2d(4, 4, 3, padding=1)
            self.s = nn.Parameter(torch.rand(1, 4, 1, 1))
            self.b = nn.Parameter(torch.rand(1, 4, 1, 1))

        def forward(self, x):
            return self.conv(x) * self.s + self.b

    class DecomposedBN(nn.Module):
        def __init__(self, rsqrt: bool) -> None:
            super().__init__()
            self.rsqrt = rsqrt
            for n in ("mean", "var", "g", "b"):
                self.register_buffer(n, torch.rand(1, 4, 1, 1))

        def forward(self, x):
            if self.rsqrt:
                return (x - self.mean) * torch.rsqrt(self.var + 1e-5) * self.g + self.b
            return (x - self.mean) / torch.sqrt(self.var + 1e-5) * self.g + self.b

    class TinyEpsLayerNorm(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w, self.b = nn.Parameter(torch.rand(8)), nn.Parameter(torch.rand(8))

        def forward(self, x):
            u = x.mean(-1, keepdim=True)
            s = (x - u).pow(2).mean(-1, keepdim=True)
            return self.w * ((x - u) / torch.sqrt(s + 1e-12)) + self.b

    ts, dyn = "torchscript", "dynamo"
    return [
        ("GELU", nn.GELU, (2, 3, 8), {(ts, 13): ef.gelu_erf_torchscript, (ts, 18): ef.gelu_erf_torchscript,
                                      (dyn, 18): ef.gelu_erf_dynamo, (ts, 20): None, (dyn, 20): None}),
        ("GELU tanh", lambda: nn.GELU(approximate="tanh"), (2, 3, 8),
         {(ts, 13): ef.gelu_tanh_torchscript, (ts, 18): ef.gelu_tanh_torchscript, (dyn, 18): ef.gelu_tanh_dynamo,
          (ts, 20): None, (dyn, 20): None}),
        ("SiLU", nn.SiLU, (2, 3, 8), {(ts, 13): ef.silu_torch, (ts, 20): ef.silu_torch, (dyn, 20): ef.silu_torch}),
        ("Hardswish", nn.Hardswish, (2, 3, 8),
         {(ts, 13): ef.hardswish_torchscript_13, (ts, 17): None, (dyn, 18): None}),
        ("LayerNorm", lambda: nn.LayerNorm(8), (2, 3, 8), {(ts, 13): ef.layer_norm_torchscript, (ts, 17): None,
                                                          (dyn, 18): None}),
        ("LayerNorm eps 1e-12 by hand", TinyEpsLayerNorm, (2, 3, 8), {(dyn, 18): ef.layer_norm_dynamo_tiny_eps}),
        ("x * scale + shift after Conv", Affine, (1, 4, 6, 6), {(ts, 13): ef.conv_mul_add_torch,
                                                               (dyn, 18): ef.conv_mul_add_torch}),
        ("decomposed BN", lambda: DecomposedBN(False), (1, 4, 6, 6), {(ts, 13): ef.decomposed_bn_folded_div,
                                                                      (dyn, 18): ef.decomposed_bn_folded_div}),
        ("decomposed BN, rsqrt", lambda: DecomposedBN(True), (1, 4, 6, 6),
         {(ts, 13): ef.decomposed_bn_folded_rsqrt, (dyn, 18): ef.decomposed_bn_folded_rsqrt}),
    ]


def export(factory: Callable, shape: tuple[int, ...], exporter: str, opset: int, path: Path) -> onnx.ModelProto:
    import torch

    module = factory().eval()
    x = torch.randn(*shape)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if exporter == "dynamo":
            torch.onnx.export(module, (x,), dynamo=True, opset_version=opset).save(str(path))
        else:
            torch.onnx.export(module, (x,), str(path), dynamo=False, opset_version=opset)
    return onnx.load(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--show", action="store_true", help="print every exported graph")
    args = parser.parse_args()
    differences = 0
    with tempfile.TemporaryDirectory() as tmp:
        for name, factory, shape, cases in modules():
            for (exporter, opset), builder in cases.items():
                path = Path(tmp) / "model.onnx"
                model = export(factory, shape, exporter, opset, path)
                found = [p for p in library() if find_matches(get_pattern(p), load_model(path))]
                ops = " ".join(op for op, _ in signature(model))
                if builder is None:
                    fused = len(signature(model)) == 1
                    verdict = "one fused op, nothing to match" if fused else "UNEXPECTED: not fused"
                elif signature(model) == signature(builder().model):
                    verdict = f"same structure as {builder.__name__}"
                else:
                    verdict = f"DIFFERS from {builder.__name__}"
                differences += verdict.startswith(("DIFFERS", "UNEXPECTED"))
                print(f"{name:30s} {exporter:11s} opset {opset}: {ops}\n    matched by {found or 'nothing'}; {verdict}")
                if args.show:
                    print(onnx.printer.to_text(model.graph))
    print(f"{differences} difference(s)")
    return 1 if differences else 0


if __name__ == "__main__":
    raise SystemExit(main())
