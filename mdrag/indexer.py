"""Keep an index current: scan -> plan -> parse -> chunk -> embed -> store.

What to do with each file is worked out by :mod:`mdrag.plan` from the manifest,
the scan and the changed files' hashes, with no store; this module reads the
files and the store, and applies the plan.

Crash safety comes from the order of writes. Before the store is touched the
manifest is saved with ``dirty = True``; chunks are upserted under ids
derived from their position and content (so a repeated write replaces, never
duplicates). Ids that the new state no longer uses (edited chunks, deleted
files) are deleted after ``on_commit`` has been told the new set of ids; then
the store is told the run is done (``Store.end_run``: durable, and its own
upkeep), and the manifest is saved clean: a reader that searches only the committed ids (`Index`
does) sees the old state until then and the new one after, never a mix. A
run that is killed at any point leaves ``dirty = True``, and the next run
compares the store's ids with the manifest's, deletes any orphans, and
re-indexes any file whose chunks are missing.

A run given a ``cancel`` event stops soon after it is set, at a safe point:
between files, before the commit. It saves the manifest (still dirty, so the
next run repairs and finishes) and raises IndexingCancelledError; a file
being parsed is left to its thread, which writes nothing.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Collection, Generator, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, NamedTuple, TypeVar

import numpy as np

from mdrag.chunking import ChunkSettings, Truncated, chunk_document
from mdrag.embedding.base import Embedder
from mdrag.errors import (
    ConfigError,
    IndexingCancelledError,
    MdragError,
    ParseError,
    ParserCrashError,
    UnsupportedFormatError,
)
from mdrag.manifest import FileState, Manifest, SkippedFile
from mdrag.parsers import parse_file
from mdrag.parsers.worker import ParseWorker
from mdrag.plan import UpdatePlan, kept_files, mismatched, nothing_to_do, plan_update, to_hash
from mdrag.scan import ScanOptions, ScanResult, scan
from mdrag.store import is_server_uri
from mdrag.store.base import Store
from mdrag.types import Chunk
from mdrag.version import __version__

__all__ = ["IndexProgress", "IndexSummary", "remove_folders", "update_index"]

log = logging.getLogger(__name__)

A = TypeVar("A")
R = TypeVar("R")

_BATCH_CHUNKS = 512  # chunks per embed + upsert round
_PARSE_AHEAD = 64  # parsed files waiting for the embedder, at most
_SAVE_EVERY_S = 5.0  # how often a long run records its progress in the manifest
_CANCEL_POLL_S = 0.1  # while waiting for a parsed file, how often a run checks whether it was cancelled
# How long readers in other processes get to see a commit in the manifest before the chunks it replaced
# are deleted (a search reads the manifest's state, then the store: a few milliseconds apart).
_PUBLISH_GRACE_S = 0.5


@dataclass
class IndexSummary:
    """What one run did; ``to_dict()`` is the JSON shape of the CLI summary."""

    added: int = 0
    modified: int = 0
    deleted: int = 0
    unchanged: int = 0  # same mtime and size, or touched with the same content
    touched: int = 0  # of the unchanged: mtime or size changed, content did not ("already embedded")
    skipped: int = 0
    kept: int = 0  # files not found because their folder is missing, empty or unreadable: kept in the index
    excluded: int = 0  # files left out by .gitignore, index.include or index.exclude
    chunks_embedded: int = 0
    chunks_reused: int = 0  # content already embedded: vector taken from the store
    chunks_deleted: int = 0
    chunks_total: int = 0
    seconds: float = 0.0
    embed_seconds: float = 0.0  # of which in the embedder (loading the model the first time included)
    rebuild: str | None = None  # why the whole corpus was re-chunked, if it was
    repaired: bool = False  # a previous run was interrupted and its leftovers were cleaned
    remaining: int = 0  # files to do that a paused run left for the next one (see update_index's pause)
    waited_s: float = 0.0  # how long this run waited for another process's run on the index to finish
    folders: list[str] = field(default_factory=list)  # the index's folders after the run
    missing_folders: list[str] = field(default_factory=list)  # folders of the index not found on disk
    removed_folders: list[str] = field(default_factory=list)  # folders taken out of the index (`mdrag remove`)
    skipped_files: list[tuple[str, str]] = field(default_factory=list)  # (path, reason)
    parser_errors: int = 0  # of the skipped: an unexpected exception in the parser (a bug; `-vv` logs it)
    decoded: dict[str, str] = field(default_factory=dict)  # path -> encoding, for text files not in UTF-8
    unsupported: dict[str, int] = field(default_factory=dict)  # extension -> files with no parser
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, object]:
        d = dict(self.__dict__)
        d["skipped_files"] = [{"path": p, "reason": r} for p, r in self.skipped_files]
        return d


def _file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_hash(path: str) -> str | OSError:
    """The sha256 of the file's bytes, or why it cannot be read."""
    try:
        return _file_hash(Path(path).read_bytes())
    except OSError as e:
        return e


