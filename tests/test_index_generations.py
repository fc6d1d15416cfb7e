"""Readers while the index changes: a search sees the last committed state until a run commits, then the
new one whole; a first build that has committed nothing says how far it is. On the FAISS store and on
Milvus (a Lite file, and a Milvus server read by a second process).

Interleavings are forced: a parser that waits on an event holds the indexer mid-run (test_threads.Held),
and a writer process is stopped (SIGSTOP) mid-run.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import mdrag.ingest.pipeline
from mdrag.config import Config, load_config
from mdrag.embedding.base import Embedder
from mdrag.errors import IndexBuildingError
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder, Held
from tests.test_threads import WAIT, _hold_searches

QUERY = "topic feature options"


@pytest.fixture(params=["faiss", "milvus"])
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _config(backend: str, **overrides: Any) -> Config:
    return load_config({"index": "g" + os.urandom(4).hex(), "store.backend": backend, **overrides})


def _docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    root.mkdir(exist_ok=True)
    for i in range(6):
        (root / f"topic{i}.md").write_text(f"# Topic {i}\n\nTopic {i} explains feature{i} and its options.\n")
    (root / "zz.held").write_text("The held topic: its feature has options too.\n")
    return root


def _paths(idx: Index) -> set[str]:
    return {r.rel_path for r in idx.search(QUERY, k=20, threshold=0.0)}


def _in_thread(fn: Any) -> tuple[threading.Thread, list[BaseException]]:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            fn()
        except BaseException as e:
            failure.append(e)

    t = threading.Thread(target=run)
    t.start()
    return t, failure


def _wait_held(held: Held, t: threading.Thread, failure: list[BaseException]) -> None:
    while t.is_alive() and not held.started.wait(0.1):
        pass
    assert held.started.is_set(), failure


def test_a_rebuild_shows_readers_the_last_commit_until_it_commits(
    tmp_path: Path, held: Held, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    monkeypatch.setattr(mdrag.ingest.pipeline, "_BATCH_CHUNKS", 2)  # the files before the held one are written
    root = _docs(tmp_path)
    held.release.set()
    idx = Index(_config(backend), embedder=HashEmbedder())
    idx.update([root])
    before = _paths(idx)
    assert len(before) == 7
    held.started.clear()
    held.release.clear()

    t, failure = _in_thread(lambda: idx.update([root], rebuild=True))
    _wait_held(held, t, failure)
    try:
        assert _paths(idx) == before, "a search during --rebuild saw a partial index"
        assert idx.status().chunks >= 7
    finally:
        held.release.set()
        t.join(WAIT)
    assert not failure, failure
    assert _paths(idx) == before
    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty and m.committed_ids is None
    assert idx.store.all_ids() == m.chunk_ids(), "the rebuild left chunks it did not write"
    idx.close()


def test_a_rebuild_reruns_the_embedder_on_every_chunk(tmp_path: Path, backend: str) -> None:
    """--rebuild trusts no stored vector (it is the cure for a store in doubt): every text is embedded."""
    root = _docs(tmp_path)
    embedder = HashEmbedder()
    with Index(_config(backend), embedder=embedder) as idx:
        idx.update([root])
        first = len(embedder.embedded)
        summary = idx.update([root], rebuild=True)
    assert summary.chunks_embedded == first and len(embedder.embedded) == 2 * first


def test_a_first_build_says_how_far_it_is_rather_than_nothing_found(tmp_path: Path, held: Held, backend: str) -> None:
    root = _docs(tmp_path)
    config = _config(backend)
    idx = Index(config, embedder=HashEmbedder())
    t, failure = _in_thread(lambda: idx.update([root]))
    _wait_held(held, t, failure)
    try:
        with pytest.raises(IndexBuildingError, match=r"is being built \(\d+ of 7 files done\)") as e:
            idx.search(QUERY)
        assert e.value.total == 7
    finally:
        held.release.set()
        t.join(WAIT)
    assert not failure, failure
    assert len(_paths(idx)) == 7
    idx.close()


# -- another process ----------------------------------------------------------


@pytest.fixture
def served_config(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Settings of an index that two processes can open at once: FAISS, or a Milvus server."""
    if request.param == "faiss":
        yield {"store": {"backend": "faiss"}}
    else:
        yield {"store": {"backend": "milvus"}, "milvus_uri": str(request.getfixturevalue("milvus_server"))}


def _writer_stopped_mid_run(argv: list[str], manifest: Path, home: Path) -> subprocess.Popen[bytes]:
    """Start ``mdrag`` ``argv`` in another process and stop it (SIGSTOP) once its run has begun writing
    (its manifest says so)."""
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "mdrag", *argv], env=env, stderr=subprocess.PIPE)
    deadline = time.monotonic() + WAIT
    while time.monotonic() < deadline and proc.poll() is None:
        m = Manifest.load(manifest) if manifest.exists() else None
        if m is not None and m.dirty:
            proc.send_signal(signal.SIGSTOP)
            return proc
        time.sleep(0.02)
    proc.kill()
    pytest.fail(f"the writer did not reach the middle of its run: {proc.stderr.read().decode()[-2000:]}")


