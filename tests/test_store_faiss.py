"""What only the FAISS store has: its files (SQLite, the saved .faiss index) and what happens when they are damaged."""

from __future__ import annotations

import sqlite3
import uuid
from pathlib import Path

import numpy as np
import pytest

from mdrag.config import load_config
from mdrag.errors import StoreDamagedError, StoreError, StoreUnavailableError
from mdrag.store.faiss import FaissStore
from mdrag.store.faiss import rows as sqlite_rows
from mdrag.store.faiss.index import ef_search
from mdrag.types import Chunk
from tests.conftest import overwrite_middle
from tests.test_store_contract import IDENTITY, bm25_ranking, make_chunks, vectors


def _store(name: str) -> FaissStore:
    return FaissStore.from_config(load_config(), name, IDENTITY, None)


def _filled(name: str) -> tuple[FaissStore, np.ndarray]:
    s = _store(name)
    s.open()
    chunks, vecs = make_chunks(1, 40), vectors(1, 40)
    s.upsert(chunks, vecs)
    s.end_run(set(), set(), whole=True)
    return s, vecs


def test_files_live_in_the_cache_folder(mdrag_home: Path) -> None:
    s, _ = _filled("docs")
    s.close()
    folder = mdrag_home / "cache" / "faiss"
    assert (folder / "docs.sqlite").is_file() and (folder / "docs.faiss").is_file()
    assert not list(folder.glob("*.pkl")) and not list(folder.glob("*.tmp"))


@pytest.mark.parametrize("damage", ["missing", "garbage", "stale"])
def test_a_missing_damaged_or_stale_faiss_file_is_rebuilt_from_sqlite(mdrag_home: Path, damage: str) -> None:
    name = "d" + uuid.uuid4().hex[:8]
    s, vecs = _filled(name)
    before = [h.id for h in s.search(vecs[5], 5)]
    faiss_file = mdrag_home / "cache" / "faiss" / f"{name}.faiss"
    old = faiss_file.read_bytes()
    if damage == "stale":  # a later run whose file was never written (killed between commit and save)
        s.upsert(make_chunks(2, 3), vectors(2, 3))
        s.end_run(set(), set(), whole=False)
    s.close()
    if damage == "missing":
        faiss_file.unlink()
    elif damage == "garbage":
        faiss_file.write_bytes(b"\0" * 100)
    else:
        faiss_file.write_bytes(old)
    s = _store(name)
    assert s.open(create=False)
    try:
        assert s.count() == (43 if damage == "stale" else 40)
        if damage == "stale":
            assert s.search(vectors(2, 3)[1], 1)[0].id == make_chunks(2, 3)[1].id
            assert s.search(vecs[5], 1)[0].id == before[0]
        else:
            assert [h.id for h in s.search(vecs[5], 5)] == before
        assert not s.unchanged_since_last_run()  # the file is not the one the last run wrote
    finally:
        s.close()


def _bm25_texts(n: int) -> list[str]:
    return [f"alpha beta {'gamma ' * (i % 3)}delta{i % 5} word{i}" for i in range(n)]


def _bm25_filled(name: str) -> tuple[FaissStore, list[Chunk], np.ndarray]:
    """A store whose last run wrote 50 chunks, then deleted 10 of them."""
    chunks, vecs = make_chunks(7, 50, texts=_bm25_texts(50)), vectors(7, 50)
    s = _store(name)
    s.open()
    s.upsert(chunks, vecs)
    s.delete_ids([c.id for c in chunks[:10]])
    s.end_run(set(), set(), whole=False)
    return s, chunks, vecs


_QUERY = "gamma delta3 word42 alpha"


