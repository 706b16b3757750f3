"""Run ``graphlens`` as its own process, without paying for a fresh interpreter's imports each time.

A helper process imports numpy, onnx, networkx and the package (of the window, only its renderer) once;
for every command it forks, and the child runs the command exactly as ``python -m graphlens`` would:
its own process id, stdin from /dev/null, stdout and stderr to files, the caller's environment and
working folder, exit code from :func:`graphlens.cli.entry`. Each test worker has its own helper. A
fresh ``python -m graphlens`` costs about half a second of imports; a fork costs a few milliseconds.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

_SERVER = r"""
import importlib, io, json, os, pkgutil, sys, traceback
import graphlens
from graphlens.cli import entry

# every module a command may import, paid once: numpy, onnx, networkx, the package and the renderer
# `render` draws with (Qt's modules; no application exists before a command makes one). Not the rest
# of the window, and not onnxruntime, which the package imports only when a command runs a model: its
# import starts threads, and a fork copies no threads but every lock
for found in pkgutil.walk_packages(graphlens.__path__, "graphlens."):
    if not found.name.startswith(("graphlens.gui", "graphlens.__main__")):
        importlib.import_module(found.name)
importlib.import_module("graphlens.gui.render")
assert "onnxruntime" not in sys.modules, "an import started onnxruntime"

def run(request):
    os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        os.dup2(os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), fd)
    sys.stdin = open(0, closefd=False)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = io.TextIOWrapper(open(2, "wb", closefd=False), errors="backslashreplace", line_buffering=True)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["graphlens", *request["args"]]
    entry()  # exits the process itself

def child(request):
    code = 1
    try:
        run(request)
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code)

for line in sys.stdin:
    request = json.loads(line)
    pid = os.fork()
    if pid == 0:
        child(request)
    os.write(1, f"{pid}\n".encode())
    _, status = os.waitpid(pid, 0)
    os.write(1, f"{os.waitstatus_to_exitcode(status)}\n".encode())
"""

_server: subprocess.Popen[bytes] | None = None


def _start() -> subprocess.Popen[bytes]:
    global _server
    if _server is None or _server.poll() is not None:
        # unbuffered: a buffered readline could take the exit code line along with the process id, and
        # select would then wait for data already read
        _server = subprocess.Popen([sys.executable, "-c", _SERVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   bufsize=0)
        atexit.register(_stop, _server)
    return _server


def _stop(server: subprocess.Popen[bytes]) -> None:
    """End of its input: the server's loop ends and it exits."""
    assert server.stdin is not None
    server.stdin.close()
    try:
        server.wait(10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def _read_line(server: subprocess.Popen[bytes], timeout: float | None) -> str:
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], timeout)
    if not ready:
        raise TimeoutError
    line = server.stdout.readline().decode()
    if not line:
        raise RuntimeError("the graphlens process server stopped")
    return line.strip()


def run_graphlens(*args: str | Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """``graphlens args`` in a process of its own; what ``subprocess.run(..., capture_output=True,
    text=True)`` on ``python -m graphlens`` returns."""
    server = _start()
    assert server.stdin is not None
    with tempfile.TemporaryDirectory(prefix="graphlens_cli_") as folder:
        out, err = Path(folder) / "stdout", Path(folder) / "stderr"
        request = {"args": [str(a) for a in args], "stdout": str(out), "stderr": str(err),
                   "env": dict(os.environ), "cwd": os.getcwd()}
        server.stdin.write((json.dumps(request) + "\n").encode())
        server.stdin.flush()
        pid = int(_read_line(server, 30))
        try:
            code = int(_read_line(server, timeout))
        except TimeoutError:
            os.kill(pid, 9)
            _read_line(server, 30)
            raise subprocess.TimeoutExpired(["graphlens", *map(str, args)], timeout) from None
        return subprocess.CompletedProcess(["graphlens", *map(str, args)], code,
                                           out.read_text(errors="replace"), err.read_text(errors="replace"))
