"""Damage that passes as health (issue 37, points 4 to 6), through the real `python -m mdrag` with the
real model on the default store (FAISS for a new index): what the store holds is never served damaged
without a word, `status --verify` names it, and the next `mdrag index` repairs it.
The same cases with a small test embedder, and on Milvus Lite: tests/test_damage.py."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from tests.faults.harness import corpus, mdrag


@pytest.fixture
def indexed(tmp_path: Path, shared_data: Path, home: Path) -> Path:
    docs = corpus(tmp_path / "docs", shared_data, n=12, step=40)
    p = mdrag(home, "index", str(docs), "-q")
    assert p.returncode == 0, p.stderr
    return home


def _search(home: Path) -> list[dict[str, str]]:
    p = mdrag(home, "search", "front matter", "-k", "50", "--threshold", "0", "--mode", "dense", "--json")
    assert p.returncode == 0, p.stderr
    return list(json.loads(p.stdout))


@pytest.mark.slow
def test_zeroed_or_swapped_vectors_and_edited_texts_are_never_served_unnoticed(indexed: Path) -> None:
    store = indexed / "cache" / "faiss" / "default.sqlite"
    with sqlite3.connect(store) as db:
        zeroed = {r[0] for r in db.execute("SELECT id FROM chunks WHERE n % 5 = 0")}
        db.execute("UPDATE chunks SET vector = zeroblob(length(vector)) WHERE n % 5 = 0")
        db.execute("UPDATE chunks SET text = 'HACKED ' || text WHERE n % 9 = 0")
        (a, va), (b, vb) = db.execute("SELECT n, vector FROM chunks WHERE n IN (1, 2)").fetchall()
        db.executemany("UPDATE chunks SET vector = ? WHERE n = ?", [(vb, a), (va, b)])  # unit vectors both
        zeroed |= {r[0] for r in db.execute("SELECT id FROM chunks WHERE n IN (1, 2)")}
    (indexed / "cache" / "faiss" / "default.faiss").unlink()
    served = _search(indexed)
    assert served and not zeroed & {r["chunk_id"] for r in served}, "a zeroed or swapped vector is never ranked"
    p = mdrag(indexed, "status", "--verify")
    assert p.returncode == 1 and "edited" in p.stdout and str(store) in p.stdout, p.stdout + p.stderr
    assert "verified:" in p.stdout
    p = mdrag(indexed, "index", "--json", "-q")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["chunks_embedded"] >= len(zeroed)
    p = mdrag(indexed, "status", "--verify")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any("HACKED" in r["text"] for r in _search(indexed))


@pytest.mark.slow
def test_a_run_with_nothing_to_do_fails_on_pages_status_cannot_read(indexed: Path) -> None:
    store = indexed / "cache" / "faiss" / "default.sqlite"
    with sqlite3.connect(store) as db:  # the leaf pages of the index status counts the rows by
        size = db.execute("PRAGMA page_size").fetchone()[0]
        page = db.execute("SELECT max(pageno) FROM dbstat WHERE name = 'chunks_root'").fetchone()[0]
    with open(store, "r+b") as f:
        f.seek(page * size - 400)
        data = f.read(400)
        f.seek(page * size - 400)
        f.write(bytes(b ^ 0xFF for b in data))
    for argv in (("status",), ("index",)):
        p = mdrag(indexed, *argv)
        assert p.returncode == 1 and "`mdrag index --rebuild`" in p.stderr and "Traceback" not in p.stderr, p.stderr
    p = mdrag(indexed, "index", "--rebuild", "-q")
    assert p.returncode == 0, p.stderr
    assert mdrag(indexed, "status", "--verify").returncode == 0
