"""Damage that passes as health, through the real `python -m mdrag` with the real
model, on both stores: each damage is said by the commands that meet it, with the exit code and message the
README gives, no damaged result is ever served, and the repair the message names gives back the index's first
answers. Each case is one trial of the suite's damage count (harness.DAMAGE, printed at the end and by
benchmarks/faults.py).

The cases: a store file the store cannot read (SQLite pages; a Milvus Lite collection or data file), its
times kept, as bit rot leaves them; zeroed vectors (FAISS: a vector index built from SQLite); chunk texts
edited in the store; the manifest deleted. Each index is built once per store and copied back (times kept)
before each case. The same cases with a small test embedder: tests/test_damage.py."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.faults.harness import DAMAGE, env, mdrag

_QUERY = ("search", "containers running in a cluster", "-k", "20", "--threshold", "0", "--mode", "dense", "--json")
_CNCF = "markdown_cncf_glossary/content/en"


@dataclass
class Built:
    home: Path  # where the index was built: its manifest names its store there
    saved: Path  # a copy of it as the build left it
    answers: list[tuple[str, str]]  # its answers to _QUERY: (file, text) of each result

    def restore(self) -> Path:
        """The home as the build left it, at the same path, every file's time kept; the home."""
        shutil.rmtree(self.home)
        shutil.copytree(self.saved, self.home, symlinks=True)
        return self.home


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory, shared_data: Path, model_cache: Path) -> dict[str, Built]:
    """Per store: a home holding the index of 24 of the CNCF glossary's pages, built with the real model, a
    copy of it to put back before each case, and its answers to the query."""
    docs = tmp_path_factory.mktemp("cncf")
    for p in sorted((shared_data / _CNCF).glob("*.md"))[::4]:
        shutil.copy(p, docs / p.name)
    out = {}
    for store in ("faiss", "milvus"):
        home = tmp_path_factory.mktemp(f"home-{store}")
        (home / "cache").mkdir()
        (home / "cache" / "models").symlink_to(model_cache)
        (home / "config.yaml").write_text(f"store:\n  backend: {store}\nserver:\n  port: {free_port()}\n")
        p = mdrag(home, "index", str(docs), "-q")
        assert p.returncode == 0, p.stderr
        saved = tmp_path_factory.mktemp(f"saved-{store}") / "home"
        shutil.copytree(home, saved, symlinks=True)
        out[store] = Built(home, saved, _answers(home))
    return out


def _answers(home: Path) -> list[tuple[str, str]]:
    p = mdrag(home, *_QUERY)
    assert p.returncode == 0, p.stderr
    return [(r["rel_path"], r["text"]) for r in json.loads(p.stdout)]


def _ids(p: subprocess.CompletedProcess[str]) -> set[str]:
    return {r["chunk_id"] for r in json.loads(p.stdout)}


# -- the damage, each returning the ids of the chunks it damaged (empty: the store or the manifest as a whole) --


def _sqlite(home: Path) -> Path:
    return home / "cache" / "faiss" / "default.sqlite"


def _collection(home: Path) -> Path:
    return home / "cache" / "milvus.db" / "collections" / "mdrag_default"


