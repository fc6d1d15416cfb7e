"""What the indexer, search and :class:`mdrag.index.Index` ask of a store: the one interface every backend implements.

A store holds one index's chunks: their text and metadata, one vector each,
and what BM25 ranks. Chunk ids are hex digests (see :mod:`mdrag.types`).
Backends declare themselves with :class:`mdrag.store.StoreBackend` (registered by entry point).

Rules every backend keeps (the contract tests in ``tests/test_store_contract.py``
hold each of them on every backend):

- Writes are visible to reads of the same process at once, and to other
  processes once :meth:`Store.end_run` has returned (``transactional``), or
  at once (not ``transactional``: readers filter by the committed ids).
- A filter never costs recall: a filtered search returns the ``k`` best chunks
  that pass the filter, as an exact search would.
- ``score`` is the cosine similarity of the chunk's vector to the query vector
  in every mode, so one threshold means the same everywhere; ``rank_score`` is
  the ranking mode's own score (cosine, or BM25).
- Filter values are data, never pasted into a query language unchecked.
- A process killed during a write leaves a store that :meth:`Store.open` opens
  (or that raises StoreDamagedError, which :meth:`Store.set_aside` clears), and
  whose rows the indexer's repair (ids compared with the manifest) makes right.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from mdrag.errors import ConfigError
from mdrag.stemming import stemmer
from mdrag.types import Chunk

__all__ = [
    "CONTEXT_MAX_BYTES",
    "ROW_FIELDS",
    "TEXT_MAX_BYTES",
    "Filter",
    "Hit",
    "Ranked",
    "Store",
    "bm25_text",
    "cut_short",
    "holds_its_bm25",
    "holds_its_text",
    "same_embedder",
]

#: The stored fields of a chunk that a :class:`Hit` carries, besides ``id``, ``score`` and ``rank_score``.
ROW_FIELDS = (
    "text", "context", "path", "rel_path", "root", "headings", "level",
    "position", "page", "line_start", "line_end", "content_hash", "metadata",
)  # fmt: skip

#: A store may keep a chunk's text and its heading context cut to these many bytes (Milvus's VARCHAR fields).
TEXT_MAX_BYTES = 65535
CONTEXT_MAX_BYTES = 1024


def cut_short(text: str, context: str) -> bool:
    """Whether a stored text or context may have been cut to its field's size (:data:`TEXT_MAX_BYTES`,
    :data:`CONTEXT_MAX_BYTES`; cut at a character, so within 3 bytes of it): then it no longer has its
    chunk's content hash, and is not taken for an edited one."""
    return (
        len(text.encode("utf-8", "surrogatepass")) > TEXT_MAX_BYTES - 4
        or len(context.encode("utf-8", "surrogatepass")) > CONTEXT_MAX_BYTES - 4
    )


def holds_its_text(text: str, context: str, content_hash: str) -> bool:
    """Whether a stored chunk's text, after its heading context, is the text that was embedded: the one whose
    sha256 its run stored as ``content_hash`` (:attr:`mdrag.types.Chunk.embed_text`)."""
    embedded = f"{context}\n\n{text}" if context else text
    return hashlib.sha256(embedded.encode("utf-8", "surrogatepass")).hexdigest() == content_hash


def bm25_text(text: str, context: str, prepare: Callable[[str], str] | None) -> str:
    """The text BM25 ranks a chunk by: its embedded text (heading context, then text), ``prepare``d (stemming)."""
    embedded = f"{context}\n\n{text}" if context else text
    return prepare(embedded) if prepare is not None else embedded


def holds_its_bm25(bm25: str, text: str, context: str, prepare: Callable[[str], str] | None) -> bool:
    """Whether a stored chunk's BM25 text is its :func:`bm25_text`, as the store prepares texts, or as the
    other setting of ``search.stemming`` did (a change of that setting re-indexes at the next `mdrag index`:
    until then the store holds the other form), or as a release that kept CJK runs whole stemmed it (those
    rows keep that form until their file changes, or `mdrag index --rebuild`)."""
    if bm25 == bm25_text(text, context, prepare):
        return True
    try:  # the other setting's form, or the stemmed form of a release that kept CJK runs whole
        forms = [None, stemmer(), stemmer(split=False)]
    except ConfigError:  # no PyStemmer: the store cannot have stemmed it either
        forms = [None]
    return any(bm25 == bm25_text(text, context, form) for form in forms if form is not prepare)


