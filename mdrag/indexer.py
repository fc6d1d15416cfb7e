"""Keep an index current: scan -> diff -> parse -> chunk -> embed -> store.

Crash safety comes from the order of writes. Before the store is touched the
manifest is saved with ``dirty = True``; chunks are upserted under ids
derived from their position and content (so a repeated write replaces, never
duplicates), and the store is flushed once, at the end of the run, before the
manifest is saved clean. Ids that the new state no longer uses (edited
chunks, deleted files) are deleted last, after ``on_commit`` has been told
the new set of ids: a reader that searches only the committed ids (`Index`
does) sees the old state until then and the new one after, never a mix. A
run that is killed at any point leaves ``dirty = True``, and the next run
compares the store's ids with the manifest's, deletes any orphans, and
re-indexes any file whose chunks are missing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import queue
import random
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import numpy as np

from mdrag.chunking import ChunkSettings, chunk_document
from mdrag.embedding.base import Embedder
from mdrag.errors import ParseError, UnsupportedFormatError
from mdrag.manifest import FileState, Manifest, diff
from mdrag.parsers import parse_file, supported_extensions
from mdrag.store.milvus import MilvusStore
from mdrag.types import Chunk

__all__ = ["IndexSummary", "record_fingerprint", "scan", "update_index"]

log = logging.getLogger(__name__)

T = TypeVar("T")
A = TypeVar("A")
R = TypeVar("R")

_BATCH_CHUNKS = 512  # chunks per embed + upsert round
_PARSE_AHEAD = 64  # parsed files waiting for the embedder, at most
_SAVE_EVERY_S = 5.0  # how often a long run records its progress in the manifest
_SKIP_DIRS = {"node_modules", "__pycache__"}
# Milvus Lite: rewrite the index whole once small updates have written this share of it.
_BM25_REWRITE_SHARE = 0.1
_BM25_SEGMENT_ROWS = 512  # Milvus Lite: fewest chunks a run writes in one segment (see _pad_segment)


@dataclass
class IndexSummary:
    """What one run did; ``to_dict()`` is the JSON shape of the CLI summary."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0  # same mtime and size, or touched with the same content
    touched: int = 0  # of the unchanged: mtime or size changed, content did not ("already embedded")
    skipped: int = 0
    chunks_embedded: int = 0
    chunks_reused: int = 0  # content already embedded: vector taken from the store
    chunks_deleted: int = 0
    chunks_total: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # of which in the embedder (loading the model the first time included)
    rebuild: str | None = None  # why the whole corpus was re-chunked, if it was
    repaired: bool = False  # a previous run was interrupted and its leftovers were cleaned
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["skipped_files"] = [{"path": p, "reason": r} for p, r in self.skipped_files]
        return d


def _file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def scan(folders: Sequence[str | Path], summary: IndexSummary | None = None) -> dict[str, tuple[str, str, int, int]]:
    """Supported files under ``folders``: abs path -> (root, rel_path, mtime_ns, size).

    Hidden folders and files are left out. A missing or empty folder is a
    warning, never an error. A file under two given folders belongs to the first.
    """
    exts = set(supported_extensions())
    out: dict[str, tuple[str, str, int, int]] = {}
    for folder in folders:
        root = Path(folder).expanduser().resolve()
        if not root.is_dir():
            _warn(summary, f"folder {folder} does not exist or is not a folder: skipped")
            continue
        before = len(out)
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in _SKIP_DIRS)
            for name in sorted(filenames):
                if name.startswith(".") or Path(name).suffix.lower() not in exts:
                    continue
                p = Path(dirpath) / name
                try:
                    st = p.stat()
                except OSError as e:
                    _warn(summary, f"cannot stat {p}: {e}")
                    continue
                if not p.is_file():
                    continue
                out.setdefault(str(p), (str(root), p.relative_to(root).as_posix(), st.st_mtime_ns, st.st_size))
        if len(out) == before:
            _warn(summary, f"folder {folder} has no supported files ({', '.join(sorted(exts))})")
    return out


