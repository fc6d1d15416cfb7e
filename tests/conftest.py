"""Shared fixtures: a private mdrag home per test, the real model, Milvus Lite and a Milvus server."""

from __future__ import annotations

import hashlib
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdrag.embedding.base import Embedder
from mdrag.parsers import register_parser
from mdrag.types import Block, Document, Section

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

os.environ.setdefault("HF_HUB_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real test files in ../shared/data (relative to the repository root)."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared test data not found at {SHARED_DATA} (see shared/data/README.md)")
    return SHARED_DATA


@pytest.fixture
def anyio_backend() -> str:
    """The event loop the tests marked ``anyio`` run on: asyncio, as mdrag's front ends do (not trio too)."""
    return "asyncio"


@pytest.fixture(autouse=True)
def mdrag_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own mdrag home (config file and cache) and no MARKDOWN_QA_* variables, nor
    MDRAG_STORE (the store is the default's, ``auto``, unless a test sets one) nor MDRAG_TOKEN (a server
    needs no token unless a test sets one)."""
    home = tmp_path / "mdrag-home"
    home.mkdir()
    monkeypatch.setenv("MDRAG_HOME", str(home))
    for var in list(os.environ):
        if var.startswith("MARKDOWN_QA_") or var in ("MDRAG_STORE", "MDRAG_TOKEN"):
            monkeypatch.delenv(var)
    return home


class HashEmbedder(Embedder):
    """A small deterministic embedder for tests of indexing logic.

    Words are hashed into 64 buckets, so texts that share words are close; every
    call is counted so tests can assert what was (not) embedded.
    """

    model_id = "test:hash-64"

    def __init__(self, dim: int = 64, max_tokens: int | None = None) -> None:
        self._dim = dim
        self._max = max_tokens
        self.embedded: list[str] = []  # every text ever embedded

    @property
    def dimension(self) -> int:
        return self._dim

    @property
    def max_tokens(self) -> int | None:
        return self._max

    def count_tokens(self, texts: Sequence[str]) -> list[int]:
        return [len(t.split()) + 2 for t in texts]

    def embed_batch(self, texts: Sequence[str]) -> np.ndarray:
        self.embedded.extend(texts)
        out = np.zeros((len(texts), self._dim), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % self._dim] += 1.0
            out[i, 0] += 1e-3
        return out


@pytest.fixture
def hash_embedder() -> HashEmbedder:
    return HashEmbedder()


@pytest.fixture
def registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Give a test its own copy of the parser registry, so its registrations end with it."""
    from mdrag import parsers

    parsers.supported_extensions()  # load the entry points into the real registry first
    monkeypatch.setattr(parsers, "_registry", dict(parsers._registry))


@pytest.fixture(scope="session")
def minilm() -> Embedder:
    """The real all-MiniLM-L6-v2, loaded once for the whole run."""
    from mdrag.embedding.local import LocalEmbedder

    return LocalEmbedder()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def listening(
    argv: Callable[[int], list[str]], log_path: Path, wait_s: float, exited: Callable[[str], object]
) -> Iterator[int]:
    """Run the server ``argv(port)`` until the block ends; yields its port once it accepts connections.

    Its output goes to ``log_path``; should it exit first, ``exited`` gets the log's tail
    (pytest.skip or pytest.fail); pytest.fail when it does not listen within ``wait_s``.
    """
    port = free_port()
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(argv(port), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + wait_s
            while True:
                if proc.poll() is not None:
                    exited(log_path.read_text(errors="replace")[-2000:])
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                        break
                except OSError:
                    if time.monotonic() > deadline:
                        pytest.fail(f"{argv(port)[0]} did not listen on port {port} within {wait_s:g} s")
                    time.sleep(0.1)
            yield port
        finally:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def milvus_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real Milvus gRPC server (`milvus-lite server`) on 127.0.0.1; yields its URI."""
    exe = shutil.which("milvus-lite") or str(Path(sys.executable).parent / "milvus-lite")
    if not Path(exe).exists():
        pytest.skip("milvus-lite's server command is not installed")
    data = tmp_path_factory.mktemp("milvus-server")

    def argv(port: int) -> list[str]:
        return [exe, "server", "--data-dir", str(data / "db"), "--host", "127.0.0.1", "--port", str(port)]

    def exited(tail: str) -> None:
        pytest.fail(f"milvus-lite server exited: {tail}")

    with listening(argv, data / "server.log", 60, exited) as port:
        yield f"http://127.0.0.1:{port}"


@pytest.fixture(params=["lite", "server"])
def store_uri(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """Each store test runs on a Milvus Lite file and on a Milvus server."""
    if request.param == "lite":
        return str(tmp_path / "store" / "milvus.db")
    return str(request.getfixturevalue("milvus_server"))


class Held:
    """A parser for ``.held`` files that waits until released: it holds the indexer mid-run.

    A local object does not pickle, so the indexer runs it in its own parse
    thread rather than in the parse worker's child process.
    """

    def __init__(self) -> None:
        self.started = threading.Event()  # a .held file is being parsed
        self.release = threading.Event()  # let it finish

    def __call__(self, data: bytes, path: str) -> Document:
        self.started.set()
        self.release.wait()
        return Document(path=path, sections=[Section(["Held"], 1, [Block(data.decode())])])


@pytest.fixture
def held(registry: None) -> Iterator[Held]:
    parser = Held()
    register_parser([".held"], parser)
    try:
        yield parser
    finally:
        parser.release.set()


def overwrite_middle(path: Path) -> None:
    """Overwrite the middle third of a file with other bytes, keeping its size, mtime and inode."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    third = len(data) // 3
    data[third : 2 * third] = bytes((b + 1) % 256 for b in data[third : 2 * third])
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_ino == st.st_ino and path.stat().st_size == st.st_size


from tests.fake_llm import llm  # noqa: E402,F401 - the stand-in LLM fixture, for every test module


# -- The counts CI tests report (tests/figures.py, the fault suite's trials): under pytest-xdist each
# worker hands them to the controller, which prints them at the end with the rest.
@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session) -> None:
    output = getattr(session.config, "workeroutput", None)
    if output is None:
        return  # not an xdist worker
    from tests import figures

    output["mdrag_figures"] = figures.handed_over(session.config)
    faults = sys.modules.get("tests.faults.harness")
    if faults is not None:
        output["mdrag_faults"] = {"trials": faults.TRIALS, "spent": faults.SPENT, "damage": faults.DAMAGE}


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    from tests import figures

    output = getattr(node, "workeroutput", {})
    figures.take_over(node.config, output.get("mdrag_figures", {}))
    if output.get("mdrag_faults"):
        from tests.faults import harness

        harness.TRIALS.extend(output["mdrag_faults"]["trials"])
        harness.SPENT.update(output["mdrag_faults"]["spent"])
        harness.DAMAGE.extend(output["mdrag_faults"].get("damage", []))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    faults = sys.modules.get("tests.faults.harness")
    if faults is not None:
        faults.summary(terminalreporter)
