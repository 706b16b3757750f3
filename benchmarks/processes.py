"""Measuring in fresh processes, so one measurement's heap and caches never colour the next."""

from __future__ import annotations

import json
import subprocess
import sys
import time


def timed(cmd: list[str]) -> float:
    """Wall-clock seconds of one whole process (which must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t0


def probe(script: str, *args: str) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one JSON object, which is returned."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)