def _warn(summary: IndexSummary | None, msg: str) -> None:
    log.warning("%s", msg)
    if summary is not None:
        summary.warnings.append(msg)


def update_index(
    store: MilvusStore,
    embedder: Embedder,
    manifest_path: Path,
    index_name: str,
    folders: Sequence[str | Path],
    settings: ChunkSettings,
    rebuild: bool = False,
    progress: bool = False,
    on_upsert: Callable[[int], None] | None = None,
    on_commit: Callable[[set[str]], None] | None = None,
    open_store: Callable[[], None] | None = None,
) -> IndexSummary:
    """Bring the store in line with ``folders``; returns what was done.

    ``store`` must be open, or ``open_store()`` opens it: a run that finds
    nothing to do, with the store's fingerprint unchanged since the manifest
    recorded it, does not open it at all. ``rebuild`` drops the collection and starts over.
    ``on_upsert(n)`` is called after n chunks with new ids are written (not yet
    committed); ``on_commit(ids)`` with the new state's chunk ids, before the
    ids it replaces are deleted.
    """
    t0 = time.perf_counter()
    summary = IndexSummary()
    roots = [str(Path(f).expanduser().resolve()) for f in folders]
    # What decides the stored chunks: a change re-chunks (vectors are reused by content hash).
    chunking = _chunking(store, embedder, settings)
    old = None if rebuild else Manifest.load(manifest_path)
    if rebuild:
        summary.rebuild = "requested (--rebuild)"
    elif old is None:
        summary.rebuild = "no manifest" if not manifest_path.exists() else "manifest unreadable"
    else:
        summary.rebuild = _rebuild_reason(old, store, embedder, chunking)
    found = scan(roots, summary)
    # The store's files as the last clean run left them: no need to count its rows.
    as_left = old is not None and not old.dirty and _fingerprint_matches(old, store)
    if open_store is not None:
        if old is not None and as_left and summary.rebuild is None and _unchanged(old, roots, found):
            summary.unchanged, summary.chunks_total = len(found), old.chunk_count
            summary.seconds = round(time.perf_counter() - t0, 3)
            return summary
        open_store()
    if rebuild:
        store.drop()
        store.open(create=True)
    if summary.rebuild:
        log.info("full re-index: %s", summary.rebuild)

    m = Manifest(index=index_name, store_uri=store.uri, model=embedder.identity, chunking=chunking, roots=roots)
    if old is not None and summary.rebuild is None:
        m.files = old.files
        m.dirty = old.dirty
        m.rows_since_rewrite = old.rows_since_rewrite
    # The folders this manifest accounts for: other indexers may write other
    # folders into the same collection, and their chunks are not ours to repair.
    scope = sorted(set(roots) | set(old.roots if old is not None else []))
    if not m.dirty and m.files and not as_left and store.count(scope) != m.chunk_count:
        log.warning("index %r: the store and the manifest disagree", index_name)
        m.dirty = True
    repair = summary.rebuild is not None or m.dirty
    if m.dirty:
        summary.repaired = True
        log.warning("the previous run of index %r did not finish: repairing", index_name)
        _drop_incomplete(store, m, scope)

    # A store that starts empty holds no vectors to reuse but the ones this run writes (texts that
    # repeat): only their hashes are looked up.
    run_hashes: set[int] | None = set() if summary.rebuild is not None and store.count() == 0 else None

    d = diff(m.files, {p: (mt, sz) for p, (_, _, mt, sz) in found.items()})
    # A file now found under another root gets new chunk ids: re-chunk it.
    moved = [p for p in d.unchanged if (m.files[p].root, m.files[p].rel_path) != found[p][:2]]
    d.unchanged = [p for p in d.unchanged if p not in set(moved)]
    summary.unchanged = len(d.unchanged)

    todo: list[tuple[str, str | None]] = [(p, None) for p in d.added + moved]  # (path, error)
    for p in d.stat_changed:  # mtime or size differ: the content hash decides
        try:
            data = Path(p).read_bytes()
        except OSError as e:
            todo.append((p, f"cannot read: {e}"))
            continue
        h = _file_hash(data)
        known = m.files[p]
        if h == known.hash and (known.root, known.rel_path) == found[p][:2]:
            known.mtime_ns, known.size = found[p][2], found[p][3]
            summary.unchanged += 1
            summary.touched += 1
            log.info("%s: touched, content unchanged: already embedded", p)
        else:
            todo.append((p, None))  # read again when parsed: memory stays bounded

    writes = bool(todo or d.removed or repair)
    if writes:
        m.dirty = True
        m.save(manifest_path)

    last_save = time.monotonic()
    written: set[str] = set()  # ids of the chunks this run upserted
    retired: list[str] = []  # ids the new state no longer uses: deleted after the commit
    batch: list[tuple[str, FileState, list[Chunk]]] = []
    batch_chunks = 0

    def parse(item: tuple[str, str | None]) -> tuple[FileState | None, list[Chunk], str | None]:
        path, err = item
        root, rel, mtime_ns, size = found[path]
        return (None, [], err) if err else _parse(path, root, rel, mtime_ns, size, embedder, settings)

    # Files are parsed and chunked in a thread while the last batch is embedded.
    for (path, _), (state, chunks, err) in _progress(_ahead(todo, parse), len(todo), progress):
        is_new = path not in m.files
        if state is None:
            summary.skipped += 1
            summary.skipped_files.append((path, err or "unknown error"))
            log.warning("skipped %s: %s", path, err)
            if not is_new:  # its old content is stale: remove it, retry next run
                retired.extend(m.files.pop(path).chunks)
            continue
        if is_new:
            summary.added += 1
        else:
            summary.modified += 1
        batch.append((path, state, chunks))
        batch_chunks += len(chunks)
        if batch_chunks >= _BATCH_CHUNKS:
            written |= _write_batch(store, embedder, m, batch, summary, on_upsert, retired, run_hashes)
            batch, batch_chunks = [], 0
            if time.monotonic() - last_save > _SAVE_EVERY_S:
                m.save(manifest_path)
                last_save = time.monotonic()
    if batch:
        written |= _write_batch(store, embedder, m, batch, summary, on_upsert, retired, run_hashes)

    # Files gone from disk: their chunks go, after the new files could reuse their vectors.
    for p in d.removed:
        retired.extend(m.files.pop(p).chunks)
    summary.deleted = len(d.removed)

    if written:
        if store.per_segment_bm25 and summary.rebuild is None:
            _pad_segment(store, m, written)
        store.flush()  # once per run: every flush seals a segment
    if writes:
        m.save(manifest_path)  # still dirty: a crash from here on is repaired
    live = m.chunk_ids()
    if on_commit is not None:
        on_commit(live)
    if repair:
        retired.extend(store.all_ids(roots=scope) - live)
    retired = sorted(set(retired) - live)
    if retired:
        store.delete_ids(retired)
        summary.chunks_deleted += len(retired)
    if writes:
        _refresh_bm25(store, m, live, len(written), whole=summary.rebuild is not None)
    if writes or old is None or old.roots != roots:
        m.mark_finished()
        m.save(manifest_path)
    summary.chunks_total = m.chunk_count
    summary.seconds = round(time.perf_counter() - t0, 3)
    summary.embed_seconds = round(summary.embed_seconds, 3)
    return summary


