"""The layout engine runs without Qt, so it can work in scripts and worker threads alike."""

from __future__ import annotations

import subprocess
import sys


def test_layout_never_loads_qt(demo_path):
    code = (
        "import sys; from graphlens.core.model import load_model;"
        "from graphlens.layout.view import build_view; from graphlens.layout.layered import layout_view;"
        "layout_view(build_view(load_model(sys.argv[1]).graph));"
        "bad = [m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))]; assert not bad, bad"
    )
    result = subprocess.run([sys.executable, "-c", code, str(demo_path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