@dataclass(frozen=True)
class Hit:
    """One chunk that :meth:`Store.search` returns: its stored fields (:data:`ROW_FIELDS`) and its scores.

    The core sets the ranks (:mod:`mdrag.retrieval.search`, :mod:`mdrag.retrieval.fusion`): on a copy
    (:func:`dataclasses.replace`) of what :meth:`Store.search` returned, or when the hit is made from a
    :class:`Ranked` list; ``headings`` and ``metadata`` may be a store's cached values: read them, do not
    change them.
    """

    id: str  # the chunk id (a hex digest)
    text: str  # body text
    context: str  # the heading trail embedded with the text
    path: str  # absolute file path
    rel_path: str  # path relative to its root folder
    root: str  # the indexed folder the file was found under
    headings: list[str]  # heading path, top down
    level: int  # heading level (0: before any heading)
    position: int  # 0-based index of the chunk within its file
    page: int  # 1-based page; 0 when the format has no pages
    line_start: int  # 1-based first line; 0 when unknown
    line_end: int  # 1-based last line; 0 when unknown
    content_hash: str  # sha256 of the embedded text
    metadata: dict[str, Any]  # the frontmatter fields the chunk carries
    score: float  # cosine similarity to the query vector, whatever ranked it
    rank_score: float  # the ranking's own score: cosine (dense), BM25, or the fused score (hybrid)
    dense_rank: int | None = None  # 1-based rank in the dense list; None: not in it, or not ranked yet
    bm25_rank: int | None = None  # 1-based rank in the BM25 list; None: not in it, or not ranked yet


#: Reads the rows at these positions of a :class:`Ranked` list, as hits with these ``rank_score``, ``dense_rank``
#: and ``bm25_rank``; a row deleted since the list was ranked is left out (None in its place).
ReadHits = Callable[[Sequence[int], Sequence[float], Sequence[int | None], Sequence[int | None]], list["Hit | None"]]


class Ranked:
    """A store's ranked list, best first, its rows not read yet: each row's ``key`` (what tells chunks apart in
    the store's lists: a row number, or the chunk id), ``score`` (cosine) and ``rank_score``; :meth:`hits`
    reads the rows a search keeps. A search fuses lists and looks at rows by these alone, and reads few rows."""

    __slots__ = ("keys", "rank_scores", "read", "scores")

    def __init__(self, keys: Sequence[Any], scores: np.ndarray, rank_scores: np.ndarray, read: ReadHits) -> None:
        self.keys = keys
        self.scores = np.asarray(scores, dtype=np.float64)
        self.rank_scores = np.asarray(rank_scores, dtype=np.float64)
        self.read = read

    @classmethod
    def of(cls, hits: Sequence[Hit]) -> Ranked:
        """The list of ``hits`` (read already: a store's :meth:`Store.search`), keyed by chunk id."""

        def read(
            at: Sequence[int], rank: Sequence[float], dense: Sequence[int | None], bm25: Sequence[int | None]
        ) -> list[Hit | None]:
            return [
                replace(hits[i], rank_score=r, dense_rank=d, bm25_rank=b) for i, r, d, b in zip(at, rank, dense, bm25)
            ]

        scores = np.fromiter((float(h.score) for h in hits), dtype=np.float64, count=len(hits))
        ranks = np.fromiter((float(h.rank_score) for h in hits), dtype=np.float64, count=len(hits))
        return cls([h.id for h in hits], scores, ranks, read)

    def __len__(self) -> int:
        return len(self.keys)


