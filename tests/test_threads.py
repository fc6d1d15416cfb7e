"""Threads and state: stopping during a reload, one Index used from several threads, store consistency.

Interleavings are forced, not hoped for: a parser that waits on an event holds
the indexer mid-run, and a wrapped store call holds a search mid-flight.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import mdrag.index.visibility
from mdrag.config import Config, load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import IndexingCancelledError
from mdrag.frontends.server import QAServer
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from mdrag.store.milvus import MilvusStore
from mdrag.store.milvus.lite import lite_locked
from mdrag.types import Chunk
from tests.conftest import HashEmbedder, Held

WAIT = 120  # seconds a test waits for an event that must come, before it fails instead of hanging
MILVUS = {"store.backend": "milvus"}  # where a test checks that the Milvus Lite file was released


def _hold_searches(idx: Index) -> tuple[threading.Event, threading.Event]:
    """Make the store searches of threads other than the main one wait: (inside, go).

    ``inside`` is set once one waits; setting ``go`` lets them on.
    """
    inside, go = threading.Event(), threading.Event()

    def held(method: Any) -> Any:
        def wait_then(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread() is not threading.main_thread():
                inside.set()
                go.wait(WAIT)
            return method(*args, **kwargs)

        return wait_then

    idx.store.search = held(idx.store.search)  # type: ignore[method-assign]
    if getattr(idx.store, "ranked", None) is not None:  # the FAISS store ranks without reading rows: held too
        idx.store.ranked = held(idx.store.ranked)  # type: ignore[attr-defined]
    return inside, go


def _config(**overrides: Any) -> Config:
    return load_config({"index": "t" + os.urandom(4).hex(), "server.port": 0, **overrides})


def _docs(tmp_path: Path, n: int = 4) -> Path:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for i in range(n):
        (root / f"topic{i}.md").write_text(f"# Topic {i}\n\nTopic {i} explains feature{i} and its options.\n")
    return root


def _consistent(idx: Index) -> None:
    """No orphan and no missing chunk: store ids == manifest ids, and the manifest is clean."""
    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty
    assert idx.store.all_ids() == m.chunk_ids()


# -- stop during a reload (QAServer.stop) ------------------------------------


@pytest.mark.slow
def test_stop_during_a_reload_stops_the_indexer_before_closing_the_index(
    tmp_path: Path, minilm: Embedder, held: Held
) -> None:
    root = _docs(tmp_path)
    config = _config()
    index = Index(config, embedder=minilm)
    # Watch the index: is an update running when it is closed?
    running: list[int] = [0]
    closed_while_updating: list[int] = []
    update, close = index.update, index.close

    def watched_update(*args: Any, **kwargs: Any) -> Any:
        running[0] += 1
        try:
            return update(*args, **kwargs)
        finally:
            running[0] -= 1

    def watched_close() -> None:
        closed_while_updating.append(running[0])
        close()

    index.update = watched_update  # type: ignore[method-assign]
    index.close = watched_close  # type: ignore[method-assign]

    async def scenario() -> None:
        server = QAServer(config, [root], overrides={"server.port": 0, "index": config["index"]}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), WAIT)
            assert await asyncio.to_thread(server.keeper.wait, None, WAIT)  # type: ignore[union-attr]  # built whole
            assert server.state == "ready" and server.chunks > 0
            (root / "new.md").write_text("# New\n\nThe quokkaflux option arrived during the reload.\n")
            (root / "slow.held").write_text("The held file.\n")
            assert await asyncio.to_thread(held.started.wait, WAIT), "the file watcher started a reload"
        finally:
            await server.stop()  # the parse of slow.held is still held
            held.release.set()

    asyncio.run(scenario())
    assert closed_while_updating == [0], "the index was closed while an update was running"

    # The index is whole: it opens, searches, and the next run finishes the interrupted one.
    with Index(config, embedder=minilm) as again:
        st = again.status()
        assert st.damaged is None and st.interrupted
        assert again.search("Topic 2 feature2 options", threshold=0)[0].rel_path == "topic2.md"
        summary = again.update()
        assert summary.repaired and summary.added == 2
        assert again.search("quokkaflux option", threshold=0)[0].rel_path == "new.md"
        _consistent(again)


def test_a_cancelled_update_keeps_what_it_wrote_and_the_next_run_finishes(tmp_path: Path, held: Held) -> None:
    root = tmp_path / "docs"
    root.mkdir()
    # 550 chunks before the held file: the run writes them (a batch is 512 chunks) before it.
    for i in range(11):
        body = "\n\n".join(f"## Part {j}\n\nFile {i} part {j} text." for j in range(50))
        (root / f"a{i:02}.md").write_text(f"# File {i}\n\n{body}\n")
    # the largest file, so that a first build (smallest first) comes to it last
    (root / "zz.held").write_text("The held file.\n" + " " * 4000 + "\n")
    embedder = HashEmbedder()
    idx = Index(_config(**{"chunk.size": 60, "chunk.overlap": 0}), embedder=embedder)
    cancel = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        try:
            idx.update([root], cancel=cancel)
        except BaseException as e:
            failure.append(e)

    t = threading.Thread(target=run)
    t.start()
    while t.is_alive() and not held.started.wait(0.1):
        pass
    assert held.started.is_set(), failure
    cancel.set()
    t.join(WAIT)
    assert not t.is_alive(), "the update stopped while a file was still being parsed"
    assert len(failure) == 1 and isinstance(failure[0], IndexingCancelledError), failure
    m = Manifest.load(idx.manifest_path)
    assert m is not None and m.dirty and len(m.files) == 11  # saved as it stopped, still to be finished
    written = len(embedder.embedded)
    assert written >= 512

    held.release.set()
    summary = idx.update([root])
    assert summary.repaired and summary.added == 1 and summary.unchanged == 11
    assert len(embedder.embedded) == written + 1, "only the held file was embedded again"
    _consistent(idx)
    idx.close()


# -- one Index, several threads ----------------------------------------------


def _built(tmp_path: Path, **overrides: Any) -> tuple[Config, Path]:
    """An index of a few files, built and closed."""
    root = _docs(tmp_path)
    config = _config(**overrides)
    with Index(config, embedder=HashEmbedder()) as idx:
        idx.update([root])
    return config, root


def test_first_searches_from_several_threads_open_the_store_once(tmp_path: Path) -> None:
    config, _ = _built(tmp_path, **MILVUS)
    idx = Index(config, embedder=HashEmbedder())
    start = threading.Barrier(6)
    results: list[int] = []

    def first_search() -> None:
        start.wait()
        results.append(len(idx.search("topic feature options", threshold=0)))

    threads = [threading.Thread(target=first_search) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(WAIT)
    assert results == [4] * 6
    idx.close()
    # One connection was made, and closed: the Milvus Lite file is free for another process.
    assert not lite_locked(config.effective("milvus_uri")), "a second connection was left open"


def test_a_commit_during_a_first_search_is_not_undone_by_the_search(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Milvus: a store without transactions, whose searches take the committed ids from the manifest.
    config, root = _built(tmp_path, **MILVUS)
    idx = Index(config, embedder=HashEmbedder())
    idx.status()  # the store is open: the search below reads the manifest, for what is committed
    read, go = threading.Event(), threading.Event()
    searcher: list[threading.Thread] = []
    load = Manifest.load

    def held_load(path: Path) -> Manifest | None:
        m = load(path)
        if threading.current_thread() in searcher:  # the search has read the committed state: hold it here
            read.set()
            go.wait(WAIT)
        return m

    monkeypatch.setattr(Manifest, "load", staticmethod(held_load))
    searcher.append(threading.Thread(target=lambda: idx.search("topic", threshold=0)))
    searcher[0].start()
    assert read.wait(WAIT)
    (root / "zebra.md").write_text("# Zebra\n\nZebra stripes and zebra crossings.\n")
    idx.update([root])  # commits a state with zebra.md while the search holds the one before
    go.set()
    searcher[0].join(WAIT)
    hits = idx.search("zebra stripes zebra crossings", threshold=0)
    assert hits and hits[0].rel_path == "zebra.md", "a later search still sees the state before the commit"
    idx.close()


def test_close_waits_for_a_search_in_flight(tmp_path: Path) -> None:
    config, _ = _built(tmp_path, **MILVUS)
    idx = Index(config, embedder=HashEmbedder())
    idx.status()
    inside, go = _hold_searches(idx)
    outcome: list[Any] = []

    def searching() -> None:
        try:
            outcome.append(len(idx.search("topic feature options", threshold=0)))
        except Exception as e:
            outcome.append(e)

    searcher = threading.Thread(target=searching)
    searcher.start()
    assert inside.wait(WAIT)
    closer = threading.Thread(target=idx.close)
    closer.start()
    closer.join(2)  # it cannot return while the search is in flight, however long we give it
    assert closer.is_alive(), "close() returned while a search was using the store"
    go.set()
    searcher.join(WAIT)
    closer.join(WAIT)
    assert outcome == [4]
    assert not lite_locked(config.effective("milvus_uri"))


def test_a_search_that_outlasts_the_grace_time_is_reported_when_its_chunks_go(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(mdrag.index.visibility, "_READERS_GRACE_S", 0.2)
    config, root = _built(tmp_path)
    idx = Index(config, embedder=HashEmbedder())
    idx.status()
    inside, go = _hold_searches(idx)
    searcher = threading.Thread(target=lambda: idx.search("topic", threshold=0))
    searcher.start()
    assert inside.wait(WAIT)
    (root / "topic1.md").write_text("# Topic 1\n\nRewritten: the old chunk of topic1.md is replaced.\n")
    with caplog.at_level(logging.WARNING, logger="mdrag.index.visibility"):
        idx.update([root])  # the search still reads the state before: the commit waits, then says so
    go.set()
    searcher.join(WAIT)
    assert "1 searches still read the state before this update" in caplog.text
    assert idx.search("Rewritten old chunk replaced", threshold=0)[0].rel_path == "topic1.md"
    _consistent(idx)
    idx.close()


# -- consistency on a Milvus server ------------------------------------------


class _Recorder:
    """A gRPC server interceptor that keeps each request a Milvus client sends, by method name."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, Any]] = []  # (method, request message)

    def interceptor(self) -> Any:
        import grpc

        recorder = self

        class Interceptor(grpc.ServerInterceptor):  # type: ignore[misc]
            def intercept_service(self, continuation: Any, details: Any) -> Any:
                handler = continuation(details)
                if handler is None or handler.unary_unary is None:
                    return handler
                method, inner = details.method.rsplit("/", 1)[-1], handler.unary_unary

                def unary(request: Any, context: Any) -> Any:
                    recorder.requests.append((method, request))
                    return inner(request, context)

                return grpc.unary_unary_rpc_method_handler(
                    unary,
                    request_deserializer=handler.request_deserializer,
                    response_serializer=handler.response_serializer,
                )

        return Interceptor()


