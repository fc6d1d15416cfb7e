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

import numpy as np

from mdrag.embedding.base import Embedder
from mdrag.ingest.manifest import FileState, Manifest
from mdrag.ingest.progress import ProgressCounter
from mdrag.ingest.summary import IndexSummary
from mdrag.store.base import Store
from mdrag.types import Chunk

__all__ = ["delete_replaced", "publish", "write_batch"]

# How long readers in other processes get to see a commit in the manifest before the chunks it replaced
# are deleted (a search reads the manifest's state, then the store: a few milliseconds apart).
_PUBLISH_GRACE_S = 0.5


class _Stopped(Exception):
    """The run's ``stop`` was set while the embedder ran: raised from its progress callback."""


def write_batch(
    store: Store,
    embedder: Embedder,
    m: Manifest,
    batch: list[tuple[str, FileState, list[Chunk]]],
    summary: IndexSummary,
    on_upsert: Callable[[list[str]], None] | None,
    retired: list[str],
    run_hashes: set[int] | None,
    bar: ProgressCounter,
    batch_chunks: int,
    stop: threading.Event | None = None,
) -> tuple[set[str], int]:
    """Embed what is new, upsert, record the files; returns the ids of the chunks written, and how many of
    the batch's files were left unwritten (``stop``).

    Chunks go to the embedder and the store ``batch_chunks`` at a time, so a
    file of any size is written in bounded pieces; the files are recorded
    once all their chunks are written. ``bar`` is told as each of the
    embedder's own batches returns. The ids the batch's files no longer
    use are added to ``retired``. With ``run_hashes`` (the store held nothing
    when the run began), only the content hashes this run has written are
    looked up in the store; the batch's are added to it (64-bit prefixes: a
    collision costs one lookup). Once ``stop`` is set (Ctrl+C), embedding stops
    at the embedder's next batch: the files whose chunks are all written are
    recorded; the chunks written of the others join ``retired`` (deleted after
    the commit), and those files are left for the next run.
    """
    stored = {cid for path, _, _ in batch if path in m.files for cid in m.files[path].chunks}
    all_chunks = [c for _, _, cs in batch for c in cs]
    new = [c for c in all_chunks if c.id not in stored]  # same id: same text, already stored
    summary.chunks_reused += len(all_chunks) - len(new)
    bar.wrote(len(all_chunks) - len(new))

    def told(n: int) -> None:
        bar.wrote(n)
        if stop is not None and stop.is_set():
            raise _Stopped

    upserted: set[str] = set()
    stopped = False
    for i in range(0, len(new), batch_chunks):
        if stop is not None and stop.is_set():
            stopped = True
            break
        chunks = new[i : i + batch_chunks]
        hashes = [c.content_hash for c in chunks]
        if run_hashes is None:
            known = store.vectors_by_hash(hashes)
        else:
            keys = [int(h[:16], 16) for h in hashes]
            known = store.vectors_by_hash([h for h, key in zip(hashes, keys) if key in run_hashes])
        todo: dict[str, str] = {}  # content hash -> text, each new text embedded once
        for c in chunks:
            if c.content_hash not in known:
                todo.setdefault(c.content_hash, c.embed_text)
        told_before = bar.chunks_done
        if todo:
            t = time.perf_counter()
            try:
                vecs = embedder.embed(list(todo.values()), progress=told)  # each text: at least one chunk
            except _Stopped:
                stopped = True
                break
            finally:
                summary.embed_seconds += time.perf_counter() - t
            known.update(zip(todo.keys(), vecs))
        if run_hashes is not None:
            run_hashes.update(keys)
        summary.chunks_embedded += len(todo)
        summary.chunks_reused += len(chunks) - len(todo)
        store.upsert(chunks, np.vstack([known[c.content_hash] for c in chunks]))
        upserted.update(c.id for c in chunks)
        if on_upsert is not None:
            on_upsert([c.id for c in chunks])
        bar.wrote(len(chunks) - (bar.chunks_done - told_before))  # those whose vector was known, or a repeated text
    left = 0
    for path, state, _ in batch:
        if stopped and not stored.union(upserted).issuperset(state.chunks):
            retired.extend(upserted.intersection(state.chunks))  # written, but not the whole file: not kept
            upserted.difference_update(state.chunks)
            left += 1
            summary.added -= path not in m.files  # not written: not added nor modified
            summary.modified -= path in m.files
            continue
        prev = m.files.get(path)
        if prev is not None:
            retired.extend(set(prev.chunks) - set(state.chunks))
        m.files[path] = state
    return upserted, left


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