@dataclass(frozen=True)
class Filter:
    """Which chunks a search may return: all of the conditions set hold. A value, never query text.

    ``path_prefix`` matches the chunk's absolute ``path`` when it starts with
    "/", else its ``rel_path``; ``%``, ``_`` and every other character stand for
    themselves. ``tags``: the chunk's ``metadata["tags"]`` contains every one.
    ``root``: the chunk was found under this indexed folder (absolute path).
    ``paths``: a chunk whose absolute ``path`` is one of these passes ``path_prefix`` and ``root`` too (the
    files whose copies pass them: :mod:`mdrag.retrieval.copies`); ``tags`` still apply.
    """

    path_prefix: str | None = None
    tags: tuple[str, ...] = ()
    root: str | None = None
    paths: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.path_prefix or self.tags or self.root)

    def matches(self, row: dict[str, Any]) -> bool:
        """Whether a row (a dict with ``path``, ``rel_path``, ``root``, ``metadata``) passes: reference semantics."""
        if self.tags:
            tags = (row.get("metadata") or {}).get("tags")
            held = {tags} if isinstance(tags, str) else set(tags) if isinstance(tags, list) else set()
            if not set(self.tags) <= held:
                return False
        return self.located(row) or row.get("path") in self.paths

    def located(self, row: dict[str, Any]) -> bool:
        """Whether a row's ``path`` or ``rel_path`` and ``root`` pass ``path_prefix`` and ``root``."""
        if self.path_prefix:
            field = "path" if self.path_prefix.startswith("/") else "rel_path"
            if not str(row.get(field, "")).startswith(self.path_prefix):
                return False
        return not self.root or row.get("root") == self.root


