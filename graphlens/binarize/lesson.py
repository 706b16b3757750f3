"""The binarization lesson: one kernel of one weight, bit by bit, with its own numbers (Qt-free).

For one kernel (output channel) of a binarized layer's float weight: its values, each bit's sign
``Bᵢ = sign(Rᵢ₋₁)`` and scale ``αᵢ = mean |Rᵢ₋₁|`` as :func:`~graphlens.binarize.bits.residual_steps`
computes them (so the math is stated once, in :mod:`graphlens.binarize.bits`), the residual's
energy after each bit, the ``2^K`` reconstruction levels ``Σ ±αᵢ`` to draw over the histogram,
one weight taken through its bits, and the SQNR for every K from 1 to 8 (never decreasing).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from onnx import numpy_helper

from graphlens.binarize.bits import MAX_BITS, Step, binarize, kernel_values, residual_steps
from graphlens.core.errors import GraphLensError
from graphlens.numerics.metrics import sqnr_db
from graphlens.rewrites.lesson_text import number, operand

if TYPE_CHECKING:
    from graphlens.binarize.binarize import LayerBits
    from graphlens.binarize.config import BinarizeConfig
    from graphlens.rewrites.lossy import LossyPreview

BINS = 120
SUB = str.maketrans("0123456789", "₀₁₂₃₄₅₆₇₈₉")


def sub(i: int) -> str:
    """``3`` → ``₃``: the index of αᵢ, Bᵢ, Rᵢ in the formulas."""
    return str(i).translate(SUB)


@dataclass
class BinarizeLesson:
    """What the lesson shows for one kernel of one weight binarized with ``bits`` bits."""

    node: str
    op_type: str
    tensor: str
    shape: tuple[int, ...]
    values: np.ndarray = field(repr=False)
    """The kernel's float weights, flat (float64)."""
    bits: int
    axis: int | None
    """The kernel axis (None: one α per tensor, the whole weight is the kernel)."""
    kernel: int
    kernels: int
    steps: list[Step]
    """Bit 1..K: αᵢ, the SQNR after it, the levels so far."""
    signs: np.ndarray = field(repr=False)
    """Bᵢ of the kernel's weights, ``(K, n)`` int8 ±1."""
    curve: list[Step]
    """Bit 1..8 of the same kernel: the SQNR against K."""
    kernel_sqnr_db: np.ndarray = field(repr=False)
    """Every kernel's SQNR at ``bits`` (the picker opens on the worst)."""
    notes: list[str] = field(default_factory=list)
    groups: int = 1
    """A grouped ConvTranspose's ``group``: kernel ``m`` spans axis 0 too (:mod:`graphlens.binarize.bits`)."""

    @property
    def alphas(self) -> list[float]:
        return [s.alpha for s in self.steps]

    @property
    def levels(self) -> np.ndarray:
        """The ``2^K`` values ``Σ ±αᵢ`` the kernel's weights can take, sorted."""
        return self.steps[-1].levels

    @property
    def sqnr_db(self) -> float:
        return self.steps[-1].sqnr_db

    @property
    def approx(self) -> np.ndarray:
        """Ŵ = Σ αᵢ·Bᵢ over the kernel, flat."""
        return np.asarray(self.alphas) @ self.signs.astype(np.float64)

    def residual_energy(self) -> list[float]:
        """‖Rᵢ‖² for i = 0..K (R₀ = W)."""
        energies = [float(np.dot(self.values, self.values))]
        residual = self.values.copy()
        for alpha, sign in zip(self.alphas, self.signs):
            residual = residual - alpha * sign
            energies.append(float(np.dot(residual, residual)))
        return energies

    def histogram(self, bins: int = BINS) -> tuple[np.ndarray, np.ndarray]:
        """Counts and edges over the weights and the levels together."""
        lo = min(float(self.values.min()), float(self.levels[0]))
        hi = max(float(self.values.max()), float(self.levels[-1]))
        return np.histogram(self.values, bins=bins, range=(lo, hi if hi > lo else lo + 1.0))

    def snapped(self) -> np.ndarray:
        """How many weights land on each level (the levels' order)."""
        found = np.searchsorted(self.levels, self.approx)
        return np.bincount(np.clip(found, 0, len(self.levels) - 1), minlength=len(self.levels))

    def example(self) -> tuple[float, list[int], float]:
        """(w, its signs B₁…B_K, ŵ) for the weight nearest the median |w|: a typical one."""
        magnitude = np.abs(self.values)
        index = int(np.argmin(np.abs(magnitude - np.median(magnitude))))
        return float(self.values[index]), [int(s) for s in self.signs[:, index]], float(self.approx[index])

    def formula_lines(self) -> list[str]:
        """Each bit's αᵢ and residual worked out with this kernel's numbers."""
        n = self.values.size
        where = ("the whole weight (one α per tensor)" if self.axis is None
                 else f"kernel {self.kernel} of {self.kernels}")
        energy = self.residual_energy()
        lines = [f"W: {where}, {n:,} weights;  R{sub(0)} = W,  ‖W‖² = {number(energy[0])}"]
        residual = self.values.copy()
        for i, (step, sign) in enumerate(zip(self.steps, self.signs), 1):
            plus = int(np.count_nonzero(sign > 0))
            total = float(np.abs(residual).sum())
            lines.append("")
            lines.append(f"bit {i}:  B{sub(i)} = sign(R{sub(i - 1)})  ({plus:,} × +1, {n - plus:,} × −1)")
            lines.append(f"  α{sub(i)} = mean |R{sub(i - 1)}| = {number(total)} / {n:,} = {number(step.alpha)}")
            lines.append(f"  R{sub(i)} = R{sub(i - 1)} − α{sub(i)}·B{sub(i)}: "
                         f" ‖R{sub(i)}‖² = {number(energy[i - 1])} − "
                         f"{n:,} × {operand(step.alpha)}² = {number(energy[i])}")
            ratio = f"{number(energy[0])} / {number(energy[i])}" if energy[i] > 0 else "‖W‖² / 0"
            lines.append(f"  SQNR = 10·log10(‖W‖² / ‖R{sub(i)}‖²) = 10·log10({ratio}) = {_db(step.sqnr_db)} dB")
            residual = residual - step.alpha * sign
        symbols = " ± ".join(f"α{sub(i)}" for i in range(1, self.bits + 1))
        count = len(np.unique(self.levels))
        lines.append("")
        lines.append("Ŵ = " + " + ".join(f"α{sub(i)}·B{sub(i)}" for i in range(1, self.bits + 1))
                     + f":  each weight is one of ±{symbols}, {count} level{'s' if count != 1 else ''}")
        if len(self.levels) <= 8:
            lines.append("levels: " + ", ".join(number(v) for v in self.levels))
        w, signs, w_hat = self.example()
        terms = [f"{'+' if s > 0 else '−'} {number(a)}" for a, s in zip(self.alphas, signs)]
        written = " ".join(terms).removeprefix("+ ").replace("− ", "−", 1 if signs[0] < 0 else 0)
        lines.append(f"e.g. w = {number(w)}:  B = ({', '.join('+1' if s > 0 else '−1' for s in signs)})  →  "
                     f"ŵ = {written} = {number(w_hat)}")
        return lines


