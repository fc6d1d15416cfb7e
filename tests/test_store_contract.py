"""The store contract (mdrag/store/base.py), held on every engine: a Milvus Lite file, a Milvus server
(`milvus-lite server` on loopback), the FAISS store, and any other registered backend (a third party's, where
it is installed: tests/test_plugins.py runs these tests on a toy one).

Each test uses the Store interface only, on small synthetic chunks with random
unit vectors, and checks results against a reference computed here: exact
top-k with numpy, and :meth:`Filter.matches` for which chunks a filter passes.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mdrag import plugins
from mdrag.config import load_config
from mdrag.errors import ConfigError, ModelMismatchError, StoreInUseError
from mdrag.store import store_backends
from mdrag.store.base import Filter, Store
from mdrag.types import Chunk

ROOT = Path(__file__).resolve().parents[1]
DIM = 16
IDENTITY = {"model": "test:contract", "dimension": DIM}
# Every registered store backend is held to the contract (one engine, named as the backend), Milvus on two.
_MILVUS_ENGINES = {
    "lite": pytest.param("lite", marks=pytest.mark.slow),
    "server": pytest.param("server", marks=pytest.mark.slow),
}
_ENGINES_OF = {"milvus": list(_MILVUS_ENGINES.values())}
ENGINES = [engine for backend in plugins.names(plugins.STORES) for engine in _ENGINES_OF.get(backend, [backend])]


def open_engine(
    engine: str,
    milvus_uri: str | None,
    name: str,
    identity: dict[str, Any] | None = None,
    prepare_text: Any = None,
    create: bool = True,
    replace_mismatch: bool = False,
) -> Store:
    """The store of index ``name`` on ``engine``, built as mdrag builds it (``from_config``), opened."""
    config = load_config({"milvus_uri": milvus_uri} if milvus_uri else {})
    backend = store_backends()["milvus" if engine in _MILVUS_ENGINES else engine]
    store: Store = backend.store(config, name, identity or IDENTITY, prepare_text)
    if not store.open(create=create, replace_mismatch=replace_mismatch):
        raise LookupError(f"index {name} does not exist")
    return store


def make_chunks(seed: int, n: int, root: str = "/docs/a", texts: list[str] | None = None) -> list[Chunk]:
    """``n`` chunks with hex ids and content hashes derived from ``seed``, spread over three files."""
    out = []
    for i in range(n):
        key = hashlib.sha256(f"{seed}:{root}:{i}".encode()).hexdigest()
        rel = f"{['guide', 'ref', 'misc'][i % 3]}/page{i % 5}.md"
        out.append(
            Chunk(
                id=key[:32],
                text=texts[i] if texts else f"chunk {i} of seed {seed} word{i % 7} common",
                context=f"Page {i % 5} > Part {i}",
                path=f"{root}/{rel}",
                rel_path=rel,
                root=root,
                heading_path=[f"Page {i % 5}", f"Part {i}"],
                level=2,
                position=i,
                content_hash=key,
                page=i + 1 if i % 2 else None,
                line_start=i + 1,
                line_end=i + 3,
                metadata={"tags": ["even" if i % 2 == 0 else "odd", f"t{i % 4}"], "title": f"Page {i % 5}"},
            )
        )
    return out


def vectors(seed: int, n: int) -> np.ndarray:
    v = np.random.default_rng(seed).normal(size=(n, DIM)).astype(np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def row_of(c: Chunk) -> dict[str, Any]:
    return {"path": c.path, "rel_path": c.rel_path, "root": c.root, "metadata": c.metadata}


@pytest.fixture(params=ENGINES)
def engine(request: pytest.FixtureRequest) -> tuple[str, str | None]:
    """(engine, milvus_uri): each contract test runs on every engine."""
    if request.param == "server":
        return "server", str(request.getfixturevalue("milvus_server"))
    return request.param, None


@pytest.fixture
def store(engine: tuple[str, str | None]) -> Any:
    s = open_engine(engine[0], engine[1], "c" + uuid.uuid4().hex[:12])
    yield s
    s.close()


def _exact(vecs: np.ndarray, ids: list[str], q: np.ndarray, k: int) -> list[tuple[str, float]]:
    sims = vecs @ q
    order = np.argsort(-sims, kind="stable")[:k]
    return [(ids[i], float(sims[i])) for i in order]


# -- writes and reads ---------------------------------------------------------


def test_upsert_replaces_by_id_and_delete_ignores_unknown_ids(store: Any) -> None:
    a, b = make_chunks(1, 12, "/docs/a"), make_chunks(2, 9, "/docs/b")
    va, vb = vectors(1, 12), vectors(2, 9)
    store.upsert(a, va)
    store.upsert(b, vb)
    assert store.count() == 21 and store.count(["/docs/a"]) == 12 and store.count(["/docs/b", "/nope"]) == 9
    assert store.all_ids() == {c.id for c in a + b}
    assert store.all_ids(["/docs/b"]) == {c.id for c in b}
    assert store.id_paths(["/docs/a"]) == {c.id: c.path for c in a}

    # the same ids again, with other text and vectors: replaced, not duplicated
    edited = [Chunk(**{**c.__dict__, "text": f"edited {c.position}"}) for c in a[:4]]
    store.upsert(edited, vectors(3, 4))
    assert store.count() == 21
    hit = store.search(vectors(3, 4)[2], 1)[0]
    assert hit.id == a[2].id and hit.text == "edited 2"

    store.delete_ids([c.id for c in b[:5]] + ["f" * 32])
    assert store.count() == 16 and store.count(["/docs/b"]) == 4
    assert store.all_ids() == {c.id for c in a + b[5:]}
    store.end_run({c.id for c in edited}, {c.id for c in a + b[5:]}, whole=False)
    assert store.count() == 16


def test_rows_carry_every_field(store: Any) -> None:
    chunks = make_chunks(4, 6)
    vecs = vectors(4, 6)
    store.upsert(chunks, vecs)
    for c, v in zip(chunks, vecs):
        row = store.search(v, 1)[0]
        assert row.id == c.id
        assert row.text == c.text and row.context == c.context
        assert (row.path, row.rel_path, row.root) == (c.path, c.rel_path, c.root)
        assert row.headings == c.heading_path and row.level == c.level and row.position == c.position
        assert row.page == (c.page or 0) and (row.line_start, row.line_end) == (c.line_start, c.line_end)
        assert row.content_hash == c.content_hash and row.metadata == c.metadata


def test_roots_are_the_folders_of_the_stored_chunks(store: Any) -> None:
    assert store.roots() == []
    odd = '/docs/it\'s "odd"] or root'  # quotes and brackets are data
    for root in ("/docs/b", "/docs/a", odd):
        store.upsert(make_chunks(3, 4, root), vectors(3, 4))
    assert store.roots() == sorted(["/docs/a", "/docs/b", odd])
    store.delete_ids(c.id for c in make_chunks(3, 4, "/docs/b"))
    assert store.roots() == sorted(["/docs/a", odd])


def test_vectors_by_hash_returns_the_stored_vectors(store: Any) -> None:
    chunks, vecs = make_chunks(5, 8), vectors(5, 8)
    store.upsert(chunks, vecs)
    found = store.vectors_by_hash([chunks[1].content_hash, chunks[6].content_hash, "0" * 64])
    assert set(found) == {chunks[1].content_hash, chunks[6].content_hash}
    np.testing.assert_allclose(found[chunks[6].content_hash], vecs[6], atol=1e-6)


def test_search_texts_reads_every_text_or_a_share_by_id(engine: tuple[str, str | None]) -> None:
    from mdrag.stemming import stemmer

    stem = stemmer()
    s = open_engine(engine[0], engine[1], "c" + uuid.uuid4().hex[:12], prepare_text=stem)
    try:
        chunks = make_chunks(6, 40)
        s.upsert(chunks, vectors(6, 40))
        assert sorted(s.search_texts()) == sorted(stem(c.embed_text) for c in chunks)
        share = [stem(c.embed_text) for c in chunks if c.id[0] in "0123"]
        assert sorted(s.search_texts(4)) == sorted(share)
    finally:
        s.close()


# -- search ---------------------------------------------------------------------


def test_dense_search_is_exact_and_scores_are_cosines(store: Any) -> None:
    chunks, vecs = make_chunks(7, 120), vectors(7, 120)
    store.upsert(chunks, vecs)
    ids = [c.id for c in chunks]
    for q in vectors(70, 5):
        hits = store.search(q, 10)
        exact = _exact(vecs, ids, q, 10)
        assert [h.id for h in hits] == [i for i, _ in exact]
        for h, (_, cos) in zip(hits, exact):
            assert h.score == pytest.approx(cos, abs=1e-4)
            assert h.rank_score == pytest.approx(cos, abs=1e-4)
    assert len(store.search(vecs[0], 500)) == 120


def test_dense_search_after_a_run_is_exact_at_the_depths_search_asks_for(engine: tuple[str, str | None]) -> None:
    """On the same chunks, Milvus Lite and FAISS gave different dense lists (and so different
    hybrid ones): FAISS ranks exactly below 20,000 chunks, and Milvus Lite's HNSW walk of 64 missed
    chunks of the exact top 40 (the rows a search of k 10 asks for) and top 120 (a hybrid search's
    dense list). A run's chunks are searched once sealed, as a reopened index is (Milvus Lite: the
    segment's HNSW graph)."""
    name = "c" + uuid.uuid4().hex[:12]
    chunks, vecs = make_chunks(21, 2000), vectors(21, 2000)
    ids = [c.id for c in chunks]
    s = open_engine(engine[0], engine[1], name)
    s.upsert(chunks, vecs)
    s.end_run(set(ids), set(ids), whole=True)
    s.close()
    s = open_engine(engine[0], engine[1], name, create=False)
    try:
        for q in vectors(210, 20):
            for k in (10, 40, 120):
                assert [h.id for h in s.search(q, k)] == [i for i, _ in _exact(vecs, ids, q, k)], k
    finally:
        s.close()