def _warn(summary: IndexSummary | None, msg: str) -> None:
    log.warning("%s", msg)
    if summary is not None:
        summary.warnings.append(msg)


def _resolve(folders: Sequence[str | Path]) -> list[str]:
    return list(dict.fromkeys(str(Path(f).expanduser().resolve()) for f in folders))


def update_index(
    store: Store,
    embedder: Embedder,
    manifest_path: Path,
    index_name: str,
    folders: Sequence[str | Path],
    settings: ChunkSettings,
    rebuild: bool = False,
    progress: Callable[[IndexProgress], None] | None = None,
    on_upsert: Callable[[list[str]], None] | None = None,
    on_commit: Callable[[set[str]], None] | None = None,
    open_store: Callable[[], None] | None = None,
    selection: ScanOptions | None = None,
    parse_limits: tuple[float, float | None] | None = None,
    cancel: threading.Event | None = None,
    only: Collection[str] | None = None,
    pause: threading.Event | None = None,
    batch_chunks: int | None = None,
    thorough: bool = False,
) -> IndexSummary:
    """Add or update ``folders`` in the index; the index's other folders are kept as they are.

    A folder that is missing, empty or partly unreadable is a warning, and
    what was indexed from it is kept: only a file that is gone from a folder
    that was listed whole is deleted (removing a folder is :func:`remove_folders`).
    ``store`` must be open, or ``open_store()`` opens it: a run that finds
    nothing to do, with the store unchanged since its last run
    (``Store.unchanged_since_last_run``), does not open it at all. ``rebuild`` drops the collection and starts over.
    ``on_upsert(ids)`` is called with the ids of the chunks just written (not yet
    committed); ``on_commit(ids)`` with the new state's chunk ids, before the
    ids it replaces are deleted. With ``parse_limits`` (seconds, MB or None),
    files are parsed in a child process (:class:`~mdrag.parsers.worker.ParseWorker`)
    and a file over either limit is skipped with the reason. ``progress`` is told
    how far the run is (:class:`IndexProgress`) as it starts, as each file is read,
    as each batch of the embedder returns, as files are written or skipped, and when
    it starts saving (an exception it raises stops the run, which the next run repairs).
    Once ``cancel`` is set, the run stops before its next file and raises
    IndexingCancelledError (the manifest is saved dirty: the next run repairs and finishes).

    A run can be kept short, so that a long update is committed in steps: with
    ``only`` (absolute paths), it parses only those of the files to do (a watched
    change goes ahead of the rest); once ``pause`` is set, it stops reading files,
    commits what it wrote, and returns with ``remaining`` files left for the next
    run. ``batch_chunks``: chunks per embed and write round (default
    ``_BATCH_CHUNKS``; fewer: a pause is
    heeded sooner, and the embedder holds the CPU for less time at once).

    A manifest that was lost (missing, unreadable, or listing no folder) gives back the index's folders
    from the store: its chunks' folders (:func:`_roots_from_store`), with a warning.

    ``thorough`` (a `status --verify` found damage): the store repairs what its thorough check finds
    (``Store.repair``), and every file's chunks are compared with the store, as after a crash: the files
    whose chunks differ, or that the store names suspect, are indexed again (their vectors reused).
    """
    t0 = time.perf_counter()
    summary = IndexSummary()
    roots = _resolve(folders)
    # What decides the stored chunks: a change re-chunks (vectors are reused by content hash).
    chunking = _chunking(store, embedder, settings)
    old = before = Manifest.load(manifest_path)
    if rebuild:
        summary.rebuild = "requested (--rebuild)"
    elif old is None:
        summary.rebuild = "no manifest" if not manifest_path.exists() else "manifest unreadable"
    else:
        summary.rebuild = _rebuild_reason(old, store, embedder, chunking)
    if summary.rebuild and old is not None:  # every folder of the index is indexed again, not only those given
        roots = _resolve([*old.roots, *roots])
    if (old is None or not old.roots) and _store_beside(store, manifest_path):
        if open_store is not None:
            open_store()
            open_store = None
        retired = old.retired_roots if old is not None else []  # a removal of them did not finish
        roots = _resolve([*_roots_from_store(store, manifest_path, retired, summary), *roots])
    found = scan(roots, selection)
    if summary.rebuild and old is not None:
        _refuse_rebuild_with_folders_missing(old, found, summary.rebuild)
    if rebuild:
        old = None
    key = _skip_key(parse_limits)
    skips = old.skipped if old is not None and summary.rebuild is None else {}
    _recall_skips(found, skips, key)
    # The store as the last clean run left it: no need to count its rows.
    as_left = old is not None and old.verified and not old.dirty and not thorough and store.unchanged_since_last_run()
    if open_store is not None and old is not None and as_left and summary.rebuild is None:
        if nothing_to_do(old, roots, found):
            summary.unchanged, summary.chunks_total = len(found.files), old.chunk_count
            summary.kept = len(kept_files(old.files, roots, found))
            summary.skipped_files = [(p, reason) for p, (_, reason) in found.skipped.items()]
            summary.skipped = len(summary.skipped_files)
            _report_scan(summary, found, old)
            summary.folders = list(old.roots)
            summary.seconds = round(time.perf_counter() - t0, 3)
            return summary
    if open_store is not None:
        open_store()
    if summary.rebuild:
        log.info("full re-index: %s", summary.rebuild)
    suspect = _repair_store(store, summary, thorough)

    m = Manifest(index=index_name, store_uri=store.uri, model=embedder.identity, chunking=chunking)
    if old is not None and summary.rebuild is None:
        m.files = old.files
        m.dirty = old.dirty or not old.verified or thorough
        m.retired_roots = old.retired_roots
        m.committed_ids, m.committed_roots = old.committed_ids, old.committed_roots
        # kept while the file is there as it was, or its folder was not listed in this run
        m.skipped = {p: f for p, f in skips.items() if p in found.skipped or f.root not in roots}
    # The folders this manifest accounts for: other indexers may write other
    # folders into the same collection, and their chunks are not ours to repair.
    m.roots = _resolve([*(old.roots if old is not None else []), *(r for r in roots if r not in found.missing)])
    scope = sorted(set(m.roots) | set(roots) | set(m.retired_roots))
    if not m.dirty and m.files and not as_left and store.count(scope) != m.chunk_count:
        log.warning("index %r: the store and the manifest disagree", index_name)
        m.dirty = True
    repair = summary.rebuild is not None or m.dirty
    if m.dirty:
        summary.repaired = True
        log.warning("the previous run of index %r did not finish, or its files changed: repairing", index_name)
        stored = store.id_paths(roots=scope)
        for path in mismatched(m.files, stored):
            log.info("re-indexing %s: its chunks in the store do not match the manifest", path)
            del m.files[path]
        for path in sorted({stored[cid] for cid in suspect if cid in stored} & m.files.keys()):
            log.info("re-indexing %s: the store finds its chunks' rows damaged", path)
            del m.files[path]
        # A repaired file may lie in any folder of the index: list them all.
        if set(m.roots) - set(roots):
            roots = m.roots
            found = scan(roots, selection)
            _recall_skips(found, m.skipped, key)
    _report_scan(summary, found, old)

    # A store that starts a full re-index empty (a new index, or one made anew for another model) holds
    # nothing readers could keep seeing, and no vectors to reuse but the ones this run writes (texts that
    # repeat); --rebuild trusts none of the stored vectors either: only this run's hashes are looked up.
    empty = summary.rebuild is not None and store.count() == 0
    m.keep_committed(None if empty else before)  # what readers keep seeing until this run commits
    run_hashes: set[int] | None = set() if rebuild or empty else None

    hashes = {p: _read_hash(p) for p in to_hash(m.files, roots, found)}
    plan = plan_update(m.files, roots, found, hashes)
    if only is not None:
        plan.todo = [t for t in plan.todo if t[0] in only]
    writes = bool(plan.todo or plan.delete or repair or m.retired_roots or (old is not None and old.roots != m.roots))
    run = _Run(
        store, embedder, settings, manifest_path, summary, progress, on_upsert, on_commit, parse_limits, cancel, pause,
        batch_chunks or _BATCH_CHUNKS,
    )  # fmt: skip
    # A rebuild writes the whole index beside what readers see, then deletes every chunk it did not write.
    sweep = _EVERYTHING if rebuild else scope if repair or m.retired_roots else None
    _apply(run, m, plan, found, writes, sweep, run_hashes)
    summary.folders = list(m.roots)
    summary.chunks_total = m.chunk_count
    summary.seconds = round(time.perf_counter() - t0, 3)
    summary.embed_seconds = round(summary.embed_seconds, 3)
    return summary


