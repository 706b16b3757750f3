"""Test setup: Qt always offscreen, compiled modules kept between runs, a cheap cyclic collector, model helpers."""

from __future__ import annotations

import gc
import os

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # before anything imports Qt

import sys
from pathlib import Path

import onnx
import pytest

__all__ = ["pytest_collection_finish", "pytest_configure", "pytest_runtest_teardown"]  # pytest's hooks


def pytest_configure(config: pytest.Config) -> None:
    """With PYTHONDONTWRITEBYTECODE set, every test worker and every ``python -m graphlens`` the tests
    start would compile the package and rewrite the tests' asserts anew (seconds per process): keep the
    compiled files in pytest's cache instead, never beside the sources."""
    cache = getattr(config, "cache", None)
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None or cache is None:
        return
    prefix = str(cache.mkdir("pycache"))
    sys.pycache_prefix = prefix
    sys.dont_write_bytecode = False
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


@pytest.fixture
def write_model(tmp_path: Path):
    """Write a ModelProto to a file under tmp_path and return its path."""

    def write(model: onnx.ModelProto, name: str = "model.onnx") -> Path:
        path = tmp_path / name
        onnx.save(model, path)
        return path

    return write


@pytest.fixture
def demo_path() -> Path:
    from graphlens.core.bundled import demo_model_path

    return demo_model_path()


def pytest_collection_finish(session: pytest.Session) -> None:
    """What exists once the tests are collected (modules, parameters, the tests themselves) lives to
    the end: out of the cycle collector's sight, a ``gc.collect()`` in the code under test costs what
    the test made, not everything every module holds."""
    gc.collect()
    gc.freeze()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item):
    """Widgets a test closed and handed to ``deleteLater`` are deleted as the event loop would delete them
    (tests run no loop): a window left alive keeps its model, layout and scene to the end of the run."""
    try:
        return (yield)
    finally:
        core = sys.modules.get("PySide6.QtCore")
        if core is not None and core.QCoreApplication.instance() is not None:
            core.QCoreApplication.sendPostedEvents(None, core.QEvent.Type.DeferredDelete)
