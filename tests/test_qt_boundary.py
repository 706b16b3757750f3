"""Only graphlens/gui may import Qt, so the core runs headless and in scripts.

Which modules import PySide6 is a layer contract (pyproject.toml, tests/test_layers.py); what a
headless command loads when it runs is checked here, since an import made at run time is
something a static contract cannot see.
"""

from __future__ import annotations

import subprocess
import sys


def test_headless_command_never_loads_qt(demo_path):
    code = (
        "import sys; from graphlens.cli import main; main(['info', sys.argv[1]]);"
        "import sys; bad = [m for m in sys.modules if m.startswith('PySide6')]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code, str(demo_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