#: ``sweep`` of a rebuild: every chunk in the store that the new state does not use is deleted.
_EVERYTHING: list[str] = []


def _repair_store(store: Store, summary: IndexSummary, thorough: bool) -> set[str]:
    """Build again what the store finds damaged in its own files (its vector index, tag rows), from the
    data it holds; each repair is a warning. The ids of the chunks whose rows the store finds suspect."""
    said, suspect = store.repair(thorough)
    for msg in said:
        summary.repaired = True
        _warn(summary, msg)
    return suspect


def _store_beside(store: Store, manifest_path: Path) -> bool:
    """Whether the store lives in the manifest's cache folder (the FAISS store, the default Milvus Lite
    file): then every chunk in it is this manifest's. A store elsewhere (a Milvus server, another home's
    Milvus Lite file) may hold other indexers' folders too."""
    if is_server_uri(store.uri):
        return False
    try:
        return Path(store.uri).expanduser().resolve().is_relative_to(manifest_path.parent.parent.resolve())
    except (OSError, ValueError):
        return False


def _roots_from_store(store: Store, manifest_path: Path, retired: list[str], summary: IndexSummary) -> list[str]:
    """The folders of an index whose manifest lost them (missing, unreadable, or listing none): the
    folders of the chunks its store holds but ``retired``, said as a warning; none for a new index."""
    roots = [r for r in store.roots() if r not in retired]
    if roots:
        _warn(
            summary,
            f"the manifest {manifest_path} was lost: took the folders back from the store: {', '.join(roots)}",
        )
    return roots


