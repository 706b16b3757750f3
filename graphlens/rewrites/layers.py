"""Which layer of a transformer a site sits in, for the fold report's per-layer lines.

A decoder with 32 layers fused on 31 reads at once as ``attention: fused on 31 of 32 layers; left on
layer 7``. The layer is the index exporters put in a node's scope: ``/model/layers.7/self_attn/Softmax``
(TorchScript, optimum, onnxruntime-genai), ``encoder.layer.7``, ``transformer.h.7``, ``block.7``; the
dynamo exporter names nodes ``node_Softmax_12`` and keeps the module path in the node's metadata
(``pkg.torch.onnx.name_scopes``, ``namespace``), which is read too.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from graphlens.core.graph import Graph

_LAYER = re.compile(r"(?:^|[/.:\s'\[])(?:layers|layer|h|blocks|block)[._](\d+)(?=$|[/.:\s',\]])")
_SCOPE_KEYS = ("pkg.torch.onnx.name_scopes", "namespace")


def layer_of(graph: Graph, names: Iterable[str]) -> int | None:
    """The layer index in the scope of the first of ``names`` (nodes of ``graph``) that has one; None if none."""
    for name in names:
        texts = [name]
        node = graph.by_name.get(name)
        if node is not None:
            texts += [p.value for p in node.proto.metadata_props if p.key in _SCOPE_KEYS]
        for text in texts:
            found = _LAYER.findall(text)
            if found:
                return int(found[-1])
    return None


@dataclass
class LayerCounts:
    """Per kind, the layers where a site was fused and where one was left."""

    fused: dict[str, list[int]] = field(default_factory=dict)
    left: dict[str, list[int]] = field(default_factory=dict)

    def add(self, kind: str, layer: int | None, *, fused: bool) -> None:
        if layer is not None:
            (self.fused if fused else self.left).setdefault(kind, []).append(layer)

    def layers(self) -> list[int]:
        """Every layer any site was seen in."""
        return sorted({layer for table in (self.fused, self.left) for found in table.values() for layer in found})

    def lines(self) -> list[str]:
        """``attention by layer: fused on 31 of 32 layers; left on layer 7``, per kind; none under two layers."""
        out = []
        for kind in sorted(set(self.fused) | set(self.left)):
            text = self.text(kind)
            if text is not None:
                out.append(f"{kind} by layer: {text}")
        return out

    def text(self, kind: str) -> str | None:
        """``fused on 31 of 32 layers; left on layer 7`` for ``kind``; None when under two layers are seen."""
        total = len(self.layers())
        done, missed = sorted(set(self.fused.get(kind, []))), sorted(set(self.left.get(kind, [])))
        if total < 2 or not (done or missed):
            return None
        if not missed:  # all of them, or a kind only some layers have (the first layer's norm)
            return f"fused on all {total} layers" if len(done) == total else f"fused on {_layers(done)}"
        fused = f"fused on {len(done)} of {total} layers" if done else "fused on no layer"
        return f"{fused}; left on {_layers(missed)}"

    def to_json(self) -> dict[str, dict[str, list[int]]]:
        kinds = sorted(set(self.fused) | set(self.left))
        return {kind: {"fused": sorted(self.fused.get(kind, [])), "left": sorted(self.left.get(kind, []))}
                for kind in kinds}


def _layers(layers: list[int]) -> str:
    """``layers 0-3, 7``, ``layer 5``: runs of consecutive layers."""
    return f"layer{'s' if len(layers) > 1 else ''} {_spans(layers)}"


def _spans(layers: list[int]) -> str:
    """``0-3, 7``: runs of consecutive layers."""
    runs: list[list[int]] = []
    for layer in layers:
        if runs and layer == runs[-1][-1] + 1:
            runs[-1].append(layer)
        else:
            runs.append([layer])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)