def _chunking(store: MilvusStore, embedder: Embedder, settings: ChunkSettings) -> dict[str, object]:
    """What decides the stored chunks: a change re-chunks (vectors are reused by content hash)."""
    return {**settings.as_dict(), "max_tokens": embedder.max_tokens, "bm25_stemming": store.prepare_text is not None}


def _rebuild_reason(old: Manifest, store: MilvusStore, embedder: Embedder, chunking: dict[str, object]) -> str | None:
    if old.model != embedder.identity:
        return f"embedding model changed from {old.model.get('model')} to {embedder.model_id}"
    if old.store_uri != store.uri:
        return "the store URI changed"
    if old.chunking != chunking:
        return "chunk settings changed"
    return None


_Found = dict[str, tuple[str, str, int, int]]  # scan(): abs path -> (root, rel_path, mtime_ns, size)


def _unchanged(old: Manifest, roots: list[str], found: _Found) -> bool:
    """Whether a clean manifest still describes every file found."""
    if old.dirty or old.roots != roots or set(found) != set(old.files):
        return False
    return all((f.root, f.rel_path, f.mtime_ns, f.size) == found[p] for p, f in old.files.items())


def _fingerprint_matches(old: Manifest, store: MilvusStore) -> bool:
    """Whether the store's files are as they were when ``old`` was last saved (see :func:`record_fingerprint`)."""
    fingerprint = store.fingerprint()
    return fingerprint is not None and fingerprint == old.store_fingerprint


