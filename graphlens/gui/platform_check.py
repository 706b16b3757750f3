"""Can the window start here? Asked before Qt loads its platform plugin, which on failure aborts the
process with its own text (exit 134) instead of saying what to install.

Two causes are common enough to name in one line each:

- **no display**: ``DISPLAY`` and ``WAYLAND_DISPLAY`` unset and no ``QT_QPA_PLATFORM`` (an ssh session,
  a container, a CI job);
- **a system library of Qt's X11 (xcb) plugin missing**: a stock Debian 12 lacks ``libxcb-cursor0``,
  ``libxcb-icccm4`` and ``libxcb-keysyms1``, which PySide6's wheel does not bundle;
- **no X server at** ``DISPLAY`` (a stale ``DISPLAY=:0`` over ssh): Qt then also blames ``libxcb-cursor0``,
  wrongly, so the connection is tried first (libxcb's ``xcb_connect``, a millisecond).

The library check loads PySide6's own ``libqxcb.so`` with ``ctypes`` (the libraries it pulls in are
the ones Qt would load next anyway, so this costs a few milliseconds) and reads the missing file's
name from the loader's error; every library of :data:`XCB_PACKAGES` is then tried, so one line names
all that are missing and the one ``apt-get install`` that brings them. Nothing here imports PySide6.
``QT_QPA_PLATFORM`` naming anything but ``xcb`` (``offscreen``, ``wayland``, ``vnc``…) skips the check:
the user chose a platform, and Qt says itself when that fails.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import re
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

XCB_PACKAGES: dict[str, str] = {
    "libxcb-cursor.so.0": "libxcb-cursor0",
    "libxcb-icccm.so.4": "libxcb-icccm4",
    "libxcb-keysyms.so.1": "libxcb-keysyms1",
    "libxcb-image.so.0": "libxcb-image0",
    "libxcb-render-util.so.0": "libxcb-render-util0",
    "libxcb-util.so.1": "libxcb-util1",
    "libxcb-randr.so.0": "libxcb-randr0",
    "libxcb-shape.so.0": "libxcb-shape0",
    "libxcb-shm.so.0": "libxcb-shm0",
    "libxcb-sync.so.1": "libxcb-sync1",
    "libxcb-xfixes.so.0": "libxcb-xfixes0",
    "libxcb-render.so.0": "libxcb-render0",
    "libxcb-xkb.so.1": "libxcb-xkb1",
    "libxcb.so.1": "libxcb1",
    "libxkbcommon-x11.so.0": "libxkbcommon-x11-0",
    "libxkbcommon.so.0": "libxkbcommon0",
    "libX11-xcb.so.1": "libx11-xcb1",
    "libX11.so.6": "libx11-6",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libfontconfig.so.1": "libfontconfig1",
    "libfreetype.so.6": "libfreetype6",
    "libglib-2.0.so.0": "libglib2.0-0",
    "libgthread-2.0.so.0": "libglib2.0-0",
    "libdbus-1.so.3": "libdbus-1-3",
}
"""Shared libraries PySide6's ``libqxcb.so`` needs that a system may lack, and the Debian/Ubuntu package of each:
``ldd`` of the plugin (PySide6 6.x, Debian 12), less what every system has (libc, libstdc++, zlib) and
what the wheel bundles (Qt itself, ICU)."""

RENDER_HINT = "or use 'graphlens render MODEL -o graph.png' for a picture without a window"

_MISSING = re.compile(r"([^\s:/]+\.so[.\d]*): cannot open shared object file")

Loader = Callable[[str], None]
"""Loads a shared library by path or soname; raises ``OSError`` with the dynamic loader's message if it cannot."""

Connector = Callable[[str], bool]
"""Whether an X server answers at a display name (``""``: libxcb reads none)."""


def _dlopen(name: str) -> None:
    """``dlopen`` with ``RTLD_LAZY``, as Qt loads its plugins (``ctypes.CDLL`` forces ``RTLD_NOW``, which binds every
    symbol of Qt's libraries first: 10 ms more). What loads stays loaded: Qt opens the same file next."""
    libc = ctypes.CDLL(None)
    libc.dlopen.restype = ctypes.c_void_p
    libc.dlopen.argtypes = [ctypes.c_char_p, ctypes.c_int]
    libc.dlerror.restype = ctypes.c_char_p
    if not libc.dlopen(name.encode(), os.RTLD_LAZY):
        raise OSError((libc.dlerror() or b"dlopen failed").decode(errors="replace"))