def _skip_key(parse_limits: tuple[float, float | None] | None) -> str:
    """What a parse failure depends on besides the file: mdrag's release and the parse limits."""
    return json.dumps([__version__, list(parse_limits) if parse_limits else None])


_SKIPPED_BEFORE = " (as at an earlier run, the file unchanged since: tried again when it changes, or with --rebuild)"


def _recall_skips(found: ScanResult, skips: dict[str, SkippedFile], key: str) -> None:
    """Move the files a parse failed on, unchanged since (same mtime, size and ``key``), from
    ``found.files`` to ``found.skipped``: they are reported as skipped without being parsed again (a
    file that made the parser time out would cost its full time limit at every run and every save)."""
    for path, s in skips.items():
        now = found.files.get(path)
        if now is not None and (now[0], now[2], now[3], s.key) == (s.root, s.mtime_ns, s.size, key):
            del found.files[path]
            found.skipped[path] = (s.root, s.reason + _SKIPPED_BEFORE)


@dataclass
class _Run:
    """What carrying out a plan needs besides the plan: where it writes, and whom it tells (see update_index)."""

    store: Store
    embedder: Embedder
    settings: ChunkSettings
    manifest_path: Path
    summary: IndexSummary
    progress: Callable[[IndexProgress], None] | None
    on_upsert: Callable[[list[str]], None] | None
    on_commit: Callable[[set[str]], None] | None
    parse_limits: tuple[float, float | None] | None
    cancel: threading.Event | None
    pause: threading.Event | None = None  # once set, the run commits what it wrote and returns
    batch_chunks: int = 0  # chunks per embed and write round


