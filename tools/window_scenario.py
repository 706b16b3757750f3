"""Drive the real GraphLens window under Xvfb with xdotool, as a person would, and save a screenshot per step.

Usage (from the repository root)::

    .venv/bin/python tools/window_scenario.py                    # 1366x768, then 1920x1080
    .venv/bin/python tools/window_scenario.py --size 1366x768    # one size
    .venv/bin/python tools/window_scenario.py --out /tmp/shots --graphlens .venv/bin/graphlens --only cls

Each size gets its own Xvfb on a free display (:97 upwards), a fresh XDG_CONFIG_HOME (no saved layout is
read) and the xcb platform; there is no window manager, so the script moves the window to 0,0 and sizes it to
the screen. Screenshots go to ``DIR/<size>/NN-step.png`` (default DIR: benchmarks/out/scenario), the app's
output to ``DIR/<size>/app-N.log``.

The scenario is data (tools/scenario_steps.py): ``SESSIONS``, one app start per model under ``--models``, each a
list of ``Step``. A step's ``actions`` are small commands (see :func:`perform`): ``key KEYS…`` (xdotool key
names), ``type TEXT``, ``click LABEL [@left|@right|@top|@bottom] [dy=N]`` (the on-screen text LABEL, found by
matching it rendered in the window's font; N pixels below it), ``drag LABEL [@…] [dy=N] by=M`` (press there,
move M pixels down: a splitter), ``shift-below DY…`` (Shift+click DY pixels below
the selected node), ``context KEY`` (KEY on the canvas; when no menu opens, a right-click on the selected node),
``focus-new`` (the app's newest top-level window other than the main one, if any). Its ``wait``:
``settle`` (the screen changed, then stayed still ``settle`` seconds), ``popup`` (a new window such as a
menu opened, then settled) or ``title:TEXT`` (the window title holds TEXT, then settled); its ``expect``: text
that must be on screen as well. A step that times out or fails prints one line, keeps its screenshot as
``NN-step-FAILED.png``, and the run goes on. Needs ``apt-get install -y xvfb xdotool imagemagick fonts-dejavu-core``.
"""

from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from numpy.typing import NDArray

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tools.scenario_steps import SESSIONS, Session, Step, prepare  # noqa: E402

MODELS = Path("/work/models/extracted")
SIZES = ("1366x768", "1920x1080")
APP_CLASS = "graphlens"
FONT = ("-density", "96", "-font", "DejaVu-Sans", "-pointsize", "9")  # Qt's default under Xvfb
OUTLINES = ((0x1E, 0x88, 0xE5), (0xE6, 0x7E, 0x22))  # a selected node's, the current search hit's (gui/scene.py)
NOISE_PIXELS = 64  # a blinking text cursor changes fewer pixels than this: not a change
SAMPLE_S = 0.15
Frame = NDArray[np.uint8]


class StepFailed(Exception):
    """A step could not be done or did not finish in time; the message is one line."""


