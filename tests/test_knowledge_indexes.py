"""The docsets' indexes kept current by the core (mdrag.knowledge.indexes), used as a front end would, without MCP.

The MCP tests (tests/test_mcp*.py) check what the ``search`` tool makes of them; these check the core's own API:
it opens only between start and close, refreshes an index when due, searches, and reports its state with the
keys the MCP ``search`` tool has always sent.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from mdrag.index.served import ServedIndexState, UpdateProgress
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.indexes import DocsetIndexes, DocsetIndexesClosedError
from tests.test_knowledge import write_config, write_files
from tests.test_mcp import error, ok

WAIT = 60.0


@pytest.fixture
def project(tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setattr("mdrag.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")  # any passage counts
    project = tmp_path / "project"
    write_config(project, "docsets:\n  - id: guide\n  - id: empty\n")
    write_files(project / ".knowledge" / "docs" / "guide", {"intro.md": "# Intro\n\nHow to install the tool.\n"})
    return project


def test_an_index_opens_only_between_start_and_close(project: Path) -> None:
    kb = KnowledgeBase(start=project)
    indexes = DocsetIndexes(kb)
    with pytest.raises(DocsetIndexesClosedError):
        indexes.open(kb.resolve("guide"))
    indexes.start()  # the docset with a folder starts updating; the one without is left alone
    try:
        (entry,) = indexes.opened()
        assert entry.wait(WAIT)
        assert indexes.open(kb.resolve("guide")) is entry  # one index and keeper per docset
    finally:
        indexes.close()
    assert indexes.opened() == []
    with pytest.raises(DocsetIndexesClosedError):
        indexes.open(kb.resolve("guide"))


def test_a_due_index_is_refreshed_and_searched_with_its_state(project: Path) -> None:
    kb = KnowledgeBase(start=project)
    indexes = DocsetIndexes(kb, refresh_interval=3600)
    indexes.start()
    try:
        entry = indexes.ensure_current(kb.resolve("guide"))
        assert entry.wait(WAIT)
        found = entry.search("install", 5)
        assert found.progress is None and [r.rel_path for r in found.results or []] == ["intro.md"]
        first = entry.updates

        write_files(project / ".knowledge" / "docs" / "guide", {"setup.md": "# Setup\n\nConfigure the proxy.\n"})
        assert indexes.ensure_current(kb.resolve("guide")) is entry and not entry.busy  # not due for an hour
        indexes.refresh_interval = 0
        indexes.ensure_current(kb.resolve("guide"))  # due now: an update is asked for
        assert entry.wait(WAIT) and entry.updates > first
        found = entry.search("proxy", 5)
        assert "setup.md" in [r.rel_path for r in found.results or []]

        state = entry.state(refreshed=True).to_dict()
        assert list(state) == [
            "index",
            "refreshed",
            "chunks_embedded",
            "chunks_reused",
            "chunks_deleted",
            "chunks_total",
            "seconds",
            "age_s",
        ]
        assert state["index"] == entry.index.name and state["refreshed"] is True
        assert state["chunks_embedded"] == 1 and state["chunks_total"] == 2  # only the new file was embedded
    finally:
        indexes.close()


def test_a_cached_search_runs_once_and_is_kept(project: Path) -> None:
    kb = KnowledgeBase(start=project)
    indexes = DocsetIndexes(kb)
    ds = kb.resolve("guide")
    indexes.start()
    try:
        assert indexes.opened()[0].wait(WAIT)
        first = indexes.cached_search(ds, "install")
        assert first is not None  # started in a thread of its own: nobody has to wait for it
        assert first.finished.wait(WAIT)
        again = indexes.cached_search(ds, "install")
        assert again is not None and again.finished.is_set()  # kept: no second search
        assert [r.rel_path for r in again.results() or []] == ["intro.md"]
    finally:
        indexes.close()
    assert indexes.cached_search(ds, "install") is None  # no open index: nothing to answer from


def test_a_docset_with_no_folder_is_refused_with_what_to_do(project: Path) -> None:
    kb = KnowledgeBase(start=project)
    indexes = DocsetIndexes(kb)
    indexes.start()
    try:
        with pytest.raises(Exception, match="has no files yet: its folder .* does not exist"):
            indexes.ensure_current(kb.resolve("empty"))
        assert len(indexes.opened()) == 1
    finally:
        indexes.close()


def test_state_and_progress_give_the_keys_the_mcp_search_tool_sends() -> None:
    assert UpdateProgress("indexing", 3, 10).to_dict() == {"state": "indexing", "files_done": 3, "files_total": 10}
    bare = ServedIndexState(index="docset_x", refreshed=False)
    assert bare.to_dict() == {
        "index": "docset_x",
        "refreshed": False,
        "chunks_embedded": 0,
        "chunks_reused": 0,
        "chunks_deleted": 0,
        "chunks_total": None,
        "seconds": 0.0,
        "age_s": None,
    }
    full = ServedIndexState(index="docset_x", refreshed=True, updating=UpdateProgress("queued", 0, None), error="")
    assert full.to_dict()["updating"] == {"state": "queued", "files_done": 0, "files_total": None}
    assert full.to_dict()["error"] == ""  # an error is sent when set, even empty


@pytest.mark.anyio
async def test_a_first_build_waiting_its_turn_is_reported_by_the_core_and_by_get(project: Path) -> None:
    """While another docset's update holds the CPU (the shared gate), a docset's first build waits: its index
    holds no files, the core says how far it is, and the MCP ``get`` tool says so rather than "not found"."""
    from mdrag.frontends.mcp import KnowledgeTools

    tools = KnowledgeTools(KnowledgeBase(start=project), search_wait=0)
    gate = tools.indexes._gate  # held here, as another docset's update would
    gate.acquire()
    try:
        async with tools.running():
            (entry,) = tools.indexes.opened()
            with anyio.fail_after(WAIT):
                while not entry.keeper.state.queued:  # its update reaches the gate
                    await anyio.sleep(0.01)
            assert entry.first_build() == UpdateProgress("queued", 0, None)
            refused = error(await tools.call("get", {"docset": "guide", "ref": "intro.md"}))
            assert refused.startswith(
                "docset 'guide' is being indexed (waiting for another index's indexing): get reads the files its "
                "index holds, so call it again shortly, or read the file under "
            )
            gate.release()
            assert await anyio.to_thread.run_sync(entry.wait, WAIT)
            assert entry.first_build() is None  # built: get reads its files
            assert "How to install the tool." in ok(await tools.call("get", {"docset": "guide", "ref": "intro.md"}))
    finally:
        if gate.locked():  # the test failed before it let the update go (the keepers have ended)
            gate.release()


def test_a_cached_search_nobody_waits_for_still_runs_and_frees_the_next(project: Path) -> None:
    """A lookup whose caller never waits (its time budget spent before it began) still runs, is kept, and
    lets the next lookup of other words start: the one-at-a-time flag is cleared by the search itself."""
    kb = KnowledgeBase(start=project)
    indexes = DocsetIndexes(kb)
    ds = kb.resolve("guide")
    indexes.start()
    try:
        assert indexes.opened()[0].wait(WAIT)
        abandoned = indexes.cached_search(ds, "install")  # its caller leaves at once
        assert abandoned is not None and abandoned.finished.wait(WAIT)
        later = indexes.cached_search(ds, "usage")  # other words: a new search, not refused as busy
        assert later is not None and later.finished.wait(WAIT) and later.results() is not None
        assert abandoned.results() is not None
    finally:
        indexes.close()