def record_fingerprint(manifest_path: Path, store: MilvusStore) -> None:
    """After the store is closed: remember its fingerprint (see ``open_store`` in :func:`update_index`)."""
    fingerprint = store.fingerprint()
    m = Manifest.load(manifest_path)
    if fingerprint and m is not None and not m.dirty and m.store_uri == store.uri:
        if m.store_fingerprint == fingerprint:
            return
        m.store_fingerprint = fingerprint
        m.save(manifest_path)


def _progress(items: Iterator[T], total: int, show: bool) -> Iterator[T]:
    if not show or total < 20:
        yield from items
        return
    from tqdm import tqdm

    yield from tqdm(items, total=total, desc="indexing", unit="file", leave=False)


def _ahead(items: Sequence[A], work: Callable[[A], R], depth: int = _PARSE_AHEAD) -> Iterator[tuple[A, R]]:
    """``(item, work(item))`` in order, computed by a thread up to ``depth`` items ahead.

    The thread overlaps parsing (Python) with embedding (native code that
    releases the GIL); the bounded queue keeps memory bounded. An exception in
    ``work`` is raised here; stopping early stops the thread.
    """
    q: queue.Queue[tuple[A, R] | BaseException | None] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(x: tuple[A, R] | BaseException | None) -> None:
        while not stop.is_set():
            try:
                q.put(x, timeout=0.1)
                return
            except queue.Full:
                continue

    def run() -> None:
        try:
            for item in items:
                if stop.is_set():
                    return
                put((item, work(item)))
            put(None)
        except BaseException as e:  # handed to the consumer, which raises it
            put(e)

    t = threading.Thread(target=run, name="mdrag-parse", daemon=True)
    t.start()
    try:
        while (x := q.get()) is not None:
            if isinstance(x, BaseException):
                raise x
            yield x
    finally:
        stop.set()
        t.join()


def _parse(
    path: str,
    root: str,
    rel: str,
    mtime_ns: int,
    size: int,
    embedder: Embedder,
    settings: ChunkSettings,
) -> tuple[FileState | None, list[Chunk], str | None]:
    try:
        data = Path(path).read_bytes()
        doc = parse_file(path, data)
    except (ParseError, UnsupportedFormatError) as e:
        return None, [], str(e).removeprefix(f"{path}: ")
    except OSError as e:
        return None, [], f"cannot read: {e}"
    for w in doc.warnings:
        log.warning("%s", w)
    chunks = chunk_document(doc, root, rel, settings, embedder.count_tokens, embedder.max_tokens)
    state = FileState(root=root, rel_path=rel, mtime_ns=mtime_ns, size=size, hash=_file_hash(data))
    state.chunks = [c.id for c in chunks]
    return state, chunks, None


