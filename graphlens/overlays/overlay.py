"""One number per node, and how it becomes a colour.

An :class:`Overlay` is whatever was measured or computed per node (latency, FLOPs, a
quantization error, a column of someone's CSV) keyed by node name. The canvas colours each box
by where its value falls between the smallest and the largest (on a log scale when the values
span more than two decades), a collapsed group by its worst member, and nodes without a value
grey. The colours come from one sequential scale, pale yellow → dark red (ColorBrewer's YlOrRd,
ordered in lightness so it reads in grey too): the darker, the worse.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

LOG_SPAN = 100.0
"""Values all positive and max/min above this (two decades): a log scale, else linear."""

SCALE_STOPS = np.array([
    (255, 255, 204), (255, 237, 160), (254, 217, 118), (254, 178, 76),
    (253, 141, 60), (252, 78, 42), (227, 26, 28), (189, 0, 38), (128, 0, 38),
], dtype=np.float64)
"""YlOrRd, best to worst."""

NO_VALUE = (207, 216, 220)
"""Grey for nodes the overlay has no value for."""


@dataclass
class Overlay:
    """Per-node numbers with a name and unit; ``log_scale`` None picks it from the values."""

    name: str
    unit: str
    values: dict[str, float]
    higher_is_worse: bool = True
    log_scale: bool | None = None
    source: str = ""
    """Where the numbers came from (a file, "onnxruntime profiler, 10 runs"), for the legend and table."""
    notes: list[str] = field(default_factory=list)
    """Lines saying how they were obtained (input sizes used, names that matched no node)."""

    def __post_init__(self) -> None:
        given = {str(k): float(v) for k, v in self.values.items()}
        self.values = {k: v for k, v in given.items() if math.isfinite(v)}
        left = [k for k in given if k not in self.values]
        if left:  # a quantized layer with no error at all has an infinite SQNR: said, not silently dropped
            self.notes = [*self.notes, f"{len(left)} node{'s' if len(left) != 1 else ''} not coloured: "
                                       f"{'its value is' if len(left) == 1 else 'their values are'} not finite "
                                       f"(such as '{left[0]}': {given[left[0]]:g})"]
        if self.log_scale is None:
            self.log_scale = wants_log_scale(self.values.values())

    @classmethod
    def of(cls, name: str, values: Mapping[str, float], unit: str = "", *, higher_is_worse: bool = True,
           log_scale: bool | None = None, source: str = "", notes: list[str] | None = None) -> Overlay:
        """Any ``dict[node_name, float]`` (a quantizer's error, say) as an overlay."""
        return cls(name, unit, dict(values), higher_is_worse, log_scale, source, notes if notes is not None else [])

    @property
    def title(self) -> str:
        """``Latency (µs)``; the legend's heading."""
        return f"{self.name} ({self.unit})" if self.unit else self.name

    def range(self) -> tuple[float, float]:
        """Smallest and largest value (0, 0 when empty)."""
        if not self.values:
            return 0.0, 0.0
        data = np.fromiter(self.values.values(), dtype=np.float64, count=len(self.values))
        return float(data.min()), float(data.max())

    def worst(self, names: Iterable[str]) -> float | None:
        """The worst value among ``names`` (a collapsed group's members); None if none has one."""
        found = [v for v in (self.values.get(n) for n in names) if v is not None]
        if not found:
            return None
        return max(found) if self.higher_is_worse else min(found)

    def ranked(self) -> list[tuple[str, float]]:
        """(node, value), worst first."""
        return sorted(self.values.items(), key=lambda kv: kv[1], reverse=self.higher_is_worse)

    def positions(self, values: np.ndarray) -> np.ndarray:
        """Where each value falls on the scale, 0 (best) to 1 (worst)."""
        lo, hi = self.range()
        data = np.asarray(values, dtype=np.float64)
        if self.log_scale and lo > 0:
            data, lo, hi = np.log10(np.maximum(data, lo)), math.log10(lo), math.log10(hi)
        t = np.zeros_like(data) if hi <= lo else np.clip((data - lo) / (hi - lo), 0.0, 1.0)
        return t if self.higher_is_worse else 1.0 - t

    def colours(self, values: np.ndarray) -> np.ndarray:
        """RGB (uint8, shape (n, 3)) for each value."""
        return scale_colours(self.positions(values))

    def ticks(self) -> list[tuple[float, str]]:
        """Marks for the legend as (position 0..1 along the bar from low to high value, label):
        min and max, and each power of ten in between on a log scale."""
        lo, hi = self.range()
        marks = [(0.0, format_value(lo, self.unit)), (1.0, format_value(hi, self.unit))]
        if self.log_scale and lo > 0 and hi > lo:
            span = math.log10(hi) - math.log10(lo)
            first, last = math.ceil(math.log10(lo)), math.floor(math.log10(hi))
            first += 10.0 ** first <= lo  # the ends have their own marks
            last -= 10.0 ** last >= hi
            step = max(1, math.ceil((last - first + 1) / 4))  # at most four marks between the ends
            for exponent in range(first, last + 1, step):
                t = (exponent - math.log10(lo)) / span
                if 0.12 < t < 0.88:
                    marks.insert(-1, (t, format_value(10.0 ** exponent, self.unit)))
        return marks

    def label(self, value: float) -> str:
        return format_value(value, self.unit)


def item_values(overlay: Overlay, members: Iterable[Iterable[str]]) -> dict[int, float]:
    """Box index -> its value, for boxes given by the node names they show (a node box: its own
    name; a collapsed group: its members, valued by the worst); boxes without a value left out."""
    found: dict[int, float] = {}
    values = overlay.values
    for index, names in enumerate(members):
        names = list(names)
        value = values.get(names[0]) if len(names) == 1 else overlay.worst(names)
        if value is not None:
            found[index] = value
    return found


def wants_log_scale(values: Iterable[float]) -> bool:
    """All positive and spanning more than :data:`LOG_SPAN`: FLOPs and latencies usually do."""
    data = list(values)
    if not data or min(data) <= 0:
        return False
    return max(data) / min(data) > LOG_SPAN


def scale_colours(t: np.ndarray) -> np.ndarray:
    """Positions 0..1 → RGB along :data:`SCALE_STOPS` (linear between stops), uint8 (n, 3)."""
    t = np.clip(np.asarray(t, dtype=np.float64), 0.0, 1.0)
    grid = np.linspace(0.0, 1.0, len(SCALE_STOPS))
    rgb = np.stack([np.interp(t, grid, SCALE_STOPS[:, k]) for k in range(3)], axis=-1)
    colours: np.ndarray = np.rint(rgb).astype(np.uint8)
    return colours


_SI = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB"))


def format_value(value: float, unit: str = "") -> str:
    """A value as people read it: ``1.2 GFLOPs``, ``3.5 MiB``, ``820 µs``, ``2.4 ms``, ``1.3e-05``."""
    if not math.isfinite(value):
        return str(value)
    magnitude = abs(value)
    if unit == "µs":
        if magnitude >= 1e6:
            return f"{value / 1e6:.3g} s"
        if magnitude >= 1e3:
            return f"{value / 1e3:.3g} ms"
        return f"{value:.3g} µs"
    if unit in ("B", "bytes"):
        for size, name in _BINARY:
            if magnitude >= size:
                return f"{value / size:.3g} {name}"
        return f"{value:.0f} B"
    suffix = f" {unit}" if unit else ""
    if magnitude >= 1e3:
        for scale, prefix in _SI:
            if magnitude >= scale:
                return f"{value / scale:.3g} {prefix}{unit}".rstrip()
    if value == int(value) and magnitude < 1e3:
        return f"{int(value)}{suffix}"
    return f"{value:.3g}{suffix}"
