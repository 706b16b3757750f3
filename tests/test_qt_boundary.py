"""Only graphlens/gui may import Qt, so the core runs headless and in scripts."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "graphlens"
QT_MODULES = ("PySide6", "PyQt5", "PyQt6", "shiboken6", "qtpy")


def _qt_imports(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = []
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        found += [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} imports {n}" for n in names if n.split(".")[0] in QT_MODULES]
    return found


def test_no_qt_import_outside_gui():
    offenders = [
        hit
        for path in sorted(PACKAGE.rglob("*.py"))
        if "gui" not in path.relative_to(PACKAGE).parts
        for hit in _qt_imports(path)
    ]
    assert offenders == []


def test_the_gui_package_does_import_qt():
    # Guards the scan above against silently finding nothing.
    assert any(_qt_imports(p) for p in (PACKAGE / "gui").rglob("*.py"))


def test_headless_command_never_loads_qt(demo_path):
    code = (
        "import sys; from graphlens.cli import main; main(['info', sys.argv[1]]);"
        "import sys; bad = [m for m in sys.modules if m.startswith('PySide6')]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code, str(demo_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