# ============================================================================ X display and screenshots
class Display:
    """A private Xvfb of one size, started on a free display number and stopped at the end."""

    def __init__(self, width: int, height: int) -> None:
        self.width, self.height = width, height
        self.number = next(n for n in range(97, 200) if not Path(f"/tmp/.X{n}-lock").exists()
                           and not Path(f"/tmp/.X11-unix/X{n}").exists())
        self.name = f":{self.number}"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> Display:
        self.process = subprocess.Popen(["Xvfb", self.name, "-screen", "0", f"{self.width}x{self.height}x24",
                                         "-nolisten", "tcp"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 10
        while not self.run("xdotool", "getdisplaygeometry"):  # the socket shows before the server answers
            if time.monotonic() > deadline or self.process.poll() is not None:
                raise SystemExit(f"Xvfb {self.name} did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(10)

    def run(self, *args: str) -> str:
        """An X command (xdotool, import) on this display; its stdout ('' when it failed)."""
        done = subprocess.run(args, env={**os.environ, "DISPLAY": self.name}, capture_output=True, text=True,
                              timeout=30)
        return done.stdout.strip() if done.returncode == 0 else ""

    def grab(self) -> Frame:
        """The whole screen as an (h, w, 3) array."""
        raw = subprocess.run(["import", "-window", "root", "-depth", "8", "rgb:-"], capture_output=True, timeout=30,
                             env={**os.environ, "DISPLAY": self.name}).stdout
        if len(raw) != self.width * self.height * 3:
            raise StepFailed("could not take a screenshot (import -window root)")
        return np.frombuffer(raw, np.uint8).reshape(self.height, self.width, 3)

    def windows(self) -> list[str]:
        """The app's visible top-level windows (a menu or a dialog is one more)."""
        return self.run("xdotool", "search", "--onlyvisible", "--class", APP_CLASS).split()

    def title(self, window: str) -> str:
        return self.run("xdotool", "getwindowname", window)

    def geometry(self, window: str) -> tuple[int, int, int, int]:
        """x, y, width, height of an X window (zeros when it is gone)."""
        shell = self.run("xdotool", "getwindowgeometry", "--shell", window)
        values = dict(line.split("=", 1) for line in shell.splitlines() if "=" in line)
        x, y, width, height = (int(values.get(k, 0)) for k in ("X", "Y", "WIDTH", "HEIGHT"))
        return x, y, width, height

    def crop(self, frame: Frame, window: str) -> Frame:
        """The part of ``frame`` that ``window`` covers."""
        x, y, w, h = self.geometry(window)
        return frame[y:y + h, x:x + w]


def save_png(frame: Frame, path: Path) -> None:
    h, w, _ = frame.shape
    subprocess.run(["convert", "-size", f"{w}x{h}", "-depth", "8", "rgb:-", str(path)], input=frame.tobytes(),
                   check=True, timeout=30)


def changed_pixels(a: Frame, b: Frame) -> int:
    return int(np.count_nonzero(np.any(a != b, axis=2)))


def settle(display: Display, before: Frame, step: Step, deadline: float) -> tuple[Frame, float]:
    """Wait until the screen changed from ``before`` and then stayed still ``step.settle`` seconds (a screen that
    never changes counts after 3 s), showing ``step.expect`` if given; the last frame and the time of the last
    change."""
    frame, last_change, moved, checked = before, time.monotonic(), False, 0.0
    start = last_change
    while True:
        time.sleep(SAMPLE_S)
        now_frame, now = display.grab(), time.monotonic()
        if changed_pixels(now_frame, frame) > NOISE_PIXELS:
            frame, last_change, moved = now_frame, now, True
        still = now - last_change >= step.settle if moved else now - start >= max(3.0, step.settle)
        if still and now - checked >= 1.0:
            checked = now
            if not step.expect or shows_text(now_frame, step.expect):
                if not moved:
                    print(f"    (no visible change after {now - start:.1f} s)")
                return now_frame, last_change
        if now > deadline:
            if still:
                raise StepFailed(f"no '{step.expect}' on screen after {step.timeout:.0f} s")
            raise StepFailed(f"the screen {'kept changing' if moved else 'did not change'} for {step.timeout:.0f} s")


def wait_for(display: Display, step: Step, before: Frame, windows_before: list[str],
             deadline: float) -> tuple[Frame, float]:
    """Wait for what ``step.wait`` names, then for the screen to settle."""
    kind, _, arg = step.wait.partition(":")
    while kind in ("popup", "title"):
        if kind == "popup" and set(display.windows()) - set(windows_before):
            break
        if kind == "title" and any(arg in display.title(w) for w in display.windows()):
            break
        if time.monotonic() > deadline:
            raise StepFailed(f"no {'new window' if kind == 'popup' else f'window titled …{arg}…'} "
                             f"within {step.timeout:.0f} s")
        time.sleep(SAMPLE_S)
    if kind not in ("popup", "title", "settle"):
        raise StepFailed(f"unknown wait '{step.wait}'")
    return settle(display, before, step, deadline)


# ============================================================================ finding things on screen
def render_label(text: str) -> NDArray[np.float64]:
    """``text`` as Qt draws a label under Xvfb (DejaVu Sans 9 pt, 96 dpi), dark on white, trimmed."""
    size = subprocess.run(["convert", *FONT, f"label:{text}", "-trim", "-format", "%w %h", "info:"],
                          capture_output=True, text=True, check=True).stdout.split()
    raw = subprocess.run(["convert", *FONT, f"label:{text}", "-trim", "+repage", "-depth", "8", "gray:-"],
                         capture_output=True, check=True).stdout
    return np.frombuffer(raw, np.uint8).reshape(int(size[1]), int(size[0])).astype(np.float64)


def correlation(image: NDArray[np.float64], template: NDArray[np.float64]) -> NDArray[np.float64]:
    """Normalized cross-correlation of ``template`` at every place it fits in ``image`` (FFT, box sums)."""
    th, tw = template.shape
    t = template - template.mean()
    norm = float(np.sqrt((t * t).sum())) or 1.0
    spectrum = np.fft.rfft2(image) * np.fft.rfft2(t[::-1, ::-1], s=image.shape)
    corr = np.fft.irfft2(spectrum, s=image.shape)[th - 1:, tw - 1:]

    def box(a: NDArray[np.float64]) -> NDArray[np.float64]:
        c = np.cumsum(np.cumsum(np.pad(a, ((1, 0), (1, 0))), 0), 1)
        return np.asarray(c[th:, tw:] - c[:-th, tw:] - c[th:, :-tw] + c[:-th, :-tw], dtype=np.float64)

    n = th * tw
    sums = box(image)
    var = np.maximum(box(image * image) - sums * sums / n, 1e-6)
    score = corr / (np.sqrt(var) * norm)
    score[var < 50.0] = 0.0  # flat areas
    return np.asarray(score, dtype=np.float64)


def find_text(frame: Frame, text: str, pick: str = "@best", threshold: float = 0.6) -> tuple[int, int]:
    """The centre of on-screen ``text``; among several places, the one ``pick`` names (@left, @right, @top,
    @bottom, @best)."""
    gray = frame.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    template = render_label(text)
    score = correlation(gray, template)
    th, tw = template.shape
    found: list[tuple[float, int, int]] = []
    for _ in range(8):
        y, x = np.unravel_index(int(np.argmax(score)), score.shape)
        best = float(score[y, x])
        if best < threshold:
            break
        found.append((best, int(x) + tw // 2, int(y) + th // 2))
        score[max(0, y - th):y + th, max(0, x - tw):x + tw] = 0.0
    if not found:
        raise StepFailed(f"no '{text}' on screen")
    keys = {"@left": lambda f: -f[1], "@right": lambda f: f[1], "@top": lambda f: -f[2], "@bottom": lambda f: f[2],
            "@best": lambda f: f[0]}
    if pick not in keys:
        raise StepFailed(f"unknown place '{pick}' (use {', '.join(keys)})")
    _, cx, cy = max((f for f in found if f[0] >= found[0][0] - 0.1), key=keys[pick])  # among the good matches
    return cx, cy


def shows_text(frame: Frame, text: str) -> bool:
    try:
        find_text(frame, text)
    except StepFailed:
        return False
    return True


def find_selected(frame: Frame) -> tuple[int, int]:
    """The centre of the selected node's outline on the canvas (blue), else of the current search hit's (orange)."""
    for colour in OUTLINES:
        mask = np.all(np.abs(frame.astype(np.int16) - np.array(colour, dtype=np.int16)) <= 8, axis=2)
        ys, xs = np.nonzero(mask)
        if len(xs) >= 20:
            return int((xs.min() + xs.max()) // 2), int((ys.min() + ys.max()) // 2)
    raise StepFailed("no selected node on the canvas (no blue selection or orange search-hit outline)")


# ============================================================================ doing the steps
def click(display: Display, x: int, y: int, button: str = "1") -> None:
    display.run("xdotool", "mousemove", str(x), str(y), "click", button)
    time.sleep(0.1)
    display.run("xdotool", "mousemove", "2", str(display.height - 2))  # out of the way: no hover, no tooltip


def open_context_menu(display: Display, key: str, expect: str = "Why doesn") -> None:
    """``key`` on the canvas; unless it opens a menu holding ``expect``, right-click the selected node."""
    windows = set(display.windows())
    display.run("xdotool", "key", key)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        opened = set(display.windows()) - windows
        if opened:
            time.sleep(0.3)
            if shows_text(display.crop(display.grab(), opened.pop()), expect):
                print(f"    {key} opened the node's menu")
                return
            print(f"    ! {key} opened a menu without '{expect}…' (focus not on the canvas?): Escape")
            display.run("xdotool", "key", "Escape")
            time.sleep(0.3)
            break
        time.sleep(SAMPLE_S)
    else:
        print(f"    ! {key} opened no menu")
    x, y = find_selected(display.grab())
    print(f"    right-click on the selected node at {x},{y}")
    display.run("xdotool", "mousemove", str(x), str(y), "click", "3")


def focus_newest(display: Display, main: str) -> None:
    others = [w for w in display.windows() if w != main]
    if others:
        print(f"    focusing window '{display.title(others[-1])}'")
        display.run("xdotool", "windowfocus", "--sync", others[-1])


def shift_click_below(display: Display, offsets: list[str]) -> None:
    """Shift+click (add to the selection) at each of ``offsets`` pixels below the selected node's centre."""
    x, y = find_selected(display.grab())
    clicks = [a for dy in offsets for a in ("mousemove", str(x), str(y + int(dy)), "keydown", "shift", "click", "1",
                                            "keyup", "shift", "sleep", "0.2")]
    display.run("xdotool", *clicks, "mousemove", "2", str(display.height - 2))


def click_text(display: Display, args: list[str], drag: bool = False) -> None:
    """``click LABEL [@place] [dy=N]``: on the text, or N pixels below it (a table's first row under its header);
    ``drag LABEL [@place] [dy=N] by=M``: press there and move M pixels down (a splitter between two panels)."""
    places = [a for a in args[1:] if a.startswith("@")]
    number = {key: sum(int(a[len(key) + 1:]) for a in args[1:] if a.startswith(f"{key}=")) for key in ("dy", "by")}
    x, y = find_text(display.grab(), args[0], places[0] if places else "@best")
    if not drag:
        click(display, x, y + number["dy"])
        return
    y, moves = y + number["dy"], [a for k in range(1, 11) for a in ("sleep", "0.03", "mousemove", str(x),
                                                                      str(y + number["dy"] + number["by"] * k // 10))]
    display.run("xdotool", "mousemove", str(x), str(y), "mousedown", "1", *moves, "mouseup", "1", "mousemove", "2",
                str(display.height - 2))


def perform(display: Display, action: str, main: str, values: dict[str, str]) -> None:
    """One action of a step (see the module docstring); ``{name}`` in it is ``values[name]``."""
    verb, *args = shlex.split(action.format(**values))
    if verb in ("key", "type") and display.windows() == [main]:
        display.run("xdotool", "windowfocus", main)  # a closed dialog leaves the X focus nowhere (no window manager)
    if verb == "key":
        display.run("xdotool", "key", "--delay", "80", *args)
    elif verb == "type":
        display.run("xdotool", "type", "--delay", "15", " ".join(args))
    elif verb in ("click", "drag"):
        click_text(display, args, drag=verb == "drag")
    elif verb == "shift-below":
        shift_click_below(display, args)
    elif verb == "context":
        open_context_menu(display, args[0])
    elif verb == "focus-new":
        focus_newest(display, main)
    else:
        raise StepFailed(f"unknown action '{action}'")
    time.sleep(0.05)


def run_step(display: Display, step: Step, main: str, values: dict[str, str]) -> tuple[Frame, float]:
    """Do ``step``; the settled screen and the seconds from its first action to the last change on screen."""
    before, windows = display.grab(), display.windows()
    start = time.monotonic()
    deadline = start + step.timeout
    for action in step.actions:
        perform(display, action, main, values)
    frame, last_change = wait_for(display, step, before, windows, deadline)
    return frame, max(0.0, last_change - start)


# ============================================================================ one app start
def app_env(display: Display, config: str) -> dict[str, str]:
    env = {**os.environ, "DISPLAY": display.name, "XDG_CONFIG_HOME": config, "QT_QPA_PLATFORM": "xcb"}
    env.pop("QT_QPA_PLATFORMTHEME", None)
    return env


def show_window(display: Display, app: subprocess.Popen[bytes], started: float, deadline: float) -> str:
    """The app's main window once it shows, moved to 0,0 and sized to the screen (no window manager here)."""
    while time.monotonic() < deadline and app.poll() is None:
        for window in display.windows():
            geometry = display.run("xdotool", "getwindowgeometry", "--shell", window)
            if "GraphLens" in display.title(window) and "WIDTH=" in geometry and "WIDTH=1\n" not in geometry:
                print(f"    window mapped after {time.monotonic() - started:.2f} s ({geometry.split()[3:5]})")
                display.run("xdotool", "windowmove", window, "0", "0", "windowsize", window,
                            str(display.width), str(display.height))
                display.run("xdotool", "windowfocus", "--sync", window)
                return window
        time.sleep(0.05)
    raise StepFailed("the window did not show" if app.poll() is None else f"the app exited (code {app.returncode})")


@dataclass
class Run:
    """Where one size's screenshots go and what it printed."""

    out: Path
    graphlens: str
    models: Path
    number: int = 0
    failures: int = 0

    def shot(self, name: str, frame: Frame, failed: bool = False) -> Path:
        self.number += 1
        path = self.out / f"{self.number:02d}-{name}{'-FAILED' if failed else ''}.png"
        save_png(frame, path)
        return path

    def values(self) -> dict[str, str]:
        """What ``{models}`` and ``{work}`` stand for in actions and ``prepare`` commands."""
        return {"models": str(self.models), "work": str(self.out)}

    def prepare(self, session: Session) -> bool:
        """Run the session's ``prepare`` commands; False (and one line) when one fails."""
        error = prepare(session, self.graphlens, self.values(), ROOT)
        if error:
            self.failures += 1
            print(f"  FAILED preparing {session.title}: {error}")
        return not error


def first_step(display: Display, session: Session, run: Run, log: Path,
               config: str) -> tuple[subprocess.Popen[bytes], str]:
    """Start the app on the session's model (settings in ``config``, empty); the first step's screenshot with the
    time from the command to a settled graph."""
    step = session.steps[0]
    command = [run.graphlens] + ([str(run.models / session.model)] if session.model else [])
    before = display.grab()
    started = time.monotonic()
    with log.open("wb") as out:
        app = subprocess.Popen(command, env=app_env(display, config), stdout=out, stderr=subprocess.STDOUT,
                               cwd=ROOT)
    deadline = started + step.timeout
    try:
        main = show_window(display, app, started, deadline)
        frame, last_change = wait_for(display, step, before, [], deadline)
    except StepFailed as error:
        run.failures += 1
        print(f"  FAILED {step.name}: {error}; see {log}")
        return app, ""
    x, y, width, height = display.geometry(main)
    fills = (x, y, width, height) == (0, 0, display.width, display.height)
    print(f"    {'' if fills else '! '}window at {x},{y}, {width}x{height}{'' if fills else ': not the whole screen'}")
    path = run.shot(step.name, frame)
    print(f"  {step.name}: graph shown {last_change - started:.2f} s after the command -> {path}")
    return app, main


def play(display: Display, session: Session, run: Run, log: Path) -> None:
    """Start the app, do the session's steps one by one, stop the app."""
    with tempfile.TemporaryDirectory(prefix="graphlens-scenario-config-") as config:
        app, main = first_step(display, session, run, log, config)
        try:
            play_steps(display, session, run, log, app, main)
        finally:
            app.terminate()
            try:
                app.wait(10)
            except subprocess.TimeoutExpired:
                app.kill()
                app.wait()


def play_steps(display: Display, session: Session, run: Run, log: Path, app: subprocess.Popen[bytes],
               main: str) -> None:
    """The session's steps after the first, one by one, while the app runs."""
    for step in session.steps[1:] if main else ():
        if app.poll() is not None:
            run.failures += 1
            print(f"  FAILED {step.name}: the app exited (code {app.returncode}); see {log}")
            return
        try:
            frame, took = run_step(display, step, main, run.values())
        except StepFailed as error:
            run.failures += 1
            path = run.shot(step.name, display.grab(), failed=True)
            print(f"  FAILED {step.name}: {error} -> {path}")
            continue
        print(f"  {step.name}: {took:.2f} s -> {run.shot(step.name, frame)}")


def run_size(size: str, out: Path, graphlens: str, models: Path, only: list[str]) -> int:
    """Every session (those whose first step's name starts with one of ``only``, if given) at one screen size on
    its own Xvfb; the number of failed steps."""
    width, height = (int(v) for v in size.split("x"))
    folder = out / size
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):
        old.unlink()
    run = Run(folder, graphlens, models)
    with Display(width, height) as display:
        print(f"{size} on display {display.name} (no window manager)")
        for k, session in enumerate(SESSIONS, 1):
            if only and not any(session.steps[0].name.startswith(word) for word in only):
                continue
            if session.model is not None and not (models / session.model).exists():
                print(f"  skipped {session.steps[0].name.removesuffix('-first-view')} "
                      f"({len(session.steps)} steps): {models / session.model} not found (see --models)")
                continue
            if run.prepare(session):
                play(display, session, run, folder / f"app-{k}.log")
    return run.failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--size", choices=SIZES, action="append", help="a screen size (default: both, one by one)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "out" / "scenario",
                        help="screenshots go to OUT/<size>/NN-step.png")
    parser.add_argument("--graphlens", default=str(ROOT / ".venv" / "bin" / "graphlens"), help="the executable")
    parser.add_argument("--models", type=Path, default=MODELS,
                        help=f"the folder the sessions' models are under (default {MODELS}); a session whose model "
                             "is missing is skipped with one line")
    parser.add_argument("--only", action="append", default=[], metavar="NAME",
                        help="only the sessions whose first step's name starts with NAME (first, sketch, cls, "
                             "compare, det, rxnmap); may be repeated")
    args = parser.parse_args(argv)
    for tool in ("Xvfb", "xdotool", "import", "convert"):
        if subprocess.run(["which", tool], capture_output=True).returncode != 0:
            print(f"{tool} is missing: apt-get install -y xvfb xdotool imagemagick fonts-dejavu-core", file=sys.stderr)
            return 2
    failures = sum(run_size(size, args.out, args.graphlens, args.models, args.only) for size in args.size or SIZES)
    print("all steps done" if not failures else f"{failures} step(s) failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