def _apply(
    run: _Run,
    m: Manifest,
    plan: UpdatePlan,
    found: ScanResult,
    writes: bool,
    sweep: list[str] | None,
    run_hashes: set[int] | None,
) -> None:
    """Carry out ``plan`` on the store and the manifest ``m``, and save ``m`` clean.

    Touched files are recorded; the files to do are parsed, chunked, embedded
    and written; ``on_commit`` is told the new state; then the chunks it no
    longer uses are deleted (with ``sweep``, every chunk under those folders
    that it does not use: a repair) and the store is told the run is done.
    With ``writes`` False the store holds the new state already: the manifest
    is not saved. ``run_hashes``: see :func:`_write_batch`.
    """
    store, embedder, settings, manifest_path, summary = (
        run.store,
        run.embedder,
        run.settings,
        run.manifest_path,
        run.summary,
    )
    todo, removed = plan.todo, plan.delete
    key = _skip_key(run.parse_limits)
    summary.unchanged = len(plan.unchanged) + len(plan.touched)
    summary.kept = len(plan.kept)
    summary.touched = len(plan.touched)
    for p, (mtime_ns, size) in plan.touched.items():
        m.files[p].mtime_ns, m.files[p].size = mtime_ns, size
        log.info("%s: touched, content unchanged: already embedded", p)
    if writes:
        m.dirty = True
        m.progress = [0, len(todo)]  # readers of a first build learn its size at once
        m.save(manifest_path)

    last_save = time.monotonic()
    written: set[str] = set()  # ids of the chunks this run upserted
    retired: list[str] = []  # ids the new state no longer uses: deleted after the commit
    batch: list[tuple[str, FileState, list[Chunk]]] = []
    bar = _Progress(len(todo), run.progress)

    # With parse_limits, files are parsed in a child process that can be stopped.
    worker = ParseWorker(run.parse_limits[1]) if run.parse_limits and any(err is None for _, err in todo) else None
    timeout = run.parse_limits[0] if run.parse_limits else 0.0
    truncated = Truncated()  # chunks longer than the model reads (chunk.strategy langchain): one warning

    def parse(item: tuple[str, str | None]) -> _Parsed:
        path, err = item
        if err:
            return _Parsed(None, [], err)
        root, rel, mtime_ns, size = found.files[path]
        return _parse(path, root, rel, mtime_ns, size, embedder, settings, worker, timeout, truncated)

    # The model loads while the first files are parsed (a parse worker takes a while to start, too).
    warming = _WarmUp(embedder) if todo else None

    def write(batch: list[tuple[str, FileState, list[Chunk]]]) -> set[str]:
        nonlocal warming
        if warming is not None:
            if not warming.ready:
                bar.now("loading the model")
            summary.embed_seconds += warming.finish()
            warming = None
        bar.now("embedding")
        ids = _write_batch(
            store, embedder, m, batch, summary, run.on_upsert, retired, run_hashes, bar, run.batch_chunks
        )
        bar.done(len(batch))
        return ids

    # Files are parsed and chunked in a thread while the last batch is embedded.
    read = 0  # files taken from todo
    try:
        with closing(_ahead(todo, parse, cancel=run.cancel)) as parsed:
            for (path, preset), result in parsed:
                read += 1
                _take(m, found, summary, bar, key, retired, batch, path, preset, result)
                if sum(len(chunks) for _, _, chunks in batch) >= run.batch_chunks:
                    written |= write(batch)
                    batch.clear()
                    if time.monotonic() - last_save > _SAVE_EVERY_S:
                        m.progress = [bar.files_done, bar.files_total]
                        m.save(manifest_path)
                        last_save = time.monotonic()
                if run.pause is not None and run.pause.is_set():
                    break
    except IndexingCancelledError:
        if writes:
            m.save(manifest_path)  # what was written so far, still dirty: the next run repairs and goes on
        raise
    finally:
        if worker is not None:
            worker.close()
    if batch:
        written |= write(batch)
    bar.now("saving")
    summary.remaining = len(todo) - read
    if msg := truncated.message():
        _warn(summary, msg)

    # Files gone from disk: their chunks go, after the new files could reuse their vectors.
    for p in removed:
        retired.extend(m.files.pop(p).chunks)
    summary.deleted = len(removed)

    live = m.chunk_ids()
    if writes:
        _publish(store, m, live)
        m.save(manifest_path)  # still dirty: a crash from here on is repaired
    if run.on_commit is not None:
        run.on_commit(live)
    if sweep is not None:
        retired.extend(store.all_ids(roots=None if sweep is _EVERYTHING else sweep) - live)
    retired = sorted(set(retired) - live)
    if retired:
        _delete_replaced(store, retired)
        summary.chunks_deleted += len(retired)
    if writes:
        store.end_run(written, live, whole=summary.rebuild is not None)
        m.retired_roots = []
        m.mark_finished()
        m.save(manifest_path)


def _publish(store: Store, m: Manifest, live: set[str]) -> None:
    """The commit for readers in other processes, in the manifest, when the store has none of its own.

    A store whose writes other processes see at once (Milvus) is read through the manifest's committed
    ids: the run's chunks are all written, so they become the committed state before the replaced ones
    are deleted. A transactional store (FAISS) commits at :meth:`~mdrag.store.base.Store.end_run`, and
    its readers in other processes see the last commit without the manifest.
    """
    if not store.transactional:
        m.publish(live, m.roots)


def _delete_replaced(store: Store, ids: list[str]) -> None:
    """Delete the chunks a commit replaced; readers in other processes of a store without transactions
    first get ``_PUBLISH_GRACE_S`` to take the new committed state from the manifest."""
    if not store.transactional:
        time.sleep(_PUBLISH_GRACE_S)
    store.delete_ids(ids)