@pytest.mark.slow
@pytest.mark.parametrize("served_config", ["faiss", "milvus-server"], indirect=True)
def test_another_process_rebuilding_never_shows_a_partial_index(
    served_config: dict[str, Any], tmp_path: Path, mdrag_home: Path, minilm: Embedder, shared_data: Path
) -> None:
    """`mdrag index --rebuild` in another process, stopped mid-run: this process's searches see the
    last commit whole, then, once it commits, the new state."""
    docs = tmp_path / "docs"
    docs.mkdir()
    for f in sorted((shared_data / "markdown_cncf_glossary").rglob("*.md"))[:40]:
        (docs / f.name).write_bytes(f.read_bytes())
    name = "x" + os.urandom(4).hex()
    (mdrag_home / "config.yaml").write_text(json.dumps(served_config))
    config = load_config({"index": name})
    reader = Index(config, embedder=minilm)
    reader.update([docs])
    queries = ["what is a container", "service mesh traffic", "infrastructure as code", "observability"]
    before = {q: [r.chunk_id for r in reader.search(q, k=5, threshold=0.0)] for q in queries}
    assert all(len(ids) == 5 for ids in before.values())
    (docs / "zz-new.md").write_text("# Vermilion widgets\n\nA vermilion widget is a container for colours.\n")

    proc = _writer_stopped_mid_run(
        ["index", "--rebuild", "--index", name, "-q"], config.manifest_path(name), mdrag_home
    )
    try:
        for q in queries:
            assert [r.chunk_id for r in reader.search(q, k=5, threshold=0.0)] == before[q], q
        seen = {r.rel_path for r in reader.search("vermilion widget colours", k=5, threshold=0.0)}
        assert "zz-new.md" not in seen, "a chunk of the rebuild was seen before it committed"
    finally:
        proc.send_signal(signal.SIGCONT)
        _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err.decode()[-2000:]
    found = reader.search("vermilion widget colours", k=5, threshold=0.0)
    assert found and found[0].rel_path == "zz-new.md", "the rebuild's commit was not seen"
    for q in queries:
        assert len(reader.search(q, k=5, threshold=0.0)) == 5
    reader.close()


def test_a_new_model_starts_a_new_index_whose_searches_say_it_is_being_built(
    tmp_path: Path, held: Held, backend: str
) -> None:
    """Vectors of another model cannot share the collection: it is made anew, and until the new index
    commits, a search says it is being built (the old one is gone: nothing else could be shown)."""
    root = _docs(tmp_path)
    config = _config(backend)
    held.release.set()
    with Index(config, embedder=HashEmbedder(dim=64)) as idx:
        idx.update([root])
    held.started.clear()
    held.release.clear()
    idx = Index(config, embedder=HashEmbedder(dim=32))
    t, failure = _in_thread(lambda: idx.update([root]))
    _wait_held(held, t, failure)
    try:
        with pytest.raises(IndexBuildingError, match="is being built"):
            idx.search(QUERY)
    finally:
        held.release.set()
        t.join(WAIT)
    assert not failure, failure
    assert len(_paths(idx)) == 7
    idx.close()


def test_a_search_meets_the_writes_made_after_it_began(tmp_path: Path, held: Held, backend: str) -> None:
    """A search takes the committed state (and how many chunks a run wrote beside it) as it begins; a run
    that writes more before the search reaches the store must not cut its results short: it had fetched
    ``k`` + the written count, and the new chunks, ranked first, took every place (a served search during a
    long update got 4 results of 5, found by tests/test_serving_faults.py)."""
    root = _docs(tmp_path)
    (root / "zz.held").unlink()
    idx = Index(_config(backend), embedder=HashEmbedder())
    idx.update([root])
    assert len(_paths(idx)) == 6
    (root / "a.held").write_text("Held first: the run has begun and written nothing.\n")
    for i in range(8):
        # each file its own bytes (identical files would be indexed once, the others as its copies)
        (root / f"b{i}.md").write_text(
            f"# Topic feature options\n\nTopic feature options, topic feature options {i}.\n"
        )
    inside, go = _hold_searches(idx)
    run, run_failure = _in_thread(lambda: idx.update([root], batch_chunks=1))
    _wait_held(held, run, run_failure)
    found: list[list[str]] = []
    reader, read_failure = _in_thread(
        lambda: found.append([r.rel_path for r in idx.search(QUERY, k=5, threshold=0, collapse="none")])
    )
    try:
        assert inside.wait(WAIT), read_failure
        before = idx._snapshot.generation
        held.release.set()  # the run writes its chunks, then commits: the commit waits for the search
        deadline = time.monotonic() + WAIT
        while idx._snapshot.generation == before and run.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert idx._snapshot.generation > before, run_failure
    finally:
        held.release.set()
        go.set()
        reader.join(WAIT)
        run.join(WAIT)
    assert not read_failure and not run_failure, (read_failure, run_failure)
    assert len(found[0]) == 5 and all(p.startswith("topic") for p in found[0]), found
    assert len(_paths(idx)) == 15
    idx.close()