def test_bm25_search_ranks_by_the_words_and_scores_by_cosine(store: Any) -> None:
    texts = [f"filler text number {i} about nothing in particular" for i in range(30)]
    texts[7] = "the zebra configuration option sets the zebra stripes"
    texts[19] = "a zebra appears once here"
    texts[23] = "configuration of many other things, in a longer sentence than the others"
    chunks, vecs = make_chunks(8, 30, texts=texts), vectors(8, 30)
    store.upsert(chunks, vecs)
    q = vectors(80, 1)[0]
    hits = store.search(q, 5, mode="bm25", text="zebra configuration")
    assert [h.id for h in hits] == [chunks[7].id, chunks[19].id, chunks[23].id]  # only chunks with the words
    assert hits[0].rank_score > hits[1].rank_score > hits[2].rank_score > 0
    by_id = {c.id: v for c, v in zip(chunks, vecs)}
    for h in hits:
        assert h.score == pytest.approx(float(by_id[h.id] @ q), abs=1e-4)
    assert store.search(q, 5, mode="bm25", text="nonexistentword") == []
    with pytest.raises(ValueError, match="mode"):
        store.search(q, 5, mode="sparse")


def bm25_ranking(chunks: list[Chunk], query: list[str], n: int) -> list[tuple[float, str]]:
    """The reference: the ``n`` best (score, id) by Okapi BM25 with k1 1.5, b 0.75 and statistics over
    ``chunks`` (their embedded text split into lowercase words), as Milvus Lite scores one segment."""
    import math
    import re
    from collections import Counter

    docs = [Counter(re.findall(r"\w+", c.embed_text.lower())) for c in chunks]
    avgdl = sum(sum(d.values()) for d in docs) / len(docs)

    def bm25(doc: Counter[str]) -> float:
        total = 0.0
        for term in query:
            df = sum(1 for d in docs if term in d)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            tf, dl = doc[term], sum(doc.values())
            total += idf * tf * 2.5 / (tf + 1.5 * (0.25 + 0.75 * dl / avgdl)) if tf else 0.0
        return total

    return sorted(((bm25(d), c.id) for d, c in zip(docs, chunks)), reverse=True)[:n]


