"""The fault suite's summary: one line at the end of the pytest output, and benchmarks/out/faults.json."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import free_port
from tests.faults.harness import REPO, TRIALS


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


_spent: dict[str, float] = {}  # node id -> seconds from its setup to its teardown, tests in this folder
_start: dict[str, float] = {}


def pytest_runtest_logstart(nodeid: str, location: tuple[str, int | None, str]) -> None:
    _start[nodeid] = time.monotonic()


def pytest_runtest_logfinish(nodeid: str, location: tuple[str, int | None, str]) -> None:
    if nodeid in _start and "faults/" in nodeid.replace("\\", "/"):
        _spent[nodeid] = time.monotonic() - _start.pop(nodeid)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if not TRIALS:
        return
    passed = sum(t["passed"] for t in TRIALS)
    repairs = sorted(t["repair_s"] for t in TRIALS if "repair_s" in t)
    figures: dict[str, Any] = {
        "trials": len(TRIALS),
        "passed": passed,
        "seed": TRIALS[0]["seed"],
        "repair_p50_s": round(statistics.median(repairs), 3) if repairs else None,
        "repair_max_s": max(repairs) if repairs else None,
        "suite_s": round(sum(_spent.values()), 1),  # every test in tests/faults/, set-up included
        "runs": TRIALS,
    }
    line = f"fault suite: {len(TRIALS)} trials, {passed} passed"
    if repairs:
        line += f", repair p50 {figures['repair_p50_s']:.2f} s, max {figures['repair_max_s']:.2f} s"
    line += f" (seed {figures['seed']}; tests/faults/ ran {figures['suite_s']:.0f} s)"
    terminalreporter.write_line(line)
    out = REPO / "benchmarks" / "out" / "faults.json"
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(figures, indent=2) + "\n")
    except OSError as e:  # a read-only checkout: the line above is enough
        terminalreporter.write_line(f"fault suite: cannot write {out}: {e}")
    else:
        terminalreporter.write_line(f"fault suite: figures in {Path(out).relative_to(REPO)}")
