"""A first build that is searched as it grows: its steps commit every few seconds (here: every few chunks),
searches answer from the files committed so far and say so (the core API, the WebSocket server, the CLI), and
`status` tells a build that runs (with its process id) from one that was stopped."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

import mdrag.index.index
import mdrag.ingest.pipeline as pipeline
from mdrag.config import load_config
from mdrag.frontends.cli import main
from mdrag.frontends.client import Client
from mdrag.index import Index
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder
from tests.test_server import _config, ask, recv, serving

ROOT = Path(__file__).resolve().parent.parent
WAIT = 30.0  # a generous bound for what a poll waits for


@pytest.fixture
def small_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """A first build's steps end every 4 chunks (rounds of 2), never by the clock."""
    monkeypatch.setattr(pipeline, "_GROW_BATCH", (2, 2))
    monkeypatch.setattr(pipeline, "_GROW_CHUNKS", 4)
    monkeypatch.setattr(pipeline, "_GROW_S", float("inf"))
    monkeypatch.setattr(pipeline, "_GROW_SHARE", 0.0)


def _docs(root: Path, n: int) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):  # one chunk each
        (root / f"page{i:02}.md").write_text(f"# Page {i}\n\nPage {i} tells of gear{i} and its parts.\n")
    return root


def test_a_first_build_in_steps_is_searched_from_what_it_committed_and_says_so(
    tmp_path: Path, mdrag_home: Path, small_steps: None
) -> None:
    docs = _docs(tmp_path / "docs", 10)
    config = load_config({"index": "grow"})
    pause = threading.Event()  # never set: the build ends its steps on its own
    with Index(config, embedder=HashEmbedder()) as builder, Index(config, embedder=HashEmbedder()) as reader:
        step = builder.update([docs], pause=pause)
        assert step.remaining > 0 and step.added == 4, step
        found = reader.search("page gear parts", k=20, threshold=0)  # as another process would
        assert {r.rel_path for r in found} == {f"page{i:02}.md" for i in range(4)}, "only what the step committed"
        part = reader.partial()
        assert part is not None and (part.files_done, part.files_total) == (4, 10)
        assert not part.running, "no run holds the index now: the build was stopped"
        assert "4 of 10 files" in part.message() and "`mdrag index` finishes it" in part.message()
        st = reader.status()
        assert st.partial == {"files_done": 4, "files_total": 10} and st.interrupted and st.indexing is None

        while step.remaining:
            step = builder.update([docs], pause=pause)
        assert reader.partial() is None
        assert len(reader.search("page gear parts", k=20, threshold=0)) == 10
        st = reader.status()
        assert (st.partial, st.interrupted, st.files) == (None, False, 10)
        assert not Manifest.load(builder.manifest_path).partial  # type: ignore[union-attr]


def test_a_change_indexed_alone_during_a_first_build_leaves_it_partial(
    tmp_path: Path, mdrag_home: Path, small_steps: None
) -> None:
    # A server indexes a saved file ahead of the build's other files (``only``): the index is no more whole
    # for it.
    docs = _docs(tmp_path / "docs", 10)
    with Index(load_config({"index": "grow"}), embedder=HashEmbedder()) as index:
        assert index.update([docs], pause=threading.Event()).remaining
        index.update([docs], only={str((docs / "page09.md").resolve())})
        part = index.partial()
        assert part is not None and (part.files_done, part.files_total) == (5, 10)
        assert index.update([docs]).remaining == 0 and index.partial() is None


def test_an_update_of_a_built_index_keeps_searches_on_what_was_committed(
    tmp_path: Path, mdrag_home: Path, small_steps: None
) -> None:
    docs = _docs(tmp_path / "docs", 3)
    config = load_config({"index": "grow"})
    with Index(config, embedder=HashEmbedder()) as index:
        index.update([docs])
        _docs(tmp_path / "more", 10)
        step = index.update([tmp_path / "more"], pause=threading.Event())  # not a first build: one commit
        assert step.remaining == 0 and step.added == 10
        assert index.partial() is None and index.status().partial is None


