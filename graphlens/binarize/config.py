"""What to binarize and how: :class:`BinarizeConfig` (the math is in :mod:`graphlens.binarize.bits`).

Defaults, and why:

- **1 bit per kernel**: XNOR-Net's binary-weight network (``α = mean |W|`` per output channel), the
  form binary kernels compute; per tensor (one α per weight) costs more accuracy for no saving;
- the **emulated** form (Ŵ stored in the weight's own dtype): every runtime runs it and it shows
  the accuracy cost; ``structured`` stores each Bᵢ as int8 ±1 with its αᵢ and rebuilds Ŵ in the graph;
- batch norms **folded first** (the quantizer's rules): a BN scale binarized apart from its conv's
  weight would be lost, and a folded one is binarized with it, as a deployed binary conv would be;
- weights only: binarized activations (``binarize_activations``) are for looking at what a fully
  binary convolution computes; without retraining they cost most of a model's accuracy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from graphlens.core.errors import GraphLensError
from graphlens.core.linear import LINEAR_OP_TYPES
from graphlens.rewrites.defaults import BN_FOLD_RULES

FORMS = ("emulated", "structured")
OP_TYPES = LINEAR_OP_TYPES
"""Op types whose constant weight (input 1) can be binarized: the linear layers of :mod:`graphlens.core.linear`."""
MAX_BITS = 8


def _check_bits(bits: Any, what: str) -> None:
    if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= MAX_BITS:
        raise GraphLensError(f"{what} must be 1 to {MAX_BITS}, not {bits}")


@dataclass(frozen=True)
class BinarizeConfig:
    """Every choice :func:`~graphlens.binarize.binarize.binarize_model` makes; see the module docstring."""

    bits: int = 1
    """K, 1..8: bits per weight element (the layers in ``layer_bits`` excepted)."""
    per_kernel: bool = True
    """One αᵢ per kernel (output channel); False: one per weight."""
    form: str = "emulated"
    """``emulated`` (Ŵ stored as the weight) or ``structured`` (int8 signs and α, Ŵ rebuilt in the graph)."""
    layer_bits: Mapping[str, int] = field(default_factory=dict, hash=False)
    """K per node name, overriding ``bits``."""
    exclude_nodes: tuple[str, ...] = ()
    exclude_op_types: tuple[str, ...] = ()
    exclude_scopes: tuple[str, ...] = ()
    """Name scopes (``/backbone``): every node whose name starts with one is left float."""
    mean_bits: float | None = None
    """A random bit map per weight around this mean (``round(N(mean, 1))`` per element, clipped to 1..K), seeded."""
    seed: int = 0
    """Seed of the bit maps and of random input samples."""
    binarize_activations: bool = False
    """Also replace each binarized Conv/ConvTranspose's input by its sign (``Where(Greater(x, 0), 1, −1)``)."""
    fold_rules: tuple[str, ...] = BN_FOLD_RULES
    """The rules run first, as the quantizer's (batch norms folded: ``fuse-decomposed-bn``, ``fold-bn``,
    ``fold-affine``); empty: none."""
    op_types: tuple[str, ...] = OP_TYPES
    only_nodes: tuple[str, ...] = ()
    """Binarize only these nodes (empty: every layer of ``op_types`` not excluded)."""

    def __post_init__(self) -> None:
        _check_bits(self.bits, "bits")
        if self.seed < 0:
            raise GraphLensError(f"seed must be 0 or more, not {self.seed}")
        if self.form not in FORMS:
            raise GraphLensError(f"unknown form '{self.form}'; forms: {', '.join(FORMS)}")
        for name, bits in self.layer_bits.items():
            _check_bits(bits, f"bits of layer '{name}'")
        unknown = [t for t in self.op_types if t not in OP_TYPES]
        if unknown:
            raise GraphLensError(f"cannot binarize op type '{unknown[0]}'; op types: {', '.join(OP_TYPES)}")
        if self.mean_bits is not None:
            top = max([self.bits, *self.layer_bits.values()])
            if not 1.0 <= self.mean_bits <= top:
                raise GraphLensError(f"mean bits must be 1 to {top} (the most bits of a layer), not {self.mean_bits:g}")
        for key in ("exclude_nodes", "exclude_op_types", "exclude_scopes", "op_types", "only_nodes", "fold_rules"):
            if isinstance(getattr(self, key), str):
                raise GraphLensError(f"{key} must be a tuple of names, not a string")

    def with_changes(self, **changes: Any) -> BinarizeConfig:
        return replace(self, **changes)

    def bits_of(self, node: str) -> int:
        return int(self.layer_bits.get(node, self.bits))

    def excludes(self, name: str, op_type: str) -> bool:
        """Whether a node is left float by name, op type, scope, or by not being in ``only_nodes``."""
        if self.only_nodes and name not in self.only_nodes:
            return True
        if name in self.exclude_nodes or op_type in self.exclude_op_types or op_type not in self.op_types:
            return True
        scopes = [s.rstrip("/") for s in self.exclude_scopes if s.rstrip("/")]
        return any(name == s or name.startswith(s + "/") for s in scopes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "bits": self.bits, "per_kernel": self.per_kernel, "form": self.form, "layer_bits": dict(self.layer_bits),
            "exclude_nodes": list(self.exclude_nodes), "exclude_op_types": list(self.exclude_op_types),
            "exclude_scopes": list(self.exclude_scopes), "mean_bits": self.mean_bits, "seed": self.seed,
            "binarize_activations": self.binarize_activations, "fold_rules": list(self.fold_rules),
            "op_types": list(self.op_types), "only_nodes": list(self.only_nodes),
        }
