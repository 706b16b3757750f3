"""Measuring in fresh processes, so one measurement's heap and caches never colour the next."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BYTECODE_CACHE = Path(tempfile.gettempdir()) / "graphlens-bench-pycache"
"""Where the measured processes keep their compiled modules, as an installed package keeps them beside it."""


def timed(cmd: list[str]) -> float:
    """Wall-clock seconds of one whole process (which must succeed)."""
    t0 = time.perf_counter()
    subprocess.run(cmd, capture_output=True, check=True)
    return time.perf_counter() - t0


def probe(script: str, *args: str) -> dict:
    """Run ``script`` in a fresh interpreter; it prints one JSON object, which is returned."""
    out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def bytecode_environment(env: dict[str, str], compile_every_run: bool, cache: Path) -> dict[str, str]:
    """``env`` where Python keeps the package's compiled modules in ``cache`` (as an installed command's are kept
    beside it), or, with ``compile_every_run``, compiles them in every process (``PYTHONDONTWRITEBYTECODE``)."""
    env = {k: v for k, v in env.items() if k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")}
    if compile_every_run:
        return {**env, "PYTHONDONTWRITEBYTECODE": "1"}
    return {**env, "PYTHONPYCACHEPREFIX": str(cache)}
