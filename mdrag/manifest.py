"""What the index holds, per file: the incremental indexer's memory.

The manifest is a JSON file written atomically (temp file, fsync, rename), so
a crash leaves either the old or the new version, never half of one. ``diff``
is pure: stat results in, added / changed / removed / unchanged out.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

__all__ = ["Diff", "FileState", "Manifest", "diff", "write_atomic"]

log = logging.getLogger(__name__)

VERSION = 1


def write_atomic(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` atomically: a temp file beside it, fsync, rename.

    A crash leaves the old file or the new one, never half of one.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    try:  # make the rename itself durable
        dfd = os.open(path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


@dataclass
class FileState:
    """One indexed file as it was when its chunks were written."""

    root: str  # the indexed folder the file was found under
    rel_path: str  # path under root, forward slashes
    mtime_ns: int
    size: int
    hash: str  # sha256 of the file's bytes: decides whether it changed
    chunks: list[str] = field(default_factory=list)  # ids of its chunks in the store


@dataclass
class Manifest:
    """Per-index state: settings that must match, and every file's state."""

    index: str
    store_uri: str
    model: dict[str, Any]  # embedder identity: {"model": ..., "dimension": ...}
    chunking: dict[str, Any]  # ChunkSettings.as_dict() plus the embedder window
    roots: list[str] = field(default_factory=list)
    files: dict[str, FileState] = field(default_factory=dict)  # absolute path -> state
    dirty: bool = False  # a run was writing to the store and did not finish
    last_indexed: float | None = None  # unix time of the last finished run
    # Chunks written by small updates since the collection was last written whole
    # (Milvus Lite keeps BM25 statistics per segment; see indexer._refresh_bm25).
    rows_since_rewrite: int = 0
    # MilvusStore.fingerprint() when the last run's store was closed: unchanged,
    # a run that finds no file changed need not open the store.
    store_fingerprint: str | None = None
    version: int = VERSION

    @property
    def chunk_count(self) -> int:
        return sum(len(f.chunks) for f in self.files.values())

    def chunk_ids(self) -> set[str]:
        return {cid for f in self.files.values() for cid in f.chunks}

    def to_json(self) -> dict[str, Any]:
        """A view for ``json.dumps``: it shares this manifest's lists and dicts (no deep copy)."""
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["files"] = {p: vars(s) for p, s in sorted(self.files.items())}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Manifest:
        if d.get("version") != VERSION:
            raise ValueError(f"manifest version {d.get('version')!r}, expected {VERSION}")
        files = {p: FileState(**s) for p, s in d.get("files", {}).items()}
        return cls(
            index=d["index"],
            store_uri=d["store_uri"],
            model=dict(d["model"]),
            chunking=dict(d["chunking"]),
            roots=list(d.get("roots", [])),
            files=files,
            dirty=bool(d.get("dirty", False)),
            last_indexed=d.get("last_indexed"),
            rows_since_rewrite=int(d.get("rows_since_rewrite", 0)),
            store_fingerprint=d.get("store_fingerprint"),
        )

    @classmethod
    def load(cls, path: Path) -> Manifest | None:
        """The manifest at ``path``, or None (logged) when missing or unreadable."""
        try:
            raw = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read manifest %s (%s): rebuilding the index", path, e)
            return None
        try:
            return cls.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError) as e:
            log.warning("manifest %s is corrupt (%s): rebuilding the index", path, e)
            return None

    def save(self, path: Path) -> None:
        """Write atomically (see :func:`write_atomic`)."""
        write_atomic(path, json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":")))

    def mark_finished(self) -> None:
        self.dirty = False
        self.last_indexed = time.time()


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)  # new paths
    stat_changed: list[str] = field(default_factory=list)  # mtime or size differ: hash decides
    removed: list[str] = field(default_factory=list)  # in the manifest, gone from disk
    unchanged: list[str] = field(default_factory=list)  # same mtime and size


def diff(known: dict[str, FileState], found: dict[str, tuple[int, int]]) -> Diff:
    """Compare the manifest with a scan: ``found`` maps path -> (mtime_ns, size)."""
    d = Diff()
    for path, (mtime_ns, size) in sorted(found.items()):
        state = known.get(path)
        if state is None:
            d.added.append(path)
        elif state.mtime_ns == mtime_ns and state.size == size:
            d.unchanged.append(path)
        else:
            d.stat_changed.append(path)
    d.removed = sorted(set(known) - set(found))
    return d