def test_bm25_scores_are_the_same_formula_on_every_engine(store: Any) -> None:
    """Okapi BM25 with k1 1.5, b 0.75 and collection-wide statistics, as Milvus Lite scores (one segment).

    The FAISS store said it used Milvus's k1 of 1.2; Milvus Lite scores with 1.5, so the two stores
    ranked differently (SciFact BM25 nDCG@10 0.6663 against 0.6706). The formula is part of the contract, not
    only the order it gives: weighted fusion mixes the scores themselves (Store.search says why); a backend
    whose engine scores otherwise ranks with mdrag.store.bm25.Bm25.
    """
    texts = [f"alpha {'beta ' * (i % 4)}gamma{i % 3} {'filler ' * (i % 9)}word{i}" for i in range(40)]
    chunks, vecs = make_chunks(9, 40, texts=texts), vectors(9, 40)
    store.upsert(chunks, vecs)
    store.end_run(set(), {c.id for c in chunks}, whole=True)
    for query in (["beta"], ["beta", "gamma1"], ["filler", "word7", "beta"]):
        want = bm25_ranking(chunks, query, 10)
        got = store.search(vecs[0], 10, mode="bm25", text=" ".join(query))
        assert [h.rank_score for h in got] == pytest.approx([w for w, _ in want], rel=1e-4)