def _take(
    m: Manifest,
    found: ScanResult,
    summary: IndexSummary,
    bar: _Progress,
    key: str,
    retired: list[str],
    batch: list[tuple[str, FileState, list[Chunk]]],
    path: str,
    preset: str | None,
    parsed: _Parsed,
) -> None:
    """Account for one parsed file: a skip is recorded (an indexed file's stale chunks join ``retired``);
    a file's chunks join ``batch``."""
    state, chunks, err, encoding, crashed, doc_warnings = parsed
    is_new = path not in m.files
    for w in doc_warnings:
        _warn(summary, w)
    bar.read(len(chunks))
    if state is None:
        summary.skipped += 1
        summary.parser_errors += crashed
        summary.skipped_files.append((path, err or "unknown error"))
        (log.info if path in m.skipped else log.warning)("skipped %s: %s", path, err)
        if preset is None:  # its parse failed (not the scan, not a read): remembered until it changes
            root, _, mtime_ns, size = found.files[path]
            m.skipped[path] = SkippedFile(root, mtime_ns, size, err or "unknown error", key)
        bar.done(1)
        if not is_new:  # its old content is stale: remove it, retry next run
            retired.extend(m.files.pop(path).chunks)
        return
    m.skipped.pop(path, None)
    if encoding and encoding.replace("-", "_").lower() not in ("utf_8", "utf_8_sig", "ascii"):
        summary.decoded[path] = encoding
        log.info("%s: decoded as %s", path, encoding)
    if is_new:
        summary.added += 1
    else:
        summary.modified += 1
    batch.append((path, state, chunks))


class _WarmUp:
    """Load the embedder's model in a thread; :meth:`finish` waits for it and says how long the load took."""

    def __init__(self, embedder: Embedder) -> None:
        self.seconds = 0.0
        self._thread = threading.Thread(target=self._run, args=(embedder,), name="mdrag-model-load", daemon=True)
        self._thread.start()

    def _run(self, embedder: Embedder) -> None:
        t = time.perf_counter()
        try:
            embedder.warm_up()
        except Exception as e:  # the first embed call loads it again and raises the error where it is handled
            log.debug("loading the model ahead of the first batch failed: %s", e)
        self.seconds = time.perf_counter() - t

    @property
    def ready(self) -> bool:
        """Whether the model is loaded (or its load failed)."""
        return not self._thread.is_alive()

    def finish(self) -> float:
        self._thread.join()
        return self.seconds


def _refuse_rebuild_with_folders_missing(old: Manifest, found: ScanResult, why: str) -> None:
    """A run that re-indexes everything cannot re-read a missing folder: it would lose that folder's chunks."""
    gone = [r for r in old.roots if not found.complete(r) and any(f.root == r for f in old.files.values())]
    if gone:
        raise MdragError(
            f"every file must be indexed again ({why}), but these folders of the index are missing, empty or "
            f"unreadable: {', '.join(gone)}. Their chunks are kept: bring the folders back (mount the disk), or "
            "take them out with `mdrag remove DIR`, then run `mdrag index` again."
        )


def remove_folders(
    store: Store,
    manifest_path: Path,
    folders: Sequence[str | Path],
    on_commit: Callable[[set[str]], None] | None = None,
) -> IndexSummary:
    """Take ``folders`` out of the index: their files' chunks are deleted; the folders need not exist.

    Raises ConfigError naming the index's folders when one of ``folders`` is not among them.
    """
    t0 = time.perf_counter()
    m = Manifest.load(manifest_path)
    if m is None:
        raise ConfigError(f"the index has no readable manifest at {manifest_path}: nothing to remove")
    m.keep_committed(m)  # what readers keep seeing until the removal commits
    targets = []
    for f in folders:
        resolved = str(Path(f).expanduser().resolve())
        match = next((r for r in m.roots if r in (resolved, str(f))), None)
        if match is None:
            raise ConfigError(
                f"{f} is not a folder of index {m.index!r}; its folders are: " + (", ".join(m.roots) or "none")
            )
        targets.append(match)
    summary = IndexSummary(removed_folders=targets)
    m.roots = [r for r in m.roots if r not in targets]
    m.retired_roots = sorted(set(m.retired_roots) | set(targets))
    gone = [p for p, state in m.files.items() if state.root in targets]
    retired = [cid for p in gone for cid in m.files.pop(p).chunks]
    summary.deleted = len(gone)
    m.dirty = True
    live = m.chunk_ids()
    _publish(store, m, live)
    m.save(manifest_path)  # from here a crash is repaired: the retired folders' chunks are deleted then
    if on_commit is not None:
        on_commit(live)
    leftovers = store.all_ids(roots=m.retired_roots) - live
    ids = sorted((set(retired) | leftovers) - live)
    if ids:
        _delete_replaced(store, ids)
    store.end_run(set(), live, whole=False)
    summary.chunks_deleted = len(ids)
    m.retired_roots = []
    m.mark_finished()
    m.save(manifest_path)
    summary.folders = list(m.roots)
    summary.chunks_total = m.chunk_count
    summary.seconds = round(time.perf_counter() - t0, 3)
    return summary


#: What parsing and chunking give for a file: raised when a release changes it (2: issue 14's chunk
#: boundaries and line spans, PDF outline sections, DOCX notes and text boxes, HTML main content;
#: 3: an HTML aside with no text does not split the section it interrupts; PDF running headers and footers left out;
#: 4: text before the first heading is under the title, neighbours share at most a third of either, langchain line
#: spans hold heading lines), so an index built by an older release is chunked again rather than mixing both.
CHUNK_FORMAT = 4