def test_a_first_build_makes_a_folders_readme_and_a_small_file_searchable_before_a_big_file(
    tmp_path: Path, mdrag_home: Path, minilm: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Steps of one file each (by the chunks written, never by the clock): each commits the next file in order.
    monkeypatch.setattr(pipeline, "_GROW_BATCH", (1, 1))
    monkeypatch.setattr(pipeline, "_GROW_CHUNKS", 1)
    monkeypatch.setattr(pipeline, "_GROW_S", float("inf"))
    monkeypatch.setattr(pipeline, "_GROW_SHARE", 0.0)
    docs = tmp_path / "docs"
    (docs / "guide").mkdir(parents=True)
    filler = " ".join(f"zeppelin{i} hangar mooring mast" for i in range(60))
    (docs / "a-big.md").write_text("".join(f"# Airship part {n}\n\n{filler}\n\n" for n in range(4)))  # first by path
    (docs / "guide" / "README.md").write_text("# The guide\n\nThis guide tells of the guidebook and its maps.\n")
    (docs / "z-small.md").write_text("# Fruit\n\nA kumquat is a small citrus fruit.\n")
    config = load_config({"index": "order"})
    seen = []  # the files searchable after each step
    with Index(config, embedder=minilm) as builder, Index(config, embedder=minilm) as reader:
        while True:
            step = builder.update([docs], pause=threading.Event())
            found = reader.search("zeppelin airship guidebook guide kumquat fruit", k=100, threshold=0)
            seen.append({r.rel_path for r in found})
            if not step.remaining:
                break
    assert seen == [
        {"guide/README.md"},
        {"guide/README.md", "z-small.md"},
        {"guide/README.md", "z-small.md", "a-big.md"},
    ]


class _Gate(HashEmbedder):
    """Embeds ``free`` batches of the keeper's updates, then waits in the next until ``release`` is set
    (queries are embedded at once)."""

    def __init__(self, free: int) -> None:
        super().__init__()
        self.free = free
        self.waiting = threading.Event()
        self.release = threading.Event()

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        if threading.current_thread().name == "mdrag-keeper":
            if self.free <= 0:
                self.waiting.set()
                self.release.wait(WAIT)
            self.free -= 1
        return super().embed_batch(texts)


def test_the_server_answers_from_a_growing_first_build_and_says_so(
    tmp_path: Path, small_steps: None, caplog: pytest.LogCaptureFixture
) -> None:
    docs = _docs(tmp_path / "docs", 12)
    gate = _Gate(free=2)  # the first step (4 chunks, two rounds of 2) commits; the second waits

    async def scenario() -> None:
        async with serving(_config(), [docs], gate, wait=False) as server:
            assert await asyncio.to_thread(gate.waiting.wait, WAIT)
            await asyncio.wait_for(server.ready.wait(), WAIT)
            async with connect(server.url) as ws:
                hello = await recv(ws)
                assert hello["state"] == "ready" and hello["partial"] == {"files_done": 4, "files_total": 12}
                assert "results come from the 4 indexed so far" in hello["message"], hello

                await ws.send(json.dumps({"type": "search", "query": "page gear parts", "k": 20, "threshold": 0}))
                found = await recv(ws)
                assert found["type"] == "search_results" and len(found["results"]) == 4
                assert found["partial"]["files_done"] == 4 and found["partial"]["running"], found
                assert "indexing: 4 of 12 files; results come from those" == found["partial"]["message"]

                _, sources, messages = await ask(ws, "Page 2 gear2")
                end = messages[-1]
                assert end["type"] == "stream_end" and sources and end["partial"]["files_total"] == 12, messages

                def asked() -> list[str]:  # `mdrag ask`: the line goes to stderr, through the log
                    with Client(server.url) as client:
                        return client.ask("Page 2 gear2", lambda _: None)

                with caplog.at_level(logging.WARNING, logger="mdrag.frontends.client"):
                    assert await asyncio.to_thread(asked)
                assert "indexing: 4 of 12 files; results come from those" in caplog.text

                gate.release.set()
                assert await asyncio.to_thread(server.keeper.wait, None, WAIT)  # type: ignore[union-attr]
                await ws.send(json.dumps({"type": "search", "query": "page gear parts", "k": 20, "threshold": 0}))
                whole = await recv(ws)
                assert len(whole["results"]) == 12 and "partial" not in whole
                await ws.send(json.dumps({"type": "status"}))
                assert "partial" not in await recv(ws)

    try:
        asyncio.run(scenario())
    finally:
        gate.release.set()


def test_cli_search_says_on_stderr_that_it_answers_from_part_of_the_files(
    tmp_path: Path,
    mdrag_home: Path,
    small_steps: None,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    docs = _docs(tmp_path / "docs", 10)
    monkeypatch.setattr(mdrag.index.index, "make_embedder", lambda config: HashEmbedder())
    with Index(load_config({})) as index:
        assert index.update([docs], pause=threading.Event()).remaining
    assert main(["search", "page gear parts", "-k", "20", "--threshold", "0", "--json"]) == 0
    out, err = capsys.readouterr()
    assert len(json.loads(out)) == 4
    assert "mdrag: the index holds 4 of 10 files" in err and "results come from those" in err, err


def _driver(home: Path, docs: Path, hold: Path) -> subprocess.Popen[str]:
    """An `mdrag index` (the real CLI, a small test embedder) that waits in its first embedding until ``hold``
    exists: it holds the writers' lock meanwhile."""
    env = {**os.environ, "MDRAG_HOME": str(home), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "tests.faults.driver", str(docs), "--index", "grow", "--hold", str(hold)]
    return subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _poll(what, timeout: float = WAIT):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(0.05)
    raise AssertionError("not reached in time")


def test_status_names_the_process_that_builds_and_says_interrupted_only_once_none_does(
    tmp_path: Path, mdrag_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = _docs(tmp_path / "docs", 6)
    hold = tmp_path / "release"
    run = _driver(mdrag_home, docs, hold)
    try:
        _poll(lambda: Path(f"{hold}.held").exists() or run.poll() is not None)
        assert run.poll() is None, run.communicate()[1][-3000:]
        with Index(load_config({"index": "grow"}), embedder=HashEmbedder()) as index:
            st = index.status()
            assert st.indexing is not None and st.indexing["pid"] == run.pid, st
            assert st.indexing["first_build"] and st.indexing["files_total"] == 6
            assert st.indexing["message"] == f"being built: {st.indexing['files_done']} of 6 files (pid {run.pid})"
            assert not st.interrupted and st.building
        assert main(["status", "--index", "grow"]) == 0
        assert f"(pid {run.pid})" in capsys.readouterr().out

        async def served() -> dict[str, Any]:  # a server of the index meanwhile: its status says so too
            config = load_config({"index": "grow", "server.port": 0})
            async with serving(config, [docs], HashEmbedder(), wait=False) as server:
                async with connect(server.url) as ws:
                    return await recv(ws)

        hello = asyncio.run(served())
        assert hello["other_process"]["pid"] == run.pid and hello["other_process"]["first_build"], hello
        assert hello["message"].startswith(f"being built: {hello['other_process']['files_done']} of 6 files (pid")

        run.send_signal(signal.SIGKILL)  # killed while it builds: no process holds the lock now
        run.wait(WAIT)
        with Index(load_config({"index": "grow"}), embedder=HashEmbedder()) as index:
            st = index.status()
            assert st.indexing is None and st.interrupted, st
    finally:
        hold.touch()
        if run.poll() is None:
            run.kill()
        run.communicate()


class _Stopping(HashEmbedder):
    """Embeds two texts a call, and sets ``stop`` in its ``at``-th call (as Ctrl+C would, mid-embedding)."""

    batch_size = 2

    def __init__(self, at: int) -> None:
        super().__init__()
        self.at, self.calls = at, 0
        self.stop = threading.Event()

    def embed_batch(self, texts):  # type: ignore[no-untyped-def]
        self.calls += 1
        if self.calls == self.at:
            self.stop.set()
        return super().embed_batch(texts)


# A first build embeds the six one-chunk pages (3 calls), then big.md (3 calls): its smallest files first.
@pytest.mark.parametrize(("at", "kept"), [(1, set()), (5, {f"page{i:02}.md" for i in range(6)})])
def test_a_stop_mid_embedding_keeps_the_whole_files_only_and_the_next_run_embeds_the_rest(
    tmp_path: Path, mdrag_home: Path, at: int, kept: set[str]
) -> None:
    docs = _docs(tmp_path / "docs", 6)
    words = " ".join(f"word{i}" for i in range(100))
    (docs / "big.md").write_text("".join(f"# Part {n}\n\n{words} part{n}\n\n" for n in range(6)))  # 6 chunks
    config = load_config({"index": "stop"})
    embedder = _Stopping(at)
    with Index(config, embedder=embedder) as index:
        step = index.update([docs], batch_chunks=2, stop=embedder.stop)
        m = Manifest.load(index.manifest_path)
        assert m is not None and not m.dirty
        assert {f.rel_path for f in m.files.values()} == kept
        assert step.remaining == 7 - len(kept) and step.added == len(kept), step
        assert index.status().chunks == m.chunk_count, "a chunk of a file not kept was left in the store"
        assert (m.chunk_count > 0) == bool(kept)

        embedder.stop = threading.Event()  # never set
        before = len(embedder.embedded)
        done = index.update([docs], batch_chunks=2)
        assert done.remaining == 0 and done.added == 7 - len(kept)
        total = Manifest.load(index.manifest_path).chunk_count  # type: ignore[union-attr]
        assert len(embedder.embedded) - before == total - m.chunk_count, "kept chunks were embedded again"


def test_a_first_build_in_steps_on_milvus_lite_ranks_as_a_build_in_one_run(
    tmp_path: Path, mdrag_home: Path, small_steps: None
) -> None:
    """Milvus Lite keeps BM25 statistics per segment and every step leaves segments of its own: the last step
    writes the steps' chunks again together, so BM25 ranks and scores as after a build in one run."""
    pytest.importorskip("milvus_lite", reason="Milvus Lite is not installed (pip install 'mdrag-docs[milvus]')")
    docs = tmp_path / "docs"
    docs.mkdir()
    words = ["gear", "spring", "valve", "pump", "lever", "belt"]
    for i in range(18):  # one chunk each; term frequencies differ from page to page
        used = " ".join(words[j % len(words)] for j in range(i % 5, i % 5 + 2 + i % 4))
        (docs / f"page{i:02}.md").write_text(f"# Page {i}\n\nPage {i} holds {used} and its {words[i % 6]} parts.\n")

    def built(name: str, steps: bool) -> list[dict[str, float]]:
        config = load_config({"index": name, "store.backend": "milvus"})
        with Index(config, embedder=HashEmbedder()) as idx:
            pause = threading.Event() if steps else None
            runs = 1
            while idx.update([docs], pause=pause).remaining:
                runs += 1
            assert (runs > 3) == steps, runs
            return [  # each page's BM25 score (pages of equal score are listed in the order they are stored)
                {r.rel_path: round(r.rank_score, 4) for r in idx.search(q, k=18, threshold=0, mode="bm25")}
                for q in ("gear valve", "pump parts", "lever belt spring")
            ]

    assert built("steps", steps=True) == built("once", steps=False)