FILTERS = [
    Filter(path_prefix="guide/"),
    Filter(path_prefix="ref/page1"),
    Filter(path_prefix="/docs/b/misc/"),
    Filter(tags=("odd",)),
    Filter(tags=("even", "t2")),
    Filter(root="/docs/b"),
    Filter(path_prefix="ref/", tags=("t1",), root="/docs/a"),
    Filter(path_prefix="nothing/"),
    # and the files named (those whose copies pass: mdrag.retrieval.copies), the tags still applied
    Filter(path_prefix="guide/", paths=("/docs/b/ref/page1.md", "/docs/a/misc/page2.md")),
    Filter(root="/docs/a", tags=("odd",), paths=("/docs/b/guide/page0.md",)),
]


@pytest.mark.parametrize("where", FILTERS, ids=lambda f: repr(f)[7:-1])
def test_filtered_search_equals_exact_filtered_search(store: Any, where: Filter) -> None:
    a, b = make_chunks(9, 150, "/docs/a"), make_chunks(10, 150, "/docs/b")
    vecs = np.vstack([vectors(9, 150), vectors(10, 150)])
    store.upsert(a + b, vecs)
    passing = [i for i, c in enumerate(a + b) if where.matches(row_of(c))]
    ids = [(a + b)[i].id for i in passing]
    for q in vectors(90, 3):
        hits = store.search(q, 10, where=where)
        exact = _exact(vecs[passing], ids, q, 10) if passing else []
        assert [h.id for h in hits] == [i for i, _ in exact]
        assert [h.score for h in hits] == pytest.approx([s for _, s in exact], abs=1e-4)
        words = store.search(q, 500, where=where, mode="bm25", text="common")  # a word every chunk has
        assert sorted(h.id for h in words) == sorted(ids)


def test_hidden_chunks_are_left_out_where_the_store_hides_them(store: Any) -> None:
    """A running update's uncommitted chunks, given as ``hidden``: a store that ``hides`` ranks only the
    others (dense, BM25, filtered), so searches need not fetch and drop them; another ranks them all."""
    chunks, vecs = make_chunks(13, 200), vectors(13, 200)
    store.upsert(chunks, vecs)
    hidden = frozenset(c.id for c in chunks[::3])
    shown = [i for i, c in enumerate(chunks) if c.id not in hidden] if store.hides else list(range(200))
    ids = [chunks[i].id for i in shown]
    where = Filter(tags=("odd",))
    passing = [i for i in shown if where.matches(row_of(chunks[i]))]
    for q in vectors(130, 3):
        hits = store.search(q, 10, hidden=hidden)
        assert [h.id for h in hits] == [i for i, _ in _exact(vecs[shown], ids, q, 10)]
        hits = store.search(q, 10, where=where, hidden=hidden)
        assert [h.id for h in hits] == [i for i, _ in _exact(vecs[passing], [chunks[i].id for i in passing], q, 10)]
        words = store.search(q, 500, mode="bm25", text="common", hidden=hidden)  # a word every chunk has
        assert sorted(h.id for h in words) == sorted(ids)
    grown = hidden | {chunks[1].id, "not-a-stored-id"}  # a run writes more: the set grows
    if store.hides:
        assert chunks[1].id not in {h.id for h in store.search(vecs[1], 5, hidden=grown)}
    assert store.search(vecs[1], 1, hidden=frozenset())[0].id == chunks[1].id  # the run ended: shown again


