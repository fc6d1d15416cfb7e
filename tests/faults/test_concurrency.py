"""Two mdrag processes on one index at once: a clear answer or a clear error, never a traceback or damage.

Milvus Lite lets one process at a time open its folder; runs of `mdrag index`
take turns (the index's writers' lock). A run of `mdrag index` is held open at
a known point by the fault driver (``--hold``: the store is open and the
manifest dirty), while real `python -m mdrag` processes meet it.
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
from typing import Any

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
def indexing(docs: Path, home: Path, tmp_path: Path, *options: str) -> Iterator[subprocess.Popen[str]]:
    """An `mdrag index` run (the fault driver) held mid-run: store open, manifest dirty (``--hold-close``
    in ``options``: held as it closes the index, its work done)."""
    release = tmp_path / "release"
    cmd = driver(docs, home, "--index", "faults", "--hold", str(release), *options)
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
def backend() -> str:
    """The home's store backend: Milvus Lite, unless a test parametrizes it."""
    return "milvus"


@pytest.fixture
def home(home: Path, backend: str) -> Path:
    """The home, with its indexes in ``backend``: what most of these tests hold is Milvus Lite's one process
    at a time (the FAISS store lets readers in while a run writes: tests/test_store_faiss.py)."""
    with open(home / "config.yaml", "a", encoding="utf-8") as f:
        f.write(f"store:\n  backend: {backend}\n")
    return home


@pytest.fixture
def docs(tmp_path: Path, shared_data: Path) -> Path:
    return corpus(tmp_path / "docs", shared_data, n=12, step=40)


def _waiting(folder: Path, home: Path, log: Path, holder: int) -> subprocess.Popen[str]:
    """A driver run of `mdrag index FOLDER`, once it says that it waits for the run of process ``holder``."""
    cmd = driver(folder, home, "--index", "faults", "--log")
    with open(log, "w") as err:
        proc = subprocess.Popen(cmd, env=env(home), cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True)
    deadline = time.monotonic() + 120
    while f"waiting for another mdrag run on index 'faults' (pid {holder}) to finish" not in log.read_text():
        assert proc.poll() is None, f"it ended instead of waiting: {log.read_text()}"
        assert time.monotonic() < deadline, "it did not reach the index's writers' lock"
        time.sleep(0.02)
    return proc


def _summary(proc: subprocess.Popen[str], log: Path) -> dict[str, Any]:
    out, _ = proc.communicate(timeout=300)
    assert proc.returncode == 0, log.read_text()
    summary: dict[str, Any] = json.loads(out.strip().splitlines()[-1])["summary"]
    return summary


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_a_second_index_run_waits_for_the_first_and_finds_its_work_done(
    docs: Path, home: Path, tmp_path: Path, backend: str
) -> None:
    other = shutil.copytree(docs, tmp_path / "other")  # another folder, the same index
    with indexing(docs, home, tmp_path) as first:
        second = _waiting(docs, home, tmp_path / "second.err", first.pid)
        third = _waiting(other, home, tmp_path / "third.err", first.pid)
    again = _summary(second, tmp_path / "second.err")
    # The first run's work is not done again, nor taken for an interrupted run to repair.
    assert (again["added"], again["unchanged"], again["chunks_embedded"]) == (0, 12, 0), again
    assert not again["repaired"] and not again["rebuild"] and again["waited_s"] > 0, again
    more = _summary(third, tmp_path / "third.err")  # it opened the store once the others had closed it
    assert (more["added"], more["repaired"]) == (12, False) and more["waited_s"] > 0, more
    verify(home, tmp_path, "faults")  # every Markdown file under tmp_path: docs and other, whole


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_the_next_run_waits_until_the_first_has_closed_the_store(docs: Path, home: Path, tmp_path: Path) -> None:
    """`mdrag index` holds the index's writers' lock until it has closed the store: the next run finds
    it free (Milvus Lite lets one process at a time open its file), with the first run's work in it."""
    with indexing(docs, home, tmp_path, "--hold-close") as first:
        second = _waiting(docs, home, tmp_path / "second.err", first.pid)
    again = _summary(second, tmp_path / "second.err")
    assert (again["added"], again["chunks_embedded"], again["repaired"]) == (0, 0, False), again
    verify(home, docs, "faults")


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
    # Ctrl-C stops it, even when this test runs where SIGINT is ignored (a background job): the child takes
    # Python's own SIGINT handler back before mdrag starts. Not a preexec_fn: Python code between fork and
    # exec, in a worker whose Milvus tests left gRPC threads running, once ended the child with SIGABRT.
    start = "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    start += "sys.argv[0] = 'mdrag'; runpy.run_module('mdrag', run_name='__main__', alter_sys=True)"
    serve = subprocess.Popen(
        [sys.executable, "-c", start, "serve", "--port", str(port)],
        env=env(home),
        cwd=REPO,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert serve.stderr is not None
        said = []  # what the server wrote before it listened: the assertion's message if it stopped
        for line in serve.stderr:  # "mdrag: listening on ..." once the index is loaded
            said.append(line)
            if "listening on" in line:
                break
        assert serve.poll() is None, f"serve ended with {serve.returncode}: " + "".join(said) + serve.stderr.read()
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
