"""The index keeper (mdrag.index.keeper): one update at a time, a long one committed in steps, a watched change
ahead of it, progress, and the last committed state served meanwhile. On both stores.

A parser that waits on an event holds an update mid-run (test_threads.Held); no test depends on timing.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.errors import EmbeddingError, IndexBuildingError
from mdrag.index import Index
from mdrag.index.keeper import FEW_FILES, IndexKeeper
from mdrag.ingest.manifest import Manifest
from tests.conftest import HashEmbedder, Held
from tests.test_threads import WAIT


@pytest.fixture(params=["faiss", "milvus"])
def idx(request: pytest.FixtureRequest) -> Any:
    index = Index(
        load_config({"index": "k" + os.urandom(4).hex(), "store.backend": request.param}), embedder=HashEmbedder()
    )
    yield index
    index.close()


def _docs(root: Path, n: int, held_at: int | None = None) -> list[Path]:
    root.mkdir(exist_ok=True)
    files = []
    for i in range(n):
        f = root / f"f{i:03}.md"
        f.write_text(f"# Page {i}\n\nPage {i} tells of item{i} and its parts.\n")
        files.append(f)
    if held_at is not None:
        (root / f"f{held_at:03}b.held").write_text("The held page.\n")
    return files


class Calls:
    """Index.update, recorded: (only, remaining) per call."""

    def __init__(self, index: Index) -> None:
        self.calls: list[tuple[frozenset[str] | None, int]] = []
        update = index.update

        def recorded(*args: Any, **kwargs: Any) -> Any:
            summary = update(*args, **kwargs)
            only = kwargs.get("only")
            self.calls.append((frozenset(only) if only is not None else None, summary.remaining))
            return summary

        index.update = recorded  # type: ignore[method-assign]


def test_a_watched_change_goes_ahead_of_a_long_update(tmp_path: Path, held: Held, idx: Index) -> None:
    root = tmp_path / "docs"
    files = _docs(root, 20, held_at=5)
    held.release.set()
    idx.update([root])
    for f in files:  # every file changes: a long update
        f.write_text(f.read_text() + "\nA second paragraph about gears.\n")
    (root / "f005b.held").write_text("The held page, edited.\n")
    held.started.clear()
    held.release.clear()
    calls = Calls(idx)
    keeper = IndexKeeper(idx, [root], step_s=3600)
    try:
        keeper.start()
        assert held.started.wait(WAIT)
        edited = files[15]
        edited.write_text("# Zebra\n\nZebra stripes and zebra crossings.\n")
        ticket = keeper.request("files changed", [str(edited)])
        held.release.set()
        assert keeper.wait(ticket, WAIT)
        hits = idx.search("zebra stripes zebra crossings", threshold=0)
        assert hits and hits[0].rel_path == "f015.md"
        assert keeper.wait(keeper.request("rescan"), WAIT)
    finally:
        keeper.close()
    first, second = calls.calls[0], calls.calls[1]
    assert first[0] is None and first[1] > 0, "the long update was not paused for the change"
    assert second == (frozenset({str(edited)}), 0), "the change did not go alone, ahead of the rest"
    assert calls.calls[2][0] is None, "the long update did not go on after the change"
    m = Manifest.load(idx.manifest_path)
    assert m is not None and not m.dirty and len(m.files) == 21
    assert all("gears" in idx.search(f"page {i} item{i} gears", k=1, threshold=0)[0].text for i in (0, 19))


def test_a_long_update_commits_in_steps_that_readers_see(tmp_path: Path, idx: Index) -> None:
    root = tmp_path / "docs"
    _docs(root, 8)
    calls = Calls(idx)
    seen: list[int] = []
    keeper = IndexKeeper(idx, [root], step_s=0.0, on_change=lambda st: seen.append(st.chunks))
    try:
        assert keeper.wait(keeper.start(), WAIT)
    finally:
        keeper.close()
    assert len(calls.calls) >= 2 and calls.calls[-1][1] == 0, calls.calls
    assert 0 < min(c for c in seen if c) < 8, "no step was committed before the end"
    st = keeper.state
    assert (st.state, st.files, st.chunks, st.indexing) == ("ready", 8, 8, None)
    assert st.summary is not None and st.finished_at is not None
    assert (st.summary.added, st.summary.chunks_embedded, st.summary.remaining) == (8, 8, 0), "summed over the steps"


def test_a_first_build_reports_its_progress_and_readers_are_told_so(tmp_path: Path, held: Held, idx: Index) -> None:
    root = tmp_path / "docs"
    _docs(root, 6, held_at=2)
    keeper = IndexKeeper(idx, [root], step_s=3600)
    try:
        ticket = keeper.start()
        assert held.started.wait(WAIT)
        st = keeper.state
        assert st.state == "loading" and st.indexing is not None and st.indexing[1] == 7, st
        assert st.message().startswith(f"indexing: {st.indexing[0]} of 7 files; loading the index")
        with pytest.raises(IndexBuildingError, match="is being built"):
            idx.search("page item parts")
        held.release.set()
        assert keeper.wait(ticket, WAIT)
    finally:
        held.release.set()
        keeper.close()
    st = keeper.state
    assert (st.state, st.files, st.indexing) == ("ready", 7, None)
    assert st.message() == "ready: 7 files, 7 chunks"


def test_an_index_with_a_committed_state_is_ready_while_its_startup_update_runs(
    tmp_path: Path, held: Held, idx: Index
) -> None:
    root = tmp_path / "docs"
    _docs(root, 4)
    idx.update([root])
    (root / "new.held").write_text("A held new page.\n")
    ready = threading.Event()
    keeper = IndexKeeper(idx, [root], on_change=lambda st: st.state == "ready" and ready.set())
    try:
        keeper.start()
        assert held.started.wait(WAIT) and ready.wait(WAIT)
        st = keeper.state
        assert st.state == "ready" and st.chunks == 4 and st.indexing is not None
        assert st.message() == f"indexing: {st.indexing[0]} of 1 files (ready: 4 files, 4 chunks)"
        assert len(idx.search("page item parts", k=10, threshold=0)) == 4
    finally:
        held.release.set()
        keeper.close()


def test_a_failed_first_update_is_reported_and_close_commits_a_running_one(tmp_path: Path, held: Held) -> None:
    class Refused(HashEmbedder):
        def embed_batch(self, texts: Any) -> Any:
            raise EmbeddingError("the embedding API refused the request")

    root = tmp_path / "docs"
    _docs(root, 3, held_at=1)
    held.release.set()
    failing = Index(load_config({"index": "k" + os.urandom(4).hex()}), embedder=Refused())
    keeper = IndexKeeper(failing, [root])
    assert keeper.wait(keeper.start(), WAIT)
    assert keeper.state.state == "failed" and "refused" in (keeper.state.error or ""), keeper.state
    keeper.close()
    failing.close()
    held.release.clear()
    held.started.clear()
    idx = Index(load_config({"index": "k" + os.urandom(4).hex()}), embedder=HashEmbedder())
    keeper = IndexKeeper(idx, [root])
    keeper.start()
    assert held.started.wait(WAIT)
    closer = threading.Thread(target=keeper.close)
    closer.start()
    held.release.set()
    closer.join(WAIT)
    assert not closer.is_alive()
    m = Manifest.load(idx.manifest_path)
    # close() pauses the update: what it wrote is committed, the rest is left for the next start
    assert m is not None and not m.dirty and len(m.files) < 4, m
    assert idx.update([root]).added == 4 - len(m.files)
    idx.close()


def test_many_changed_files_are_a_long_update_and_a_later_edit_goes_ahead_of_it(
    tmp_path: Path, held: Held, idx: Index
) -> None:
    """A folder copied in is seen by the watcher as hundreds of changed files: they are updated in steps
    like a rescan, so that an edit made meanwhile does not wait for all of them."""
    root = tmp_path / "docs"
    _docs(root, 2)
    held.release.set()
    idx.update([root])
    calls = Calls(idx)
    keeper = IndexKeeper(idx, [root], step_s=3600)
    try:
        assert keeper.wait(keeper.start(), WAIT)
        calls.calls.clear()
        held.release.clear()
        held.started.clear()
        dropped = _docs(root / "dropped", FEW_FILES + 1, held_at=3)
        keeper.request("files changed", [str(p) for p in [*dropped, root / "dropped" / "f003b.held"]])
        assert held.started.wait(WAIT)
        edited = root / "f001.md"
        edited.write_text("# Zebra\n\nZebra stripes and zebra crossings.\n")
        ticket = keeper.request("files changed", [str(edited)])
        held.release.set()
        assert keeper.wait(ticket, WAIT)
    finally:
        held.release.set()
        keeper.close()
    assert calls.calls[0][0] is None and calls.calls[0][1] > 0, calls.calls  # the drop: a long update, paused
    assert calls.calls[1] == (frozenset({str(edited)}), 0), calls.calls


def test_keepers_that_share_a_gate_update_one_at_a_time(tmp_path: Path, held: Held, idx: Index) -> None:
    """The MCP server's docsets: a keeper whose update waits for another index's says it is queued, and
    runs once that one ends; its own updater (the docset's) is called as index.update would be."""
    first, second = tmp_path / "first", tmp_path / "second"
    _docs(first, 3, held_at=1)
    _docs(second, 4)
    other = Index(load_config({"index": "k" + os.urandom(4).hex()}), embedder=HashEmbedder())
    how: list[dict[str, Any]] = []

    def update(folders: Any, **kwargs: Any) -> Any:
        how.append(kwargs)
        return other.update([second], **kwargs)

    gate = threading.Lock()
    holding = IndexKeeper(idx, [first], gate=gate)
    waiting = IndexKeeper(other, update=update, gate=gate)
    try:
        holding.start()
        assert held.started.wait(WAIT)
        ticket = waiting.start()
        deadline = time.monotonic() + WAIT
        while not waiting.state.queued and time.monotonic() < deadline:  # it reaches the gate
            time.sleep(0.01)
        queued = waiting.state
        assert not how, "the second update started while the first held the gate"
        held.release.set()
        assert waiting.wait(ticket, WAIT) and holding.wait(None, WAIT)
    finally:
        held.release.set()
        holding.close()
        waiting.close()
        other.close()
    assert queued.queued and queued.state == "loading"
    assert not waiting.state.queued and waiting.state.state == "ready" and waiting.state.files == 4
    assert how and {"cancel", "batch_chunks", "pause", "progress"} <= set(how[0])
    assert holding.state.files == 4  # three pages and the held one
