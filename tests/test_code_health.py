"""The code stays linted, typed, free of dead names and of long functions and modules.

ruff, mypy and vulture read their settings from pyproject.toml; each check is skipped only when its
tool is not installed (they come with the ``test`` extra).
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "graphlens"
LINTED = ["graphlens", "tests", "benchmarks", "tools"]
MAX_FUNCTION_LINES = 80
MAX_MODULE_LINES = 500


def run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m module args`` from the repository root, or a skip when the tool is not installed."""
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[test]')")
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=600)


def report(done: subprocess.CompletedProcess[str]) -> str:
    return (done.stdout + done.stderr).strip()[-6000:]


def test_ruff_finds_nothing() -> None:
    done = run_tool("ruff", "check", "--no-cache", "--output-format", "concise", *LINTED)
    assert done.returncode == 0, report(done)


def test_mypy_finds_nothing(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # mypy's incremental cache beside pytest's own (-p no:cacheprovider: a fresh one in tmp_path)
    cache = getattr(request.config, "cache", None)
    cache = cache.mkdir("mypy") if cache is not None else tmp_path
    done = run_tool("mypy", "--cache-dir", str(cache))  # files and strictness: [tool.mypy]
    assert done.returncode == 0, report(done)


def test_vulture_finds_no_dead_code() -> None:
    done = run_tool("vulture")  # paths and whitelist: [tool.vulture]
    assert done.returncode == 0, report(done)


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def long_functions(source: str, limit: int = MAX_FUNCTION_LINES) -> list[tuple[str, int, int]]:
    """(name, first line, length) of every function or method longer than ``limit`` lines, decorators
    and docstring included."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
            length = (node.end_lineno or node.lineno) - first + 1
            if length > limit:
                found.append((node.name, first, length))
    return found


def test_long_functions_are_found() -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(79))
    assert long_functions(f"def exactly_80():\n{body}\n") == []
    assert long_functions(f"class A:\n  @staticmethod\n  def long():\n{body}\n") == [("long", 2, 81)]


def test_no_function_over_80_lines() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} {name} ({length} lines)"
             for path in _sources() for name, line, length in long_functions(path.read_text())]
    assert not found, "\n".join(found)


def test_no_module_over_500_lines() -> None:
    found = [f"{path.relative_to(ROOT)} ({count} lines)" for path in _sources()
             if (count := len(path.read_text().splitlines())) > MAX_MODULE_LINES]
    assert not found, "\n".join(found)
