"""Damaged files under MDRAG_HOME: every case is noticed, said plainly, and repaired by
`mdrag index` (a store missing rows, an edited manifest, a store damaged by a killed run), by
any command (index files Milvus Lite cannot load: built again from the data) or `mdrag index
--rebuild` (any other store Milvus Lite cannot open, or whose data files are not the ones their run wrote,
moved aside first; `status`, `search` and a plain `mdrag index` say so alike); chunk texts edited in the store
(found by `status --verify`, their files read again by the next `mdrag index`); what status and search say of a
lost manifest, and what `status --verify` read.
Driven through the real CLI on a real Milvus Lite file (`store.backend: milvus`); the tests of a damaged
manifest also on the default store (FAISS for a new index). The FAISS store's own damage: test_store_faiss.py."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import random
import re
import shutil
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from mdrag.config import load_config
from mdrag.frontends.cli import main
from mdrag.index import Index
from mdrag.store.milvus import MilvusStore
from mdrag.types import Chunk
from tests.conftest import HashEmbedder, overwrite_middle

DOCS = {
    "install.md": "# Install\n\nDownload the archive and unpack it.\n\n## Linux\n\nUse apt to install the tool.\n",
    "shortcodes.md": "# Shortcodes\n\nA shortcode is a template called from content.\n",
    "sub/colours.md": "# Colours\n\nThe palette has seven unusual colours like vermilion.\n",
}


@pytest.fixture
def backend() -> str:
    """The setting ``store.backend`` of the test's home: ``milvus``, unless a test is parametrized."""
    return "milvus"


@pytest.fixture(autouse=True)
def _store_setting(mdrag_home: Path, backend: str) -> None:
    if backend != "auto":  # auto: no setting, the default
        (mdrag_home / "config.yaml").write_text(f"store:\n  backend: {backend}\n")


#: The tests of a damaged manifest run on Milvus Lite and on the default store.
both_stores = pytest.mark.parametrize("backend", ["milvus", "auto"])


@pytest.fixture
def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path):
    """``cli(*argv) -> (code, stdout, stderr)``: the real `mdrag` with a small fast embedder."""
    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    monkeypatch.chdir(tmp_path)

    def run(*argv: str) -> tuple[int, str, str]:
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return run


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    root = tmp_path / "docs"
    for rel, text in DOCS.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _collection(home: Path) -> Path:
    return home / "cache" / "milvus.db" / "collections" / "mdrag_default"


def _assert_whole(cli: Callable[..., tuple[int, str, str]], total: int) -> None:
    code, out, err = cli("search", "vermilion palette", "--json", "--threshold", "0")
    assert code == 0, err
    assert "sub/colours.md" in {r["rel_path"] for r in json.loads(out)}
    code, out, _ = cli("status", "--json")
    st = json.loads(out)
    assert code == 0 and st["chunks"] == total and st["damaged"] is None and not st["interrupted"]
    idx = Index(load_config())
    try:
        idx.store.open(create=False)
        assert len(idx.store.all_ids()) == idx.store.count() == total, "no duplicate, no orphan"
    finally:
        idx.close()


def _build(cli: Callable[..., tuple[int, str, str]], docs: Path) -> int:
    code, out, err = cli("index", str(docs), "--json", "-q")
    assert code == 0, err
    return int(json.loads(out)["chunks_total"])


def _delete_data_files(home: Path) -> None:
    files = list(_collection(home).glob("partitions/*/data/*.parquet"))
    assert files
    for f in files:
        f.unlink()


def _garble_collection_manifest(home: Path) -> None:
    (_collection(home) / "manifest.json").write_text("garbage{")


@pytest.mark.parametrize("damage", [_delete_data_files, _garble_collection_manifest])
def test_a_store_missing_rows_is_reported_then_repaired_by_index(cli, docs: Path, mdrag_home: Path, damage) -> None:
    total = _build(cli, docs)
    damage(mdrag_home)
    code, out, err = cli("search", "vermilion palette")
    assert code == 1 and f"holds 0 of the {total} chunks" in err and "run `mdrag index`" in err
    code, out, err = cli("status")
    assert code == 1 and "damaged:" in out and "mdrag index" in out
    code, out, err = cli("index", "--json", "-q")  # the no-change shortcut must not hide it
    assert code == 0, err
    s = json.loads(out)
    assert s["repaired"] and s["chunks_total"] == total
    _assert_whole(cli, total)