def test_a_filter_on_a_small_file_among_closer_chunks_loses_nothing(store: Any) -> None:
    # As on the otel docs: a few chunks of one file, many closer chunks elsewhere.
    far, near = make_chunks(11, 12, "/docs/small"), make_chunks(12, 400, "/docs/big")
    q = vectors(110, 1)[0]
    v_far = vectors(11, 12) - 0.5 * q  # every chunk of the small file further from q than most others
    v_near = vectors(12, 400) + 0.5 * q
    v_far /= np.linalg.norm(v_far, axis=1, keepdims=True)
    v_near /= np.linalg.norm(v_near, axis=1, keepdims=True)
    store.upsert(far + near, np.vstack([v_far, v_near]).astype(np.float32))
    hits = store.search(q, 10, where=Filter(root="/docs/small"))
    assert [h.id for h in hits] == [i for i, _ in _exact(v_far, [c.id for c in far], q, 10)]


HOSTILE = ['a"b', "50%", "a_b", "back\\slash", "nul\x00x", "ünï cödé/日本", "' OR 1=1 --", '") or (id != "', "\n"]


def test_hostile_filter_values_are_data(store: Any) -> None:
    # Folders and tags whose names hold each value, and near misses that a wildcard or injection would match.
    names = [*HOSTILE, "50x", "axb", "ab", "back"]
    chunks: list[Chunk] = []
    for j, name in enumerate(names):
        for c in make_chunks(20 + j, 2, root=f"/docs/{name}"):
            chunks.append(Chunk(**{**c.__dict__, "rel_path": f"{name}/{c.rel_path}", "metadata": {"tags": [name]}}))
    vecs = vectors(20, len(chunks))
    try:
        store.upsert(chunks, vecs)
    except ConfigError:
        chunks = [c for c in chunks if "\x00" not in c.root]  # a backend that cannot store NUL says so
        vecs = vectors(20, len(chunks))
        store.upsert(chunks, vecs)
    q = vecs[0]
    for value in HOSTILE:
        for where in (Filter(path_prefix=value), Filter(path_prefix=f"/docs/{value}"), Filter(tags=(value,)),
                      Filter(root=f"/docs/{value}")):  # fmt: skip
            want = {c.id for c in chunks if where.matches(row_of(c))}
            try:
                got = {h.id for h in store.search(q, len(chunks), where=where)}
            except ConfigError:
                continue  # refused with a clear error: allowed
            assert got == want, (value, where)
    assert store.count() == len(chunks)


# -- life cycle -------------------------------------------------------------------


def test_reopen_keeps_everything(engine: tuple[str, str | None]) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    with pytest.raises(LookupError):
        open_engine(engine[0], engine[1], name, create=False)
    s = open_engine(*engine, name)
    chunks, vecs = make_chunks(30, 25), vectors(30, 25)
    s.upsert(chunks, vecs)
    s.end_run({c.id for c in chunks}, {c.id for c in chunks}, whole=True)
    s.close()
    s = open_engine(*engine, name, create=False)
    try:
        assert s.count() == 25 and s.all_ids() == {c.id for c in chunks}
        assert s.search(vecs[4], 1)[0].id == chunks[4].id
        assert s.search(vecs[4], 3, mode="bm25", text="word4")[0].id in {c.id for c in chunks if "word4" in c.text}
    finally:
        s.close()


def test_another_model_is_refused_or_replaced(engine: tuple[str, str | None]) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    s = open_engine(*engine, name)
    s.upsert(make_chunks(31, 5), vectors(31, 5))
    s.end_run(set(), set(), whole=True)
    s.close()
    other = {"model": "test:other", "dimension": 8}
    with pytest.raises(ModelMismatchError, match="rebuild|Rebuild"):
        open_engine(*engine, name, identity=other)
    with pytest.raises(ModelMismatchError, match=r"\(16-d, int8\)"):  # the same model at another precision
        open_engine(*engine, name, identity={**IDENTITY, "precision": "int8"})
    open_engine(*engine, name, identity={**IDENTITY, "precision": "fp32"}).close()  # fp32: what none names
    s = open_engine(*engine, name, identity=other, replace_mismatch=True)
    try:
        assert s.count() == 0
        s.upsert(make_chunks(32, 3), np.eye(3, 8, dtype=np.float32))
        assert s.count() == 3
    finally:
        s.close()


