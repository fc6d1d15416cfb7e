"""Writing an index run's chunks to the store: embed what is new, upsert, and delete what a commit replaced.

A chunk whose content is already in the store is not embedded again: its
vector is taken from the store by content hash. A store without transactions
is committed for readers in other processes through the manifest
(:func:`publish`) before the chunks a commit replaced are deleted.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Protocol

import numpy as np

from mdrag.embedding.base import Embedder
from mdrag.ingest.manifest import FileState, Manifest
from mdrag.ingest.progress import ProgressCounter
from mdrag.ingest.summary import IndexSummary
from mdrag.store.base import Store
from mdrag.types import Chunk

__all__ = ["Run", "delete_replaced", "publish", "write_batch"]

# How long readers in other processes get to see a commit in the manifest before the chunks it replaced
# are deleted (a search reads the manifest's state, then the store: a few milliseconds apart).
_PUBLISH_GRACE_S = 0.5


class _Stopped(Exception):
    """The run's ``stop`` was set while the embedder ran: raised from its progress callback."""


class Run(Protocol):
    """What writing a batch reads and changes of an index run (:class:`mdrag.ingest.pipeline.IndexRun`)."""

    store: Store
    embedder: Embedder
    m: Manifest  # the new state: the files written are recorded in it
    summary: IndexSummary
    bar: ProgressCounter  # told as each of the embedder's own batches returns
    retired: list[str]  # the ids the new state no longer uses: deleted after the commit
    run_hashes: set[int] | None  # the content hashes this run wrote (64-bit prefixes), or None: not kept
    batch_chunks: int  # chunks per embed and upsert round

    @property
    def on_upsert(self) -> Callable[[list[str]], None] | None: ...  # the ids of the chunks just written

    @property
    def stop(self) -> threading.Event | None: ...  # Ctrl+C: stop embedding at the embedder's next batch


def write_batch(run: Run, batch: list[tuple[str, FileState, list[Chunk]]]) -> tuple[set[str], int]:
    """Embed what is new, upsert, record the files; returns the ids of the chunks written, and how many of
    the batch's files were left unwritten (``run.stop``).

    Chunks go to the embedder and the store ``run.batch_chunks`` at a time, so a
    file of any size is written in bounded pieces; the files are recorded
    once all their chunks are written. ``run.bar`` is told as each of the
    embedder's own batches returns. The ids the batch's files no longer
    use are added to ``run.retired``. With ``run.run_hashes`` (the store held nothing
    when the run began), only the content hashes this run has written are
    looked up in the store; the batch's are added to it (64-bit prefixes: a
    collision costs one lookup). Once ``run.stop`` is set (Ctrl+C), embedding stops
    at the embedder's next batch: the files whose chunks are all written are
    recorded; the chunks written of the others join ``run.retired`` (deleted after
    the commit), and those files are left for the next run.
    """
    m = run.m
    stored = {cid for path, _, _ in batch if path in m.files for cid in m.files[path].chunks}
    all_chunks = [c for _, _, cs in batch for c in cs]
    new = [c for c in all_chunks if c.id not in stored]  # same id: same text, already stored
    run.summary.chunks_reused += len(all_chunks) - len(new)
    run.bar.wrote(len(all_chunks) - len(new))
    upserted, stopped = _upsert(run, new)
    return upserted, _record(run, batch, stored, upserted, stopped)


def _upsert(run: Run, new: list[Chunk]) -> tuple[set[str], bool]:
    """Embed (or take from the store by content hash) and upsert the ``new`` chunks, ``run.batch_chunks`` at a
    time; the ids written, and whether ``run.stop`` stopped it."""
    stop, bar = run.stop, run.bar

    def told(n: int) -> None:
        bar.wrote(n)
        if stop is not None and stop.is_set():
            raise _Stopped

    upserted: set[str] = set()
    for i in range(0, len(new), run.batch_chunks):
        if stop is not None and stop.is_set():
            return upserted, True
        chunks = new[i : i + run.batch_chunks]
        told_before = bar.chunks_done
        known = _vectors(run, chunks, told)
        if known is None:
            return upserted, True
        run.store.upsert(chunks, np.vstack([known[c.content_hash] for c in chunks]))
        upserted.update(c.id for c in chunks)
        if run.on_upsert is not None:
            run.on_upsert([c.id for c in chunks])
        bar.wrote(len(chunks) - (bar.chunks_done - told_before))  # those whose vector was known, or a repeated text
    return upserted, False


def _vectors(run: Run, chunks: list[Chunk], told: Callable[[int], None]) -> dict[str, np.ndarray] | None:
    """The vectors of ``chunks`` by content hash: those the store holds, and the others embedded (each new
    text once; ``told`` as each of the embedder's batches returns); None when ``run.stop`` stopped it."""
    hashes = [c.content_hash for c in chunks]
    if run.run_hashes is None:
        known = run.store.vectors_by_hash(hashes)
    else:
        keys = [int(h[:16], 16) for h in hashes]
        known = run.store.vectors_by_hash([h for h, key in zip(hashes, keys) if key in run.run_hashes])
    todo: dict[str, str] = {}  # content hash -> text, each new text embedded once
    for c in chunks:
        if c.content_hash not in known:
            todo.setdefault(c.content_hash, c.embed_text)
    if todo:
        t = time.perf_counter()
        try:
            vecs = run.embedder.embed(list(todo.values()), progress=told)  # each text: at least one chunk
        except _Stopped:
            return None
        finally:
            run.summary.embed_seconds += time.perf_counter() - t
        known.update(zip(todo.keys(), vecs))
    if run.run_hashes is not None:
        run.run_hashes.update(keys)
    run.summary.chunks_embedded += len(todo)
    run.summary.chunks_reused += len(chunks) - len(todo)
    return known


def _record(
    run: Run, batch: list[tuple[str, FileState, list[Chunk]]], stored: set[str], upserted: set[str], stopped: bool
) -> int:
    """Record the batch's files in the manifest, their replaced chunks retired. After a stop, a file whose
    chunks are not all in the store (``stored`` before, or ``upserted`` now) is not recorded: its chunks written
    are retired (and taken out of ``upserted``), and it is left for the next run. How many files were left."""
    m, summary = run.m, run.summary
    left = 0
    for path, state, _ in batch:
        if stopped and not stored.union(upserted).issuperset(state.chunks):
            run.retired.extend(upserted.intersection(state.chunks))  # written, but not the whole file: not kept
            upserted.difference_update(state.chunks)
            left += 1
            summary.added -= path not in m.files  # not written: not added nor modified
            summary.modified -= path in m.files
            continue
        prev = m.files.get(path)
        if prev is not None:
            run.retired.extend(set(prev.chunks) - set(state.chunks))
        m.files[path] = state
    return left


def publish(store: Store, m: Manifest, live: set[str]) -> None:
    """The commit for readers in other processes, in the manifest, when the store has none of its own.

    A store whose writes other processes see at once (Milvus) is read through the manifest's committed
    ids: the run's chunks are all written, so they become the committed state before the replaced ones
    are deleted. A transactional store (FAISS) commits at :meth:`~mdrag.store.base.Store.end_run`, and
    its readers in other processes see the last commit without the manifest.
    """
    if not store.transactional:
        m.publish(live, m.roots)


def delete_replaced(store: Store, ids: list[str]) -> None:
    """Delete the chunks a commit replaced; readers in other processes of a store without transactions
    first get ``_PUBLISH_GRACE_S`` to take the new committed state from the manifest."""
    if not store.transactional:
        time.sleep(_PUBLISH_GRACE_S)
    store.delete_ids(ids)