def _xcb_connects(display: str) -> bool:
    """Open and close one connection with libxcb, as Qt's xcb plugin will (reading ``~/.Xauthority`` alike)."""
    try:
        xcb = ctypes.CDLL("libxcb.so.1")
    except OSError:
        return True  # the library check has named it already
    xcb.xcb_connect.restype = ctypes.c_void_p
    xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
    xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
    xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
    connection = xcb.xcb_connect(display.encode() or None, None)  # never NULL: an error connection instead
    try:
        return bool(xcb.xcb_connection_has_error(connection) == 0)
    finally:
        xcb.xcb_disconnect(connection)


def xcb_plugin() -> Path | None:
    """PySide6's X11 platform plugin, found without importing PySide6; None if there is none."""
    spec = importlib.util.find_spec("PySide6")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        plugin = Path(folder) / "Qt" / "plugins" / "platforms" / "libqxcb.so"
        if plugin.is_file():
            return plugin
    return None


def platform_problem(environ: Mapping[str, str] | None = None, load: Loader = _dlopen,
                     plugin: Path | None = None, connects: Connector = _xcb_connects,
                     system: str = sys.platform) -> str | None:
    """One line saying why the window cannot start here and what to do; None when nothing is in the way.

    ``load``, ``plugin`` and ``connects`` stand in for the dynamic loader, PySide6's plugin and an X server in tests.
    Only X11/Wayland systems are checked: macOS and Windows have their own platform plugins and no ``DISPLAY``.
    """
    if not system.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return None
    env = os.environ if environ is None else environ
    requested = env.get("QT_QPA_PLATFORM", "").strip()
    display, wayland = env.get("DISPLAY", "").strip(), env.get("WAYLAND_DISPLAY", "").strip()
    if requested:
        names = {part.split(":")[0].strip() for part in requested.split(";") if part.strip()}
        if names != {"xcb"}:
            return None
    elif not display and not wayland:
        return ("no display to open the window on (DISPLAY and WAYLAND_DISPLAY are unset): run graphlens in a "
                f"desktop session, or set DISPLAY (e.g. DISPLAY=:0 for the local screen), {RENDER_HINT}")
    elif wayland or env.get("XDG_SESSION_TYPE", "") == "wayland":
        return None  # Qt tries its Wayland plugin first there; the X11 one is only its fallback
    missing = missing_libraries(load, plugin)
    if missing is not None or connects(display):
        return missing
    if not display:
        return (f"QT_QPA_PLATFORM={requested} asks for X11, but DISPLAY is unset: set it (e.g. DISPLAY=:0), "
                f"{RENDER_HINT}")
    return (f"no X server answers at DISPLAY={display} (or it refuses this user): start one or set DISPLAY to "
            f"the screen to use, {RENDER_HINT}")


def missing_libraries(load: Loader = _dlopen, plugin: Path | None = None) -> str | None:
    """One line naming the libraries Qt's xcb plugin cannot find and the command that installs them, or None."""
    plugin = plugin or xcb_plugin()
    if plugin is None:
        return None  # not a PySide6 wheel we know the layout of: let Qt speak for itself
    try:
        load(str(plugin))
    except OSError as exc:
        first = _MISSING.search(str(exc))
        if first is None:
            return f"Qt's X11 platform plugin cannot be loaded ({' '.join(str(exc).split())}); {RENDER_HINT}"
        missing = [first.group(1)]
    else:
        return None
    for soname in XCB_PACKAGES:
        if soname not in missing and not _loads(load, soname):
            missing.append(soname)
    packages = list(dict.fromkeys(XCB_PACKAGES[s] for s in missing if s in XCB_PACKAGES))
    libraries = ", ".join(missing)
    if not packages:
        return (f"the window cannot start: Qt's X11 platform plugin needs {libraries}, which is not installed; "
                f"install the package that provides it, {RENDER_HINT}")
    them = "it" if len(missing) == 1 else "them"
    return (f"the window cannot start: Qt's X11 platform plugin needs {libraries}, not installed; install {them} "
            f"with: sudo apt-get install {' '.join(packages)} ({RENDER_HINT})")


def _loads(load: Loader, soname: str) -> bool:
    try:
        load(soname)
    except OSError:
        return False
    return True