def _pad_segment(store: MilvusStore, m: Manifest, written: set[str]) -> None:
    """Give a small update's segment BM25 statistics like the whole index's.

    Milvus Lite computes BM25 statistics per segment (see
    ``MilvusStore.per_segment_bm25``): chunks written alone would score far
    too low. Writing a random sample of the other chunks again with them
    makes their segment a sample of the index, with its term frequencies.
    """
    if len(written) >= _BM25_SEGMENT_ROWS:
        return
    others = sorted(m.chunk_ids() - written)
    sample = random.Random(len(others)).sample(others, min(len(others), _BM25_SEGMENT_ROWS - len(written)))
    if sample:
        store.rewrite(sample, flush=False)


def _refresh_bm25(store: MilvusStore, m: Manifest, live: set[str], written: int, whole: bool) -> None:
    """Keep Milvus Lite's per-segment BM25 statistics close to the whole index's.

    Small updates write segments that are samples of the index
    (:func:`_pad_segment`); once they add up to ``_BM25_REWRITE_SHARE`` of the
    index, every chunk is written again, together (about 1 ms per chunk).
    """
    if not store.per_segment_bm25 or whole:
        m.rows_since_rewrite = 0
        return
    m.rows_since_rewrite += written
    if live and m.rows_since_rewrite >= _BM25_REWRITE_SHARE * len(live):
        log.info("rewriting %d chunks so that BM25 statistics cover the whole index", len(live))
        store.rewrite(live)
        m.rows_since_rewrite = 0


def _write_batch(
    store: MilvusStore,
    embedder: Embedder,
    m: Manifest,
    batch: list[tuple[str, FileState, list[Chunk]]],
    summary: IndexSummary,
    on_upsert: Callable[[int], None] | None,
    retired: list[str],
    run_hashes: set[int] | None = None,
) -> set[str]:
    """Embed what is new, upsert, record the files; returns the ids of the chunks written.

    The ids the batch's files no longer use are added to ``retired``. With
    ``run_hashes`` (the store held nothing when the run began), only the
    content hashes this run has written are looked up in the store; the
    batch's are added to it (64-bit prefixes: a collision costs one lookup).
    """
    stored = {cid for path, _, _ in batch if path in m.files for cid in m.files[path].chunks}
    all_chunks = [c for _, _, cs in batch for c in cs]
    chunks = [c for c in all_chunks if c.id not in stored]  # same id: same text, already stored
    hashes = [c.content_hash for c in chunks]
    if run_hashes is None:
        known = store.vectors_by_hash(hashes)
    else:
        keys = [int(h[:16], 16) for h in hashes]
        known = store.vectors_by_hash([h for h, key in zip(hashes, keys) if key in run_hashes])
        run_hashes.update(keys)
    todo: dict[str, str] = {}  # content hash -> text, each new text embedded once
    for c in chunks:
        if c.content_hash not in known:
            todo.setdefault(c.content_hash, c.embed_text)
    if todo:
        t = time.perf_counter()
        vecs = embedder.embed(list(todo.values()))
        summary.embed_seconds += time.perf_counter() - t
        known.update(zip(todo.keys(), vecs))
    summary.chunks_embedded += len(todo)
    summary.chunks_reused += len(all_chunks) - len(todo)
    if chunks:
        store.upsert(chunks, np.vstack([known[c.content_hash] for c in chunks]))
        if on_upsert is not None:
            on_upsert(len(chunks))
    for path, state, _ in batch:
        prev = m.files.get(path)
        if prev is not None:
            retired.extend(set(prev.chunks) - set(state.chunks))
        m.files[path] = state
    return {c.id for c in chunks}


def _drop_incomplete(store: MilvusStore, m: Manifest, scope: list[str]) -> None:
    """After a crash: forget files whose chunks are not all in the store."""
    present = store.all_ids(roots=scope)
    for path in [p for p, s in m.files.items() if not set(s.chunks) <= present]:
        log.info("re-indexing %s: its chunks are incomplete", path)
        del m.files[path]
