"""Two mdrag processes on one index at once: a clear answer or a clear error, never a traceback or damage.

Milvus Lite lets one process at a time open its folder. A run of `mdrag index`
is held open at a known point by the fault driver (``--hold``: the store is
open and the manifest dirty), while real `python -m mdrag` processes meet it.
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.faults.harness import (
    REPO,
    MiniLMIdentity,
    assert_clear_error,
    corpus,
    driver,
    env,
    mdrag,
    verify,
)

pytestmark = pytest.mark.slow  # the real model, in real processes


@contextmanager
def indexing(docs: Path, home: Path, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """An `mdrag index` run (the fault driver) held mid-run: store open, manifest dirty."""
    release = tmp_path / "release"
    cmd = driver(docs, home, "--index", "faults", "--hold", str(release))
    proc = subprocess.Popen(cmd, env=env(home), cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not Path(str(release) + ".held").exists():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the run did not reach its first batch"
            time.sleep(0.02)
        yield proc
    finally:
        release.touch()
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert json.loads(out.strip().splitlines()[-1])["summary"]["added"] > 0


@pytest.fixture
def home(home: Path) -> Path:
    """The home, with its indexes in Milvus Lite: what these tests hold is Milvus Lite's one process at a
    time (the FAISS store lets readers in while a run writes: tests/test_store_faiss.py)."""
    with open(home / "config.yaml", "a", encoding="utf-8") as f:
        f.write("store:\n  backend: milvus\n")
    return home


@pytest.fixture
def docs(tmp_path: Path, shared_data: Path) -> Path:
    return corpus(tmp_path / "docs", shared_data, n=12, step=40)


def test_a_second_index_run_fails_clearly_and_the_first_finishes(docs: Path, home: Path, tmp_path: Path) -> None:
    with indexing(docs, home, tmp_path):
        second = mdrag(home, "index", str(docs), "--index", "faults")
        assert_clear_error(second, "in use by another process", "mdrag index")
        other = tmp_path / "other"  # another folder, the same index: the same answer
        shutil.copytree(docs, other)
        assert_clear_error(mdrag(home, "index", str(other), "--index", "faults", "--json"), "in use")
    verify(home, docs, "faults")  # the first run's index, whole


def test_search_and_status_during_index_say_so(docs: Path, home: Path, tmp_path: Path) -> None:
    with indexing(docs, home, tmp_path):
        for argv in (
            ["search", "front matter"],
            ["search", "front matter", "--json"],
            ["status"],
            ["status", "--json"],
        ):
            p = mdrag(home, *argv, "--index", "faults")
            # No server owns the index: the error says the store is busy and that no server answers.
            assert_clear_error(p, "in use by another process", "No mdrag server answers")
    verify(home, docs, "faults")


def test_index_while_serve_owns_the_index(docs: Path, home: Path, tmp_path: Path) -> None:
    assert mdrag(home, "index", str(docs), "-q").returncode == 0
    before = verify(home, docs, "default", embedder=MiniLMIdentity())
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "mdrag", "serve", "--port", str(port)],
        env=env(home),
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
        # Ctrl-C stops it, even when this test runs where SIGINT is ignored (a background job).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        assert serve.stderr is not None
        for line in serve.stderr:  # "mdrag: listening on ..." once the index is loaded
            if "listening on" in line:
                break
        assert serve.poll() is None, serve.stderr.read()
        (docs / "added.md").write_text("# Zeppelins\n\nAirships and their hangars.\n")
        assert_clear_error(mdrag(home, "index", str(docs)), "in use by another process", "mdrag serve")
        # Reads go through the server that owns the index.
        found = mdrag(
            home, "search", "front matter", "--threshold", "0", "--json", "--server", f"ws://127.0.0.1:{port}"
        )
        assert found.returncode == 0 and json.loads(found.stdout), found.stderr
    finally:
        serve.send_signal(signal.SIGINT)
        serve.communicate(timeout=60)
    assert serve.returncode == 0
    # The server watches the index's folders: it may have indexed added.md before it stopped.
    p = mdrag(home, "index", "--json", "-q")
    assert p.returncode == 0 and json.loads(p.stdout)["added"] in (0, 1), p.stderr
    after = verify(home, docs, "default", embedder=MiniLMIdentity())
    assert {p: c for p, c in after.items() if not p.endswith("added.md")} == before, "the refused run changed nothing"
    assert any(p.endswith("added.md") for p in after)