def _chunking(store: Store, embedder: Embedder, settings: ChunkSettings) -> dict[str, object]:
    """What decides the stored chunks: a change re-chunks (vectors are reused by content hash)."""
    return {
        **settings.as_dict(),
        "max_tokens": embedder.max_tokens,
        "bm25_stemming": store.prepare_text is not None,
        "format": CHUNK_FORMAT,
    }


def _rebuild_reason(old: Manifest, store: Store, embedder: Embedder, chunking: dict[str, object]) -> str | None:
    if old.model != embedder.identity:
        return f"embedding model changed from {old.model.get('model')} to {embedder.model_id}"
    if old.store_uri != store.uri:
        return "the store URI changed"
    if old.chunking.get("format") != chunking["format"]:
        return "this release of mdrag parses and chunks files differently"
    if old.chunking != chunking:
        return "chunk settings changed"
    return None


def _report_scan(summary: IndexSummary, found: ScanResult, old: Manifest | None) -> None:
    """Copy what the scan saw into the summary, with what it means for the index."""
    summary.warnings.extend(found.warnings)
    summary.excluded = found.excluded
    summary.unsupported = dict(sorted(found.unsupported.items()))
    summary.missing_folders = list(found.missing)
    if old is None:
        return
    for root in [*found.missing, *found.empty]:
        n = sum(1 for f in old.files.values() if f.root == root)
        if n:
            _warn(
                summary,
                f"folder {root} is missing or empty: its {n} indexed files are kept. "
                f"If you removed it on purpose, run `mdrag remove {root}`.",
            )


#: What a run is doing: files are read (parsed and chunked) while the model loads and while earlier
#: files are embedded; "saving": every file is written, the run commits and deletes what it replaced.
Stage = Literal["reading", "loading the model", "embedding", "saving"]


@dataclass(frozen=True)
class IndexProgress:
    """How far a run is: what :func:`update_index` tells its ``progress`` callback.

    A file is read (parsed and chunked: its chunks are known) before it is done (its chunks written to
    the store, or the file skipped). ``chunks_known`` grows as files are read; ``chunks_done`` counts
    the chunks of the files read that are written: embedded, or their vectors reused. Every count only
    grows; once the run is "saving", ``chunks_done == chunks_known`` and ``files_done == files_read``, which
    is ``files_total`` unless a ``pause`` stopped the run early.
    """

    stage: Stage
    files_done: int  # files written or skipped
    files_total: int  # files this run reads
    files_read: int  # files parsed and chunked
    chunks_done: int  # chunks written, or already in the store
    chunks_known: int  # chunks of the files read


class _Progress:
    """Counts what a run did and tells ``report`` (see :class:`IndexProgress`) each time a count moves:
    as each file is read, as each batch of the embedder returns, as files are written or skipped."""

    def __init__(self, total: int, report: Callable[[IndexProgress], None] | None) -> None:
        self.stage: Stage = "reading"
        self.files_total = total
        self.files_done = 0
        self.files_read = 0
        self.chunks_done = 0
        self.chunks_known = 0
        self._report = report
        self._tell()

    def _tell(self) -> None:
        if self._report is not None:
            self._report(
                IndexProgress(
                    self.stage, self.files_done, self.files_total, self.files_read, self.chunks_done, self.chunks_known
                )
            )

    def now(self, stage: Stage) -> None:
        """The run moves on to ``stage``."""
        if stage != self.stage:
            self.stage = stage
            self._tell()

    def read(self, chunks: int) -> None:
        """A file was parsed and chunked into ``chunks`` chunks (none: it was skipped)."""
        self.files_read += 1
        self.chunks_known += chunks
        self._tell()

    def done(self, files: int) -> None:
        """``files`` files were written to the store, or skipped."""
        self.files_done += files
        self._tell()

    def wrote(self, chunks: int) -> None:
        """``chunks`` more chunks are written (or embedded, about to be written)."""
        if chunks:
            self.chunks_done += chunks
            self._tell()


