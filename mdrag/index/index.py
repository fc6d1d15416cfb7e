"""The `Index`: one named index, its store and embedder, updated and searched."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mdrag.chunking import ChunkSettings
from mdrag.config import Config, load_config
from mdrag.embedding import Embedder, make_embedder
from mdrag.errors import (
    IndexBuildingError,
    MdragError,
    ModelMismatchError,
    StoreDamagedError,
)
from mdrag.index.health import Health
from mdrag.index.snapshot import Snapshot
from mdrag.index.status import IndexStatus, Partial
from mdrag.index.verify import VerifyRecord
from mdrag.index.visibility import Visibility
from mdrag.index.writers import Running, Writers
from mdrag.ingest.manifest import Manifest
from mdrag.ingest.plan import mismatched
from mdrag.ingest.progress import IndexProgress
from mdrag.ingest.scan import ScanOptions
from mdrag.ingest.summary import IndexSummary
from mdrag.retrieval.documents import Fetched, fetch
from mdrag.retrieval.linked import Resolver
from mdrag.retrieval.links import notes_at, notes_of, with_links
from mdrag.retrieval.relevance import TermStats
from mdrag.retrieval.search import Scope, SearchOptions, search
from mdrag.retrieval.shown import held_filters
from mdrag.store import check_backend, in_home, make_store, resolve_backend
from mdrag.types import SearchResult

if TYPE_CHECKING:
    import numpy as np

    from mdrag.answering.ask import Answer
    from mdrag.answering.followup import Turn
    from mdrag.ingest.pipeline import Indexer
    from mdrag.store.base import Store

__all__ = ["Index", "make_embedder", "open_index"]

log = logging.getLogger(__name__)

# term_stats() counts at most about this many chunks' words; a larger index is sampled.
_STATS_ROWS = 40000


class Index:
    """A named index: ``update()`` keeps it in line with folders, ``search()`` queries it.

    >>> with open_index() as idx:                                  # doctest: +SKIP
    ...     idx.update(["docs"])
    ...     for r in idx.search("how do I install it?", k=5):
    ...         print(r.score, r.rel_path, r.heading)

    One Index may be used from several threads: searches run side by side and
    with one update (updates and removals run one at a time, across processes
    too: see :class:`mdrag.index.writers.Writers`); the store is
    opened once, by whichever call needs it first; ``close()`` waits for the
    calls in progress. A search reads the state committed when it began; the
    chunks a commit replaces are deleted once the searches still reading the
    state before it have finished, or, should one take longer than
    ``mdrag.index.visibility._READERS_GRACE_S``, after that, with a warning (that search may then miss
    some results; nothing else is affected).

    Its locks are taken in this order, never against it (a thread holding one takes only those after it):

    1. ``_update_lock``: one update or removal at a time in this process;
    2. the writers' file lock (:class:`~mdrag.index.writers.Writers`): the same across processes;
    3. ``_cond``: the count of calls using the store; :meth:`close` holds it while it closes the store, and
       every other call holds it only for an instant, at its start and its end, holding nothing else;
    4. ``_open_lock``: the store's connection (opening, closing; :class:`~mdrag.index.health.Health`'s counts);
    5. ``_store_lock``: the store object, made on first use (:attr:`store`) or made again.
    """

    def __init__(self, config: Config | None = None, embedder: Embedder | None = None) -> None:
        self.config = config or load_config()  # resolved settings
        self.name: str = self.config["index"]  # index (collection) name
        # The embedder the settings give (a --rebuild builds with it), and the one the index was built with,
        # which reads and updates it (the same but for a precision the settings changed since).
        self._configured = embedder or make_embedder(self.config)  # loads its model lazily
        built = Manifest.load(self.manifest_path)
        self.embedder = self._configured.for_index(built.model) if built is not None else self._configured
        ChunkSettings.from_config(self.config)  # settings that cannot go together: said now (see settings)
        self._stem = None  # applied to BM25 texts and queries
        if self.config["search.stemming"]:
            from mdrag.stemming import stemmer

            self._stem = stemmer()
        # The store backend (store.backend, or what `auto` picks for this index) and why; opened on first use.
        self.backend, self.backend_reason = resolve_backend(self.config, self.name)
        log.info("index %r: %s store (%s)", self.name, self.backend, self.backend_reason)
        check_backend(self.config, self.name, self.backend)  # an extra it needs and lacks: said now, not later
        self._store: Store | None = None  # made on first use (see store)
        self._store_lock = threading.Lock()
        # The store's connection; these two (and the rows _health counted) are guarded by _open_lock.
        self._open_lock = threading.Lock()  # one thread opens (or closes) the store, the others wait
        self._opened = False  # the store is connected and its collection loaded
        self._exists = False
        self._update_lock = threading.Lock()  # one update() or remove() at a time
        self._writers = Writers(self.manifest_path, self.name)  # the same, across processes
        self._cond = threading.Condition()  # guards the two fields below
        self._busy = 0  # calls using the store now (search, status, update, remove): close() waits for them
        self._stats: tuple[int, TermStats] | None = None  # term_stats() and the snapshot generation it counted
        # What searches see: a running update is invisible until it commits, then visible all at once.
        self._snapshot = Snapshot()
        self._view = Visibility(self.manifest_path, self.name, self._snapshot)  # that snapshot, with the manifest
        self._health = Health(self.name, self.manifest_path, self._view, self._open_lock)  # what a search checks first
        self._verify = VerifyRecord(self.manifest_path)  # what the last `status --verify` found damaged
        self._search_options: tuple[Config, SearchOptions] | None = None  # see search_options
        self._yield = False  # updates give way to searches (see yield_to_searches)

    @property
    def store(self) -> Store:
        """The index's store, made on first use: the embedder's identity, which the store records, may
        ask an embedding API for its vectors' size, and a new ``Index`` never waits on the network."""
        store = self._store  # made already: every search comes here, no lock needed
        if store is None:
            with self._store_lock:
                if self._store is None:
                    self._store = make_store(self.config, self.name, self.embedder.identity, self._stem, self.backend)
                store = self._store
        return store

    @property
    def settings(self) -> ChunkSettings:
        """How files are cut: the ``chunk.*`` settings, those left unset taken from what the index recorded
        (a program that does not set them keeps the index's); one set to another value chunks every file
        again (vectors of unchanged text are reused), as the update's ``rebuild`` says."""
        m = Manifest.load(self.manifest_path)
        return ChunkSettings.from_config(self.config, m.chunking if m is not None else None)

    @property
    def search_options(self) -> SearchOptions:
        """The search settings (``search.*``) as one value, built once for each ``config`` (a server
        replaces ``config`` when its settings file changes)."""
        built = self._search_options
        if built is None or built[0] is not self.config:
            built = self._search_options = (self.config, SearchOptions.from_config(self.config))
        return built[1]

    @property
    def manifest_path(self) -> Path:
        return self.config.manifest_path(self.name)

    @contextmanager
    def _using(self) -> Iterator[None]:
        """Count a call that uses the store, so that close() waits for it."""
        with self._cond:
            self._busy += 1
        try:
            yield
        finally:
            with self._cond:
                self._busy -= 1
                self._cond.notify_all()

    def _open(self, create: bool, set_aside_damage: bool = False) -> bool:
        """Open the store (create the collection with ``create``) unless it is open; whether it exists."""
        with self._open_lock:
            if not self._opened or (create and not self._exists):
                try:
                    self._exists = self.store.open(create=create, replace_mismatch=create)
                except StoreDamagedError:
                    if not set_aside_damage or self.store.set_aside() is None:
                        raise
                    self._exists = self.store.open(create=create, replace_mismatch=create)
                self._opened = True
                self._health.forget()
            return self._exists

    def _end_run(self) -> None:
        """What a failed run wrote stays invisible (the next run deletes it); searches follow the store again.
        A run may have repaired (or found) missing rows: they are checked again at the next search."""
        self._view.end_run()
        with self._open_lock:
            self._health.forget()

    @property
    def folders(self) -> list[str]:
        """The index's folders (absolute), as its last run recorded them; kept while missing on disk."""
        m = Manifest.load(self.manifest_path)
        return list(m.roots) if m is not None else []

    @property
    def files(self) -> list[str]:
        """The indexed files' paths relative to their folder, as the last run recorded them."""
        m = Manifest.load(self.manifest_path)
        return sorted(f.rel_path for f in m.files.values()) if m is not None else []

    @property
    def shared_names(self) -> tuple[list[str], frozenset[str]]:
        """The index's folders, and the relative paths that files of several of them share (``x.md`` in two),
        as of the manifest the last search read: such a result's ``rel_path`` alone does not name its file."""
        return self._view.seen_roots, self._view.seen_shared

    def _folders_to_update(self, folders: Sequence[str | Path] | None) -> list[str | Path]:
        """``folders`` when given; else the index's folders, with the setting ``folders`` when it was set
        (its default, ./markdown, only for an index that has no folders yet)."""
        if folders:
            return list(folders)
        known: list[str | Path] = list(self.folders)
        if not known or self.config.sources.get("folders") != "default":
            known += [f for f in self.config["folders"] if str(Path(f).expanduser().resolve()) not in known]
        return known

    def _selection(self) -> ScanOptions:
        c = self.config
        mb = c["index.max_file_mb"]
        return ScanOptions(
            include=tuple(c["index.include"]),
            exclude=tuple(c["index.exclude"]),
            gitignore=c["index.gitignore"],
            max_file_bytes=int(mb * 2**20) if mb else None,
        )

    def _indexer(self, embedder: Embedder, batch_chunks: int | None = None) -> Indexer:
        """The indexer of this index's store under its settings, embedding with ``embedder``."""
        from mdrag.ingest.pipeline import Indexer, IndexOptions  # not imported by a search

        options = IndexOptions(
            self.settings,  # read from the manifest once per run
            self._selection(),
            (self.config["index.parse_timeout"], self.config["index.max_parse_mb"] or None),
            batch_chunks,
        )
        return Indexer(self.store, embedder, self.manifest_path, self.name, options)

    def update(
        self,
        folders: Sequence[str | Path] | None = None,
        rebuild: bool = False,
        progress: Callable[[IndexProgress], None] | None = None,
        cancel: threading.Event | None = None,
        only: Collection[str] | None = None,
        pause: threading.Event | None = None,
        batch_chunks: int | None = None,
        stop: threading.Event | None = None,
    ) -> IndexSummary:
        """Add or update ``folders`` (default: all of the index's folders), incrementally.

        The index's other folders are kept as they are; a folder that is missing
        or empty is a warning and keeps what was indexed from it. To take a
        folder out of the index, use :meth:`remove`. ``progress`` is told how far
        the run is (:class:`mdrag.ingest.pipeline.IndexProgress`), often. Setting ``cancel``
        (from another thread) stops the run before its next file with
        IndexingCancelledError; searches keep the last committed state, and the
        next run finishes the work. A run of another process on the index is
        waited for (with a warning in the log): this one then finds that run's
        work done, and its summary's ``waited_s`` says how long it waited.
        ``only``, ``pause``, ``stop`` and ``batch_chunks`` keep a run short (see
        :class:`mdrag.ingest.pipeline.RunEvents` and :class:`~mdrag.ingest.pipeline.IndexOptions`):
        :class:`mdrag.index.keeper.IndexKeeper` commits a long update in steps with them. Given ``pause``,
        a first build also ends its steps on its own, every few seconds, so that searches (of this process
        and others) answer from the files it has done (:meth:`partial` says how many); the summary's
        ``remaining`` says whether to run the next. While a run indexes, other processes' :meth:`status`
        says so, with its process id and progress.
        """
        with self._using(), self._update_lock, self._writers.hold(cancel):
            # Read under the writers' lock: after a wait for another process's run, what that run left.
            folders = self._folders_to_update(folders)

            # A damaged collection is set aside (as --rebuild would) when a run was killed while writing
            # it: with no manifest (a first run killed before its commit) or a dirty one. The next run is
            # the repair a kill asks for; the folders hold everything the collection held.
            old = Manifest.load(self.manifest_path)
            set_aside = rebuild or old is None or old.dirty
            # What the last `status --verify` found: this run checks every row and repairs it.
            verified = self._verify.found()

            if rebuild and self.embedder is not self._configured:
                self._take_configured_embedder()
            # what `status --verify` found damaged, or pages SQLite cannot read, are not built upon
            if rebuild and (verified is not None or self._unreadable()):
                with self._open_lock:
                    self.store.close()
                    self._opened = False
                    self.store.set_aside()

            def open_store() -> None:
                self._open(create=True, set_aside_damage=set_aside)

            roots = frozenset(str(Path(f).expanduser().resolve()) for f in folders)

            def told(p: IndexProgress) -> None:
                self._view.progress = (p.files_done, p.files_total)
                self._writers.record(p.files_before + p.files_done, p.files_before + p.files_total, p.first_build)
                if progress is not None:
                    progress(p)

            self._view.begin_run()
            try:
                opened = self._opened
                if opened:
                    open_store()
                # No search waits while a first build has committed nothing: it gives way from its second step on.
                gives_way = self._yield and only is None and not (old is None or old.building)
                embedder = self.embedder.background() if gives_way else self.embedder
                from mdrag.ingest.pipeline import RunEvents  # not imported by a search

                events = RunEvents(
                    told,
                    on_upsert=self._snapshot.written,
                    on_commit=lambda ids: self._view.commit(ids, roots),
                    open_store=None if opened else open_store,  # a run with nothing to do need not open it
                    cancel=cancel,
                    pause=pause,
                    stop=stop,
                )
                ended = False  # the run is over: no step of it follows (a failed one is not gone on with)
                summary = self._indexer(embedder, batch_chunks).run(
                    folders, events, rebuild=rebuild, only=only, thorough=verified is not None
                )
                ended = not summary.remaining
                summary.waited_s = round(self._writers.waited, 3)
                if verified is not None:
                    self._verify.repaired(verified)
                return summary
            except BaseException:
                ended = True
                raise
            finally:
                if ended or not self._writers.held_on:  # the record goes with the lock (kept between the CLI's steps)
                    self._writers.clear_record()
                self._end_run()

    def _take_configured_embedder(self) -> None:
        """A rebuild embeds with the embedder the settings give, not the one the index was built with: the
        store is made again, with its identity."""
        log.info("index %r: rebuilt with the configured embedder %s", self.name, self._configured.identity)
        with self._open_lock, self._store_lock:
            if self._store is not None:
                self._store.close()
            self._store, self._opened, self._exists = None, False, False
            self.embedder = self._configured
            self._health.forget()

    def _unreadable(self) -> bool:
        """Whether the store cannot be read whole (every row read: a --rebuild embeds every chunk anyway)."""
        try:
            if self._open(create=False):
                self.store.check(thorough=True)
        except StoreDamagedError:
            return True
        except MdragError:  # another model's store, one in use: the run says so
            pass
        return False

    def yield_to_searches(self) -> None:
        """From now on this index's updates give way to its searches: they embed with the embedder's
        :meth:`~mdrag.embedding.base.Embedder.background` model (one thread at a lower OS priority, for
        the ONNX and OpenVINO backends), so that a long update beside them does not slow the searches
        down. A run given ``only`` (a few changed files, which a user waits for) does not give way, nor does
        the first step of a first build (no search can be answered before it commits). For a
        server that keeps its index current (:class:`mdrag.index.keeper.IndexKeeper`); a plain `mdrag index`
        embeds on every core."""
        self._yield = True

    def remove(self, folders: Sequence[str | Path]) -> IndexSummary:
        """Take ``folders`` out of the index and delete their chunks (the folders need not exist).

        Raises ConfigError, naming the index's folders, for a folder that is not one of them.
        """
        removed = frozenset(str(Path(f).expanduser().resolve()) for f in folders) | frozenset(map(str, folders))
        with self._using(), self._update_lock, self._writers.hold():
            self._view.begin_run()
            try:
                self._open(create=True)
                from mdrag.ingest.pipeline import RunEvents  # not imported by a search

                events = RunEvents(on_commit=lambda ids: self._view.commit(ids, removed))
                summary = self._indexer(self.embedder).remove(folders, events)
                summary.waited_s = round(self._writers.waited, 3)
                return summary
            finally:
                self._end_run()

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the index's writers' lock for the block: other processes' updates and removals wait.

        ``update()`` and ``remove()`` take it themselves (a run that waits for another
        process's says so, and then finds that run's work done). Held around them
        and :meth:`close` (as `mdrag index` does), it keeps the store this process's
        until it is closed: Milvus Lite lets one process at a time open its file.
        """
        with self._writers.hold():
            yield

    def partial(self) -> Partial | None:
        """How much of its first build the index holds, when its searches answer from part of its files (that
        build commits in steps, or was stopped); None when it holds every file. Reads the manifest (when it
        changed since the last read) and, for a partial index, whether a process builds it now."""
        part = self._view.manifest_state().partial
        if part is None:
            return None
        return Partial(part[0], part[1], self._writers.running() is not None)

    def running(self) -> Running | None:
        """The run (this process's or another's) that holds the index's writers' lock and indexes now, with its
        process id and progress; None when none does. Reads a small file beside the manifest."""
        return self._writers.running()

    def building(self) -> IndexBuildingError | None:
        """How far the index's first build is (this process's or another's), as the error a search of it
        gets; None once the index holds a committed state (or no build has started). Reads the manifest only."""
        return self._view.building()

    def search(
        self,
        query: str,
        k: int | None = None,
        threshold: float | None = None,
        filters: Mapping[str, Any] | None = None,
        mode: str | None = None,
        collapse: str | None = None,
    ) -> list[SearchResult]:
        """Ranked results for ``query``; ``threshold`` and ``mode`` default to the settings."""
        with self._using():
            return self._search(query, k, threshold, filters, mode, collapse)

    def _search(
        self,
        query: str,
        k: int | None,
        threshold: float | None,
        filters: Mapping[str, Any] | None,
        mode: str | None,
        collapse: str | None,
    ) -> list[SearchResult]:
        o = self.search_options
        options = replace(
            o,
            k=k or o.k,
            threshold=o.threshold if threshold is None else threshold,
            mode=mode or o.mode,
            collapse=o.collapse if collapse is None else collapse,
        )
        exists, vector = self._open_to_search(query)
        manifest = self._view.manifest_state()
        filters = held_filters(filters, self._view.seen_roots)  # a path typed through a symbolic link
        self._health.check_search(self.store, exists, manifest)
        self._view.follow_committed(manifest, self.store.transactional)

        def links() -> Resolver | None:  # a vault's links, read when a search's best candidates have some
            notes = notes_at(self.manifest_path, manifest.stamp)
            return notes.resolve if notes is not None else None

        with self._snapshot.reading() as visible:
            if visible.ids is not None and not visible.ids and visible.roots is None:
                raise self._health.nothing_committed(self.store, exists, manifest)
            # a store outside the home may hold other indexers' folders too: there each row is checked against its own
            folders = frozenset(self._view.seen_roots) if in_home(self.store.uri, self.manifest_path) else frozenset()
            copies = self._view.seen_copies
            results = search(
                self.store, self.embedder, query, options, filters, vector, Scope(visible, links, folders, copies)
            )
        if not results and self._view.progress is None and manifest.building:
            raise self._view.building_error()  # a transactional store being built by another process shows nothing yet
        return with_links(results, lambda: notes_at(self.manifest_path, manifest.stamp))  # a vault note's links

    def _open_to_search(self, query: str) -> tuple[bool, np.ndarray | None]:
        """Open the store for a search (whether the index exists in it); the first search also embeds
        ``query`` meanwhile (its vector, else None)."""
        # Unlocked read of _opened: at worst the query is embedded alone. Without a manifest the index most
        # likely does not exist: the store says so first, and the model is neither prepared nor loaded for it.
        if not self._opened and query.strip() and self.manifest_path.exists():
            # First search: load the model and embed the query while the store opens.
            with ThreadPoolExecutor(1, thread_name_prefix="mdrag-embed") as pool:
                pending_vector = pool.submit(self.embedder.embed_query, query)
                exists = self._open(create=False)
                return exists, pending_vector.result()
        return self._open(create=False), None

    def get(self, refs: str | Sequence[str], stop: threading.Event | None = None, links: bool = False) -> Fetched:
        """Documents of the index, or parts of them, read from disk now: ``refs`` are paths relative to its
        folders (``docs/config.md``, ``docs/config.md:10-40``, ``docs/config.md#Menus``), a note's name or
        alias, chunk ids or globs; see :mod:`mdrag.retrieval.documents`. Reads the manifest only: the store
        is not opened. ``stop``: set when the caller's client has gone; the get stops before its next
        document. ``links``: each part also lists its note's links and backlinks (notes vaults)."""
        manifest = Manifest.load(self.manifest_path)
        fetched = fetch(manifest, self.name, refs, stop=stop)
        if links and manifest is not None:
            notes = notes_of(manifest)
            for part in fetched.parts:
                part.links, part.backlinks = notes.links(part.path), notes.backlinks(part.path)
        return fetched

    def warm_up(self) -> None:
        """Load now what the first question would wait for: the embedder's model, the store's in-memory
        search structures (the FAISS store's BM25 index: about 35 s at a million chunks) and the term
        statistics of :mod:`mdrag.retrieval.relevance`. The Q&A server calls it in a thread once its index is ready."""
        self.search("warm up", k=1, threshold=0.0, mode="hybrid")
        self.term_stats()

    def term_stats(self) -> TermStats:
        """Document frequencies of the words in the index's chunks, for :mod:`mdrag.retrieval.relevance`.

        Counted from the store's BM25 text on first use (about 1 s per 10,000
        chunks; an index of more than ``_STATS_ROWS`` chunks is sampled by chunk
        id, a hex digest, so the sample is uniform), and again after each commit.
        """
        generation = self._snapshot.generation
        with self._cond:
            if self._stats is not None and self._stats[0] == generation:
                return self._stats[1]
        with self._using():
            if not self._open(create=False):
                raise MdragError(f"index {self.name!r} does not exist in {self.store.uri}: run `mdrag index` first")
            count = self.store.count()
            share = 16 if count <= _STATS_ROWS else max(1, -(-16 * _STATS_ROWS // count))  # sixteenths read
            stats = TermStats(self.store.search_texts(share), self._stem)
        with self._cond:
            if self._snapshot.generation == generation:
                self._stats = (generation, stats)
        return stats

    def status(self, verify: bool = False) -> IndexStatus:
        """Name, store backend (and why it was picked), store, model, files, chunks, last run, and what is
        damaged (``to_dict()``: JSON-ready): rows missing by the manifest, and what the store finds unlike what its last
        run recorded (:meth:`Store.check`; ``verify``: every row read, not only what is cheap to check, and
        every file's chunk ids compared with the manifest; what it finds is recorded for the next
        :meth:`update`, which repairs it). An index built with another embedder than the configured one is
        described all the same, by its manifest (its chunks as the manifest lists them, nothing checked),
        with ``model_mismatch`` saying so and what to do."""
        mismatch: ModelMismatchError | None = None
        started, checked = time.monotonic(), list[str]()  # what --verify read, said with how long it took
        with self._using():
            m = Manifest.load(self.manifest_path)
            try:
                exists = self._open(create=False)
            except ModelMismatchError as e:  # the store opens only with the embedder that built it
                mismatch, exists = e, True
            if mismatch is not None:  # described by its manifest; its store is neither counted nor checked
                chunks, damage = (len(m.visible()[0]) if m else 0), []
            else:
                try:
                    missing = self._health.missing_rows(self.store, exists)
                    chunks = self.store.count() if exists else 0
                    found = self.store.check(thorough=verify) if exists else []
                except StoreDamagedError as e:
                    if verify:  # SQLite's own check found pages it cannot read: `mdrag index --rebuild` sets it aside
                        self._verify.record([str(e)])
                    raise
                if verify and exists:
                    read = "every row" if self.backend == "faiss" else "what its thorough check reads"
                    checked.append(getattr(self.store, "verify_reads", f"{read} of the index store {self.store.uri}"))
                if verify and exists and m is not None and m.roots and not m.dirty and m.verified and not missing:
                    found += self._unlike_manifest(m)
                    checked.append("each file's chunk ids against the manifest")
                damage = ([self._health.loss(self.store, missing, exists)] if missing else []) + found
                if verify and damage:  # rows moved out of the index's folders count as missing: repaired too
                    self._verify.record(damage)
        recorded = mismatch.built if mismatch is not None and mismatch.built else self.embedder.identity
        running = self.running()  # a run holds the writers' lock: "being built", not "interrupted"
        indexing = {**asdict(running), "message": running.message()} if running is not None else None
        return IndexStatus(
            index=self.name,
            backend=self.backend,
            backend_reason=self.backend_reason,
            store_uri=self.store.uri,
            exists=exists,
            model=(m.model if m else recorded),
            model_mismatch=str(mismatch) if mismatch is not None else None,
            folders=m.roots if m else [],
            files=m.file_count if m else 0,  # committed: a run's progress is not counted
            chunks=chunks,
            last_indexed=m.last_indexed if m else None,
            interrupted=bool(m and (not m.verified or (running is None and (m.dirty or m.partial)))),
            building=bool(m and m.building) or (self._view.progress is not None and m is None),
            indexing=indexing,
            partial={"files_done": m.partial[0], "files_total": m.partial[1]} if m and m.partial else None,
            damaged="; ".join(damage) or None,
            chunking=m.chunking if m else self.settings.as_dict(),
            manifest=str(self.manifest_path),
            manifest_lost=not (m and m.roots) and chunks > 0,  # the store holds what no manifest lists
            verified={"checked": checked, "seconds": round(time.monotonic() - started, 3)} if verify else None,
        )

    def _unlike_manifest(self, m: Manifest) -> list[str]:
        """The files whose chunks in the store are not the ones the manifest lists (every id read), as one
        message naming the store, or []."""
        differ = mismatched(m.files, self.store.id_paths(m.roots))
        if not differ:
            return []
        return [
            f"the chunks of {len(differ)} file(s) in the index store {self.store.uri} are not the ones the "
            f"manifest lists (such as {differ[0]})"
        ]

    def close(self) -> None:
        """Close the store once the calls using it (from other threads) have returned; a later call reopens it."""
        with self._cond:
            self._cond.wait_for(lambda: self._busy == 0)
            with self._open_lock:  # held with _cond: no call can start using the store until it is closed
                if self._store is not None:
                    self._store.close()
                self._opened = False

    def __enter__(self) -> Index:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def ask(self, question: str, on_text: Callable[[str], None] | None = None, history: Sequence[Turn] = ()) -> Answer:
        """Answer ``question`` from the index under the answer policy of :mod:`mdrag.answering.ask`: the LLM's
        answer, the passages when no LLM is set, or "no relevant information" (``refused``);
        ``on_text`` is called with each piece of text as it arrives; ``history``: the earlier turns
        (:class:`mdrag.answering.followup.Turn`) a follow-up question refers to."""
        from mdrag.answering.ask import (
            ask,  # not at the top: mdrag.answering.ask loads the OpenAI SDK, which only a question needs
        )

        return ask(self, question, on_text, history)


def open_index(name: str | None = None, config: Config | None = None, **settings: Any) -> Index:
    """Open (or prepare to create) an index.

    ``settings`` are dotted config keys with ``.`` written as ``__``, e.g.
    ``open_index("docs", chunk__size=800, search__threshold=0.4)``.
    """
    overrides = {k.replace("__", "."): v for k, v in settings.items()}
    if name:
        overrides["index"] = name
    config = config.with_overrides(overrides) if config else load_config(overrides)
    return Index(config)