def _db(value: float) -> str:
    return "∞" if value == float("inf") else f"{value:.2f}"


def kernel_sqnrs(w: np.ndarray, bits: int, axis: int | None, groups: int = 1) -> np.ndarray:
    """Each kernel's SQNR at ``bits`` (one value per tensor when ``axis`` is None)."""
    result = binarize(w, bits, axis=axis, groups=groups)
    w = np.asarray(w, np.float64)
    return np.asarray([sqnr_db(kernel_values(w, axis, k, result.groups), kernel_values(result.approx, axis, k,
                                                                                       result.groups))
                       for k in range(result.kernels)])


def weight_lesson(w: np.ndarray, bits: int, *, axis: int | None, kernel: int | None = None, node: str = "",
                  op_type: str = "", tensor: str = "", groups: int = 1) -> BinarizeLesson:
    """The lesson for kernel (output channel) ``kernel`` of ``w`` (None: the one that binarizes worst);
    ``groups``: a grouped ConvTranspose's ``group``."""
    w = np.asarray(w, np.float64)
    per_kernel = kernel_sqnrs(w, bits, axis, groups)
    kernels = per_kernel.size
    if kernel is None:
        kernel = int(np.argmin(per_kernel))
    if not 0 <= kernel < kernels:
        raise GraphLensError(f"there is no kernel {kernel}; the weight has kernels 0–{kernels - 1}")
    steps = residual_steps(w, bits, axis, kernel, groups=groups)
    curve = residual_steps(w, MAX_BITS, axis, kernel, groups=groups)
    result = binarize(w, bits, axis=axis, groups=groups)
    values = kernel_values(w, axis, kernel, result.groups)
    kernel_signs = np.stack([kernel_values(s, axis, kernel, result.groups) for s in result.signs])
    return BinarizeLesson(node, op_type, tensor, tuple(w.shape), values, bits, axis, kernel, kernels, steps,
                          kernel_signs, curve, per_kernel, groups=result.groups)


def layer_lesson(preview: LossyPreview[BinarizeConfig, Any], layer: LayerBits, kernel: int | None = None,
                 bits: int | None = None) -> BinarizeLesson:
    """The lesson for a row of a preview's result (a ``LayerBits``): its float weight, kernel ``kernel``
    (None: the worst), ``bits`` bits (None: the layer's)."""
    found = next((t for t in preview.float_model.graph.initializer if t.name == layer.tensor), None)
    w: np.ndarray | None
    if found is not None:
        w = numpy_helper.to_array(found)
    else:  # a Constant node's value
        from graphlens.core.model import Model

        w = Model(preview.float_model).graph.constant_value(layer.tensor)
    if w is None:
        raise GraphLensError(f"weight '{layer.tensor}' of '{layer.node}' is "
                             "not in the model the binarizer started from")
    lesson = weight_lesson(w, bits or layer.bits, axis=layer.axis, kernel=kernel, node=layer.node,
                           op_type=layer.op_type, tensor=layer.tensor, groups=layer.groups)
    if preview.config.mean_bits is not None:
        lesson.notes.append("The preview drew a random number of bits per element; here every weight has K bits.")
    return lesson
