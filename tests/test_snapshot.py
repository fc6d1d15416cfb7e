"""What searches see while an update runs (mdrag.index.snapshot.Snapshot), without a store."""

from __future__ import annotations

import threading

from mdrag.index.snapshot import Snapshot
from mdrag.retrieval.search import Visible

WAIT = 120  # seconds a test waits for an event that must come, before it fails instead of hanging


def test_a_running_update_stays_invisible_until_it_commits() -> None:
    snap = Snapshot()
    snap.begin((frozenset({"a"}), frozenset({"/docs"})))
    snap.written(["a", "b", "c", "d"])  # "a" was visible already: rewritten, not hidden
    with snap.reading() as before:
        assert before == Visible(frozenset({"a"}), frozenset({"/docs"}), frozenset({"b", "c", "d"}))
    assert snap.commit({"a", "b"}, frozenset({"/more"}), grace_s=0) == 0
    with snap.reading() as after:  # the new ids at once; the folders of both states are filtered
        assert after == Visible(frozenset({"a", "b"}), frozenset({"/docs", "/more"}), frozenset())
    assert snap.generation == 1
    snap.written(["e", "f"])
    with snap.reading() as v:
        assert v.hidden == frozenset({"e", "f"})
    snap.end()  # a failed run: what it wrote stays invisible (the ids filter), no longer hidden by the store
    with snap.reading() as v:
        assert v.hidden == frozenset() and v.ids == frozenset({"a", "b"})


def test_a_commit_waits_for_the_searches_reading_the_state_before_it() -> None:
    snap = Snapshot()
    inside, leave = threading.Event(), threading.Event()

    def search() -> None:
        with snap.reading():
            inside.set()
            leave.wait(WAIT)

    reader = threading.Thread(target=search)
    reader.start()
    assert inside.wait(WAIT)
    assert snap.commit({"x"}, frozenset(), grace_s=0) == 1  # gave up at once: one search still reads
    with snap.reading():  # a search of the new state does not hold the next commit back
        pass
    done: list[int] = []
    committer = threading.Thread(target=lambda: done.append(snap.commit({"y"}, frozenset(), grace_s=WAIT)))
    committer.start()
    leave.set()
    reader.join(WAIT)
    committer.join(WAIT)
    assert done == [0]  # the old state's search ended, and the commit went on


def test_outside_a_run_the_state_follows_its_source_and_a_run_wins_over_it() -> None:
    snap = Snapshot()
    calls: list[str] = []

    def read(ids: set[str]) -> tuple[frozenset[str], frozenset[str]]:
        calls.append("read")
        return frozenset(ids), frozenset({"/docs"})

    snap.follow(("manifest", 1), lambda: read({"a"}))
    snap.follow(("manifest", 1), lambda: read({"stale"}))  # same source: not read again
    assert calls == ["read"] and snap.committed == frozenset({"a"}) and snap.generation == 1
    snap.follow(("manifest", 2), lambda: read({"a", "b"}))  # another process committed
    assert snap.committed == frozenset({"a", "b"}) and snap.generation == 2
    snap.begin((frozenset({"a", "b"}), frozenset({"/docs"})))
    snap.follow(("manifest", 3), lambda: read({"half"}))  # this process's run owns the state
    assert snap.committed == frozenset({"a", "b"})
    snap.commit({"c"}, frozenset({"/docs"}), grace_s=0)
    snap.end()
    assert snap.committed == frozenset({"c"})
    snap.follow("store", lambda: None)  # a transactional store: no filter
    with snap.reading() as v:
        assert v.ids is None


def test_a_run_waits_for_the_searches_that_read_every_chunk_before_it_writes() -> None:
    """Between runs a FAISS search reads with no filter: a run of this process that wrote under it would
    show it chunks not committed (an edited page's old and new chunks together). The run's first write
    waits for it; a search that starts after the run began reads the committed state."""
    snap = Snapshot()
    inside, leave = threading.Event(), threading.Event()

    def search() -> None:
        with snap.reading() as v:
            assert v.ids is None
            inside.set()
            leave.wait(WAIT)

    reader = threading.Thread(target=search)
    reader.start()
    assert inside.wait(WAIT)
    began = threading.Event()
    runner = threading.Thread(target=lambda: (snap.begin((frozenset({"a"}), None), wait_s=WAIT), began.set()))
    runner.start()
    assert not began.wait(0.2), "the run went on while a search read every chunk"
    leave.set()
    assert began.wait(WAIT)
    reader.join(WAIT)
    runner.join(WAIT)
    with snap.reading() as v:
        assert v.ids == frozenset({"a"})
