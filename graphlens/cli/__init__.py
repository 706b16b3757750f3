"""The ``graphlens`` command: the GUI with no command, headless subcommands otherwise.

Every user-facing failure is a :class:`GraphLensError` printed as one line with exit code 2;
a bug is one line with exit code 3; tracebacks appear only with ``--debug``. A reader that stops
reading (``| head``) ends the command quietly.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

from graphlens.cli.common import EXIT_FAILED_CHECK, EXIT_INTERNAL, EXIT_OK, EXIT_USAGE, count_argument
from graphlens.cli.inspect import add_explain, add_info, add_match, add_patterns, add_render
from graphlens.cli.lossy import add_binarize, add_quantize
from graphlens.cli.pernode import add_overlay, add_profile
from graphlens.cli.rewrite import add_compare, add_diff, add_fold
from graphlens.core.bulk import collector_deferred
from graphlens.core.errors import GraphLensError
from graphlens.core.names import printable

__all__ = ["COMMANDS", "EXIT_FAILED_CHECK", "EXIT_INTERNAL", "EXIT_OK", "EXIT_USAGE", "entry", "main"]


class OneLineParser(argparse.ArgumentParser):
    """A usage error in one line, exit 2, as every other bad input is; the usage is one ``--help`` away."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message} (see {self.prog} --help)\n")


QT_FREE_WINDOW_MODULES = ("graphlens.workspace", "graphlens.layout.view", "graphlens.layout.layered")
"""What every window uses and needs no Qt, imported before PySide6: PySide6's import hook reads the source of each
module imported after it (looking for ``from __feature__``), 30-40 ms for these and what they import."""


def run_gui(argv: Sequence[str]) -> int:
    parser = OneLineParser(
        prog="graphlens",
        description="Open an ONNX model in the GraphLens window (the bundled demo if none is given). "
        f"Headless commands: {', '.join(sorted(COMMANDS))} (see graphlens COMMAND --help).",
    )
    parser.add_argument("model", nargs="?", type=Path, help="ONNX model to open")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    args = parser.parse_args(argv)
    from graphlens.gui.platform_check import platform_problem

    problem = platform_problem()  # before Qt loads its platform plugin, which would abort the process instead
    if problem is not None:
        raise GraphLensError(problem)
    from graphlens.core.bundled import demo_model_path
    from graphlens.core.model import load_model

    model = load_model(args.model or demo_model_path())  # fail here, with one line, before any window
    for module in QT_FREE_WINDOW_MODULES:
        importlib.import_module(module)
    from graphlens.gui.app import run

    return run(model)


COMMANDS: dict[str, Callable[[argparse._SubParsersAction[argparse.ArgumentParser]], None]] = {
    "info": add_info,
    "patterns": add_patterns,
    "match": add_match,
    "explain": add_explain,
    "fold": add_fold,
    "diff": add_diff,
    "compare": add_compare,
    "quantize": add_quantize,
    "binarize": add_binarize,
    "render": add_render,
    "profile": add_profile,
    "overlay": add_overlay,
}


def _command_parser(command: str) -> argparse.ArgumentParser:
    """The parser of one command: building all twelve would import what only the others need."""
    parser = OneLineParser(prog="graphlens")
    parser.add_argument("--debug", action="store_true", help="show tracebacks")
    sub: argparse._SubParsersAction[argparse.ArgumentParser] = parser.add_subparsers(
        dest="command", required=True, parser_class=OneLineParser)
    COMMANDS[command](sub)
    for action in sub.choices.values():
        action.add_argument("--debug", action="store_true", help="show tracebacks")
        for option in action._actions:
            if option.dest == "seed":  # every command's --seed, whoever declares it: numpy refuses a negative one
                option.type = count_argument(0)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; every failure becomes one line on stderr and an exit code (see :data:`EXIT_INTERNAL`)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--debug"] and argv[1:2] and argv[1] in COMMANDS:  # graphlens --debug info m.onnx
        argv = [*argv[1:], "--debug"]
    debug = "--debug" in argv
    stdout, stderr = sys.stdout, sys.stderr
    sys.stdout = _DropsOutputOnceReaderLeaves(stdout)
    sys.stderr = _Printable(stderr)
    try:
        with collector_deferred():  # the one place a command sets the collector; see core/bulk.py
            if argv and argv[0] in COMMANDS:
                _refuse_empty_arguments(argv)
                try:
                    args = _command_parser(argv[0]).parse_args(argv)
                except SystemExit as exc:  # --help (0), or a usage error already said in one line (2)
                    return int(exc.code or 0)
                _check_environment()
                with _terminate_as_exception():
                    code = int(args.func(args))
            else:
                code = run_gui(argv)
        sys.stdout.flush()  # a closed pipe shows up here, while it can still be handled
        return code
    except BrokenPipeError:
        return _reader_went_away()
    except GraphLensError as exc:
        if debug:
            raise
        _say(f"graphlens: {_one_line(str(exc))}")
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C: one line, not silence (models are written whole or not at all: core/io.py)
        _say("graphlens: interrupted")
        return 130
    except Terminated:
        _say("graphlens: terminated")
        return 128 + signal.SIGTERM
    except Exception as exc:  # a bug, not bad input: still one line unless asked for more
        if debug:
            raise
        _say(f"graphlens: internal error: {type(exc).__name__}: {_one_line(str(exc))} (rerun with --debug for details)")
        return EXIT_INTERNAL
    finally:
        sys.stdout, sys.stderr = stdout, stderr