def _flip(path: Path, at: int, size: int) -> None:
    """Flip ``size`` bytes of ``path`` from ``at``, keeping its size and times."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(at)
        data = f.read(size)
        f.seek(at)
        f.write(bytes(b ^ 0xFF for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def sqlite_pages(home: Path) -> set[str]:
    """400 bytes flipped in the leaf pages of the index `status` counts rows by."""
    with sqlite3.connect(_sqlite(home)) as db:
        size = db.execute("PRAGMA page_size").fetchone()[0]
        page = db.execute("SELECT max(pageno) FROM dbstat WHERE name = 'chunks_root'").fetchone()[0]
    _flip(_sqlite(home), page * size - 400, 400)
    return set()


def zeroed_vectors(home: Path) -> set[str]:
    """Every fifth vector zeroed in SQLite and two unit vectors swapped (only their digests tell), and the
    .faiss file deleted: the vector index is built from SQLite."""
    with sqlite3.connect(_sqlite(home)) as db:
        ids = {r[0] for r in db.execute("SELECT id FROM chunks WHERE n % 5 = 0")}
        db.execute("UPDATE chunks SET vector = zeroblob(length(vector)) WHERE n % 5 = 0")
        (a, va), (b, vb) = db.execute("SELECT n, vector FROM chunks WHERE n IN (1, 2)").fetchall()
        db.executemany("UPDATE chunks SET vector = ? WHERE n = ?", [(vb, a), (va, b)])
        ids |= {r[0] for r in db.execute("SELECT id FROM chunks WHERE n IN (1, 2)")}
    (home / "cache" / "faiss" / "default.faiss").unlink()
    return ids


def faiss_texts(home: Path) -> set[str]:
    with sqlite3.connect(_sqlite(home)) as db:
        ids = {r[0] for r in db.execute("SELECT id FROM chunks WHERE n % 3 = 0")}
        db.execute("UPDATE chunks SET text = 'HACKED ' || text WHERE n % 3 = 0")
    return ids


def milvus_schema(home: Path) -> set[str]:
    """64 bytes flipped in the collection's schema: Milvus Lite cannot open it."""
    path = _collection(home) / "schema.json"
    _flip(path, path.stat().st_size // 2, 64)
    return set()


def milvus_data_file(home: Path) -> set[str]:
    """64 bytes flipped in the middle of a data file (the largest: a first build that commits in steps leaves
    one per step): Milvus Lite reads it without an error."""
    files = sorted(_collection(home).glob("partitions/*/data/data_*.parquet"), key=lambda p: (p.stat().st_size, p))
    assert files, "the collection has data files"
    path = files[-1]
    _flip(path, path.stat().st_size // 2, 64)
    return set()


_EDIT = """
import sys
from pymilvus import MilvusClient
from mdrag.store.milvus.rows import FIELDS
c = MilvusClient(sys.argv[1])
c.load_collection("mdrag_default")
rows = c.query("mdrag_default", filter="", output_fields=["id", *FIELDS, "vector", "bm25_text"], limit=16384)
rows = sorted(rows, key=lambda r: r["id"])[::3]
for r in rows:
    r["text"] = "HACKED " + r["text"]
c.upsert("mdrag_default", rows)
c.flush("mdrag_default")
c.close()
print(" ".join(r["id"] for r in rows))
"""


def milvus_texts(home: Path) -> set[str]:
    """Every third chunk's text edited through pymilvus (in a process of its own: Milvus Lite's lock)."""
    db = str(home / "cache" / "milvus.db")
    p = subprocess.run([sys.executable, "-c", _EDIT, db], env=env(home), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return set(p.stdout.split())


def manifest(home: Path) -> set[str]:
    (home / "cache" / "manifests" / "default.json").unlink()
    return set()


# -- what each command must do -------------------------------------------------------------------------


def _unreadable(said: str) -> Callable[[Path, set[str]], None]:
    """Every command fails with one message naming the damage and `mdrag index --rebuild`, which repairs it."""

    def commands(home: Path, damaged: set[str]) -> None:
        messages = set()
        for argv in (("index",), ("status",), _QUERY):
            p = mdrag(home, *argv)
            assert p.returncode == 1 and p.stdout == "", (argv, p.stdout, p.stderr)  # nothing served
            last = p.stderr.strip().splitlines()[-1]
            assert said in last and "`mdrag index --rebuild`" in last and "Traceback" not in p.stderr, (argv, last)
            messages.add(last)
        assert len(messages) == 1, messages
        p = mdrag(home, "index", "--rebuild", "-q")
        assert p.returncode == 0, p.stderr

    return commands


def _vectors(home: Path, damaged: set[str]) -> None:
    p = mdrag(home, *_QUERY)
    assert p.returncode == 0 and not damaged & _ids(p), "a zeroed or swapped vector is never ranked"
    assert f"chunk vector(s) in {_sqlite(home)} are damaged" in p.stderr, p.stderr
    _verified_then_indexed(home, "are damaged (not the vectors their run stored)", damaged)


def _edited(home: Path, damaged: set[str]) -> None:
    p = mdrag(home, *_QUERY)
    assert p.returncode == 0 and "HACKED" not in p.stdout and "result(s) left out" in p.stderr, p.stdout + p.stderr
    _verified_then_indexed(home, f"the text of {len(damaged)} chunk(s) in ", damaged)


def _verified_then_indexed(home: Path, said: str, damaged: set[str]) -> None:
    p = mdrag(home, "status", "--verify")
    assert p.returncode == 1 and said in p.stdout and "run `mdrag index` to repair it" in p.stdout, p.stdout
    p = mdrag(home, "index", "--json", "-q")
    assert p.returncode == 0 and json.loads(p.stdout)["chunks_embedded"] >= len(damaged), p.stdout + p.stderr


def _manifest_lost(store: str) -> Callable[[Path, set[str]], None]:
    def commands(home: Path, damaged: set[str]) -> None:
        path = home / "cache" / "manifests" / "default.json"
        p = mdrag(home, "status")
        assert p.returncode == 1 and f"the manifest {path} is missing, though the store holds" in p.stdout, p.stdout
        assert "`mdrag index` takes the index's folders back from the store" in p.stdout, p.stdout
        p = mdrag(home, *_QUERY)
        assert "is being built" not in p.stderr, p.stderr
        if store == "milvus":  # which chunks are committed is what the manifest said
            assert p.returncode == 1 and p.stdout == "" and f"the manifest {path} is missing" in p.stderr, p.stderr
        else:  # SQLite's commits are what FAISS serves
            assert p.returncode == 0, p.stderr
        p = mdrag(home, "index", "--json", "-q")
        assert p.returncode == 0 and json.loads(p.stdout)["chunks_embedded"] == 0, p.stdout + p.stderr

    return commands


CASES = [
    ("faiss", sqlite_pages, _unreadable("SQLite cannot read")),
    ("faiss", zeroed_vectors, _vectors),
    ("faiss", faiss_texts, _edited),
    ("faiss", manifest, _manifest_lost("faiss")),
    ("milvus", milvus_schema, _unreadable("Milvus Lite cannot open")),
    ("milvus", milvus_data_file, _unreadable("is not the data file its run wrote")),
    ("milvus", milvus_texts, _edited),
    ("milvus", manifest, _manifest_lost("milvus")),
]


@pytest.fixture
def trial(request: pytest.FixtureRequest) -> Iterator[dict[str, object]]:
    """This case's record in the suite's damage count: passed unless an assertion failed."""
    record: dict[str, object] = {"passed": False}
    t0 = time.monotonic()
    yield record
    record["seconds"] = round(time.monotonic() - t0, 1)
    DAMAGE.append(record)


@pytest.mark.slow
@pytest.mark.parametrize(("store", "damage", "commands"), CASES, ids=[f"{s}-{d.__name__}" for s, d, _ in CASES])
def test_damage_is_said_never_served_and_repaired(
    built: dict[str, Built],
    store: str,
    damage: Callable[[Path], set[str]],
    commands: Callable[[Path, set[str]], None],
    trial: dict[str, object],
) -> None:
    trial.update(store=store, damage=damage.__name__)
    home = built[store].restore()
    damaged = damage(home)
    commands(home, damaged)
    p = mdrag(home, "status", "--verify")
    assert p.returncode == 0, p.stdout + p.stderr
    assert _answers(home) == built[store].answers, "the repaired index answers as it did before the damage"
    trial["passed"] = True