@runtime_checkable
class Store(Protocol):
    """One index's chunks and vectors. Methods raise mdrag.errors.StoreError (or a subclass) when they fail."""

    uri: str  # where the store lives, as users name it in messages (never holds credentials)
    has_bm25: bool  # BM25 search is possible (False: "bm25" and "hybrid" fall back to dense)
    # Other processes see a run's writes only at its end_run, all at once (True), or as they are
    # written (False: they read the committed ids the manifest records, see mdrag.ingest.manifest).
    transactional: bool
    # search() leaves out the chunks it is given as ``hidden`` (True), or ranks them with the rest (False:
    # the caller fetches that many more rows, and drops them).
    hides: bool
    # Applied to BM25 texts and BM25 queries (stemming), or None: from_config's ``prepare_text``.
    prepare_text: Callable[[str], str] | None

    # -- life cycle ---------------------------------------------------------
    def open(self, create: bool = True, replace_mismatch: bool = False) -> bool:
        """Connect or load; whether the index exists (False only without ``create``).

        An index written by another embedding model raises ModelMismatchError, or
        with ``replace_mismatch`` is dropped and created anew. Files that cannot be
        read raise StoreDamagedError; another process holding the store raises
        StoreInUseError.
        """
        ...

    def close(self) -> None:
        """Release connections, locks and memory; a later :meth:`open` reopens."""
        ...

    def drop(self) -> None:
        """Delete the whole index."""
        ...

    def set_aside(self) -> Path | None:
        """Move a damaged index into the cache's ``damaged/`` folder; where it went, or None (nothing moved)."""
        ...

    def check(self, thorough: bool = False) -> list[str]:
        """What differs from what the last :meth:`end_run` recorded of the store's own files (its vector
        index, row counts), each a message naming the file; [] when whole. By default what is cheap to
        check (a read of the vector index file at most); ``thorough`` reads every row too."""
        ...

    def repair(self, thorough: bool = False) -> tuple[list[str], set[str]]:
        """Build again from the stored data (vectors, metadata: nothing is embedded again) what the cheap
        :meth:`check` finds damaged (``thorough``: what the thorough one finds); what was repaired, each a
        message, and the ids of chunks whose rows are suspect, whose files the indexer indexes again.
        Lost chunk rows are the indexer's to repair."""
        ...

    def unchanged_since_last_run(self) -> bool:
        """Whether the store is exactly as the last :meth:`end_run` left it (lets a no-change run skip its checks).

        False whenever the store cannot tell.
        """
        ...

    # -- writes -------------------------------------------------------------
    def upsert(self, chunks: Sequence[Chunk], vectors: np.ndarray) -> None:
        """Insert or replace chunks by id (``vectors``: one float32 row per chunk, normalized)."""
        ...

    def delete_ids(self, ids: Iterable[str]) -> None:
        """Delete these chunks; ids not stored are ignored."""
        ...

    def end_run(self, written: set[str], live: set[str], whole: bool) -> None:
        """An indexing run is done writing: make it durable and do the backend's upkeep.

        ``written``: the ids this run upserted; ``live``: every id the index
        should now hold; ``whole``: the index is now built whole, by this run
        (a rebuild) or by the steps this run ends (the last step of a first
        build run in steps, whose earlier steps wrote ``live - written``: a
        backend whose ranking depends on how rows were written together may
        write those again). Called once per run that wrote or deleted
        anything, after its deletes.
        """
        ...

    # -- reads --------------------------------------------------------------
    def vectors_by_hash(self, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Stored vectors for these chunk content hashes (the embedding cache); hashes not stored are left out."""
        ...

    def all_ids(self, roots: Sequence[str] | None = None) -> set[str]:
        """Every chunk id, or those under these indexed folders."""
        ...

    def id_paths(self, roots: Sequence[str] | None = None) -> dict[str, str]:
        """Chunk id -> file path, for every chunk or those under these indexed folders."""
        ...

    def count(self, roots: Sequence[str] | None = None) -> int:
        """How many chunks, in all or under these indexed folders."""
        ...

    def roots(self) -> list[str]:
        """The indexed folders the stored chunks were found under (their ``root``), sorted: how an
        index whose manifest was lost takes its folders back."""
        ...

    def search_texts(self, share: int = 16) -> Iterator[str]:
        """The text BM25 ranks of every chunk, or of about ``share``/16 of them (ids starting with one
        of the first ``share`` hex digits)."""
        ...

    def search(
        self,
        vector: np.ndarray,
        k: int,
        where: Filter | None = None,
        mode: str = "dense",
        text: str = "",
        hidden: frozenset[str] = frozenset(),
    ) -> list[Hit]:
        """The ``k`` best chunks passing ``where``, best first, each with its ``score`` (cosine to
        ``vector``) and ``rank_score`` (its ranks unset). ``mode``: "dense" (by cosine) or "bm25" (by
        BM25 on ``text``); hybrid ranking fuses the two in the core (:mod:`mdrag.retrieval.fusion`). ``hidden``:
        chunk ids that a store that :attr:`hides` leaves out (what a running update of this process
        wrote and has not committed).

        A store may also have ``ranked`` with the same arguments: the same list as a :class:`Ranked`, whose
        rows are read only when the search asks for them (the FAISS store's); a search then reads the rows
        it looks at, not every candidate. Without it, the search wraps what ``search`` returns.

        BM25 is one formula on every backend (Okapi BM25, k1 1.5, b 0.75, statistics over the whole
        collection, words as :mod:`mdrag.store.bm25` splits them; the store contract test holds it), because
        the scores themselves are used, not only their order: the default hybrid fusion (``weighted``) mixes
        each list's min-max normalised scores, so another formula moves every hybrid list, and
        ``search.dense_weight``'s default was measured on this one; and an index gives the same results on
        every store (``auto`` may move it from one to another). A backend whose engine ranks full text
        otherwise ranks with :class:`mdrag.store.bm25.Bm25` over its texts, as the FAISS store does."""
        ...


def same_embedder(stored: dict[str, Any], identity: dict[str, Any]) -> bool:
    """Whether vectors of the embedder ``identity`` may join a store written by ``stored``: the same model,
    dimension and precision (``fp32`` where an identity names none: every index built before int8)."""
    return (
        stored.get("model") == identity.get("model")
        and int(stored.get("dimension", -1)) == int(identity["dimension"])
        and stored.get("precision", "fp32") == identity.get("precision", "fp32")
    )
