"""Keep an index current: scan -> plan -> parse -> chunk -> embed -> store.

An :class:`Indexer` is built once from its parts (the store, the embedder, the
manifest's path and :class:`IndexOptions`); :meth:`Indexer.run` brings folders
into the index, telling :class:`RunEvents` as it goes, and :meth:`Indexer.remove`
takes folders out. Each run is an :class:`IndexRun`, which holds the run's state (the new
manifest, the summary, the progress, the batch, what was retired) and has a method per step.
What to do with each file is worked out by :mod:`mdrag.ingest.plan` from the manifest, the scan
and the changed files' hashes, with no store; the run reads the files (:mod:`mdrag.ingest.reading`)
and the store, and applies the plan, writing its batches with :mod:`mdrag.ingest.writing`.

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

import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from mdrag.chunking import ChunkSettings
from mdrag.embedding.base import Embedder
from mdrag.errors import ConfigError, IndexingCancelledError
from mdrag.ingest import boilerplate
from mdrag.ingest.background import WarmUp, ahead
from mdrag.ingest.copies import CopyPlan, plan_copies, release
from mdrag.ingest.manifest import FileState, Manifest, PagePrints, SkippedFile
from mdrag.ingest.plan import (
    UpdatePlan,
    chunking_of,
    first_build_order,
    kept_files,
    mismatched,
    nothing_to_do,
    plan_update,
    rebuild_reason,
    recall_skips,
    refuse_rebuild_with_folders_missing,
    skip_key,
    to_hash,
)
from mdrag.ingest.progress import IndexProgress, ProgressCounter
from mdrag.ingest.reading import FileReader, Parsed, read_hash
from mdrag.ingest.scan import ScanOptions, ScanResult, scan
from mdrag.ingest.summary import NEW_INDEX, IndexSummary, report_scan, warn
from mdrag.ingest.writing import delete_replaced, publish, write_batch
from mdrag.parsers import parse_file
from mdrag.parsers.worker import ParseWorker
from mdrag.store import in_home, moved_uri, same_location
from mdrag.store.base import Store
from mdrag.types import Chunk, Document

__all__ = ["IndexOptions", "IndexRun", "Indexer", "RunEvents"]

log = logging.getLogger(__name__)

_BATCH_CHUNKS = 512  # chunks per embed + upsert round
_SAVE_EVERY_S = 5.0  # how often a long run records its progress in the manifest
# A first build given a ``pause`` (run in steps) ends a step once it wrote _GROW_CHUNKS chunks or ran _GROW_S,
# and ran _GROW_SHARE of the time the build has run (each step scans again, starts a parse worker, saves the
# store's files: a long build pays that a few dozen times, not every few seconds), so that readers search the
# files it has done within seconds; rounds of _GROW_BATCH chunks (fewer until a step commits) end it soon.
_GROW_CHUNKS = 384
_GROW_S = 4.0
_GROW_BATCH = (64, 128)
_GROW_SHARE = 0.1


@dataclass(frozen=True)
class IndexOptions:
    """How an :class:`Indexer` reads files and writes their chunks."""

    settings: ChunkSettings  # how files are cut into chunks: a change re-chunks every file
    selection: ScanOptions | None = None  # which files of the folders are indexed (None: every supported file)
    # (seconds, MB or None): files are parsed in a child process (:class:`~mdrag.parsers.worker.ParseWorker`),
    # and a file over either limit is skipped with the reason. None: parsed in this process, no limit.
    parse_limits: tuple[float, float | None] | None = None
    # Chunks per embed and write round (None: ``_BATCH_CHUNKS``); fewer: a pause is heeded sooner,
    # and the embedder holds the CPU for less time at once.
    batch_chunks: int | None = None


@dataclass(frozen=True)
class RunEvents:
    """Whom a run tells what it does, and what stops it (see :meth:`Indexer.run`)."""

    # How far the run is, as it starts, as each file is read, as each batch of the embedder returns,
    # as files are written or skipped, and when it starts saving (an exception it raises stops the
    # run, which the next run repairs).
    progress: Callable[[IndexProgress], None] | None = None
    on_upsert: Callable[[list[str]], None] | None = None  # the ids of the chunks just written (not committed)
    on_commit: Callable[[set[str]], None] | None = None  # the new state's chunk ids, before those it replaces go
    # Opens the store, called when the run first needs it (None: the store is open). A run that finds nothing
    # to do, the store unchanged since its last run (``Store.unchanged_since_last_run``), does not call it.
    open_store: Callable[[], None] | None = None
    # Once set, the run stops before its next file and raises IndexingCancelledError (the manifest is saved
    # dirty: the next run repairs and finishes).
    cancel: threading.Event | None = None
    # Once set, the run stops reading files, commits what it wrote, and returns with ``remaining`` files
    # left for the next run: a long update is committed in steps. A first build given one also ends a step on
    # its own every few seconds (``_GROW_S``, ``_GROW_CHUNKS``): its caller runs the next.
    pause: threading.Event | None = None
    # Once set (Ctrl+C), the run stops embedding at the embedder's next batch, and returns as a pause does,
    # having committed the files whose chunks are all written (the others are left to the next run).
    stop: threading.Event | None = None


#: ``sweep`` of a rebuild: every chunk in the store that the new state does not use is deleted.
_EVERYTHING: list[str] = []


class Indexer:
    """Keeps one index's store and manifest in line with its folders (see the module's docstring).

    >>> indexer = Indexer(store, embedder, manifest_path, "docs", IndexOptions(ChunkSettings()))  # doctest: +SKIP
    >>> summary = indexer.run(["docs"], RunEvents(progress=print))                                # doctest: +SKIP
    """

    def __init__(self, store: Store, embedder: Embedder, manifest_path: Path, name: str, options: IndexOptions) -> None:
        self.store = store  # where the chunks go: open, or opened by RunEvents.open_store
        self.embedder = embedder  # embeds the new chunks; its identity is recorded in the manifest
        self.manifest_path = manifest_path  # the index's per-file state, saved as the run goes
        self.name = name  # the index's name, recorded in the manifest and named in the log
        self.options = options

    def run(
        self,
        folders: Sequence[str | Path],
        events: RunEvents | None = None,
        *,
        rebuild: bool = False,
        only: Collection[str] | None = None,
        thorough: bool = False,
    ) -> IndexSummary:
        """Add or update ``folders`` in the index; the index's other folders are kept as they are.

        A folder that is missing, empty or partly unreadable is a warning, and
        what was indexed from it is kept: only a file that is gone from a folder
        that was listed whole is deleted (removing a folder is :meth:`remove`).
        ``events``: whom the run tells, and what stops it (see :class:`RunEvents`).
        ``rebuild`` drops the collection and starts over. With ``only`` (absolute
        paths), the run parses only those of the files to do (a watched change goes
        ahead of the rest).

        A manifest that was lost (missing, unreadable, or listing no folder) gives back the index's folders
        from the store: its chunks' folders (:func:`_roots_from_store`), with a warning.

        ``thorough`` (a `status --verify` found damage): the store repairs what its thorough check finds
        (``Store.repair``), and every file's chunks are compared with the store, as after a crash: the files
        whose chunks differ, or that the store names suspect, are indexed again (their vectors reused).
        """
        t0 = time.perf_counter()
        events = events or RunEvents()
        summary = IndexSummary()
        run = IndexRun(self, events, summary)
        if run.prepare(folders, rebuild, only, thorough):
            run.apply()
            summary.folders = list(run.m.roots)
            summary.chunks_total = run.m.chunk_count
        summary.seconds = round(time.perf_counter() - t0, 3)
        summary.embed_seconds = round(summary.embed_seconds, 3)
        return summary

    def remove(self, folders: Sequence[str | Path], events: RunEvents | None = None) -> IndexSummary:
        """Take ``folders`` out of the index: their files' chunks are deleted; the folders need not exist.
        Of ``events``, only ``on_commit`` is told (the new state's chunk ids, before the removed ones go).

        Raises ConfigError naming the index's folders when one of ``folders`` is not among them.
        """
        t0 = time.perf_counter()
        store, manifest_path = self.store, self.manifest_path
        on_commit = events.on_commit if events is not None else None
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
        boilerplate.prune(m.pages, m.roots, lambda *_: False)
        released = release(m.files, set(gone), set(), found=ScanResult())  # copies of removed files
        if released:
            warn(
                summary,
                f"{len(released)} files of the index's other folders had the same bytes as a removed file (such as "
                f"{released[0]}): the next `mdrag index` indexes them under their own paths",
            )
        summary.deleted = len(gone)
        m.dirty = True
        live = m.chunk_ids()
        publish(store, m, live)
        m.save(manifest_path)  # from here a crash is repaired: the retired folders' chunks are deleted then
        if on_commit is not None:
            on_commit(live)
        leftovers = store.all_ids(roots=m.retired_roots) - live
        ids = sorted((set(retired) | leftovers) - live)
        if ids:
            delete_replaced(store, ids)
        store.end_run(set(), live, whole=False)
        summary.chunks_deleted = len(ids)
        m.retired_roots = []
        m.mark_finished()
        m.save(manifest_path)
        summary.folders = list(m.roots)
        summary.chunks_total = m.chunk_count
        summary.seconds = round(time.perf_counter() - t0, 3)
        return summary


class IndexRun:
    """One run of an :class:`Indexer`: its state, from what it finds to do to its commit, and a method per step.

    It holds the new state's manifest (``m``), the ``summary``, the progress (``bar``), the ``batch`` of files
    read and not written yet, and what was ``retired`` (the ids the new state no longer uses: deleted after the
    commit). :meth:`prepare` decides what to do, repairing what a run that did not finish left; :meth:`apply`
    does it (see :meth:`Indexer.run`).
    """

    def __init__(self, indexer: Indexer, events: RunEvents, summary: IndexSummary) -> None:
        self.store = indexer.store
        self.embedder = indexer.embedder
        self.manifest_path = indexer.manifest_path
        self.name = indexer.name
        self.options = indexer.options
        self.events = events
        self.summary = summary
        self.key = skip_key(indexer.options.parse_limits)  # the parse limits a skip was recorded under
        self.batch_chunks = indexer.options.batch_chunks or _BATCH_CHUNKS
        self._open_store = events.open_store  # None once the store is open
        self.before: Manifest | None = None  # the manifest as the last run left it
        # What prepare() finds to do, for apply().
        self.m: Manifest  # the new state: the files as they will be, saved as the run goes
        self.plan: UpdatePlan  # what to do with each file of the folders listed
        self.found: ScanResult
        self.roots: list[str] = []
        self.writes = False  # False: the store holds the new state already, and the manifest is not saved
        self.sweep: list[str] | None = None  # folders (``_EVERYTHING``: all) whose chunks the new state drops
        self.run_hashes: set[int] | None = None  # see :func:`mdrag.ingest.writing.write_batch`
        self.copies: CopyPlan  # files to do that are copies of others (mdrag.ingest.copies): recorded, not parsed
        self.left_out = 0  # files to do that the run leaves to the next (not among ``only``)
        # What apply() does.
        self.bar: ProgressCounter  # the progress, told to RunEvents.progress
        self.batch: list[tuple[str, FileState, list[Chunk]]] = []
        self.retired: list[str] = []  # ids the new state no longer uses: deleted after the commit
        self.written: set[str] = set()  # ids of the chunks this run upserted
        self.left = 0  # files read, but left unwritten by a stop
        self.growing = False  # a first build (nothing committed yet, or part of its files)
        self.step_began: float | None = None  # when a first build run in steps began this one
        self._reader: FileReader
        self._early: dict[str, Document | Exception] = {}  # what parsing the HTML pages gave already
        self._drops: dict[str, list[str]] = {}  # the blocks left out of each page's chunks
        self._kept: dict[str, dict[str, list[str]]] = {}  # the passages each page keeps that others leave out
        self._warming: WarmUp | None = None  # the model, loading while the first files are parsed
        self._last_save = 0.0  # when the manifest last recorded the run's progress (time.monotonic)

    @property
    def on_upsert(self) -> Callable[[list[str]], None] | None:
        return self.events.on_upsert

    @property
    def stop(self) -> threading.Event | None:
        return self.events.stop

    # -- prepare: what the run does --------------------------------------------------------------------------
    def prepare(
        self, folders: Sequence[str | Path], rebuild: bool, only: Collection[str] | None, thorough: bool
    ) -> bool:
        """Decide what the run does, repairing what a run that did not finish left; False: nothing to do
        (``summary`` then says what was found)."""
        store, summary = self.store, self.summary
        # What decides the stored chunks: a change re-chunks (vectors are reused by content hash).
        chunking = chunking_of(store, self.embedder, self.options.settings)
        old, roots = self._earlier(_resolve(folders), rebuild, chunking)
        found = scan(roots, self.options.selection)
        if summary.rebuild and old is not None:
            refuse_rebuild_with_folders_missing(old, found, summary.rebuild)
        if rebuild:
            old = None
        skips = old.skipped if old is not None and summary.rebuild is None else {}
        recall_skips(found, skips, self.key)
        # The store as the last clean run left it: no need to count its rows.
        as_left = (
            old is not None and old.verified and not old.dirty and not thorough and store.unchanged_since_last_run()
        )
        if self._unchanged(old, roots, found, as_left):
            return False
        self._open()
        if summary.rebuild:  # said at WARNING unless asked for (--rebuild) or the index is new
            (log.warning if not rebuild and (self.before is not None or self.manifest_path.exists()) else log.info)(
                "index %r: every file is indexed again (%s); searches keep the last committed state until it is done",
                self.name,
                summary.rebuild,
            )
        suspect = _repair_store(store, summary, thorough)
        self.m = self._new_manifest(old, chunking, roots, found, skips, thorough)
        scope = sorted(set(self.m.roots) | set(roots) | set(self.m.retired_roots))
        if not self.m.dirty and self.m.files and not as_left and store.count(scope) != self.m.chunk_count:
            log.warning("index %r: the store and the manifest disagree", self.name)
            self.m.dirty = True
        repair = summary.rebuild is not None or self.m.dirty
        if self.m.dirty:
            roots, found = self._repair(roots, found, scope, suspect)
        report_scan(summary, found, old)
        self.roots, self.found = roots, found
        self._plan(old, rebuild, only, scope, repair)
        return True

    def _open(self) -> None:
        """Open the store (RunEvents.open_store), unless it is open."""
        if self._open_store is not None:
            self._open_store()
            self._open_store = None

    def _earlier(
        self, roots: list[str], rebuild: bool, chunking: dict[str, object]
    ) -> tuple[Manifest | None, list[str]]:
        """The manifest the last run left (None: none, or unreadable) and the folders to scan: ``roots``, with
        every folder of the index when it is indexed again whole (``summary.rebuild`` says why), or those its
        store holds when its manifest lost them."""
        store, manifest_path, summary = self.store, self.manifest_path, self.summary
        old = self.before = Manifest.load(manifest_path)
        if old is not None and not rebuild and _moved(old, store, manifest_path, self._open_store):
            self._open_store = None
        if rebuild:
            summary.rebuild = "requested (--rebuild)"
        elif old is None:
            summary.rebuild = NEW_INDEX if not manifest_path.exists() else "manifest unreadable"
        else:
            summary.rebuild = rebuild_reason(old, store, self.embedder, chunking)
        if summary.rebuild and old is not None:  # every folder of the index is indexed again, not only those given
            roots = _resolve([*old.roots, *roots])
        if (old is None or not old.roots) and in_home(store.uri, manifest_path):
            self._open()
            retired = old.retired_roots if old is not None else []  # a removal of them did not finish
            recovered = _roots_from_store(store, manifest_path, retired, summary)
            if recovered and summary.rebuild == NEW_INDEX:  # not new: its manifest was lost
                summary.rebuild = "no manifest"
            roots = _resolve([*recovered, *roots])
        return old, roots

    def _unchanged(self, old: Manifest | None, roots: list[str], found: ScanResult, as_left: bool) -> bool:
        """Whether nothing changed since the last clean run (``as_left``), the store unopened: the summary
        then says what was found."""
        summary = self.summary
        if self._open_store is None or old is None or not as_left or summary.rebuild is not None or old.partial:
            return False
        if not nothing_to_do(old, roots, found) or boilerplate.stale(old.files, old.pages):
            return False
        summary.unchanged, summary.chunks_total = len(found.files), old.chunk_count
        summary.kept = len(kept_files(old.files, roots, found))
        summary.skipped_files = [(p, reason) for p, (_, reason) in found.skipped.items()]
        summary.skipped = len(summary.skipped_files)
        report_scan(summary, found, old)
        summary.folders = list(old.roots)
        return True

    def _new_manifest(
        self,
        old: Manifest | None,
        chunking: dict[str, object],
        roots: list[str],
        found: ScanResult,
        skips: dict[str, SkippedFile],
        thorough: bool,
    ) -> Manifest:
        """The new state's manifest: the last run's files, unless every file is indexed again."""
        before = self.before
        m = Manifest(index=self.name, store_uri=self.store.uri, model=self.embedder.identity, chunking=chunking)
        m.last_indexed = before.last_indexed if before is not None else None  # until this run finishes
        if old is not None and self.summary.rebuild is None:
            m.files, m.pages = old.files, old.pages
            m.dirty = old.dirty or not old.verified or thorough
            m.retired_roots = old.retired_roots
            m.committed_ids, m.committed_roots = old.committed_ids, old.committed_roots
            m.committed_files = old.committed_files
            m.partial, m.grown_since = old.partial, old.grown_since  # a first build in part goes on
            # kept while the file is there as it was, or its folder was not listed in this run
            m.skipped = {p: f for p, f in skips.items() if p in found.skipped or f.root not in roots}
        # The folders this manifest accounts for: other indexers may write other
        # folders into the same collection, and their chunks are not ours to repair.
        m.roots = _resolve([*(old.roots if old is not None else []), *(r for r in roots if r not in found.missing)])
        return m

    def _repair(
        self, roots: list[str], found: ScanResult, scope: list[str], suspect: set[str]
    ) -> tuple[list[str], ScanResult]:
        """Forget the files whose chunks in the store do not match the manifest, or whose rows the store finds
        suspect: they are indexed again. The folders to scan and what the scan found, then."""
        m = self.m
        self.summary.repaired = True
        log.warning("the previous run of index %r did not finish, or its files changed: repairing", self.name)
        stored = self.store.id_paths(roots=scope)
        for path in mismatched(m.files, stored):
            log.info("re-indexing %s: its chunks in the store do not match the manifest", path)
            del m.files[path]
        for path in sorted({stored[cid] for cid in suspect if cid in stored} & m.files.keys()):
            log.info("re-indexing %s: the store finds its chunks' rows damaged", path)
            del m.files[path]
        # A repaired file may lie in any folder of the index: list them all.
        if set(m.roots) - set(roots):
            roots = m.roots
            found = scan(roots, self.options.selection)
            recall_skips(found, m.skipped, self.key)
        return roots, found

    def _plan(
        self, old: Manifest | None, rebuild: bool, only: Collection[str] | None, scope: list[str], repair: bool
    ) -> None:
        """What to do with each file (``plan``, ``copies``), whether the run writes, and what it sweeps."""
        m, roots, found = self.m, self.roots, self.found
        # A store that starts a full re-index empty (a new index, or one made anew for another model) holds
        # nothing readers could keep seeing, and no vectors to reuse but the ones this run writes (texts that
        # repeat); --rebuild trusts none of the stored vectors either: only this run's hashes are looked up.
        empty = self.summary.rebuild is not None and self.store.count() == 0
        m.keep_committed(None if empty else self.before)  # what readers keep seeing until this run commits
        self.run_hashes = set() if rebuild or empty else None

        hashes = {p: read_hash(p) for p in to_hash(m.files, roots, found)}
        plan = plan_update(m.files, roots, found, hashes)
        # A first build or rebuild does first the files likely asked about first; an update keeps the plan's order.
        if self.summary.rebuild is not None or m.committed_ids == [] or m.partial is not None:
            plan.todo = first_build_order(plan.todo, found)
        left_out = len(plan.todo)  # files to do that this run leaves (``only``)
        if only is not None:
            plan.todo = [t for t in plan.todo if t[0] in only]
        self.left_out = left_out - len(plan.todo)
        # Files of the same bytes as another are recorded as its copies, not parsed (mdrag.ingest.copies).
        plan.todo, copies = plan_copies(m.files, plan.todo, plan.delete, found, lambda p: hashes.get(p) or read_hash(p))
        restale = _forget_pages(m, roots, found, plan)
        moved = old is not None and old.roots != m.roots  # with a first build in part: its end says it is whole
        writes = bool(
            plan.todo or copies.count or plan.delete or repair or m.retired_roots or moved or m.partial is not None
        )
        self.writes = writes or bool(restale)
        # A rebuild writes the whole index beside what readers see, then deletes every chunk it did not write.
        self.sweep = _EVERYTHING if rebuild else scope if repair or m.retired_roots else None
        self.plan, self.copies = plan, copies

    # -- apply: carrying out the plan ------------------------------------------------------------------------
    def apply(self) -> None:
        """Carry out the plan on the store and the manifest, and save the manifest clean.

        Touched files are recorded; the files to do are parsed, chunked, embedded
        and written; ``on_commit`` is told the new state; then the chunks it no
        longer uses are deleted (with ``sweep``, every chunk under those folders
        that it does not use: a repair) and the store is told the run is done.
        With ``writes`` False the store holds the new state already: the manifest
        is not saved.
        """
        todo = self._begin()
        todo = self._start_reading(todo)
        read = self._read_and_write(todo)
        self._commit(todo, read)

    def _begin(self) -> list[tuple[str, str | None]]:
        """Record the touched files and the copies, and save the manifest dirty (when the run writes); the
        files to read."""
        m, plan, summary = self.m, self.plan, self.summary
        summary.unchanged = len(plan.unchanged) + len(plan.touched)
        summary.kept = len(plan.kept)
        summary.touched = len(plan.touched)
        for p, (mtime_ns, size) in plan.touched.items():
            m.files[p].mtime_ns, m.files[p].size = mtime_ns, size
            if p in m.pages:
                m.pages[p].mtime_ns, m.pages[p].size = mtime_ns, size
            log.info("%s: touched, content unchanged: already embedded", p)
        # A first build (nothing committed yet, or part of its files) run in steps commits every few seconds.
        self.growing = self.writes and (m.committed_ids == [] or m.partial is not None)
        if self.growing and self.events.pause is not None:  # run in steps
            self.batch_chunks = min(self.batch_chunks, _GROW_BATCH[0] if not m.partial else _GROW_BATCH[1])
            m.grown_since = m.grown_since or time.time()
        if self.writes:
            m.dirty = True
            m.progress = [0, len(plan.todo)]  # readers of a first build learn its size at once
            m.save(self.manifest_path)
        self.step_began = time.monotonic() if self.growing and self.events.pause is not None else None
        self._last_save = time.monotonic()
        self.copies.record_now(m, self.found, self.retired, summary)
        return plan.todo + [(p, None) for p in boilerplate.stale(m.files, m.pages, [p for p, _ in plan.todo])]

    def _start_reading(self, todo: list[tuple[str, str | None]]) -> list[tuple[str, str | None]]:
        """Start the parse worker (with parse limits) and read the HTML pages ahead, to know the blocks each
        folder's pages repeat before any of them is chunked; the files to read, with the pages that must be
        chunked again for it."""
        m, parse_limits, events = self.m, self.options.parse_limits, self.events
        # With parse_limits, files are parsed in a child process that can be stopped.
        worker = ParseWorker(parse_limits[1]) if parse_limits and any(err is None for _, err in todo) else None
        timeout, max_mb = parse_limits if parse_limits else (0.0, None)
        self._reader = FileReader(self.embedder, self.options.settings, worker, timeout, max_mb)
        try:  # the blocks each folder's HTML pages repeat, known before any of its pages is chunked
            self._early = boilerplate.read_pages(
                [p for p, err in todo if err is None],
                self.found.files,
                m.pages,
                lambda p: worker.parse(p, timeout) if worker is not None else parse_file(p),
                events.cancel,
            )
        except BaseException as e:
            if worker is not None:
                worker.close()
            if isinstance(e, IndexingCancelledError) and self.writes:
                m.save(self.manifest_path)  # what was written so far, still dirty: the next run repairs and goes on
            raise
        todo += [(p, None) for p in boilerplate.stale(m.files, m.pages, [p for p, _ in todo])]
        self._drops, self._kept = boilerplate.decide(m.pages)
        sizes = [(path, self.found.files[path][3]) for path, _ in todo if path in self.found.files]  # not skipped
        self.bar = ProgressCounter(len(todo), events.progress, sizes, self.summary.unchanged if self.growing else None)
        return todo

    def _read_and_write(self, todo: list[tuple[str, str | None]]) -> int:
        """Parse and chunk the files to do (in a thread, while the last batch is embedded), and write them in
        batches, until they are done or the run stops reading (:meth:`_step_over`); how many were read."""
        # The model loads while the first files are parsed (a parse worker takes a while to start, too).
        self._warming = WarmUp(self.embedder) if todo else None
        read = 0  # files taken from todo
        try:
            with closing(ahead(todo, self._parse, cancel=self.events.cancel)) as parsed:
                for (path, preset), result in parsed:
                    read += 1
                    self._take(path, preset, result)
                    if sum(len(chunks) for _, _, chunks in self.batch) >= self.batch_chunks:
                        self._write()
                        if time.monotonic() - self._last_save > _SAVE_EVERY_S:
                            self.m.progress = [self.bar.files_done, self.bar.files_total]
                            self.m.save(self.manifest_path)
                            self._last_save = time.monotonic()
                    if self._step_over():
                        break
        except IndexingCancelledError:
            if self.writes:
                self.m.save(self.manifest_path)  # what was written so far, still dirty: the next run repairs
            raise
        finally:
            if self._reader.worker is not None:
                self._reader.worker.close()
        if self.batch:  # after a stop, written only where nothing is left to embed
            self._write()
        return read

    def _parse(self, item: tuple[str, str | None]) -> Parsed:
        """Read, parse and chunk one file to do (``item``: its path, and why it is skipped already, if it is)."""
        path, err = item
        if err:
            parsed = Parsed(None, [], err)
        else:
            early, drop, keep = self._early.pop(path, None), self._drops.get(path, ()), self._kept.get(path, {})
            parsed = self._reader.read(path, self.found.files[path], early=early, drop=drop, keep=keep)
        self.bar.parsed(path, len(parsed.chunks))  # ahead of the embedder: the estimate of the chunks to write
        return parsed

    def _take(self, path: str, preset: str | None, parsed: Parsed) -> None:
        """Account for one parsed file: a skip is recorded (an indexed file's stale chunks join ``retired``);
        a file's chunks join ``batch``."""
        m, summary = self.m, self.summary
        state, chunks, err, encoding, crashed, doc_warnings = parsed
        is_new = path not in m.files
        for w in doc_warnings:
            warn(summary, w)
        self.bar.read(len(chunks))
        if state is None:
            summary.skipped += 1
            summary.parser_errors += crashed
            summary.skipped_files.append((path, err or "unknown error"))
            (log.info if path in m.skipped else log.warning)("skipped %s: %s", path, err)
            if preset is None:  # its parse failed (not the scan, not a read): remembered until it changes
                root, _, mtime_ns, size = self.found.files[path]
                m.skipped[path] = SkippedFile(root, mtime_ns, size, err or "unknown error", self.key)
            self.bar.done(1)
            if not is_new:  # its old content is stale: remove it, retry next run
                self.retired.extend(m.files.pop(path).chunks)
            return
        m.skipped.pop(path, None)
        if encoding and encoding.replace("-", "_").lower() not in ("utf_8", "utf_8_sig", "ascii"):
            summary.decoded[path] = encoding
            log.info("%s: decoded as %s", path, encoding)
        if is_new:
            summary.added += 1
        else:
            summary.modified += 1
        self.batch.append((path, state, chunks))

    def _write(self) -> None:
        """Embed and write the batch (:func:`mdrag.ingest.writing.write_batch`), the model loaded first."""
        events, bar = self.events, self.bar
        if self._warming is not None and not (events.stop is not None and events.stop.is_set()):
            if not self._warming.ready:
                bar.now("loading the model")
            self.summary.embed_seconds += self._warming.finish()
            self._warming = None
        bar.now("embedding")
        ids, unwritten = write_batch(self, self.batch)
        self.left += unwritten
        bar.done(len(self.batch) - unwritten)
        self.written |= ids
        self.batch.clear()

    def _step_over(self) -> bool:
        """Whether the run stops reading files here: paused, stopped, or a first build's step is over."""
        events, m = self.events, self.m
        if events.stop is not None and events.stop.is_set():
            return True
        took = time.monotonic() - self.step_began if self.step_began is not None else None
        if took is not None and (took >= _GROW_S or len(self.written) >= _GROW_CHUNKS):
            if took >= _GROW_SHARE * (time.time() - (m.grown_since or 0.0)):
                return True
        return events.pause is not None and events.pause.is_set() and not _would_drop(m, self.retired, self.batch)

    def _commit(self, todo: list[tuple[str, str | None]], read: int) -> None:
        """Delete the files gone from disk, commit the new state, delete the chunks it no longer uses, and save
        the manifest clean. ``read``: how many of ``todo`` were read (the others are left to the next run)."""
        m, store, summary, retired = self.m, self.store, self.summary, self.retired
        self.bar.now("saving")
        summary.remaining = (
            len(todo) - read + self.left + self.copies.record_after(m, self.found, retired, summary, self.key)
        )
        if msg := self._reader.truncated.message():
            warn(summary, msg)

        # Files gone from disk: their chunks go, after the new files could reuse their vectors.
        for p in self.plan.delete:
            retired.extend(m.files.pop(p).chunks)
        summary.deleted = len(self.plan.delete)

        live = m.chunk_ids()
        if self.writes:
            publish(store, m, live)
            m.save(self.manifest_path)  # still dirty: a crash from here on is repaired
        if self.events.on_commit is not None:
            self.events.on_commit(live)
        if self.sweep is not None:
            retired.extend(store.all_ids(roots=None if self.sweep is _EVERYTHING else self.sweep) - live)
        retired = sorted(set(retired) - live)
        if retired:
            delete_replaced(store, retired)
            summary.chunks_deleted += len(retired)
        if self.writes:
            undone = summary.remaining + self.left_out
            # A rebuild wrote the index whole; so has the last step of a first build run in steps, over its steps.
            store.end_run(self.written, live, whole=summary.rebuild is not None or (self.growing and not undone))
            m.retired_roots = []
            m.mark_finished()
            if self.growing:  # readers are told that the index holds part of its files
                total = summary.unchanged + len(todo) + self.copies.count + self.left_out
                m.partial = [total - undone, total] if undone else None
                m.grown_since = m.grown_since if undone else None
            m.save(self.manifest_path)


def _would_drop(m: Manifest, retired: list[str], batch: list[tuple[str, FileState, list[Chunk]]]) -> bool:
    """Whether committing now would drop chunks that readers see and that nothing replaced yet: the files
    a full re-index has not done again (a pause then waits for the run's end, so that readers keep the
    committed index whole). ``batch``: the files read and not written yet, whose chunks the commit holds."""
    if not m.committed_ids:
        return False
    kept = m.chunk_ids()
    kept.update(retired)
    for _, _, chunks in batch:
        kept.update(c.id for c in chunks)
    return not kept.issuperset(m.committed_ids)


def _resolve(folders: Sequence[str | Path]) -> list[str]:
    return list(dict.fromkeys(str(Path(f).expanduser().resolve()) for f in folders))


def _repair_store(store: Store, summary: IndexSummary, thorough: bool) -> set[str]:
    """Build again what the store finds damaged in its own files (its vector index, tag rows), from the
    data it holds; each repair is a warning. The ids of the chunks whose rows the store finds suspect."""
    said, suspect = store.repair(thorough)
    for msg in said:
        summary.repaired = True
        warn(summary, msg)
    return suspect


def _moved(old: Manifest, store: Store, manifest_path: Path, open_store: Callable[[], None] | None) -> bool:
    """Whether the manifest records its store in a home that was copied or moved (see
    :func:`mdrag.store.moved_uri`), the store in this home holding exactly the chunks it lists: then
    it is the same index, and its manifest records the new place (saved, when its checksum held).
    Opens the store (with ``open_store``) to count them; whether it did."""
    if same_location(old.store_uri, store.uri):
        return False
    moved = moved_uri(old.store_uri, manifest_path)
    if moved is None or not same_location(moved, store.uri):
        return False
    if open_store is not None:
        open_store()
    expected = old.visible()[0] if old.dirty else old.chunk_ids()
    stored = store.all_ids(roots=old.roots) if old.roots else set()
    if not expected or not expected <= stored or (not old.dirty and stored != expected):
        log.warning(
            "index %r: the manifest records its store at %s; the store at %s does not hold the chunks it lists",
            old.index,
            old.store_uri,
            store.uri,
        )
        return True
    log.info("index %r: its home moved: the store recorded at %s is at %s, whole", old.index, old.store_uri, store.uri)
    old.store_uri = store.uri
    if old.verified:
        old.save(manifest_path)
    return True


def _roots_from_store(store: Store, manifest_path: Path, retired: list[str], summary: IndexSummary) -> list[str]:
    """The folders of an index whose manifest lost them (missing, unreadable, or listing none): the
    folders of the chunks its store holds but ``retired``, said as a warning; none for a new index."""
    roots = [r for r in store.roots() if r not in retired]
    if roots:
        warn(
            summary,
            f"the manifest {manifest_path} was lost: took the folders back from the store: {', '.join(roots)}",
        )
    return roots


def _forget_pages(m: Manifest, roots: Sequence[str], found: ScanResult, plan: UpdatePlan) -> list[str]:
    """Forget the HTML pages' prints (:mod:`mdrag.ingest.boilerplate`) of pages deleted, now skipped, or out
    of the index; the indexed pages that must be chunked again as a block crossed the share (even with
    nothing else to do: a run that did part of its files left them)."""
    listed, deleted = set(roots), set(plan.delete)

    def gone(path: str, prints: PagePrints) -> bool:
        if path in deleted or path in found.skipped:
            return True
        scanned = prints.root in listed and found.complete(prints.root) and not found.kept(path)
        return scanned and path not in found.files

    boilerplate.prune(m.pages, m.roots, gone)
    return boilerplate.stale(m.files, m.pages, [p for p, _ in plan.todo])
