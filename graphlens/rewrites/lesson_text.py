"""How every lesson (BN folding, quantization, binarization) writes a number, so that they read alike."""

from __future__ import annotations


def number(value: float) -> str:
    """How the lesson writes a number: 5 significant digits, a true minus sign in front."""
    text = f"{float(value):.5g}"
    return "−" + text[1:] if text.startswith("-") else text


def operand(value: float) -> str:
    """A number inside a formula; negative ones in parentheses so `a − (−b)` reads right."""
    text = number(value)
    return f"({text})" if text.startswith("−") else text


def parse_number(text: str) -> float:
    """The inverse of :func:`number`, for readers of ``formula_lines``."""
    return float(text.strip("()").replace("−", "-"))
