"""What the index holds, per file: the incremental indexer's memory.

The manifest is a JSON file written atomically (temp file, fsync, rename), so
a crash leaves either the old or the new version, never half of one. It ends
with a checksum of everything before it: a manifest changed outside mdrag (by
hand, or damaged on disk) that still parses loads with ``verified = False``,
and the indexer then checks every file's chunks against the store. One that
does not parse loads as None (the index is rebuilt, reusing stored vectors).
``diff`` is pure: stat results in, added / changed / removed / unchanged out.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from mdrag.errors import ManifestError
from mdrag.fileio import write_atomic

__all__ = ["Diff", "FileState", "Manifest", "PagePrints", "SkippedFile", "diff"]

log = logging.getLogger(__name__)

# 2: a file may be recorded as a copy of an identical one (``FileState.copy_of``). A manifest of version 1 loads
# (it has no copies); an earlier release reads one of version 2 as unreadable, and builds the index again.
VERSION = 2
_LOADS = (1, VERSION)
_CHECKSUM = ',"checksum":"'  # the last key of a saved manifest: sha256 of the text before it
_PRINTS = ("blocks", "passages", "own")  # PagePrints' lists of fingerprints, each saved as one string


@dataclass
class FileState:
    """One indexed file as it was when its chunks were written."""

    root: str  # the indexed folder the file was found under
    rel_path: str  # path under root, forward slashes
    mtime_ns: int
    size: int
    hash: str  # sha256 of the file's bytes: decides whether it changed
    chunks: list[str] = field(default_factory=list)  # ids of its chunks in the store
    # A notes vault's note (mdrag.parsers.vault): {"aliases": [...], "links": [notes as its links name them]};
    # None otherwise (and then not saved).
    note: dict[str, list[str]] | None = None
    # The file whose chunks stand for this one, its bytes the same (``hash``): this file has no chunks of its
    # own (mdrag.ingest.copies); None: the file has its own chunks (not saved).
    copy_of: str | None = None
    # An HTML page: the fingerprints of the blocks its site repeats, left out of its chunks
    # (mdrag.ingest.boilerplate); None otherwise (and then not saved).
    dropped: list[str] | None = None
    # An HTML page: its passages that other pages of its folder leave out for it (mdrag.ingest.passages), by
    # fingerprint: [first line, last line] of the passage here (0, 0: not known); None: none (not saved).
    kept: dict[str, list[int]] | None = None


def _state(s: FileState) -> dict[str, Any]:
    """A file state for JSON: ``note``, ``copy_of``, ``dropped`` and ``kept`` only where there is one."""
    return {k: v for k, v in vars(s).items() if v is not None or k not in ("note", "copy_of", "dropped", "kept")}


@dataclass
class PagePrints:
    """One HTML page's block fingerprints (mdrag.ingest.boilerplate), as the page was when it was read:
    valid while it is unchanged, whether its chunks are written yet or not."""

    root: str  # the indexed folder the page was found under
    rel_path: str  # path under root, forward slashes
    mtime_ns: int
    size: int
    blocks: list[str] = field(default_factory=list)  # sorted distinct fingerprints of its blocks (saved: one string)
    # Of those, the blocks long enough to be kept on one page only (mdrag.ingest.passages; saved: one string)
    passages: list[str] = field(default_factory=list)
    # Of those, the passages under a heading of their own (mdrag.ingest.passages.is_own; saved: one string)
    own: list[str] = field(default_factory=list)

    def current(self, found: tuple[str, str, int, int]) -> bool:
        """Whether these prints are of the page the scan found, ``(root, rel_path, mtime_ns, size)``."""
        return (self.root, self.rel_path, self.mtime_ns, self.size) == tuple(found)


@dataclass
class SkippedFile:
    """A file a parse failed on, as it was then: it is not parsed again until it changes, or ``key`` does."""

    root: str  # the indexed folder it was found under
    mtime_ns: int
    size: int
    reason: str
    key: str  # what else would change the outcome (mdrag's version, the parse limits)


@dataclass
class Manifest:
    """Per-index state: settings that must match, and every file's state."""

    index: str
    store_uri: str
    model: dict[str, Any]  # embedder identity: {"model": ..., "dimension": ...}
    chunking: dict[str, Any]  # ChunkSettings.as_dict() plus the embedder window
    roots: list[str] = field(default_factory=list)  # the index's folders, kept while missing on disk
    # Folders being removed (`mdrag remove`): their chunks may still be in the store until the
    # removal finishes, so a repair after a crash deletes them too.
    retired_roots: list[str] = field(default_factory=list)
    files: dict[str, FileState] = field(default_factory=dict)  # absolute path -> state
    skipped: dict[str, SkippedFile] = field(default_factory=dict)  # absolute path -> the parse failure
    # Absolute path -> an HTML page's block fingerprints, indexed or about to be: what decides which blocks
    # a site repeats (mdrag.ingest.boilerplate).
    pages: dict[str, PagePrints] = field(default_factory=dict)
    dirty: bool = False  # a run was writing to the store and did not finish
    last_indexed: float | None = None  # unix time of the last finished run
    # While a run writes (``dirty``): the last committed state, which readers keep seeing until the run
    # commits (``files`` holds the run's progress). ``committed_ids`` None: ``files`` is the committed state.
    committed_ids: list[str] | None = None
    committed_roots: list[str] | None = None  # the folders those ids account for (None: all of them)
    committed_files: int | None = None  # how many files those ids are (None: not recorded: the manifest's files)
    progress: list[int] | None = None  # [files done, files to do] of the run writing, as last saved
    # [files committed, files in all] of a first build that committed part of its files (in steps, so that
    # readers search what it has done); None: the index holds every file its last finished run found.
    partial: list[int] | None = None
    grown_since: float | None = None  # unix time that first build started (its steps grow with it); None: none
    version: int = VERSION
    # False when the file's checksum did not match (changed outside mdrag): not saved.
    verified: bool = field(default=True, compare=False)

    @property
    def chunk_count(self) -> int:
        return sum(len(f.chunks) for f in self.files.values())

    @property
    def file_count(self) -> int:
        """The files of the last committed state (see :meth:`visible`): a run's progress is not counted."""
        if self.dirty and self.committed_ids is not None and self.committed_files is not None:
            return self.committed_files
        return len(self.files)

    def chunk_ids(self) -> set[str]:
        return {cid for f in self.files.values() for cid in f.chunks}

    def visible(self) -> tuple[frozenset[str], frozenset[str] | None]:
        """The last committed state, (chunk ids, the folders they account for): what readers see while a
        run writes the next one. A first build that has not committed yet: no id, and every folder."""
        if self.dirty and self.committed_ids is not None:
            roots = self.committed_roots
            return frozenset(self.committed_ids), frozenset(roots) if roots else None
        return frozenset(self.chunk_ids()), frozenset(self.roots)

    @property
    def building(self) -> bool:
        """A first build is writing (or was stopped): nothing has been committed for readers yet."""
        return self.dirty and self.committed_ids is not None and not self.committed_ids

    def keep_committed(self, before: Manifest | None) -> None:
        """Record ``before``'s committed state (see :meth:`visible`) before this run's first write."""
        if self.committed_ids is not None:
            return
        if before is None:
            self.committed_ids, self.committed_roots, self.committed_files = [], None, 0
            return
        self.committed_files = before.file_count
        ids, roots = before.visible()
        self.committed_ids, self.committed_roots = sorted(ids), sorted(roots) if roots is not None else None

    def publish(self, ids: set[str], roots: Sequence[str]) -> None:
        """The run's new state is the committed one (its chunks are written; the replaced ones not yet deleted)."""
        self.committed_ids = sorted(ids)
        self.committed_files = len(self.files)
        self.committed_roots = sorted({*roots, *(self.committed_roots or ())})

    def to_json(self) -> dict[str, Any]:
        """A view for ``json.dumps``: it shares this manifest's lists and dicts (no deep copy)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "verified"}
        d["files"] = {p: _state(s) for p, s in sorted(self.files.items())}
        d["skipped"] = {p: vars(s) for p, s in sorted(self.skipped.items())}
        d["pages"] = {
            p: {**vars(s), **{k: " ".join(getattr(s, k)) for k in _PRINTS}} for p, s in sorted(self.pages.items())
        }
        return d

    @classmethod
    def from_json(cls, d: Any) -> Manifest:
        """A manifest from parsed JSON; ValueError naming what is wrong when it is not one."""
        if not isinstance(d, dict):
            raise ValueError(f"a JSON object was expected, not {type(d).__name__}")
        # Keys the manifest no longer has (the store keeps its own state): "rows_since_rewrite",
        # "store_fingerprint". A manifest that holds them loads; they are dropped at its next save.
        if d.get("version") not in _LOADS:
            raise ValueError(f"manifest version {d.get('version')!r}, expected one of {_LOADS}")
        raw_files = d.get("files", {})
        if not isinstance(raw_files, dict):
            raise ValueError(f"'files' must be an object, not {type(raw_files).__name__}")
        files = {}
        for p, s in raw_files.items():
            state = FileState(**s) if isinstance(s, dict) else None
            if state is None or not all(isinstance(c, str) for c in state.chunks or []):
                raise ValueError(f"the entry for {p!r} is not a file state")
            if state.copy_of is not None and not isinstance(state.copy_of, str):
                raise ValueError(f"the entry for {p!r} names its original as {state.copy_of!r}, not a path")
            state.chunks = list(state.chunks or [])
            files[p] = state
        raw_skipped = d.get("skipped") or {}  # absent in manifests of earlier releases
        if not isinstance(raw_skipped, dict) or not all(isinstance(s, dict) for s in raw_skipped.values()):
            raise ValueError("'skipped' must be an object of skipped files")
        raw_pages = d.get("pages") or {}  # absent in manifests of earlier releases
        if not isinstance(raw_pages, dict) or not all(isinstance(s, dict) for s in raw_pages.values()):
            raise ValueError("'pages' must be an object of page fingerprints")
        return cls(
            index=str(d["index"]),
            store_uri=str(d["store_uri"]),
            model=dict(d["model"]),
            chunking=dict(d["chunking"]),
            roots=[str(r) for r in d.get("roots") or []],
            retired_roots=[str(r) for r in d.get("retired_roots") or []],
            files=files,
            skipped={p: SkippedFile(**s) for p, s in raw_skipped.items()},
            pages={p: PagePrints(**{**s, **{k: _blocks(s.get(k)) for k in _PRINTS}}) for p, s in raw_pages.items()},
            dirty=bool(d.get("dirty", False)),
            last_indexed=d.get("last_indexed"),
            committed_ids=_strings(d.get("committed_ids"), "committed_ids"),
            committed_roots=_strings(d.get("committed_roots"), "committed_roots"),
            committed_files=d["committed_files"] if isinstance(d.get("committed_files"), int) else None,
            progress=[int(n) for n in d["progress"]] if isinstance(d.get("progress"), list) else None,
            partial=[int(n) for n in d["partial"]] if isinstance(d.get("partial"), list) else None,
            grown_since=float(d["grown_since"]) if isinstance(d.get("grown_since"), (int, float)) else None,
        )

    @classmethod
    def load(cls, path: Path) -> Manifest | None:
        """The manifest at ``path``, or None (logged) when missing or unreadable.

        A manifest that parses but whose checksum does not match loads with
        ``verified`` False: the indexer reconciles it with the store.
        """
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as e:
            log.warning("cannot read manifest %s (%s): the next `mdrag index` writes it again", path, e)
            return None
        try:
            raw = data.decode("utf-8")
            m = cls.from_json(json.loads(raw))
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # UnicodeDecodeError is a ValueError
            log.warning(
                "manifest %s is corrupt (%s): the next `mdrag index` writes it again (taking the folders back "
                "from the store)",
                path,
                str(e)[:200],
            )
            return None
        m.verified = _checksum_ok(raw)
        if not m.verified:
            log.warning("manifest %s was changed outside mdrag: checking it against the store", path)
        return m

    def save(self, path: Path) -> None:
        """Write atomically (see :func:`mdrag.fileio.write_atomic`), with a checksum as its last key.

        Raises ManifestError saying what to do when the file cannot be written
        (a full disk, a read-only folder); the previous manifest stays as it was.
        """
        body = json.dumps(self.to_json(), ensure_ascii=False, separators=(",", ":"))
        digest = hashlib.sha256(body.encode("utf-8")).hexdigest()
        try:
            write_atomic(path, f'{body[:-1]}{_CHECKSUM}{digest}"}}')
        except OSError as e:
            if e.errno in (errno.ENOSPC, errno.EDQUOT):
                todo = "Free some space on that disk"
            elif e.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
                todo = "Make that folder writable"
            else:
                todo = "Check that disk"
            raise ManifestError(
                f"cannot save the index manifest {path}: {e.strerror or e}. {todo} and run "
                "`mdrag index` again: what was indexed is kept, and that run repairs the rest."
            ) from e
        self.verified = True

    def mark_finished(self) -> None:
        self.dirty = False
        self.last_indexed = time.time()
        self.committed_ids = self.committed_roots = self.progress = self.committed_files = None


def _strings(value: Any, key: str) -> list[str] | None:
    """A list of strings from JSON, or None; ValueError naming ``key`` when it is something else."""
    if value is None:
        return None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key!r} must be a list of strings")
    return list(value)


def _blocks(value: Any) -> list[str]:
    """A page's block fingerprints from JSON: one string, space-separated (a list is read too)."""
    return [str(v) for v in value] if isinstance(value, list) else str(value or "").split()


def _checksum_ok(raw: str) -> bool:
    """Whether ``raw`` ends with the checksum :meth:`Manifest.save` wrote."""
    cut = raw.rfind(_CHECKSUM)
    if cut < 0 or not raw.endswith('"}'):
        return False
    body = raw[:cut] + "}"
    return hashlib.sha256(body.encode("utf-8")).hexdigest() == raw[cut + len(_CHECKSUM) : -2]


@dataclass
class Diff:
    added: list[str] = field(default_factory=list)
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
