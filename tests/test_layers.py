"""The package layers hold: gui and cli on top, core at the bottom, PySide6 only in gui.

The contracts are in pyproject.toml (``[tool.importlinter]``); ``lint-imports`` checks them by
hand, this test on every run, failing with import-linter's own report of each broken import.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_LINT = (
    "import sys; from importlinter.cli import lint_imports; "
    "sys.exit(lint_imports(config_filename='pyproject.toml', no_cache=True, no_logo=True))"
)


def test_every_layer_contract_is_kept():
    result = subprocess.run([sys.executable, "-c", _LINT], cwd=ROOT, capture_output=True, text=True)
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    contracts = (ROOT / "pyproject.toml").read_text().count("[[tool.importlinter.contracts]]")
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", report)
    assert kept is not None and int(kept.group(1)) == contracts >= 4, report


def test_the_import_graph_sees_qt_in_the_gui():
    # Guards the PySide6 contract against passing because external imports went unseen.
    import grimp

    graph = grimp.build_graph("graphlens", include_external_packages=True)
    assert "PySide6" in graph.find_modules_directly_imported_by("graphlens.gui.app")