NAME_LISTS = frozenset({"--rules", "--exclude", "--select", "--layers"})
"""Options taking comma-separated names, where an empty one (``fold-bn,,``) is a typo, not a name."""


def _refuse_empty_arguments(argv: list[str]) -> None:
    """An empty argument (an unset shell variable, most likely) is refused: as a path it would read as the current
    folder, as a list of names as none at all. So is one of commas alone (``--rules ,,,``), a list naming
    nothing, and either given as ``--option=``."""
    for i, value in enumerate(argv):
        option, joined, given = value.partition("=") if value.startswith("--") else ("", "", value)
        after = option if joined else argv[i - 1] if i > 0 else "graphlens"
        if not given.replace(",", "").strip() and (joined or not option):
            raise GraphLensError(f"an empty argument after '{after}'; give it a value")
        if after in NAME_LISTS and (joined or not option) and any(not n.strip() for n in given.split(",")):
            raise GraphLensError(f"{after} {given!r} has an empty name between its commas; list the names alone")


def _check_environment() -> None:
    """Settings read from the environment, refused in one line before any work rather than deep inside it."""
    from graphlens.numerics.memory import MEMORY_LIMIT_VARIABLE, memory_limit

    if os.environ.get(MEMORY_LIMIT_VARIABLE, "").strip():
        memory_limit()


class Terminated(BaseException):
    """SIGTERM (``kill``, a container stopping), raised in the command's thread: the ``with`` blocks under way
    remove their temporary files (a save's staging folder, an ``--evaluate`` candidate) instead of leaving them."""


@contextlib.contextmanager
def _terminate_as_exception() -> Iterator[None]:
    """SIGTERM raises :class:`Terminated` while a command runs; the previous handler comes back after it."""
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set handlers
        yield
        return

    def stop(_signum: int, _frame: Any) -> None:
        raise Terminated

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


class _DropsOutputOnceReaderLeaves:
    """The command's stdout: when its reader closes the pipe (``| head``), later output is dropped and
    the command runs on, so the files it was asked to write (``--csv``, ``-o``, ``--report``) are written.
    Stopping at the first print lost them."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream
        self._reader_left = False

    def write(self, text: str) -> int:
        if not self._reader_left:
            try:
                return self._stream.write(printable(text))
            except BrokenPipeError:
                self._leave()
        return len(text)

    def flush(self) -> None:
        if not self._reader_left:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._leave()

    def _leave(self) -> None:
        self._reader_left = True
        _reader_went_away()  # stdout's descriptor now leads to /dev/null: what is still buffered goes there
        with contextlib.suppress(OSError, ValueError):
            self._stream.flush()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


class _Printable:
    """The command's stderr: every character that would reorder or hide part of the line on a terminal (a
    name's bidi override, control characters) written as an escape, whichever code prints the line."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        return self._stream.write(printable(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _one_line(text: str) -> str:
    """Messages quoting a model's names or a library's error may hold newlines; the contract is one line."""
    return " ".join(text.split("\n")).strip() if "\n" in text else text


def _say(line: str) -> None:
    with contextlib.suppress(BrokenPipeError, OSError):  # nowhere left to say it
        print(line, file=sys.stderr)


def _reader_went_away() -> int:
    """The reader of our output closed it (``graphlens match ... | head -1``): stop quietly, as Unix tools do.

    Python would otherwise complain again when it flushes stdout at exit, so point stdout at
    /dev/null first (the recipe in the ``signal`` module's documentation).
    """
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout replaced by something without a file descriptor
        pass
    return EXIT_OK


def entry() -> None:
    """The console script: :func:`main`, then exit without tearing the heap down object by object.

    Freeing a 100,000-node model at interpreter exit takes longer than matching it; the output is
    flushed and nothing is left open for writing (saves are atomic and complete), so skip it.
    """
    with collector_deferred(keep=True):  # the process exits next: no last pass over the whole heap
        code = main()
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        code = _reader_went_away()
    with contextlib.suppress(BrokenPipeError, OSError):
        sys.stderr.flush()
    os._exit(code)



if __name__ == "__main__":
    entry()
