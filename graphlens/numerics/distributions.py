"""How far a quantized model's class probabilities moved: top-1 agreement and KL divergence, per position.

SQNR on a Softmax output misleads both ways. Probabilities saturate near 0 and 1, so a direction
classifier whose "180°" fell from 0.95 to 0.8 (under its pipeline's 0.9 threshold) still reads 46 dB;
and measured on log-probabilities instead, the thousands of classes of a CTC recognizer that no
decision reads, at 1e-9, swamp it. What a pipeline reads is the distribution, weighted by its own
probabilities, and its top class. So for an output made by a Softmax, at every position (every index
of the other axes) with ``p`` the float model's probabilities and ``q`` the quantized model's, both
along the class axis:

- top-1 agreement: the share of positions where ``argmax p = argmax q``;
- KL divergence ``KL(p‖q) = Σ_c p_c·(ln p_c − ln q_c)`` in nats, its mean and its largest over the
  positions (``q_c`` floored at :data:`FLOOR`; terms with ``p_c = 0`` are 0).

The class axis is the one the probabilities sum to 1 along (the Softmax's own ``axis`` is lost when
exporters reshape around it, as opset-11 models converted to opset 13 do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx

from graphlens.numerics.inputs import VALUE_PASS_THROUGH
from graphlens.numerics.metrics import finite

FLOOR = 1e-12
"""The smallest probability a quantized model's class is taken to have in ``ln q`` (float32 Softmax underflows
to 0 where float64 would not)."""
SUM_TOLERANCE = 1e-3


def softmax_outputs(model: onnx.ModelProto) -> list[str]:
    """The graph outputs a Softmax makes, directly or through ops that keep its values
    (:data:`~graphlens.numerics.inputs.VALUE_PASS_THROUGH`)."""
    producer = {out: node for node in model.graph.node for out in node.output}
    found = []
    for value in model.graph.output:
        node = producer.get(value.name)
        while node is not None and node.op_type in VALUE_PASS_THROUGH and node.input:
            node = producer.get(node.input[0])
        if node is not None and node.op_type == "Softmax":
            found.append(value.name)
    return found


def class_axis(p: np.ndarray) -> int | None:
    """The axis ``p`` sums to 1 along (the last, when several do), longer than 1; None if none does."""
    if p.ndim == 0 or p.dtype.kind != "f":
        return None
    for axis in reversed(range(p.ndim)):
        if p.shape[axis] > 1 and np.allclose(p.sum(axis=axis, dtype=np.float64), 1.0, rtol=0, atol=SUM_TOLERANCE):
            return axis
    return None


@dataclass
class DistributionStats:
    """Running top-1 agreement and KL divergence over batches of one Softmax output."""

    axis: int | None = None
    positions: int = 0
    same_top1: int = 0
    kl_sum: float = 0.0
    kl_max: float = 0.0

    def add(self, p: np.ndarray, q: np.ndarray) -> None:
        """One batch of the float (``p``) and quantized (``q``) probabilities; a tensor no axis of which sums to
        1 (the first batch decides) adds nothing."""
        if self.axis is None:
            self.axis = class_axis(p)
        if self.axis is None or p.shape != q.shape or p.ndim <= self.axis:
            return
        p64, q64 = np.moveaxis(p, self.axis, -1).astype(np.float64), np.moveaxis(q, self.axis, -1).astype(np.float64)
        p64, q64 = p64.reshape(-1, p64.shape[-1]), q64.reshape(-1, q64.shape[-1])
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(p64 > 0, p64 * (np.log(p64) - np.log(np.maximum(q64, FLOOR))), 0.0)
        kl = terms.sum(axis=1)
        self.positions += kl.size
        self.same_top1 += int(np.count_nonzero(p64.argmax(axis=1) == q64.argmax(axis=1)))
        self.kl_sum += float(kl.sum())
        self.kl_max = max(self.kl_max, float(kl.max(initial=0.0)))

    @property
    def top1(self) -> float:
        """The share of positions whose top class stayed (NaN before any)."""
        return self.same_top1 / self.positions if self.positions else math.nan

    @property
    def kl_mean(self) -> float:
        return self.kl_sum / self.positions if self.positions else math.nan

    def line(self, name: str) -> str:
        changed = self.positions - self.same_top1
        return (f"probabilities '{name}': top class changed at {changed} of {self.positions} position"
                f"{'' if self.positions == 1 else 's'} ({100 * (1 - self.top1):.2f} %); "
                f"KL divergence mean {self.kl_mean:.2g}, worst {self.kl_max:.2g} nats")

    def to_dict(self) -> dict[str, Any]:
        return {"axis": self.axis, "positions": self.positions, "top1_agreement": finite(self.top1),
                "kl_mean_nats": finite(self.kl_mean), "kl_max_nats": finite(self.kl_max)}