@pytest.fixture
def recorded_server(tmp_path: Path) -> Iterator[tuple[str, _Recorder]]:
    """A Milvus gRPC server (Milvus Lite's, in this process) on 127.0.0.1 that records each request."""
    import grpc
    from milvus_lite.adapter.grpc.servicer import MilvusServicer
    from milvus_lite.db import MilvusLite
    from pymilvus.grpc_gen import milvus_pb2_grpc

    recorder = _Recorder()
    db = MilvusLite(str(tmp_path / "server-db"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), interceptors=[recorder.interceptor()])
    milvus_pb2_grpc.add_MilvusServiceServicer_to_server(MilvusServicer(db), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield f"http://127.0.0.1:{port}", recorder
    finally:
        server.stop(grace=2)
        db.close()


def test_collections_are_created_and_read_with_strong_consistency(recorded_server: tuple[str, _Recorder]) -> None:
    from pymilvus.grpc_gen.common_pb2 import ConsistencyLevel

    uri, recorder = recorded_server
    store = MilvusStore(uri, "t" + os.urandom(4).hex(), {"model": "test:model", "dimension": 8})
    store.open(create=True)
    chunks = [
        Chunk(
            id=f"{i:064x}",
            text=f"consistency text {i}",
            context="Doc",
            path="/r/a.md",
            rel_path="a.md",
            root="/r",
            heading_path=["Doc"],
            level=1,
            position=i,
            content_hash=f"{i:064x}",
        )
        for i in range(3)
    ]
    vectors = np.eye(3, 8, dtype=np.float32)
    store.upsert(chunks, vectors)
    # The indexer's reads of its own writes, and a search in each of the store's modes (hybrid fuses
    # these two lists in mdrag.retrieval.fusion), right after the write.
    assert store.vectors_by_hash([c.content_hash for c in chunks]).keys() == {c.content_hash for c in chunks}
    assert store.all_ids() == {c.id for c in chunks} and store.count() == 3
    for mode in ("dense", "bm25"):
        assert store.search(vectors[0], 3, mode=mode, text="consistency text")
    store.close()

    (create,) = [r for m, r in recorder.requests if m == "CreateCollection"]
    assert create.consistency_level == ConsistencyLevel.Strong
    reads = [(m, r) for m, r in recorder.requests if m in ("Query", "Search", "HybridSearch")]
    assert {m for m, _ in reads} == {"Query", "Search"}
    for method, request in reads:
        assert not request.use_default_consistency and request.consistency_level == ConsistencyLevel.Strong, method


class _Ranked:
    """A lock that notes when a thread takes it while holding one of the same or a later rank: the check of
    :class:`Index`'s lock order (its docstring's list), wherever its calls take them."""

    def __init__(self, rank: int, name: str, broken: list[str], held: threading.local) -> None:
        self.rank, self.name, self._broken, self._held = rank, name, broken, held
        self._lock = threading.Lock()
        self._owner: int | None = None

    def _stack(self) -> list[_Ranked]:
        stack: list[_Ranked] = self._held.__dict__.setdefault("stack", [])
        return stack

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        against = [h.name for h in self._stack() if h.rank >= self.rank]
        if against:
            self._broken.append(f"{self.name} taken holding {', '.join(against)}")
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._owner = threading.get_ident()
            self._stack().append(self)
        return got

    def release(self) -> None:
        self._stack().remove(self)
        self._owner = None
        self._lock.release()

    def _is_owned(self) -> bool:  # what threading.Condition asks of its lock
        return self._owner == threading.get_ident()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def test_an_index_takes_its_locks_in_the_order_its_docstring_gives(tmp_path: Path) -> None:
    """Updates, removals, searches, status, term statistics and close, from threads at once: no thread takes
    one of the Index's locks while it holds one that comes later in the order."""
    config, root = _built(tmp_path)
    idx = Index(config, embedder=HashEmbedder())
    broken: list[str] = []
    held = threading.local()
    idx._update_lock = _Ranked(1, "_update_lock", broken, held)  # type: ignore[assignment]
    idx._cond = threading.Condition(_Ranked(3, "_cond", broken, held))  # type: ignore[arg-type]
    idx._open_lock = idx._health._open_lock = _Ranked(4, "_open_lock", broken, held)  # type: ignore[assignment]
    idx._store_lock = _Ranked(5, "_store_lock", broken, held)  # type: ignore[assignment]
    other = tmp_path / "other"
    other.mkdir()
    (other / "extra.md").write_text("# Extra\n\nAn extra page about feature9.\n")

    def updates() -> None:
        for i in range(3):
            (root / "topic0.md").write_text(f"# Topic 0\n\nTopic 0, edit {i}, explains feature0.\n")
            idx.update([root, other])
            idx.remove([other])

    def reads() -> None:
        for _ in range(5):
            idx.search("topic feature options", threshold=0)
            idx.status()
            idx.term_stats()
            idx.close()

    with futures.ThreadPoolExecutor(3) as pool:
        done = [pool.submit(f) for f in (updates, reads, reads)]
        for f in done:
            f.result(WAIT)
    idx.close()
    assert broken == [], broken
