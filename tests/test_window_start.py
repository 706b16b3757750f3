"""Starting the window: where it cannot start, one line and exit 2 instead of Qt's abort; where it can, it starts.

The missing-library case is tested with a fake loader (the sentence and the packages), with the real dynamic
loader on a copy of PySide6's xcb plugin whose dependency on ``libxcb-cursor.so.0`` is renamed to a library no
system has (glibc's own message parsed), and as a whole ``graphlens`` process using that copy.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from graphlens.gui import platform_check
from graphlens.gui.platform_check import RENDER_HINT, XCB_PACKAGES, missing_libraries, platform_problem

PLUGIN = Path("/opt/fake/libqxcb.so")
RENAMED = "libxcb-cursxr.so.0"  # as long as libxcb-cursor.so.0, so the plugin's string table keeps its layout


def _env(**values: str) -> dict[str, str]:
    """The test process's environment without anything that picks a display or a Qt platform, plus ``values``."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE")}
    return {**env, **values}


def _fake_loader(missing: set[str], calls: list[str] | None = None):
    """A loader where the plugin fails on the first of ``missing`` (glibc's wording) and each of ``missing`` fails."""

    def load(name: str) -> None:
        if calls is not None:
            calls.append(name)
        if name == str(PLUGIN) and missing:
            raise OSError(f"{sorted(missing)[0]}: cannot open shared object file: No such file or directory")
        if name in missing:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")

    return load


def _never(name: str) -> bool:
    raise AssertionError(f"no X server should be asked ({name})")


def test_no_display_is_one_line_and_exit_2_without_qt():
    result = subprocess.run([sys.executable, "-m", "graphlens"], env=_env(), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("graphlens: no display to open the window on (DISPLAY and WAYLAND_DISPLAY are "
                                    "unset)")
    assert "set DISPLAY" in result.stderr and "graphlens render MODEL -o graph.png" in result.stderr


def test_the_check_imports_no_qt():
    code = ("import sys; from graphlens.gui.platform_check import platform_problem; "
            "print(platform_problem({'DISPLAY': ':9999'}) is not None, "
            "[m for m in sys.modules if m.startswith(('PySide6', 'shiboken6'))])")
    result = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, timeout=120)
    assert result.stdout.split(" ", 1)[1].strip() == "[]", result.stderr


def test_missing_libraries_are_named_with_the_command_that_installs_them():
    missing = {"libxcb-cursor.so.0", "libxcb-icccm.so.4", "libxcb-keysyms.so.1"}
    line = missing_libraries(_fake_loader(missing), PLUGIN)
    assert line == (
        "the window cannot start: Qt's X11 platform plugin needs libxcb-cursor.so.0, libxcb-icccm.so.4, "
        "libxcb-keysyms.so.1, not installed; install them with: sudo apt-get install libxcb-cursor0 libxcb-icccm4 "
        f"libxcb-keysyms1 ({RENDER_HINT})"
    )
    assert "\n" not in line


def test_one_missing_library_and_one_package_for_two_libraries():
    assert missing_libraries(_fake_loader({"libxcb-cursor.so.0"}), PLUGIN) == (
        "the window cannot start: Qt's X11 platform plugin needs libxcb-cursor.so.0, not installed; install it "
        f"with: sudo apt-get install libxcb-cursor0 ({RENDER_HINT})")
    line = missing_libraries(_fake_loader({"libglib-2.0.so.0", "libgthread-2.0.so.0"}), PLUGIN)
    assert line is not None and line.endswith(f"sudo apt-get install libglib2.0-0 ({RENDER_HINT})")


def test_a_display_with_every_library_and_a_server_is_no_problem():
    calls: list[str] = []
    assert platform_problem({"DISPLAY": ":0"}, _fake_loader(set(), calls), PLUGIN, lambda d: d == ":0") is None
    assert calls == [str(PLUGIN)]  # the plugin alone is loaded when nothing is missing: cheap on every start


def test_missing_libraries_are_reported_where_x11_is_used():
    load = _fake_loader({"libxcb-cursor.so.0"})
    for env in ({"DISPLAY": ":0"}, {"QT_QPA_PLATFORM": "xcb", "DISPLAY": ":0"}):
        line = platform_problem(env, load, PLUGIN, lambda d: True)
        assert line is not None and "sudo apt-get install libxcb-cursor0" in line, env


def test_a_chosen_platform_or_wayland_skips_the_check():
    calls: list[str] = []
    load = _fake_loader({"libxcb-cursor.so.0"}, calls)
    for env in ({"QT_QPA_PLATFORM": "offscreen"}, {"QT_QPA_PLATFORM": "offscreen", "DISPLAY": ":0"},
                {"QT_QPA_PLATFORM": "wayland;xcb"}, {"WAYLAND_DISPLAY": "wayland-0"},
                {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}, {"DISPLAY": ":0", "XDG_SESSION_TYPE": "wayland"}):
        assert platform_problem(env, load, PLUGIN, _never) is None, env
    assert calls == []


