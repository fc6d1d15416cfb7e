"""Manifest: pure diff, atomic save, corrupt files become a rebuild."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from mdrag.errors import ManifestError
from mdrag.ingest.manifest import FileState, Manifest, diff


def _state(mtime: int = 1, size: int = 10, chunks: list[str] | None = None) -> FileState:
    return FileState(root="/r", rel_path="a.md", mtime_ns=mtime, size=size, hash="h", chunks=chunks or ["c1"])


def test_diff_finds_added_changed_removed_unchanged() -> None:
    known = {"/r/a.md": _state(), "/r/b.md": _state(), "/r/gone.md": _state()}
    found = {"/r/a.md": (1, 10), "/r/b.md": (2, 10), "/r/new.md": (5, 5)}
    d = diff(known, found)
    assert d.added == ["/r/new.md"]
    assert d.stat_changed == ["/r/b.md"]
    assert d.removed == ["/r/gone.md"]
    assert d.unchanged == ["/r/a.md"]


def test_size_change_with_same_mtime_is_a_change() -> None:
    assert diff({"/a": _state(1, 10)}, {"/a": (1, 11)}).stat_changed == ["/a"]


def _manifest() -> Manifest:
    m = Manifest(index="default", store_uri="/s.db", model={"model": "m", "dimension": 4}, chunking={"size": 1})
    m.files["/r/a.md"] = _state(chunks=["x", "y"])
    return m


def test_save_and_load_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "m" / "default.json"
    m = _manifest()
    m.save(path)
    loaded = Manifest.load(path)
    assert loaded == m
    assert loaded is not None and loaded.chunk_ids() == {"x", "y"} and loaded.chunk_count == 2
    assert [p.name for p in path.parent.iterdir()] == ["default.json"], "no temp files left"


def test_missing_or_corrupt_manifest_loads_as_none(tmp_path: Path, caplog) -> None:
    path = tmp_path / "default.json"
    assert Manifest.load(path) is None
    path.write_text('{"index": "default", "files": {')
    assert Manifest.load(path) is None
    assert "corrupt" in caplog.text
    path.write_text(json.dumps({"version": 99}))
    assert Manifest.load(path) is None


def test_failed_save_keeps_the_old_manifest_and_says_what_to_do(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "manifests" / "default.json"
    m = _manifest()
    m.save(path)
    before = path.read_text()
    m.files["/r/b.md"] = _state()

    def boom(*a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("os.fsync", boom)
    with pytest.raises(ManifestError, match="No space left on device. Free some space on that disk"):
        m.save(path)
    assert path.read_text() == before
    assert [p.name for p in path.parent.iterdir()] == ["default.json"]


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff\xfe\x00garbage",  # not UTF-8
        b"[]",
        b'{"version": 1, "index": "default", "store_uri": "/s", "model": {}, "chunking": {}, "files": null}',
        b'{"version": 1, "index": "default", "store_uri": "/s", "model": {}, "chunking": {}, "files": {"/a": 5}}',
        b'{"version": 1, "index": "default", "store_uri": "/s", "model": {}, "chunking": {}, "files": {"/a": {}}}',
        b'"a string"',
        b"",
    ],
)
def test_every_unreadable_manifest_loads_as_none(tmp_path: Path, raw: bytes, caplog) -> None:
    path = tmp_path / "default.json"
    path.write_bytes(raw)
    assert Manifest.load(path) is None
    assert "corrupt" in caplog.text


def test_a_manifest_changed_outside_mdrag_loads_unverified(tmp_path: Path, caplog) -> None:
    path = tmp_path / "default.json"
    _manifest().save(path)
    loaded = Manifest.load(path)
    assert loaded is not None and loaded.verified
    d = json.loads(path.read_text())
    d["files"]["/r/a.md"]["chunks"] = []  # the entry's chunks emptied by hand
    path.write_text(json.dumps(d, indent=2))
    edited = Manifest.load(path)
    assert edited is not None and not edited.verified
    assert "changed outside mdrag" in caplog.text
    edited.save(path)
    again = Manifest.load(path)
    assert again is not None and again.verified


def test_a_manifest_that_held_store_state_still_loads_verified(tmp_path: Path) -> None:
    """Manifests of older releases held the Milvus Lite store's state (rows_since_rewrite, store_fingerprint);
    the store keeps it now: such a manifest loads, checksum intact, and its next save drops those keys."""
    import hashlib

    path = tmp_path / "default.json"
    d = _manifest().to_json()
    d.update(rows_since_rewrite=7, store_fingerprint="ab" * 32)
    body = json.dumps(d, ensure_ascii=False, separators=(",", ":"))
    path.write_text(f'{body[:-1]},"checksum":"{hashlib.sha256(body.encode()).hexdigest()}"}}')
    loaded = Manifest.load(path)
    assert loaded is not None and loaded.verified and loaded == _manifest()
    loaded.save(path)
    assert "store_fingerprint" not in path.read_text() and "rows_since_rewrite" not in path.read_text()