def _garble(pattern: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        files = list(_collection(home).glob(pattern))
        assert files, pattern
        for f in files:
            with open(f, "r+b") as fh:
                fh.write(b"\x00garbage" * 512)

    damage.__name__ = f"garble {pattern}"
    return damage


@pytest.mark.parametrize("damage", [_garble("schema.json"), _garble("partitions/*/data/*.parquet")])
def test_a_store_that_cannot_be_opened_is_called_damaged_and_rebuild_sets_it_aside(
    cli, docs: Path, mdrag_home: Path, damage
) -> None:
    total = _build(cli, docs)
    damage(mdrag_home)
    for argv in (("status",), ("search", "palette"), ("index",)):
        code, out, err = cli(*argv)
        assert code == 1, argv
        assert "damaged" in err and str(_collection(mdrag_home)) in err and "--rebuild" in err, (argv, err)
        assert "in use by another process" not in err and "Traceback" not in err
    code, out, err = cli("index", "--rebuild", "--json", "-q")  # no folder: the index's own folders
    assert code == 0, err
    assert json.loads(out)["chunks_total"] == total
    aside = list((mdrag_home / "cache" / "damaged").iterdir())
    assert len(aside) == 1 and aside[0].name.startswith("mdrag_default-"), "the damaged files are kept aside"
    _assert_whole(cli, total)


def _truncate_index_files(home: Path) -> None:
    # As a kill while Milvus Lite wrote a segment's index file (in place, after the data) leaves it.
    files = list(_collection(home).glob("partitions/*/indexes/*"))
    assert files
    for f in files:
        f.write_bytes(b"")


@pytest.mark.parametrize("damage", [_truncate_index_files, _garble("partitions/*/indexes/*")])
def test_damaged_index_files_are_set_aside_and_built_again_by_any_command(
    cli, docs: Path, mdrag_home: Path, damage, caplog: pytest.LogCaptureFixture
) -> None:
    total = _build(cli, docs)
    damage(mdrag_home)
    code, out, err = cli("search", "vermilion palette", "--json", "--threshold", "0")
    assert code == 0, err
    assert "sub/colours.md" in {r["rel_path"] for r in json.loads(out)}
    assert any("index file" in r.getMessage() for r in caplog.records), "the repair is logged"
    aside = list((mdrag_home / "cache" / "damaged").glob("mdrag_default-indexes-*/*/*"))
    assert aside, "the damaged index files are kept aside"
    _assert_whole(cli, total)
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err


def test_a_damaged_store_with_no_manifest_is_set_aside_by_the_next_run(cli, docs: Path, mdrag_home: Path) -> None:
    # As a first run killed while Milvus Lite wrote its files leaves it: nothing committed, nothing to keep.
    total = _build(cli, docs)
    _garble("schema.json")(mdrag_home)
    _manifest(mdrag_home).unlink()
    code, out, err = cli("index", str(docs), "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["chunks_total"] == total
    assert len(list((mdrag_home / "cache" / "damaged").iterdir())) == 1, "the damaged files are kept aside"
    _assert_whole(cli, total)


def test_a_damaged_store_with_a_dirty_manifest_is_set_aside_by_the_next_run(cli, docs: Path, mdrag_home: Path) -> None:
    # As a run killed while Milvus Lite wrote its files leaves it: the manifest says a run did not finish.
    from mdrag.ingest.manifest import Manifest

    total = _build(cli, docs)
    m = Manifest.load(_manifest(mdrag_home))
    assert m is not None
    m.dirty = True
    m.save(_manifest(mdrag_home))
    _garble("partitions/*/data/*.parquet")(mdrag_home)
    code, out, err = cli("index", "--json", "-q")
    assert code == 0, err
    s = json.loads(out)
    assert s["repaired"] and s["chunks_total"] == total
    assert len(list((mdrag_home / "cache" / "damaged").iterdir())) == 1, "the damaged files are kept aside"
    _assert_whole(cli, total)


def _manifest(home: Path) -> Path:
    return home / "cache" / "manifests" / "default.json"


@pytest.mark.parametrize(
    "raw",
    [b"\xff\xfe\x00\x01not utf-8", b"[]", b"null", None],
    ids=["not-utf8", "list", "null", "files-null"],
)
@both_stores
def test_an_unreadable_manifest_never_crashes_a_command(
    cli, docs: Path, mdrag_home: Path, raw: bytes | None, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    total = _build(cli, docs)
    path = _manifest(mdrag_home)
    if raw is None:
        d = json.loads(path.read_text())
        d["files"] = None
        raw = json.dumps(d).encode()
    path.write_bytes(raw)
    for argv in (("status",), ("search", "palette")):
        code, out, err = cli(*argv)
        assert "Traceback" not in err and code in (0, 1), (argv, err)
        said = out + err + caplog.text  # what is true: nothing rebuilds, nothing is being built
        assert "rebuilding" not in said and "is being built" not in said and "`mdrag index`" in said, (argv, said)
    code, out, err = cli("index", str(docs), "--json", "-q")
    assert code == 0, err
    s = json.loads(out)
    assert s["rebuild"] == "manifest unreadable" and s["chunks_total"] == total and s["chunks_embedded"] == 0
    _assert_whole(cli, total)
    path.write_bytes(raw)
    code, out, err = cli("index", str(docs), "--rebuild", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err


@both_stores
def test_a_manifest_entry_emptied_by_hand_is_reconciled_with_the_store(
    cli, docs: Path, mdrag_home: Path, backend: str
) -> None:
    total = _build(cli, docs)
    path = _manifest(mdrag_home)
    d = json.loads(path.read_text())
    colours = next(p for p in d["files"] if p.endswith("colours.md"))
    d["files"][colours]["chunks"] = []
    path.write_text(json.dumps(d))
    code, out, err = cli("index", "--json", "-q")
    assert code == 0, err
    s = json.loads(out)
    assert s["repaired"] and s["chunks_total"] == total
    _assert_whole(cli, total)


@both_stores
def test_a_full_disk_at_manifest_save_is_one_clear_message(
    cli, docs: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch, backend: str
) -> None:
    total = _build(cli, docs)
    (docs / "new.md").write_text("# New\n\nA page written while the disk was full.\n")
    real = os.fsync

    def fsync(fd: int) -> None:
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).startswith("default.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    code, out, err = cli("index", "-q")
    assert code == 1 and "Traceback" not in err
    assert "No space left on device. Free some space on that disk and run `mdrag index` again" in err
    monkeypatch.setattr(os, "fsync", real)
    code, out, err = cli("index", "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["chunks_total"] > total
    _assert_whole(cli, json.loads(out)["chunks_total"])


@pytest.mark.parametrize("backend", ["faiss"])
def test_status_after_a_failed_update_says_when_it_was_last_indexed_and_that_the_update_failed(
    cli, docs: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An index built fine, whose next update the store's full disk stops: its last run still finished at
    its time, and the update that did not finish is named, never "never"."""
    _build(cli, docs)
    code, out, _ = cli("status", "--json")
    built = json.loads(out)["last_indexed"]
    assert code == 0 and built
    (docs / "new.md").write_text("# New\n\nA page written while the disk was full.\n")

    def full(*args: Any) -> int:
        raise sqlite3.OperationalError("database or disk is full")

    with monkeypatch.context() as patched:
        patched.setattr("mdrag.store.faiss.rows.insert", full)
        code, out, err = cli("index", "-q")
    assert code == 1 and "Free some space" in err, err
    code, out, _ = cli("status", "--json")
    st = json.loads(out)
    assert st["last_indexed"] == built and st["interrupted"], st
    code, out, _ = cli("status")
    assert "never" not in out and "the last update failed or was interrupted" in out, out
    assert time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(built)) in out, out


# -- a store that lost everything -------------------------------------------


def _faiss_file(home: Path, ext: str) -> Path:
    return home / "cache" / "faiss" / f"default.{ext}"


def _sql(statement: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        with sqlite3.connect(_faiss_file(home, "sqlite")) as db:
            assert db.execute(statement).rowcount != 0, f"the damage changed nothing: {statement}"

    damage.__name__ = statement
    return damage


def _delete(*relpaths: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        for rel in relpaths:
            path = home / "cache" / rel
            assert path.exists(), path
            shutil.rmtree(path) if path.is_dir() else path.unlink()

    damage.__name__ = "delete " + " ".join(relpaths)
    return damage


def _garble_sqlite_header(home: Path) -> None:
    with open(_faiss_file(home, "sqlite"), "r+b") as f:
        f.write(b"garbage header!!")


def _truncate_sqlite(home: Path) -> None:
    _faiss_file(home, "sqlite").write_bytes(b"")


LOST = [
    ("faiss", _delete("faiss/default.sqlite")),
    ("faiss", _truncate_sqlite),
    ("faiss", _delete("faiss/default.sqlite", "faiss/default.faiss")),
    ("faiss", _sql("DELETE FROM meta")),
    ("milvus", _delete("milvus.db")),
    ("milvus", _delete("milvus.db/collections/mdrag_default/schema.json")),
]


@pytest.mark.parametrize(("backend", "damage"), LOST, ids=[f"{b}-{d.__name__}" for b, d in LOST])
def test_a_store_that_lost_everything_is_named_then_repaired_by_index(
    cli, docs: Path, mdrag_home: Path, backend: str, damage: Callable[[Path], None]
) -> None:
    total = _build(cli, docs)
    damage(mdrag_home)
    code, out, err = cli("status")
    assert code == 1, out + err
    # what is true: with the meta table deleted every row is there
    meta = "DELETE FROM meta" in damage.__name__
    held = f"though it holds {total} chunk rows of the {total}" if meta else f"none of the {total} chunks"
    assert "damaged:" in out and held in out and "mdrag index" in out, out
    assert "(empty" not in out
    code, out, err = cli("status", "--json")
    assert code == 1 and json.loads(out)["damaged"], out
    code, out, err = cli("search", "vermilion palette")
    lost = "lost the records that name the model" if meta else "lost its data"
    assert code == 1 and lost in err and "run `mdrag index`" in err and "does not exist" not in err, err
    code, out, err = cli("index", "--json", "-q")  # the index's own folders: the manifest still lists them
    assert code == 0, err
    assert json.loads(out)["chunks_total"] == total
    _assert_whole(cli, total)


# -- a lost manifest ----------------------------------------------------------


def _no_roots(path: Path) -> None:
    from mdrag.ingest.manifest import Manifest

    m = Manifest.load(path)
    assert m is not None
    m.roots = []
    m.save(path)  # a valid checksum


MANIFEST_LOSSES: dict[str, Callable[[Path], None]] = {
    "deleted": lambda p: p.unlink(),
    "brace": lambda p: p.write_text("{"),
    "list": lambda p: p.write_text("[]"),
    "object": lambda p: p.write_text("{}"),
    "not-utf8": lambda p: p.write_bytes(b"\xff\xfe\x00\x01not utf-8"),
    "truncated": lambda p: p.write_bytes(p.read_bytes()[: p.stat().st_size // 2]),
    "no-roots": _no_roots,
}


@pytest.mark.parametrize("loss", list(MANIFEST_LOSSES))
@pytest.mark.parametrize("backend", ["milvus", "faiss"])
def test_a_lost_manifest_takes_the_folders_back_from_the_store(
    cli, docs: Path, mdrag_home: Path, backend: str, loss: str
) -> None:
    total = _build(cli, docs)
    MANIFEST_LOSSES[loss](_manifest(mdrag_home))
    code, out, err = cli("status")
    lost = "is missing" if loss == "deleted" else "is unreadable or lists no folder"
    assert code == 1 and f"the manifest {_manifest(mdrag_home)} {lost}, though the store holds {total}" in out, out
    assert "`mdrag index` takes the index's folders back from the store" in out, out
    code, out, err = cli("index", "--json", "-q")  # no folder: the index's own
    assert code == 0, err
    s = json.loads(out)
    assert s["folders"] == [str(docs.resolve())] and s["chunks_total"] == total and s["chunks_embedded"] == 0, s
    assert not json.loads(cli("status", "--json")[1])["manifest_lost"]
    assert any("was lost: took the folders back from the store: " + str(docs.resolve()) in w for w in s["warnings"])
    (docs / "later.md").write_text("# Later\n\nA page written after the manifest was lost.\n")
    code, out, err = cli("index", "--json", "-q")  # from then on, the folders are the index's again
    assert code == 0, err
    s = json.loads(out)
    assert s["added"] == 1 and s["folders"] == [str(docs.resolve())] and not s["warnings"], s
    _assert_whole(cli, s["chunks_total"])


# -- damage inside a file ------------------------------------------------------


def _top(cli: Callable[..., tuple[int, str, str]], *extra: str) -> list[str]:
    code, out, err = cli(
        "search", "vermilion palette apt install", "--json", "--threshold", "0", "--mode", "dense", *extra
    )
    assert code == 0, err
    return [r["chunk_id"] for r in json.loads(out)]


@pytest.mark.parametrize("backend", ["faiss"])
def test_a_damaged_faiss_file_is_named_searched_right_and_written_again_by_index(
    cli, docs: Path, mdrag_home: Path, backend: str
) -> None:
    total = _build(cli, docs)
    before = _top(cli)
    overwrite_middle(_faiss_file(mdrag_home, "faiss"))
    assert _top(cli) == before, "built from SQLite, not read from the damaged file"
    code, out, err = cli("status")
    assert code == 1 and "damaged:" in out and str(_faiss_file(mdrag_home, "faiss")) in out, out
    code, out, err = cli("index", "--json", "-q")  # judged by its checksum: no shortcut
    assert code == 0, err
    s = json.loads(out)
    assert s["repaired"] and s["chunks_embedded"] == 0 and any("built again" in w for w in s["warnings"]), s
    _assert_whole(cli, total)
    assert _top(cli) == before


@pytest.mark.parametrize("backend", ["faiss"])
def test_lost_tag_rows_are_named_never_searched_and_rebuilt_by_index(
    cli, docs: Path, mdrag_home: Path, backend: str
) -> None:
    (docs / "tagged.md").write_text("---\ntags: [paint]\n---\n# Paint\n\nVermilion paint for the palette.\n")
    total = _build(cli, docs)
    assert _top(cli, "--tag", "paint")
    _sql("DELETE FROM tags")(mdrag_home)
    code, out, err = cli("search", "vermilion", "--tag", "paint")
    assert code == 1 and "tags table" in err and "mdrag index" in err, (out, err)
    code, out, err = cli("status")
    assert code == 1 and "tags table" in out, out
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["repaired"], err
    assert _top(cli, "--tag", "paint")
    _assert_whole(cli, total)


def test_a_changed_milvus_index_file_is_set_aside_and_built_again(
    cli, docs: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    total = _build(cli, docs)
    before = _top(cli)
    files = list(_collection(mdrag_home).glob("partitions/*/indexes/*vector*"))
    assert files
    for f in files:
        overwrite_middle(f)
    assert _top(cli) == before
    assert any("not the ones their run wrote" in r.getMessage() for r in caplog.records)
    assert list((mdrag_home / "cache" / "damaged").glob("mdrag_default-indexes-*/*/*")), "kept aside"
    code, out, err = cli("status", "--verify")
    assert code == 0, out
    _assert_whole(cli, total)


def test_a_run_records_the_checksums_of_index_files_that_milvus_lite_writes_after_its_flush(
    cli, docs: Path, mdrag_home: Path
) -> None:
    """Milvus Lite writes a segment's index file in the background after the flush: a run that recorded
    its checksums before the file was there left it unchecked (a damaged one then went unnoticed), and
    one that hashed it while Lite still wrote it called it damaged at every open (the otel docs)."""
    import hashlib
    import threading

    _build(cli, docs)
    coll = _collection(mdrag_home)
    idx = Index(load_config(), embedder=HashEmbedder())
    try:
        assert idx.search("vermilion palette", k=1, threshold=0.0)  # the store is open
        store: Any = idx.store
        index = next(coll.glob("partitions/*/indexes/*vector*"))
        whole = index.read_bytes()
        index.unlink()  # as Lite leaves it a moment after the flush: not there yet, then written in parts

        def write() -> None:
            with open(index, "wb") as f:
                f.write(whole[: len(whole) // 2])
                f.flush()
                stop.wait(0.15)
                f.write(whole[len(whole) // 2 :])

        stop = threading.Event()
        later = threading.Timer(0.5, write)
        later.start()
        store._record_sums()
        later.join()
        recorded = json.loads(store._files.sums.read_text())["index_files"]
        assert recorded.get(str(index.relative_to(coll))) == hashlib.sha256(whole).hexdigest(), recorded
    finally:
        idx.close()


# -- every kind of damage tried: found, or repaired, never served -----------------


_QUERY = ("vermilion palette apt install", "--json", "--threshold", "0", "--mode", "dense")


def _rows(out: str) -> list[tuple[str, str]]:
    """Each result's file and text (a chunk whose id was changed serves the right text)."""
    return [(r["rel_path"], r["text"]) for r in json.loads(out)]


def _answers(cli: Callable[..., tuple[int, str, str]], *extra: str) -> list[tuple[str, str]]:
    code, out, err = cli("search", *_QUERY, *extra)
    assert code == 0, err
    return _rows(out)


def _random_bytes(pattern: str, size: int = 8192) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        files = list((home / "cache").glob(pattern))
        assert files, pattern
        for f in files:
            st = f.stat()
            with open(f, "r+b") as fh:
                fh.seek(max(0, st.st_size - size) // 2)
                fh.write(random.Random(f.name).randbytes(min(size, st.st_size)))
            os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))

    damage.__name__ = f"{size} random bytes in {pattern}"
    return damage


def _cut(rel: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        path = home / "cache" / rel
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    damage.__name__ = f"half of {rel}"
    return damage


def _middle(pattern: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        files = list((home / "cache").glob(pattern))
        assert files, pattern
        for f in files:
            overwrite_middle(f)

    damage.__name__ = f"middle third of {pattern}"
    return damage


def _flip_index_page(name: str) -> Callable[[Path], None]:
    """Flip the last 400 bytes (its cells: the keys) of the first page of the SQLite index ``name``."""

    def damage(home: Path) -> None:
        path = _faiss_file(home, "sqlite")
        with sqlite3.connect(path) as db:
            size = db.execute("PRAGMA page_size").fetchone()[0]
            page = db.execute("SELECT max(pageno) FROM dbstat WHERE name = ?", (name,)).fetchone()[0]
        st = path.stat()
        with open(path, "r+b") as f:
            f.seek(page * size - 400)
            data = f.read(400)
            f.seek(page * size - 400)
            f.write(bytes(b ^ 0xFF for b in data))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))

    damage.__name__ = f"400 bytes flipped in the SQLite index {name}"
    return damage


def _milvus_delete_rows(home: Path) -> None:
    from pymilvus import MilvusClient

    client = MilvusClient(str(home / "cache" / "milvus.db"))
    try:
        client.load_collection("mdrag_default")
        ids = [r["id"] for r in client.query("mdrag_default", filter="", output_fields=["id"], limit=2)]
        client.delete("mdrag_default", ids=ids)
    finally:
        client.close()


def _both(*damages: Callable[[Path], None]) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        for d in damages:
            d(home)

    damage.__name__ = " + ".join(d.__name__ for d in damages)
    return damage


_IDX = "milvus.db/collections/mdrag_default/partitions/*/indexes/*"

_FIRST_CHUNKS = (
    "FROM chunks WHERE n IN (SELECT min(n) FROM chunks WHERE rel_path IN ('sub/colours.md', 'shortcodes.md') "
    "GROUP BY rel_path)"
)


def _swap_vectors(home: Path) -> None:
    """The vectors of the first chunks of sub/colours.md and shortcodes.md swapped: two unit vectors."""
    with sqlite3.connect(_faiss_file(home, "sqlite")) as db:
        (a, va), (b, vb) = db.execute(f"SELECT n, vector {_FIRST_CHUNKS}").fetchall()
        assert va != vb
        db.executemany("UPDATE chunks SET vector = ? WHERE n = ?", [(vb, a), (va, b)])


#: (store, damage, how it shows): "status" (`status` exits 1 naming it), "verify" (only `status --verify`
#: finds it; searches are right meanwhile), "open" (repaired by any command: searches are right), "rebuild"
#: (a file SQLite cannot read: every command says so and `mdrag index --rebuild` sets it aside). Each one
#: is repaired by the next `mdrag index` (``--rebuild`` for the last kind). The cases of the tests above
#: (a store that lost everything, a .faiss file rewritten in the middle, DELETE FROM tags, ...) are not repeated.
DAMAGE = [
    ("faiss", _delete("faiss/default.faiss"), "status"),
    ("faiss", _cut("faiss/default.faiss"), "status"),
    ("faiss", _random_bytes("faiss/default.faiss"), "status"),
    ("faiss", _sql("DELETE FROM tags WHERE n IN (SELECT n FROM tags LIMIT 1)"), "status"),
    ("faiss", _sql("UPDATE tags SET tag = 'other'"), "status"),
    ("faiss", _sql("INSERT INTO tags SELECT 'paint', n FROM chunks WHERE n NOT IN (SELECT n FROM tags)"), "status"),
    ("faiss", _sql("DROP TABLE tags"), "status"),
    ("faiss", _sql("DELETE FROM chunks WHERE n = (SELECT min(n) FROM chunks)"), "status"),
    ("faiss", _sql("DELETE FROM chunks"), "status"),
    ("faiss", _sql("DELETE FROM meta WHERE key = 'identity'"), "status"),
    (
        "faiss",
        _sql(  # a different first character: an id that already starts with "f" must change too
            "UPDATE chunks SET id = (CASE substr(id, 1, 1) WHEN 'f' THEN 'e' ELSE 'f' END) || substr(id, 2)"
            " WHERE n = (SELECT min(n) FROM chunks)"
        ),
        "verify",
    ),
    (
        "faiss",
        _sql("UPDATE chunks SET vector = zeroblob(length(vector)) WHERE n = (SELECT min(n) FROM chunks)"),
        "verify",
    ),
    ("faiss", _sql("UPDATE tagsets SET tags = '[]'"), "status"),  # a note's tags, kept once for all its chunks
    ("faiss", _sql("DELETE FROM tagsets"), "status"),
    ("faiss", _swap_vectors, "verify"),  # unit vectors both: only their digests tell
    ("faiss", _garble_sqlite_header, "rebuild"),
    ("faiss", _cut("faiss/default.sqlite"), "rebuild"),
    ("faiss", _random_bytes("faiss/default.sqlite", 4096), "rebuild"),
    ("faiss", _flip_index_page("chunks_root"), "rebuild"),  # read by `status`; a plain run read it too
    ("milvus", _random_bytes(_IDX + ".idx"), "open"),
    ("milvus", _milvus_delete_rows, "status"),
    ("milvus", _delete("milvus.db.mdrag"), "status"),  # the checksum record lost: named, and written again
    ("milvus", _both(_delete("milvus.db.mdrag"), _random_bytes(_IDX + ".idx")), "status"),
    ("milvus", _random_bytes("milvus.db/collections/mdrag_default/partitions/*/data/*.parquet", 64), "rebuild"),
    ("milvus", _random_bytes("milvus.db/collections/mdrag_default/schema.json", 64), "rebuild"),
]


@pytest.mark.parametrize(("backend", "damage", "shows"), DAMAGE, ids=[f"{b}-{d.__name__}" for b, d, _ in DAMAGE])
def test_damage_is_found_or_repaired_and_never_served(
    cli, docs: Path, mdrag_home: Path, backend: str, damage: Callable[[Path], None], shows: str
) -> None:
    (docs / "tagged.md").write_text("---\ntags: [paint]\n---\n# Paint\n\nVermilion paint for the palette.\n")
    total = _build(cli, docs)
    before = _answers(cli), _answers(cli, "--tag", "paint")
    damage(mdrag_home)
    status, out, err = cli("status")
    assert status == (0 if shows in ("verify", "open") else 1) or shows == "rebuild", out + err
    if status == 0:  # nothing said: a search answers right, or (a file SQLite cannot read) fails saying so
        for extra, right in zip(((), ("--tag", "paint")), before):
            code, out, err = cli("search", *_QUERY, *extra)
            assert (code, code and "--rebuild" in err) == (1, True) if code else _rows(out) == right, err
    code, out, err = cli("status", "--verify")
    assert code == (0 if shows == "open" else 1), out + err
    if code:
        assert str(mdrag_home / "cache") in out + err, "names the file"
        assert ("--rebuild" in err) == (shows == "rebuild"), err
    code, out, err = cli("index", "--json", "-q")
    if shows == "rebuild":
        assert code == 1 and "--rebuild" in err, err
        code, out, err = cli("index", "--rebuild", "--json", "-q")
    assert code == 0, err
    assert json.loads(out)["chunks_total"] == total
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    assert (_answers(cli), _answers(cli, "--tag", "paint")) == before
    _assert_whole(cli, total)


@both_stores
def test_status_verify_says_what_it_checked_and_how_long_it_took(cli, docs: Path, backend: str) -> None:
    """`status --verify` is not `status` printed again."""
    _build(cli, docs)
    code, plain, _ = cli("status")
    assert code == 0 and "verified:" not in plain
    code, out, err = cli("status", "--verify")
    assert code == 0 and out != plain, err
    lite = "the row count, the data files' sha256, every row's text"
    read = "every row" if backend == "auto" else lite  # auto: the FAISS store
    assert f"verified:     {read}" in out and "against the manifest" in out and " s\n" in out
    code, out, _ = cli("status", "--verify", "--json")
    verified = json.loads(out)["verified"]
    assert code == 0 and len(verified["checked"]) == 2 and verified["seconds"] >= 0
    code, out, _ = cli("status", "--json")
    assert json.loads(out)["verified"] is None


@pytest.mark.parametrize("backend", ["faiss"])
def test_damaged_vectors_are_never_ranked_when_the_vector_index_is_built_from_sqlite(
    cli, docs: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A vector index built again from SQLite leaves out the vectors that are not the
    unit vectors a run wrote (zeroed, cut short), says so, and the next `mdrag index` embeds them again."""
    total = _build(cli, docs)
    _sql("UPDATE chunks SET vector = zeroblob(length(vector)) WHERE n % 2 = 0")(mdrag_home)
    _sql("UPDATE chunks SET vector = substr(vector, 1, 8) WHERE n = 1")(mdrag_home)
    _faiss_file(mdrag_home, "faiss").unlink()
    with sqlite3.connect(_faiss_file(mdrag_home, "sqlite")) as db:
        damaged = {r[0] for r in db.execute("SELECT id FROM chunks WHERE n % 2 = 0 OR n = 1")}
    code, out, err = cli("search", *_QUERY)
    assert code == 0, err
    assert not damaged & {r["chunk_id"] for r in json.loads(out)}, "a damaged vector is never ranked"
    assert f"chunk vector(s) in {_faiss_file(mdrag_home, 'sqlite')} are damaged" in caplog.text
    code, out, err = cli("index", "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] == total and s["chunks_embedded"] >= len(damaged), s
    assert any("were damaged: embedded again" in w for w in s["warnings"]), s
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    _assert_whole(cli, total)


def test_a_changed_milvus_data_file_is_found_by_verify_and_rebuild_builds_it_again(
    cli, docs: Path, mdrag_home: Path
) -> None:
    """The run records the sha256 of the collection's data files; `status --verify`
    compares them, and the rows of a changed one cannot be trusted: `mdrag index --rebuild`."""
    total = _build(cli, docs)
    files = sorted(_collection(mdrag_home).glob("partitions/*/data/data_*.parquet"))
    assert files
    st = files[0].stat()
    with open(files[0], "r+b") as f:
        f.seek(st.st_size // 2)
        data = f.read(64)
        f.seek(st.st_size // 2)
        f.write(bytes(b ^ 0xFF for b in data))
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    code, out, err = cli("status", "--verify")
    assert code == 1 and str(files[0]) in err and "`mdrag index --rebuild`" in err, out + err
    code, out, err = cli("index", "--json", "-q")
    assert code == 1 and "`mdrag index --rebuild`" in err, out + err
    code, out, err = cli("index", "--rebuild", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    _assert_whole(cli, total)


@pytest.mark.parametrize("backend", ["faiss"])
def test_rebuild_sets_aside_a_store_with_pages_sqlite_cannot_read_unasked(cli, docs: Path, mdrag_home: Path) -> None:
    """The `mdrag index --rebuild` a damaged store's message asks for works without a
    `status --verify` before it (it reads every row, then sets the store aside rather than build upon it)."""
    total = _build(cli, docs)
    _flip_index_page("chunks_root")(mdrag_home)
    code, out, err = cli("index", "--json", "-q")
    assert code == 1 and "`mdrag index --rebuild`" in err, out + err
    code, out, err = cli("index", "--rebuild", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err
    assert list((mdrag_home / "cache" / "damaged").iterdir()), "set aside, not deleted"
    _assert_whole(cli, total)


@pytest.mark.parametrize("backend", ["faiss"])
def test_swapped_vectors_are_never_ranked_when_the_vector_index_is_built_from_sqlite(
    cli, docs: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two rows' vectors swapped are unit vectors both; the digest each run records with
    a vector (of its chunk's content hash and its bytes) finds them. A vector index built again from SQLite
    leaves them out, the warning names how many and their files, and `mdrag index` embeds them again."""
    total = _build(cli, docs)
    before = _answers(cli)
    store = _faiss_file(mdrag_home, "sqlite")
    _swap_vectors(mdrag_home)
    with sqlite3.connect(store) as db:
        swapped = dict(db.execute(f"SELECT id, path {_FIRST_CHUNKS}").fetchall())
    assert len(swapped) == 2
    _faiss_file(mdrag_home, "faiss").unlink()
    caplog.clear()
    code, out, err = cli("search", *_QUERY)
    assert code == 0, err
    served = json.loads(out)
    assert served and not swapped.keys() & {r["chunk_id"] for r in served}, "a swapped vector is never ranked"
    files = ", ".join(sorted(swapped.values()))
    assert f"2 chunk vector(s) in {store} are damaged (in 2 file(s): {files})" in caplog.text
    code, out, err = cli("index", "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] == total and s["chunks_embedded"] >= 2, s
    assert any(w.startswith(f"2 chunk vector(s) in {store} were damaged: embedded again (in 2 file(s): {files})")
               for w in s["warnings"]), s  # fmt: skip
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    assert _answers(cli) == before
    _assert_whole(cli, total)


@pytest.mark.parametrize("backend", ["faiss"])
def test_a_store_written_before_vector_digests_is_checked_by_length_and_norm_then_gets_them(
    cli, docs: Path, mdrag_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A store of an older release has no vector digests: it opens and searches as before, `status --verify`
    checks its vectors by length and norm and says that is all it can, and the next `mdrag index` records
    their digests (nothing embedded again); from then on a swap is found."""
    total = _build(cli, docs)
    before = _answers(cli)
    store = _faiss_file(mdrag_home, "sqlite")
    with sqlite3.connect(store) as db:
        db.execute("ALTER TABLE chunks DROP COLUMN vector_digest")
    caplog.clear()
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    assert f"the chunk vectors in {store} were stored before mdrag recorded their digests" in caplog.text
    assert _answers(cli) == before
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_embedded"] == 0, out + err
    with sqlite3.connect(store) as db:
        assert db.execute("SELECT count(*) FROM chunks WHERE vector_digest IS NULL").fetchone()[0] == 0
    caplog.clear()
    code, out, err = cli("status", "--verify")
    assert code == 0 and "were stored before" not in caplog.text, out + err
    _swap_vectors(mdrag_home)
    code, out, err = cli("status", "--verify")
    assert code == 1 and f"2 chunk vector(s) in {store} are damaged" in out, out + err
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, out + err
    assert _answers(cli) == before
    _assert_whole(cli, total)


# -- a damaged store found and repaired, on Milvus Lite (the FAISS side: the tests above) --------------------


def flip(path: Path, size: int = 64) -> None:
    """Flip ``size`` bytes in the middle of ``path``, keeping its size and times (as bit rot leaves it)."""
    st = path.stat()
    with open(path, "r+b") as f:
        f.seek(max(0, st.st_size - size) // 2)
        data = f.read(size)
        f.seek(max(0, st.st_size - size) // 2)
        f.write(bytes(b ^ 0xFF for b in data))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))


def _flip(pattern: str) -> Callable[[Path], None]:
    def damage(home: Path) -> None:
        files = sorted(_collection(home).glob(pattern))
        assert files, pattern
        flip(files[0])

    damage.__name__ = f"64 bytes flipped in {pattern}, its time kept"
    return damage


#: (damage, what every command says): a collection Milvus Lite cannot open, and a data file that is not the
#: one its run wrote (Milvus Lite reads it without an error: its rows cannot be trusted).
UNREADABLE = [
    (_flip("schema.json"), "Milvus Lite cannot open"),
    (_flip("partitions/*/data/data_*.parquet"), "is not the data file its run wrote"),
]


@pytest.mark.parametrize(("damage", "said"), UNREADABLE, ids=[d.__name__ for d, _ in UNREADABLE])
def test_a_plain_index_fails_on_a_store_it_cannot_read_as_status_and_search_do(
    cli, docs: Path, mdrag_home: Path, damage: Callable[[Path], None], said: str
) -> None:
    """On Milvus Lite, the run with nothing to do said "done" (its shortcut looked at the
    files' sizes and times), and a changed data file was served."""
    total = _build(cli, docs)
    damage(mdrag_home)
    messages = set()
    for argv in (("index",), ("status",), ("search", *_QUERY), ("index", "--json", "-q")):
        code, out, err = cli(*argv)
        assert code == 1 and out == "", (argv, out, err)
        assert said in err and "`mdrag index --rebuild`" in err and "Traceback" not in err, (argv, err)
        messages.add(err.strip().splitlines()[-1])
    assert len(messages) == 1, f"one message from every command: {messages}"
    code, out, err = cli("index", "--rebuild", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err
    assert list((mdrag_home / "cache" / "damaged").iterdir()), "set aside, not deleted"
    _assert_whole(cli, total)
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_embedded"] == 0, err


def test_a_run_with_nothing_to_do_still_skips_the_store_when_it_is_whole(
    cli, docs: Path, mdrag_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks above cost the run with nothing to do no opening of the store (their sha256 only)."""
    _build(cli, docs)
    opened: list[bool] = []
    real = MilvusStore.open

    def counting(self: MilvusStore, *args: Any, **kwargs: Any) -> bool:
        opened.append(True)
        return real(self, *args, **kwargs)

    monkeypatch.setattr(MilvusStore, "open", counting)
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["unchanged"] == len(list(docs.rglob("*.md"))), err
    assert not opened


def edit_texts(home: Path, every: int = 2) -> set[str]:
    """Prefix the text of every ``every``-th chunk (by id) with HACKED, through pymilvus (an upsert of the
    whole row: its content hash, vector and BM25 text kept); the ids of those chunks."""
    from pymilvus import MilvusClient

    from mdrag.store.milvus.rows import FIELDS

    client = MilvusClient(str(home / "cache" / "milvus.db"))
    try:
        client.load_collection("mdrag_default")
        fields = ["id", *FIELDS, "vector", "bm25_text"]
        rows = client.query("mdrag_default", filter="", output_fields=fields, limit=16384)
        rows = sorted(rows, key=lambda r: r["id"])[::every]
        for r in rows:
            r["text"] = "HACKED " + r["text"]
        client.upsert("mdrag_default", rows)
        client.flush("mdrag_default")
    finally:
        client.close()
    return {r["id"] for r in rows}


def _edit_faiss(home: Path) -> set[str]:
    _sql("UPDATE chunks SET text = 'HACKED ' || text WHERE n % 2 = 0")(home)
    with sqlite3.connect(home / "cache" / "faiss" / "default.sqlite") as db:
        return {r[0] for r in db.execute("SELECT id FROM chunks WHERE text LIKE 'HACKED %'")}


@pytest.mark.parametrize("backend", ["milvus", "faiss"])
def test_edited_chunk_texts_are_found_by_verify_and_their_files_read_again(
    cli, docs: Path, mdrag_home: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """On both stores, a text edited in the store no longer has its content hash: a search
    leaves it out, saying so, `status --verify` names it, and the next `mdrag index` reads its file again."""
    total = _build(cli, docs)
    before = _rows(cli("search", *_QUERY)[1])
    edited = edit_texts(mdrag_home) if backend == "milvus" else _edit_faiss(mdrag_home)
    assert edited
    code, out, err = cli("search", *_QUERY)  # never served: its text no longer has its content hash
    assert code == 0 and not any("HACKED" in t for _, t in _rows(out)), out
    assert "result(s) left out: their text in the index store" in caplog.text, caplog.text
    assert "`mdrag status --verify` finds every such chunk" in caplog.text
    code, out, err = cli("status", "--verify")
    assert code == 1 and f"the text of {len(edited)} chunk(s) in {mdrag_home / 'cache'}" in out, out + err
    assert "(edited)" in out and "run `mdrag index` to repair it" in out, out
    code, out, err = cli("index", "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] == total and s["chunks_embedded"] >= len(edited), (s, err)
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    after = _rows(cli("search", *_QUERY)[1])
    assert after == before and not any("HACKED" in t for _, t in after)
    _assert_whole(cli, total)


def _move_paths(home: Path, backend: str) -> set[str]:
    """Point a third of the chunks (by id) at /etc/passwd, as ../../etc/passwd under their folder (FAISS: and one
    more as passwd under the folder /etc): the ids."""
    if backend == "faiss":
        _sql("UPDATE chunks SET rel_path = '../../etc/passwd', path = '/etc/passwd' WHERE n % 3 = 0")(home)
        one = "(SELECT max(n) FROM chunks WHERE n % 3 != 0)"
        _sql(f"UPDATE chunks SET root = '/etc', rel_path = 'passwd', path = '/etc/passwd' WHERE n = {one}")(home)
        with sqlite3.connect(_faiss_file(home, "sqlite")) as db:
            return {r[0] for r in db.execute("SELECT id FROM chunks WHERE path = '/etc/passwd'")}
    from pymilvus import MilvusClient

    from mdrag.store.milvus.rows import FIELDS

    client = MilvusClient(str(home / "cache" / "milvus.db"))
    try:
        client.load_collection("mdrag_default")
        fields = ["id", *FIELDS, "vector", "bm25_text"]
        rows = sorted(
            client.query("mdrag_default", filter="", output_fields=fields, limit=16384), key=lambda r: r["id"]
        )
        rows = rows[::3]
        for r in rows:
            r["rel_path"], r["path"] = "../../etc/passwd", "/etc/passwd"
        client.upsert("mdrag_default", rows)
        client.flush("mdrag_default")
    finally:
        client.close()
    return {r["id"] for r in rows}


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_a_result_whose_path_leaves_the_index_folders_is_never_shown_nor_opened(
    cli, docs: Path, mdrag_home: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A path changed in the store to lead out of the index's folders: a search leaves those results out,
    saying so once with how many and what repairs it, `get` never reads the file it names, `status --verify`
    names the damage and the next `mdrag index` repairs it."""
    total = _build(cli, docs)
    before = _answers(cli)
    moved = _move_paths(mdrag_home, backend)
    assert moved
    caplog.clear()
    code, out, err = cli("search", *_QUERY)
    assert code == 0, err
    results = json.loads(out)
    assert results and not moved & {r["chunk_id"] for r in results}, results
    assert not any(r["path"] == "/etc/passwd" or ".." in r["rel_path"] for r in results), results
    said = [r.getMessage() for r in caplog.records if "not inside the index's folders" in r.getMessage()]
    assert len(said) == 1, caplog.text
    assert re.match(r"\d+ result\(s\) left out: their path in the index store ", said[0]), said
    assert "`mdrag status --verify`" in said[0] and "`mdrag index`" in said[0], said
    for ref in ("../../etc/passwd", "/etc/passwd", sorted(moved)[0]):
        code, out, err = cli("get", ref, "--json")
        assert "root:" not in out, (ref, out)  # /etc/passwd's first line is never served
    code, out, err = cli("status", "--verify")
    assert code == 1, out + err
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err
    assert _answers(cli) == before
    _assert_whole(cli, total)


def _zebra_bm25(home: Path, backend: str) -> set[str]:
    """Write 'zebra zebra zebra' as the BM25 text of half the chunks (by id): their ids."""
    if backend == "faiss":
        _sql("UPDATE chunks SET bm25_text = 'zebra zebra zebra' WHERE n % 2 = 0")(home)
        with sqlite3.connect(_faiss_file(home, "sqlite")) as db:
            return {r[0] for r in db.execute("SELECT id FROM chunks WHERE bm25_text = 'zebra zebra zebra'")}
    from pymilvus import MilvusClient

    from mdrag.store.milvus.rows import FIELDS

    client = MilvusClient(str(home / "cache" / "milvus.db"))
    try:
        client.load_collection("mdrag_default")
        fields = ["id", *FIELDS, "vector", "bm25_text"]
        rows = sorted(
            client.query("mdrag_default", filter="", output_fields=fields, limit=16384), key=lambda r: r["id"]
        )
        rows = rows[::2]
        for r in rows:
            r["bm25_text"] = "zebra zebra zebra"
        client.upsert("mdrag_default", rows)
        client.flush("mdrag_default")
    finally:
        client.close()
    return {r["id"] for r in rows}


@pytest.mark.parametrize("backend", ["faiss", "milvus"])
def test_a_changed_bm25_text_is_found_by_verify_and_built_again_by_index(
    cli, docs: Path, mdrag_home: Path, backend: str
) -> None:
    """The BM25 text is the chunk's text as BM25 reads it: one changed in the store (found only once the
    FAISS store builds its BM25 index from SQLite) is named by `status --verify` and made again from the
    chunk's text by the next `mdrag index`."""
    total = _build(cli, docs)
    before = _answers(cli, "--mode", "hybrid")
    changed = _zebra_bm25(mdrag_home, backend)
    assert changed
    if backend == "faiss":
        _faiss_file(mdrag_home, "bm25").unlink()  # its BM25 index is built from SQLite's texts now
    code, out, err = cli("status", "--verify")
    assert code == 1, out + err
    assert f"the BM25 text of {len(changed)} chunk(s) in {mdrag_home / 'cache'}" in out, out
    code, out, err = cli("index", "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == total, err
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    code, out, err = cli("search", "zebra", "--json", "--threshold", "0", "--mode", "bm25")
    assert code == 0 and json.loads(out) == [], out + err
    assert _answers(cli, "--mode", "hybrid") == before
    _assert_whole(cli, total)


def test_a_text_milvus_holds_cut_to_its_field_passes_verify(tmp_path: Path) -> None:
    """A chunk text over the text field's 65,535 bytes is kept cut short: its content hash cannot be
    checked, and the cut is not damage."""
    text = "word " * 14000  # 70,000 bytes
    embedded = f"Long\n\n{text}"
    chunk = Chunk(
        id="a" * 32,
        text=text,
        context="Long",
        path=str(tmp_path / "long.md"),
        rel_path="long.md",
        root=str(tmp_path),
        heading_path=["Long"],
        level=1,
        position=0,
        content_hash=hashlib.sha256(embedded.encode()).hexdigest(),
    )
    embedder = HashEmbedder()
    store = MilvusStore(str(tmp_path / "milvus.db"), "cut", embedder.identity)
    try:
        store.open()
        store.upsert([chunk], embedder.embed([embedded]))
        store.end_run({chunk.id}, {chunk.id}, whole=True)
        assert store.check(thorough=True) == []
    finally:
        store.close()


# -- point 8: what status and search say is true --------------------------------


@pytest.mark.parametrize("backend", ["milvus", "faiss"])
def test_a_deleted_manifest_is_said_lost_with_what_the_next_index_does(
    cli, docs: Path, mdrag_home: Path, backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    total = _build(cli, docs)
    _manifest(mdrag_home).unlink()
    code, out, err = cli("status")
    assert code == 1, out + err
    assert f"note:         the manifest {_manifest(mdrag_home)} is missing, though the store holds {total}" in out
    assert "`mdrag index` takes the index's folders back from the store" in out, out
    assert "files:        unknown" in out and "last indexed: unknown" in out and "never" not in out, out
    code, out, err = cli("status", "--json")
    assert code == 1 and json.loads(out)["manifest_lost"], out
    code, out, err = cli("search", *_QUERY)
    said = err + caplog.text
    assert "is being built" not in said and "rebuilding" not in said, said
    if backend == "milvus":  # its searches read the committed chunks from the manifest: none can be trusted
        assert code == 1 and f"the manifest {_manifest(mdrag_home)} is missing" in err, err
        assert "run `mdrag index` to write it again" in err, err
    else:  # the FAISS store commits with SQLite: what it holds is what was committed
        assert code == 0, err
    code, out, err = cli("index", "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] == total and s["chunks_embedded"] == 0, (s, err)  # as the note says
    code, out, err = cli("status")
    assert code == 0 and "note:" not in out, out
    _assert_whole(cli, total)


@pytest.mark.slow
def test_verify_on_a_milvus_server_says_it_read_rows_not_files(
    cli, docs: Path, mdrag_home: Path, milvus_server: str
) -> None:
    name = f"verify{os.getpid()}"
    (mdrag_home / "config.yaml").write_text(f"store:\n  backend: milvus\nmilvus_uri: {milvus_server}\n")
    code, out, err = cli("index", str(docs), "--index", name, "--json", "-q")
    assert code == 0, err
    code, out, err = cli("status", "--verify", "--index", name)
    assert code == 0, out + err
    assert f"of the Milvus server at {milvus_server}, not its files (they are not on this machine)" in out, out
    assert "data files" not in out and "row count" not in out, out


def test_verify_on_milvus_lite_says_it_read_its_files(cli, docs: Path, mdrag_home: Path) -> None:
    _build(cli, docs)
    code, out, err = cli("status", "--verify")
    db = mdrag_home / "cache" / "milvus.db"
    assert code == 0 and "the row count, the data files' sha256, every row's text against its content" in out, out
    assert f"sampled vectors of the index store {db}" in out, out
    sums = mdrag_home / "cache" / "milvus.db.mdrag" / "mdrag_default.sums.json"
    sums.unlink()
    code, out, err = cli("status", "--verify")
    assert code == 1 and f"of the index store {db}, not its data files (their checksum record {sums}" in out, out


def test_an_empty_milvus_lite_collection_without_its_checksum_record_is_no_repair(
    cli, docs: Path, tmp_path: Path, mdrag_home: Path
) -> None:
    """A collection that holds no row and no checksum record (a first build killed after the store made its
    collection, before its first write) has nothing to check: the next run records it without a warning and
    reports no repair, as it would for a new index."""
    empty = tmp_path / "empty"
    empty.mkdir()
    code, out, err = cli("index", str(empty), "--json", "-q")
    assert code == 0 and json.loads(out)["chunks_total"] == 0, err
    sums = mdrag_home / "cache" / "milvus.db.mdrag" / "mdrag_default.sums.json"
    assert _collection(mdrag_home).is_dir()
    sums.unlink(missing_ok=True)
    (mdrag_home / "cache" / "manifests" / "default.json").unlink()
    code, out, err = cli("index", str(docs), "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] > 0, err
    assert not s["repaired"] and not any("recorded again" in w for w in s["warnings"]), s
    assert json.loads(sums.read_text())["data_files"], "recorded by the run that wrote the rows"


def _flip_data_file(home: Path) -> Path:
    """Change 64 bytes in the middle of the collection's first data file, its times kept: the file."""
    files = sorted(_collection(home).glob("partitions/*/data/data_*.parquet"))
    assert files
    st = files[0].stat()
    with open(files[0], "r+b") as f:
        f.seek(st.st_size // 2)
        data = f.read(64)
        f.seek(st.st_size // 2)
        f.write(bytes(b ^ 0xFF for b in data))
    os.utime(files[0], ns=(st.st_atime_ns, st.st_mtime_ns))
    return files[0]


@pytest.mark.parametrize(("lost", "first"), [("deleted", "status"), ("emptied", "verify")])
def test_a_lost_milvus_lite_checksum_record_is_named_and_written_again_by_index(
    cli, docs: Path, mdrag_home: Path, lost: str, first: str
) -> None:
    """The record of the data files' sha256, lost, is said by `status`, and the next `mdrag index` checks every
    row and writes it again: later damage to a data file is found again."""
    total = _build(cli, docs)
    sums = mdrag_home / "cache" / "milvus.db.mdrag" / "mdrag_default.sums.json"
    assert json.loads(sums.read_text())["data_files"]
    sums.unlink() if lost == "deleted" else sums.write_text("{}")
    code, out, err = cli("status", *(["--verify"] if first == "verify" else []))
    assert code == 1 and f"damaged:      the checksum record {sums} of " in out, out + err
    assert "is missing" in out, out
    code, out, err = cli("index", "--json", "-q")
    s = json.loads(out)
    assert code == 0 and s["chunks_total"] == total, err
    assert any(str(sums) in w and "recorded again" in w for w in s["warnings"]), s
    assert json.loads(sums.read_text())["data_files"], "written again"
    code, out, err = cli("status", "--verify")
    assert code == 0, out + err
    changed = _flip_data_file(mdrag_home)
    code, out, err = cli("status", "--verify")
    assert code == 1 and str(changed) in err and "`mdrag index --rebuild`" in err, out + err
