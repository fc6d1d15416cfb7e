"""The fault suite's fixtures, and the time each of its tests takes (its summary: tests.faults.harness.summary)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.faults.harness import SPENT


@pytest.fixture(scope="session")
def model_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One ONNX/OpenVINO export of the model for the whole run: each test's home links to it."""
    return tmp_path_factory.mktemp("models")


@pytest.fixture
def home(mdrag_home: Path, model_cache: Path) -> Path:
    """This test's mdrag home, for real `python -m mdrag` processes: the shared model export,
    and a server port of its own (reads of a busy index ask the server at that port)."""
    (mdrag_home / "cache").mkdir()
    (mdrag_home / "cache" / "models").symlink_to(model_cache)
    (mdrag_home / "config.yaml").write_text(f"server:\n  port: {free_port()}\n")
    return mdrag_home


_start: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _start[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if nodeid in _start and "faults/" in nodeid.replace("\\", "/"):
        SPENT[nodeid] = time.monotonic() - _start.pop(nodeid)