def test_another_reader_sees_each_ended_run(engine: tuple[str, str | None]) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    writer = open_engine(*engine, name)
    chunks, vecs = make_chunks(33, 10), vectors(33, 10)
    writer.upsert(chunks[:6], vecs[:6])
    writer.end_run(set(), set(), whole=False)
    reader = open_engine(*engine, name, create=False)
    try:
        assert reader.count() == 6
        writer.upsert(chunks[6:], vecs[6:])
        writer.delete_ids([chunks[0].id])
        writer.end_run(set(), set(), whole=False)
        assert reader.all_ids() == {c.id for c in chunks[1:]}
        assert reader.search(vecs[8], 1)[0].id == chunks[8].id
        assert chunks[0].id not in {h.id for h in reader.search(vecs[0], 10)}
        words = reader.search(vecs[8], 5, mode="bm25", text="word1")  # chunks 1 and 8: i % 7 == 1
        assert {h.id for h in words} == {chunks[1].id, chunks[8].id}
    finally:
        reader.close()
        writer.close()


def test_unchanged_since_last_run_is_false_after_a_write(engine: tuple[str, str | None]) -> None:
    s = open_engine(*engine, "c" + uuid.uuid4().hex[:12])
    try:
        s.upsert(make_chunks(34, 4), vectors(34, 4))
        s.end_run(set(), set(), whole=True)
        if engine[0] == "faiss":
            assert s.unchanged_since_last_run()
        s.upsert(make_chunks(35, 2), vectors(35, 2))
        assert not s.unchanged_since_last_run()
    finally:
        s.close()


# -- other processes ----------------------------------------------------------------

_CHILD = """
import json, sys, time
from tests.test_store_contract import make_chunks, open_engine, vectors
args = json.loads(sys.argv[1])
s = open_engine(args["engine"], args["uri"], args["name"])
if args.get("lock_wait_s") is not None and hasattr(s, "lock_wait_s"):
    s.lock_wait_s = args["lock_wait_s"]
s.upsert(make_chunks(40, 30), vectors(40, 30))
s.end_run(set(), set(), whole=True)
s.upsert(make_chunks(41, 30), vectors(41, 30))  # a second run, never ended
print("written", flush=True)
sys.stdin.readline()  # killed here, or told to end the run
s.end_run(set(), set(), whole=False)
s.close()
print("ended", flush=True)
"""


def _child(engine: tuple[str, str | None], name: str) -> subprocess.Popen[str]:
    # the path this process was given too: a third party's backend is installed there
    path = [str(ROOT), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path), "HF_HUB_OFFLINE": "1"}
    args = json.dumps({"engine": engine[0], "uri": engine[1], "name": name})
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if line.strip() != "written":
        proc.kill()
        pytest.fail(f"the writer process failed: {line!r}, exit {proc.wait()}")
    return proc


def test_a_writer_killed_mid_run_leaves_a_store_that_opens_and_repairs(engine: tuple[str, str | None]) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    proc = _child(engine, name)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    first, second = {c.id for c in make_chunks(40, 30)}, {c.id for c in make_chunks(41, 30)}
    s = open_engine(*engine, name)
    try:
        ids = s.all_ids()
        assert first <= ids <= first | second  # the ended run is all there; the killed one in part or not at all
        assert s.count() == len(ids)
        s.delete_ids(ids - first)  # the indexer's repair: ids the manifest does not list go
        s.end_run(set(), first, whole=False)
        assert s.all_ids() == first and s.count() == 30
        assert s.search(vectors(40, 30)[3], 1)[0].id == make_chunks(40, 30)[3].id
    finally:
        s.close()


def test_a_second_writer_is_refused_or_serialized(engine: tuple[str, str | None]) -> None:
    name = "c" + uuid.uuid4().hex[:12]
    proc = _child(engine, name)
    mine = make_chunks(42, 5)
    s = None
    try:
        try:
            s = open_engine(*engine, name)
            if hasattr(s, "lock_wait_s"):
                s.lock_wait_s = 0.5  # FAISS: wait for the other run this long, then refuse
            s.upsert(mine, vectors(42, 5))
            refused = False
        except StoreInUseError as e:
            assert "another process" in str(e)
            refused = True
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ended"
        assert proc.wait(60) == 0
        if refused:  # the other run is over: this one may write now
            s = s or open_engine(*engine, name)
            s.upsert(mine, vectors(42, 5))
        assert s is not None
        s.end_run(set(), set(), whole=False)
        expected = {c.id for c in make_chunks(40, 30) + make_chunks(41, 30) + mine}
        assert s.all_ids() == expected and s.count() == 65
    finally:
        if s is not None:
            s.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
