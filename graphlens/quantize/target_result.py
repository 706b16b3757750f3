"""What a target search chose and measured, and the report's line for it (:mod:`~.target` runs the search)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field


@dataclass
class TargetResult:
    """What the search chose and measured."""

    target: float
    metric: str
    """``output SQNR`` (dB) or ``score``."""
    excluded: list[str]
    reached: float
    """The chosen model's value."""
    met: bool
    runs: list[tuple[int, float]] = field(default_factory=list)
    """(layers left float, value) for every measured run, in order."""
    float_value: float | None = None
    """The float model's score (a score target only)."""
    samples: int = 0
    """The samples every run was measured on (an SQNR target; 0: the user's score)."""
    given_samples: int = 0
    """The samples the search was given: more than ``samples`` when it took the first (:data:`MEASURED_ELEMENTS`)."""
    floor: float | None = None
    """Out of reach: the value with every layer float but the last ranked."""
    input_db: float | None = None
    """Out of reach: the output SQNR with only the model's inputs quantized."""
    outputs_db: dict[str, float] = field(default_factory=dict)
    """Each output's SQNR of the chosen model, on ``samples`` (an SQNR target)."""
    random_samples: bool = False
    """The samples were random ones (no calibration given)."""
    int8_macs: float | None = None
    """The chosen model's share of the quantized layers' multiply-accumulates still in int8 (None: unknown)."""

    def samples_line(self) -> str:
        """Which samples the search measured on, as the report says it."""
        return samples_phrase(self.samples, self.given_samples, " random" if self.random_samples else "")

    def line(self, names: int | None = None) -> str:
        """The report's line; ``names``: list at most that many of the layers left float (a window's summary)."""
        unit = " dB" if self.metric == "output SQNR" else ""
        on = self.samples_line()
        runs = f"{len(self.runs)} run{'s' if len(self.runs) != 1 else ''}"
        shown = self.excluded if names is None else self.excluded[:names]
        floats = ", ".join(shown) + (", …" if len(shown) < len(self.excluded) else "") if self.excluded else "none"
        macs = "" if self.int8_macs is None else f", {100 * self.int8_macs:.1f} % of the MACs int8"
        layers = f"{len(self.excluded)} layer{'s' if len(self.excluded) != 1 else ''}"
        if self.floor is not None:
            inputs = "" if self.input_db is None else f"; the model's input quantized alone: {self.input_db:.4g} dB"
            kept = (f"kept the best model found, {self.reached:.4g}{unit} with {layers} left float ({runs}{macs}): "
                    f"{floats}" if self.excluded else
                    f"kept every layer quantized, the best found: {self.reached:.4g}{unit} ({runs})")
            return (f"target {self.metric} {self.target:g}{unit} out of reach{on}: {self.floor:.4g}{unit} with every "
                    f"layer float but one{inputs}; {kept}")
        verdict = "reached" if self.met else "NOT reached; kept the best model found,"
        return (f"target {self.metric} {self.target:g}{unit} {verdict} {self.reached:.4g}{unit}{on} with "
                f"{layers} left float ({runs}{macs}): {floats}")

    def to_dict(self) -> dict[str, object]:
        return {"target": self.target, "metric": self.metric, "reached": _finite(self.reached), "met": self.met,
                "left_float": list(self.excluded), "runs": [[k, _finite(v)] for k, v in self.runs],
                "float_value": None if self.float_value is None else _finite(self.float_value),
                "samples": self.samples, "floor": None if self.floor is None else _finite(self.floor),
                "input_db": None if self.input_db is None else _finite(self.input_db), "int8_macs": self.int8_macs}


def samples_phrase(samples: int, given: int, kind: str = "") -> str:
    """`` on the 8 samples``, or `` on the first 2 of the 8 samples`` when the search took fewer than given."""
    if not samples:
        return ""
    if given <= samples:
        return f" on the {samples}{kind} sample{'s' if samples != 1 else ''}"
    first = "first sample" if samples == 1 else f"first {samples}"
    return f" on the {first} of the {given}{kind} samples"


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
