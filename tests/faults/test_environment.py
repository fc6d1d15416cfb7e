"""The machine misbehaves: stdout's reader goes away.

Real `python -m mdrag` processes, the real model (its export shared by every
test), Milvus Lite.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.faults.harness import REPO, corpus, env, mdrag

EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as for any Unix tool whose reader went away


def closed_pipe() -> int:
    """The write end of a pipe whose read end is already closed: every write fails (EPIPE)."""
    r, w = os.pipe()
    os.close(r)
    return w


def test_status_into_a_closed_pipe_exits_quietly(mdrag_home: Path) -> None:
    for argv in (["status"], ["status", "--json"]):
        w = closed_pipe()
        try:
            p = mdrag(mdrag_home, *argv, stdout=w, stderr=subprocess.PIPE, capture_output=False)
        finally:
            os.close(w)
        assert p.returncode == EXIT_BROKEN_PIPE, p.stderr
        assert p.stderr == "", "no traceback, no 'Exception ignored' at exit"


@pytest.fixture
def docs(tmp_path: Path, shared_data: Path) -> Path:
    return corpus(tmp_path / "docs", shared_data, n=12, step=40)


@pytest.fixture
def indexed(docs: Path, home: Path) -> Path:
    """``home`` with an index of ``docs`` written by the real model."""
    p = mdrag(home, "index", str(docs), "-q")
    assert p.returncode == 0, p.stderr
    return home


@pytest.mark.slow
def test_search_into_a_closed_pipe_or_head_exits_quietly(indexed: Path) -> None:
    for argv in (
        ["search", "front matter", "-k", "50", "--threshold", "0"],
        ["search", "front matter", "-k", "50", "--threshold", "0", "--json"],
    ):
        w = closed_pipe()
        try:
            p = mdrag(indexed, *argv, stdout=w, stderr=subprocess.PIPE, capture_output=False)
        finally:
            os.close(w)
        assert p.returncode == EXIT_BROKEN_PIPE and p.stderr == "", p.stderr
    # `| head -1`: head may exit before or after mdrag writes everything; either way, quietly.
    search = "-m mdrag search 'front matter' -k 50 --threshold 0 --json"
    cmd = f"set -o pipefail; {shlex.quote(sys.executable)} {search} | head -1"
    sh = subprocess.run(["bash", "-c", cmd], env=env(indexed), cwd=REPO, capture_output=True, text=True, timeout=300)
    assert sh.returncode in (0, EXIT_BROKEN_PIPE) and sh.stdout == "[\n" and sh.stderr == "", sh