def test_a_run_saves_the_bm25_index_and_a_new_process_reads_it_instead_of_every_text(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    name = "b" + uuid.uuid4().hex[:8]
    s, chunks, vecs = _bm25_filled(name)
    want = [(h.id, h.rank_score) for h in s.search(vecs[0], 10, mode="bm25", text=_QUERY)]
    s.close()
    assert (mdrag_home / "cache" / "faiss" / f"{name}.bm25").is_file()
    assert not list((mdrag_home / "cache" / "faiss").glob("*.tmp"))

    def no_rebuild(*args: object) -> None:
        raise AssertionError("the BM25 index was built from SQLite")

    monkeypatch.setattr(sqlite_rows, "bm25_index", no_rebuild)
    s = _store(name)
    assert s.open(create=False)
    try:
        assert [(h.id, h.rank_score) for h in s.search(vecs[0], 10, mode="bm25", text=_QUERY)] == want
        s.upsert(make_chunks(8, 5, texts=["gamma gamma word42"] * 5), vectors(8, 5))  # kept up to date
        s.end_run(set(), set(), whole=False)
        assert {h.id for h in s.search(vecs[0], 5, mode="bm25", text="gamma word42")} == {
            c.id for c in make_chunks(8, 5, texts=["gamma gamma word42"] * 5)
        }
    finally:
        s.close()


@pytest.mark.parametrize("damage", ["missing", "garbage", "stale", "other-rows", "older-version"])
def test_a_missing_damaged_or_stale_bm25_file_is_built_from_sqlite(
    mdrag_home: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    name = "b" + uuid.uuid4().hex[:8]
    s, chunks, vecs = _bm25_filled(name)
    want = [(h.id, h.rank_score) for h in s.search(vecs[0], 10, mode="bm25", text=_QUERY)]
    bm25_file = mdrag_home / "cache" / "faiss" / f"{name}.bm25"
    old = bm25_file.read_bytes()
    if damage in ("stale", "other-rows"):  # a later run's chunks (its file never written, or it is another one)
        more = make_chunks(9, 4, texts=["gamma word42"] * 4)
        s.upsert(more, vectors(9, 4))
        s.end_run(set(), set(), whole=False)
        want = [(h.id, h.rank_score) for h in s.search(vecs[0], 10, mode="bm25", text=_QUERY)]
    s.close()
    if damage == "missing":
        bm25_file.unlink()
    elif damage == "garbage":
        bm25_file.write_bytes(old[:100] + b"\0" * (len(old) - 100))
    elif damage == "stale":
        bm25_file.write_bytes(old)
    elif damage == "other-rows":  # the file its run recorded, holding other rows (as if SQLite went back)
        import sqlite3

        bm25_file.write_bytes(old)
        with sqlite3.connect(mdrag_home / "cache" / "faiss" / f"{name}.sqlite") as db:
            db.execute("UPDATE meta SET value = ? WHERE key = 'bm25_file'", (sqlite_rows.faiss_digest(bm25_file),))
    else:  # an index written before the file existed
        import sqlite3

        bm25_file.unlink()
        with sqlite3.connect(mdrag_home / "cache" / "faiss" / f"{name}.sqlite") as db:
            db.execute("DELETE FROM meta WHERE key = 'bm25_file'")
    s = _store(name)
    assert s.open(create=False)
    try:
        assert [(h.id, h.rank_score) for h in s.search(vecs[0], 10, mode="bm25", text=_QUERY)] == want
    finally:
        s.close()
    if damage != "older-version":
        assert "building the BM25 index from SQLite" in caplog.text


def test_a_damaged_sqlite_file_is_reported_and_set_aside(mdrag_home: Path) -> None:
    s, _ = _filled("docs")
    s.close()
    db = mdrag_home / "cache" / "faiss" / "docs.sqlite"
    db.write_bytes(b"this is not a database" * 100)
    s = _store("docs")
    with pytest.raises(StoreDamagedError, match=r"damaged.*mdrag index --rebuild"):
        s.open()
    moved = s.set_aside()
    assert moved is not None and moved.parent == mdrag_home / "cache" / "damaged"
    assert (moved / "docs.sqlite").read_bytes().startswith(b"this is not")
    assert not db.exists()
    assert s.open() and s.count() == 0
    s.close()


def test_a_garbled_schema_is_named_by_path_and_kind_never_by_its_bytes(mdrag_home: Path) -> None:
    s, _ = _filled("docs")
    s.close()
    db = mdrag_home / "cache" / "faiss" / "docs.sqlite"
    data = bytearray(db.read_bytes())
    at = data.find(b"CREATE TABLE chunks") + len("CREATE TABLE ")
    data[at : at + 27] = b"\x1b[31m\x07\xff\xfe junk \x00\x01 bytes!!"  # a terminal escape in the table's SQL
    db.write_bytes(bytes(data))
    with pytest.raises(StoreDamagedError) as e:
        _store("docs").open()
    msg = str(e.value)
    assert str(db) in msg and "mdrag index --rebuild" in msg, msg
    assert "(its schema is damaged)" in msg or "(its pages are damaged)" in msg, msg
    assert "\x1b" not in msg and "junk" not in msg and "\x07" not in msg, msg


def test_hnsw_from_its_threshold_skips_deleted_chunks_and_filters_stay_exact(
    mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mdrag.store.base import Filter
    from mdrag.store.faiss import store as faiss_store

    monkeypatch.setattr(faiss_store, "_HNSW_MIN", 100)  # the graph from 100 chunks, so the test stays small
    s = _store("big")
    s.open()
    chunks, vecs = make_chunks(3, 300), vectors(3, 300)
    s.upsert(chunks, vecs)
    s.end_run(set(), set(), whole=True)
    assert s._mem.index.hnsw
    gone = {c.id for c in chunks[:40]}
    s.delete_ids(gone)
    s.end_run(set(), set(), whole=False)  # 40 deleted of 260: kept in the graph, skipped
    assert s._mem.index.hnsw and len(s._mem.index.dead) == 40
    s.close()
    s = _store("big")
    assert s.open(create=False)  # from the saved graph, deleted rows and all
    try:
        assert s._mem.index.hnsw and len(s._mem.index.dead) == 40 and s.count() == 260
        for i in (0, 5, 39):  # the nearest chunk to a deleted chunk's vector is never that chunk
            assert gone.isdisjoint(h.id for h in s.search(vecs[i], 10))
        hits = [s.search(v, 1)[0].id for v in vecs[40:90]]
        assert sum(h == c.id for h, c in zip(hits, chunks[40:90])) >= 48  # approximate, but close to exact
        where = Filter(tags=("odd",))
        live = [i for i in range(40, 300) if where.matches({"metadata": chunks[i].metadata})]
        q = vectors(33, 1)[0]
        sims = vecs[live] @ q
        exact = [chunks[live[j]].id for j in np.argsort(-sims)[:10]]
        assert [h.id for h in s.search(q, 10, where=where)] == exact
        hidden = frozenset(chunks[live[j]].id for j in np.argsort(-sims)[:5])  # an update's uncommitted rows
        walked = {h.id for h in s.search(q, 20, hidden=hidden)}  # the graph's walk skips them, and the dead
        assert walked and walked.isdisjoint(hidden | gone), walked & (hidden | gone)
    finally:
        s.close()


def test_a_run_ended_by_another_thread_lets_the_next_writer_in() -> None:
    import threading

    s = _store("threads")
    s.open()
    writer = threading.Thread(target=s.upsert, args=(make_chunks(4, 5), vectors(4, 5)))
    writer.start()
    writer.join()
    s.end_run(set(), set(), whole=True)  # in this thread: the writers' lock is released all the same
    other = _store("threads")
    other.lock_wait_s = 0.5
    other.open()
    try:
        other.upsert(make_chunks(5, 2), vectors(5, 2))
        other.end_run(set(), set(), whole=False)
        assert other.count() == 7
    finally:
        other.close()
        s.close()


def test_a_failed_write_leaves_sqlite_and_memory_as_they_were(monkeypatch: pytest.MonkeyPatch) -> None:
    s, vecs = _filled("fail")
    chunks = make_chunks(1, 40)
    edited = [Chunk(**{**c.__dict__, "text": "edited"}) for c in chunks[:5]]
    real = s._add_memory

    def broken(*args: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(s, "_add_memory", broken)
    with pytest.raises(OSError):
        s.upsert(edited, vecs[:5])  # the old rows were deleted, the new ones written: all undone
    monkeypatch.setattr(s, "_add_memory", real)
    try:
        assert s.count() == 40
        hit = s.search(vecs[2], 1)[0]
        assert hit.id == chunks[2].id and hit.text == chunks[2].text
        s.end_run(set(), set(), whole=False)
        assert s.count() == 40 and s.search(vecs[3], 1)[0].text == chunks[3].text
    finally:
        s.close()


def test_a_folder_it_may_not_write_is_searched_read_only_and_never_written(monkeypatch: pytest.MonkeyPatch) -> None:
    """A read-only home or mount: SQLite cannot make its shared-memory file there, so the store opens
    its file read-only (immutable) to search it, and an indexing run is refused with the reason."""
    s, vecs = _filled("ro")
    before = [h.id for h in s.search(vecs[5], 5)]
    s.close()
    monkeypatch.setattr(sqlite_rows, "writable", lambda folder, path: False)
    s = _store("ro")
    with pytest.raises(StoreUnavailableError, match="is read-only: mdrag can search it but not index into it"):
        s.open(create=True)
    assert s.open(create=False)
    try:
        assert s.count() == 40 and [h.id for h in s.search(vecs[5], 5)] == before
        with pytest.raises(StoreUnavailableError, match="read-only"):
            s.upsert(make_chunks(2, 1), vectors(2, 1))
        assert s.count() == 40
    finally:
        s.close()


def test_a_full_disk_is_said_plainly_and_what_was_committed_stays() -> None:
    s, vecs = _filled("full")
    pages = s.db.execute("PRAGMA page_count").fetchone()[0]
    s.db.execute(f"PRAGMA max_page_count = {pages + 1}")  # as if the disk had room for one more page
    big = [Chunk(**{**c.__dict__, "text": "words " * 4000}) for c in make_chunks(2, 20)]
    try:
        with pytest.raises(StoreError, match=r"the disk is full \(database or disk is full\)\. Free some space"):
            s.upsert(big, vectors(2, 20))
        assert s.count() == 40 and s.search(vecs[5], 1)[0].id == make_chunks(1, 40)[5].id
        s.db.execute("PRAGMA max_page_count = 1073741823")  # space freed: the run goes on
        s.upsert(big, vectors(2, 20))
        s.end_run(set(), set(), whole=False)
        assert s.count() == 60
    finally:
        s.close()


@pytest.mark.parametrize("search_between", [True, False], ids=["searched-between-batches", "first-search-at-the-end"])
def test_bm25_scores_use_collection_wide_statistics_after_updates_and_deletes(search_between: bool) -> None:
    texts = [f"alpha beta {'gamma ' * (i % 3)}delta{i % 5} word{i}" for i in range(60)]
    chunks, vecs = make_chunks(6, 60, texts=texts), vectors(6, 60)
    s = _store("bm25")
    s.open()
    try:
        for i in range(0, 60, 7):  # small batches, as small updates write them: one set of statistics all the same
            s.upsert(chunks[i : i + 7], vecs[i : i + 7])
            if search_between:  # each batch becomes its own segment
                s.search(vecs[0], 1, mode="bm25", text="alpha")
        s.delete_ids([c.id for c in chunks[:10]])
        s.end_run(set(), set(), whole=False)
        query = ["gamma", "delta3", "word42"]
        want = bm25_ranking(chunks[10:], query, 8)  # statistics of the live chunks only
        got = s.search(vecs[0], 8, mode="bm25", text=" ".join(query))
        assert [h.rank_score for h in got] == pytest.approx([w for w, _ in want], rel=1e-5)
        assert got[0].id == want[0][1]
    finally:
        s.close()


def test_a_reader_in_another_process_sees_ended_runs_only() -> None:
    from tests.test_store_contract import _child

    proc = _child(("faiss", None), "shared")  # one run ended (chunks of seed 40), a second one written, not ended
    reader = _store("shared")
    try:
        assert reader.open(create=False)
        ended, pending = make_chunks(40, 30), make_chunks(41, 30)
        assert reader.all_ids() == {c.id for c in ended}
        assert reader.search(vectors(41, 30)[0], 1)[0].id != pending[0].id
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ended"
        assert reader.count() == 60
        assert reader.search(vectors(41, 30)[0], 1)[0].id == pending[0].id
        assert reader.search(vectors(41, 30)[0], 1, mode="bm25", text="seed 41")[0].id in {c.id for c in pending}
    finally:
        reader.close()
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def test_a_run_with_nothing_to_do_answers_without_opening_the_store(
    mdrag_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mdrag.index import Index

    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# Alpha\n\nThe alpha page talks about gardens.\n")
    config = load_config(overrides={"store.backend": "faiss"})
    with Index(config) as index:
        index.update([docs])
    fresh = _store(config["index"])
    assert fresh.unchanged_since_last_run()  # answered from SQLite without opening (and loading) the store

    def no_open(*args: object, **kwargs: object) -> bool:
        raise AssertionError("a run with nothing to do opened the store")

    monkeypatch.setattr(FaissStore, "open", no_open)
    with Index(config) as index:
        assert index.update([docs]).chunks_embedded == 0
    monkeypatch.undo()
    fresh.faiss_path.write_bytes(fresh.faiss_path.read_bytes())  # the same bytes: the file the last run wrote
    assert fresh.unchanged_since_last_run()
    overwrite_middle(fresh.faiss_path)  # size, time and inode kept: not the file the last run wrote
    assert not fresh.unchanged_since_last_run()


def test_a_store_in_a_relative_folder_answers_before_opening(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`make demo` runs with MDRAG_HOME=.mdrag-demo: the read-only look at SQLite needs a file URI."""
    monkeypatch.chdir(tmp_path)
    s = FaissStore("relative/faiss", "rel", IDENTITY, None)
    s.open()
    s.upsert(make_chunks(7, 3), vectors(7, 3))
    s.end_run(set(), set(), whole=True)
    s.close()
    again = FaissStore("relative/faiss", "rel", IDENTITY, None)
    assert again.unchanged_since_last_run()
    monkeypatch.chdir(tmp_path / "relative")  # the process moves: the store's files stay where they were
    assert again.unchanged_since_last_run() and again.open(create=False) and again.count() == 3
    again.close()


def test_the_hnsw_walk_widens_with_the_graph() -> None:
    """ef 64 held recall@10 0.99 at 100,000 chunks but 0.85 at a million (benchmarks/hnsw_ef.py): past
    100,000 the walk widens, to about 255 at a million (recall 0.989)."""
    sizes = [20_000, 100_000, 200_000, 1_000_000, 5_000_000]
    efs = [ef_search(n) for n in sizes]
    assert efs[:2] == [64, 64] and efs == sorted(efs) and len(set(efs[1:])) == 4
    assert 250 <= ef_search(1_000_000) <= 300


def test_a_writer_waiting_for_another_process_does_not_hold_up_searches() -> None:
    """While this process's writer waits for another process's run (its lock), a search in this process
    answers from what was committed; the writer goes on once the other run ends. (A second `mdrag mcp`
    on the same MDRAG_HOME answered each search after the 10 s the writer waited.)"""
    import threading
    import time

    import filelock

    s, vecs = _filled("waits")
    s.lock_wait_s = 60
    other_run = filelock.FileLock(str(s.folder / "waits.lock"))  # as another process's writer holds it
    other_run.acquire()
    writer = threading.Thread(target=s.upsert, args=(make_chunks(7, 3), vectors(7, 3)))
    found: list[int] = []
    searcher = threading.Thread(target=lambda: found.append(len(s.search(vecs[0], 5))))
    try:
        writer.start()
        time.sleep(0.3)  # the writer is waiting by now (were it not, the search still must answer)
        searcher.start()
        searcher.join(30)
        assert found == [5] and writer.is_alive(), "the search answered while the writer still waited"
    finally:
        other_run.release()
        writer.join(30)
        searcher.join(30)
    s.end_run(set(), set(), whole=False)
    assert s.count() == 43
    s.close()


def test_a_damaged_stored_vector_is_never_reused_for_a_new_chunk_of_the_same_text(mdrag_home: Path) -> None:
    """The indexer reuses stored vectors by content hash: a vector swapped with another row's (a unit vector,
    so only its digest tells) must not be handed to a new chunk, which would record it as sound."""
    s, vecs = _filled("reuse")
    chunks = make_chunks(1, 40)
    s.close()
    with sqlite3.connect(mdrag_home / "cache" / "faiss" / "reuse.sqlite") as db:
        (a, va), (b, vb) = db.execute("SELECT n, vector FROM chunks ORDER BY n LIMIT 2").fetchall()
        db.executemany("UPDATE chunks SET vector = ? WHERE n = ?", [(vb, a), (va, b)])
    s = _store("reuse")
    assert s.open(create=False)
    try:
        found = s.vectors_by_hash([c.content_hash for c in chunks[:3]])
        assert found.keys() == {chunks[2].content_hash}, "the swapped ones are embedded again"
        assert np.allclose(found[chunks[2].content_hash], vecs[2])
    finally:
        s.close()