def _ahead(
    items: Sequence[A], work: Callable[[A], R], depth: int = _PARSE_AHEAD, cancel: threading.Event | None = None
) -> Generator[tuple[A, R], None, None]:
    """``(item, work(item))`` in order, computed by a thread up to ``depth`` items ahead.

    The thread overlaps parsing (Python) with embedding (native code that
    releases the GIL); the bounded queue keeps memory bounded. An exception in
    ``work`` is raised here; stopping early stops the thread. Once ``cancel``
    is set, IndexingCancelledError is raised before the next item, without
    waiting for the thread's current ``work`` to return (it stops after it).
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

    def get() -> tuple[A, R] | BaseException | None:
        while True:
            if cancel is not None and cancel.is_set():
                raise IndexingCancelledError("indexing was cancelled before it finished; the next run completes it")
            try:
                return q.get(timeout=_CANCEL_POLL_S if cancel is not None else None)
            except queue.Empty:
                continue

    t = threading.Thread(target=run, name="mdrag-parse", daemon=True)
    t.start()
    cancelled = False
    try:
        while (x := get()) is not None:
            if isinstance(x, BaseException):
                raise x
            yield x
    except IndexingCancelledError:
        cancelled = True
        raise
    finally:
        stop.set()
        if not cancelled:  # a cancelled run does not wait for a parse in progress: it writes nothing
            t.join()


class _Parsed(NamedTuple):
    """One file's parse: its state and chunks, or why it was skipped."""

    state: FileState | None  # None: skipped
    chunks: list[Chunk]
    reason: str | None = None  # why it was skipped
    encoding: str | None = None  # the text's encoding, when it was decoded
    crashed: bool = False  # skipped for an unexpected exception in the parser (ParserCrashError)
    warnings: Sequence[str] = ()  # the parser's non-fatal problems (Document.warnings)


def _parse(
    path: str,
    root: str,
    rel: str,
    mtime_ns: int,
    size: int,
    embedder: Embedder,
    settings: ChunkSettings,
    worker: ParseWorker | None = None,
    timeout: float = 0.0,
    truncated: Truncated | None = None,
) -> _Parsed:
    try:
        data = Path(path).read_bytes()
        doc = worker.parse(path, timeout) if worker is not None else parse_file(path, data)
    except (ParseError, UnsupportedFormatError) as e:
        return _Parsed(None, [], str(e).removeprefix(f"{path}: "), crashed=isinstance(e, ParserCrashError))
    except OSError as e:
        return _Parsed(None, [], f"cannot read: {e}")
    chunks = chunk_document(doc, root, rel, settings, embedder.count_tokens, embedder.max_tokens, truncated)
    state = FileState(root=root, rel_path=rel, mtime_ns=mtime_ns, size=size, hash=_file_hash(data))
    state.chunks = [c.id for c in chunks]
    return _Parsed(state, chunks, None, doc.encoding, warnings=doc.warnings)


def _write_batch(
    store: Store,
    embedder: Embedder,
    m: Manifest,
    batch: list[tuple[str, FileState, list[Chunk]]],
    summary: IndexSummary,
    on_upsert: Callable[[list[str]], None] | None,
    retired: list[str],
    run_hashes: set[int] | None,
    bar: _Progress,
    batch_chunks: int,
) -> set[str]:
    """Embed what is new, upsert, record the files; returns the ids of the chunks written.

    Chunks go to the embedder and the store ``batch_chunks`` at a time, so a
    file of any size is written in bounded pieces; the files are recorded
    once all their chunks are written. ``bar`` is told as each of the
    embedder's own batches returns. The ids the batch's files no longer
    use are added to ``retired``. With ``run_hashes`` (the store held nothing
    when the run began), only the content hashes this run has written are
    looked up in the store; the batch's are added to it (64-bit prefixes: a
    collision costs one lookup).
    """
    stored = {cid for path, _, _ in batch if path in m.files for cid in m.files[path].chunks}
    all_chunks = [c for _, _, cs in batch for c in cs]
    new = [c for c in all_chunks if c.id not in stored]  # same id: same text, already stored
    summary.chunks_reused += len(all_chunks) - len(new)
    bar.wrote(len(all_chunks) - len(new))
    for i in range(0, len(new), batch_chunks):
        chunks = new[i : i + batch_chunks]
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
        told = bar.chunks_done
        if todo:
            t = time.perf_counter()
            vecs = embedder.embed(list(todo.values()), progress=bar.wrote)  # each text: at least one chunk
            summary.embed_seconds += time.perf_counter() - t
            known.update(zip(todo.keys(), vecs))
        summary.chunks_embedded += len(todo)
        summary.chunks_reused += len(chunks) - len(todo)
        store.upsert(chunks, np.vstack([known[c.content_hash] for c in chunks]))
        if on_upsert is not None:
            on_upsert([c.id for c in chunks])
        bar.wrote(len(chunks) - (bar.chunks_done - told))  # those whose vector was known, or a repeated text
    for path, state, _ in batch:
        prev = m.files.get(path)
        if prev is not None:
            retired.extend(set(prev.chunks) - set(state.chunks))
        m.files[path] = state
    return {c.id for c in new}