def test_macos_and_windows_are_not_checked():
    for system in ("darwin", "win32"):
        assert platform_problem({}, _fake_loader({"libxcb-cursor.so.0"}), PLUGIN, _never, system=system) is None


def test_no_x_server_at_display_is_named():
    load = _fake_loader(set())
    assert platform_problem({"DISPLAY": ":7"}, load, PLUGIN, lambda d: False) == (
        f"no X server answers at DISPLAY=:7 (or it refuses this user): start one or set DISPLAY to the screen to use, "
        f"{RENDER_HINT}")
    line = platform_problem({"QT_QPA_PLATFORM": "xcb"}, load, PLUGIN, lambda d: False)
    assert line is not None and line.startswith("QT_QPA_PLATFORM=xcb asks for X11, but DISPLAY is unset")


def test_the_real_connection_check_fails_where_no_server_listens():
    try:
        platform_check.ctypes.CDLL("libxcb.so.1")
    except OSError:
        pytest.skip("no libxcb on this system")
    assert platform_check._xcb_connects(":9999") is False  # noqa: SLF001 (the real check, not a fake)


def _plugin_missing_a_library(tmp_path: Path) -> Path:
    """A copy of PySide6's xcb plugin needing :data:`RENAMED` instead of libxcb-cursor.so.0, beside Qt's libraries."""
    real = platform_check.xcb_plugin()
    if real is None:
        pytest.skip("no PySide6 xcb plugin")
    folder = tmp_path / "Qt" / "plugins" / "platforms"
    folder.mkdir(parents=True)
    (tmp_path / "Qt" / "lib").symlink_to(real.parents[2] / "lib")  # the plugin's RUNPATH: $ORIGIN/../../lib
    data = real.read_bytes()
    assert b"libxcb-cursor.so.0\0" in data
    copy = folder / "libqxcb.so"
    copy.write_bytes(data.replace(b"libxcb-cursor.so.0\0", RENAMED.encode() + b"\0"))
    return copy


def test_the_real_loader_names_the_missing_library(tmp_path):
    line = missing_libraries(plugin=_plugin_missing_a_library(tmp_path))
    assert line == (f"the window cannot start: Qt's X11 platform plugin needs {RENAMED}, which is not installed; "
                    f"install the package that provides it, {RENDER_HINT}")
    assert RENAMED not in XCB_PACKAGES


def test_a_missing_library_stops_graphlens_in_one_line(tmp_path):
    plugin = _plugin_missing_a_library(tmp_path)
    code = ("import sys; from pathlib import Path; from graphlens.gui import platform_check; "
            f"platform_check.xcb_plugin = lambda: Path({str(plugin)!r}); "
            "from graphlens.cli import entry; entry()")
    result = subprocess.run([sys.executable, "-c", code], env=_env(DISPLAY=":9999"), capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == 2, result.stderr
    assert result.stderr == (f"graphlens: the window cannot start: Qt's X11 platform plugin needs {RENAMED}, which "
                             f"is not installed; install the package that provides it, {RENDER_HINT}\n")


def _drawn(result: subprocess.CompletedProcess[str]) -> float:
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("drawn ")]
    assert len(lines) == 1, result.stderr
    return float(lines[0].split()[1])


def test_the_window_starts_offscreen_and_reports_its_first_drawing(tmp_path):
    env = _env(QT_QPA_PLATFORM="offscreen", GRAPHLENS_REPORT_DRAWN="1", XDG_CONFIG_HOME=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "graphlens"], env=env, capture_output=True, text=True, timeout=120)
    assert _drawn(result) > 0


@pytest.mark.skipif(shutil.which("Xvfb") is None, reason="needs Xvfb")
def test_the_window_starts_on_an_x_server(tmp_path):
    read, write = os.pipe()
    server = subprocess.Popen(["Xvfb", "-displayfd", str(write), "-screen", "0", "1366x768x24", "-nolisten", "tcp"],
                              pass_fds=(write,), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    os.close(write)
    try:
        with os.fdopen(read) as displayfd:
            display = ":" + displayfd.readline().strip()
        env = _env(DISPLAY=display, GRAPHLENS_REPORT_DRAWN="1", XDG_CONFIG_HOME=str(tmp_path))
        assert platform_problem(env) is None
        result = subprocess.run([sys.executable, "-m", "graphlens"], env=env, capture_output=True, text=True,
                                timeout=120)
        assert _drawn(result) > 0
        assert "qt.qpa" not in result.stderr
    finally:
        server.terminate()
        server.wait(timeout=30)
