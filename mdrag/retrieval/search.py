"""Query -> ranked results: embed, nearest neighbours in the store, rerank (optional), threshold, filters."""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from mdrag.embedding.base import Embedder
from mdrag.errors import ConfigError
from mdrag.knobs import STORE_MAX_ROWS
from mdrag.retrieval import rerank as reranking
from mdrag.retrieval.candidates import Candidates
from mdrag.retrieval.copies import Copies
from mdrag.retrieval.fusion import POOL, fused, fusion_for
from mdrag.retrieval.linked import Resolver, lift
from mdrag.settings import DEFAULTS
from mdrag.store.base import Filter, Hit, Ranked, Store, cut_short, holds_its_text
from mdrag.types import SearchResult

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = ["FILTER_KEYS", "Scope", "SearchOptions", "Visible", "build_filter", "search"]

log = logging.getLogger(__name__)

_BM25_DEPTH = 1024  # a BM25-mode search fetches past this many rows for no threshold or collapse
# Rows below the threshold are read for every word of the query (_holds) only among BM25's first this many:
# a chunk that holds every word ranks there, and reading every candidate's words costs too much per search
# (RESULTS.md, "Figures that were in code comments").
_EXACT_DEPTH = 30
_WORD = re.compile(r"\w+", re.UNICODE)
# collapse="auto": a query of at most this many words names one detail, and gets passages; a longer one asks
# about a section's subject, and gets one result per section (RESULTS.md, "Collapse by the query's length").
_DETAIL_WORDS = 7

#: Filters that `search` understands, and what they match.
FILTER_KEYS = {
    "path_prefix": "files whose path starts with this (absolute, or relative to the indexed folder)",
    "tags": "files whose frontmatter tags contain this tag (a list: all of them)",
    "root": "files found under this indexed folder (absolute path)",
}


def _setting(key: str) -> Any:
    """The default of a ``search.*`` setting: options built without a config rank as `mdrag search` does."""
    return DEFAULTS[key][1]


@dataclass(frozen=True)
class SearchOptions:
    """How a search ranks and cuts its results: the ``search.*`` settings as one value; each field's
    default is the setting's (mdrag.config)."""

    k: int = _setting("search.k")  # results, at most
    threshold: float | None = _setting("search.threshold")  # results scoring below it are dropped; None: none are
    mode: str = _setting("search.mode")  # the ranking: dense, bm25 or hybrid (the score is the cosine in every mode)
    fusion: str = _setting("search.fusion")  # how hybrid fuses its two lists (mdrag.retrieval.fusion)
    dense_weight: float = _setting("search.dense_weight")  # the dense list's weight in weighted fusion
    # Keep only the best chunk of each "section" (heading path; a PDF page without outline
    # headings is a section) or "file", so one long section or file cannot fill every place.
    collapse: str = _setting("search.collapse")
    # Reorders the best fused rows before the threshold and the cut (rerank.*; mdrag.retrieval.rerank); None: off.
    rerank: reranking.Reranker | None = None
    # Notes vaults: the notes the best candidates link to move up by this share (mdrag.retrieval.linked); 0: off.
    link_boost: float = _setting("search.link_boost")
    # Places a page (file) may take in the list; its other kept sections are attached to its best one
    # (``SearchResult.sections``). 0: no limit.
    per_page: int = _setting("search.per_page")

    @classmethod
    def from_config(cls, config: Config) -> SearchOptions:
        """The options the settings ``search.k``, ``search.threshold``, ... ask for."""
        return cls(
            k=config["search.k"],
            threshold=config["search.threshold"],
            mode=config["search.mode"],
            fusion=config["search.fusion"],
            dense_weight=config["search.dense_weight"],
            collapse=config["search.collapse"],
            rerank=reranking.from_config(config),
            link_boost=config["search.link_boost"],
            per_page=config["search.per_page"],
        )


@dataclass(frozen=True)
class Visible:
    """Which chunks a search may return: the index's committed state when the search began."""

    ids: frozenset[str] | None = None  # only these chunk ids; None: every chunk
    roots: frozenset[str] | None = None  # the folders ``ids`` account for (others pass); None: all folders
    # Chunks written by a running update and not yet visible: a store that ``hides`` leaves them out of
    # its ranking; from another store that many more rows are fetched, to make up for them.
    hidden: frozenset[str] = frozenset()


def _no_links() -> Resolver | None:
    return None


@dataclass(frozen=True)
class Scope:
    """What a search may see and show of its index: the index's state when the search began, which one search
    reads and none changes. The default: every chunk, no folders checked, no copies, no links."""

    visible: Visible = Visible()  # the chunks it may return
    # The index's link resolver (a notes vault's), asked for only when one of the best candidates has links.
    links: Callable[[], Resolver | None] = _no_links
    # The index's folders: a row whose folder is not one of them is left out; none given: not checked.
    folders: frozenset[str] = frozenset()
    copies: Copies | None = None  # the index's files recorded as copies of others (mdrag.retrieval.copies)


def build_filter(filters: Mapping[str, Any] | None) -> Filter | None:
    """The :class:`~mdrag.store.base.Filter` for ``filters`` (None: no filter); each store translates it.

    ConfigError: an unknown key, a value of the wrong type, or one no path can
    hold (a NUL character).
    """
    if not filters:
        return None
    unknown = set(filters) - set(FILTER_KEYS)
    if unknown:
        raise ConfigError(f"unknown search filter {sorted(unknown)}: use {', '.join(FILTER_KEYS)}")
    prefix = filters.get("path_prefix") or None
    if prefix is not None and not isinstance(prefix, str):
        raise ConfigError(f"filter path_prefix must be a string (a path), not {type(prefix).__name__}")
    tags = filters.get("tags") or ()
    tags = (tags,) if isinstance(tags, str) else tags
    if not isinstance(tags, list | tuple) or not all(isinstance(t, str) for t in tags):
        raise ConfigError("filter tags must be a tag or a list of tags (strings)")
    root = filters.get("root") or None
    if root is not None and not isinstance(root, str):
        raise ConfigError(f"filter root must be a string (an indexed folder), not {type(root).__name__}")
    if any("\x00" in v for v in [prefix or "", *tags, root or ""]):
        raise ConfigError("filter values cannot contain NUL characters")
    where = Filter(prefix.removeprefix("./") if prefix else None, tuple(tags), root)
    return where or None


def _section_key(row: Hit) -> tuple[object, ...]:
    """What ``collapse="section"`` groups by: the heading path, or the page where there is none.

    A PDF page without an outline entry is a section of its own; text before
    a file's first heading (page 0: no page) is one section, as before.
    """
    headings = row.headings or []
    return (row.path, *headings) if headings else (row.path, row.page or 0)


def search(
    store: Store,
    embedder: Embedder,
    query: str,
    options: SearchOptions = SearchOptions(),
    filters: Mapping[str, Any] | None = None,
    vector: np.ndarray | None = None,
    scope: Scope = Scope(),
) -> list[SearchResult]:
    """The ``options.k`` chunks most similar to ``query`` whose score is at least ``options.threshold``,
    or that hold every word of the query.

    Scores are cosine similarities clipped to 0..1 (MiniLM vectors are normalized). A
    chunk that holds every word of the query (as BM25 reads them: its heading trail and
    text) is kept whatever its score: a model embeds a setting's name, a version or a
    table row poorly, and a short keyword query that names one finds it with a low cosine.
    Only the chunks ``scope.visible`` lets through are returned; ``filters`` are
    :data:`FILTER_KEYS`. ``vector`` is the query's embedding when the caller has it already.
    ``scope.links`` gives the index's link resolver: a notes vault's candidates lift the notes the best of them
    link to by ``options.link_boost`` (:mod:`mdrag.retrieval.linked`) before the reranker and the cut;
    it is asked for only when one of them has links.
    With ``options.rerank``, its best ``top_n`` rows are reordered by the reranker first
    (:mod:`mdrag.retrieval.rerank`; their ``rerank_score`` says its score); the threshold still
    reads the cosine, so reranking only changes the order. A chunk whose stored text is not the text
    that was indexed (it no longer has its content hash: edited in the store) is never returned, nor is one
    whose file is not inside its folder, or whose folder is not one of the index's ``scope.folders`` (when given): a
    path changed in the store (``../../etc/passwd``) is never shown nor opened; a warning says how many
    were left out, and what repairs them. ``scope.copies``: the index's files recorded as copies of others; each
    result lists its file's copies, and a filter by path finds a copy's text (:mod:`mdrag.retrieval.copies`).
    """
    k, threshold, collapse = options.k, options.threshold, options.collapse
    visible, links, copies = scope.visible, scope.links, scope.copies
    if collapse == "auto":
        collapse = "passage" if len(query.split()) <= _DETAIL_WORDS else "section"
    if not any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in query):
        # blank: whitespace and invisible format characters (a zero-width space, a BOM) only
        raise ConfigError("the search query is empty: give some words to search for")
    if k < 1:
        raise ConfigError(f"k must be at least 1, got {k}")
    where = build_filter(filters)
    if copies is not None:
        where = copies.widen(where)
    if vector is None:
        vector = embedder.embed_query(query)
    fetch = k * 4 if collapse != "none" else k  # room for the chunks that collapse away
    if options.rerank is not None:
        fetch = max(fetch, options.rerank.top_n)  # the reranker reorders that many
    n = min(fetch + (0 if store.hides else len(visible.hidden)), STORE_MAX_ROWS)
    keeping = _Keeping(
        visible,
        threshold,
        _words(query, store.prepare_text) if threshold is not None else set(),  # _holds reads them
        collapse,
        store.prepare_text,
        _mode(options.mode, store) != "dense",  # the rows carry their rank in a BM25 list
        scope.folders,
        options.per_page,
    )
    scored: dict[str, float] | None = None  # the reranker's scores by chunk id: asked once per search
    while True:
        ranked, more = _ranked(store, vector, query, n, where, options, visible.hidden, k)
        candidates = lift(ranked, options.link_boost, links, lambda r: _shown(r, visible))
        if options.rerank is not None:
            if scored is None:
                shown = (r for r in candidates if _shown(r, visible))
                scored = options.rerank.score(query, list(islice(shown, options.rerank.top_n)))
            candidates = reranking.reorder(list(candidates), scored)
        elif candidates is ranked and threshold is not None and keeping.bm25_listed:
            candidates = ranked.only(_may_pass(ranked, threshold))  # the rest are not read
        rows = keeping.kept(candidates, k)
        # Fewer than k, and rows that would be kept may lie past those fetched: ask for more.
        if len(rows) >= k or not more or n >= STORE_MAX_ROWS:
            break
        n = min(max(2 * n, n + fetch), STORE_MAX_ROWS)
    if keeping.edited:
        log.warning(
            "%d result(s) left out: their text in the index store %s is not the text that was indexed (edited "
            "in the store?). `mdrag status --verify` finds every such chunk, and the `mdrag index` after it reads "
            "their files again",
            len(keeping.edited),
            store.uri,
        )
    if keeping.misplaced:
        log.warning(
            "%d result(s) left out: their path in the index store %s is not inside the index's folders (changed "
            "in the store?). `mdrag status --verify` finds every such chunk, and the `mdrag index` after it reads "
            "their files again",
            len(keeping.misplaced),
            store.uri,
        )
    results = [
        replace(_result(r, scored), sections=[_result(x, scored) for x in keeping.attached.get(r.id, ())]) for r in rows
    ]
    return copies.shown(results, where) if copies is not None else results


def _result(r: Hit, scored: Mapping[str, float] | None) -> SearchResult:
    """A kept row as a result (``scored``: the reranker's scores by chunk id, where it reranked)."""
    return SearchResult(
        text=r.text,
        path=r.path,
        rel_path=r.rel_path,
        score=round(_score(r), 6),
        heading_path=list(r.headings or []),
        chunk_id=r.id,
        page=r.page or None,
        line_start=r.line_start or None,
        line_end=r.line_end or None,
        metadata=dict(r.metadata or {}),
        rank_score=round(r.rank_score, 6),
        dense_rank=r.dense_rank,
        bm25_rank=r.bm25_rank,
        rerank_score=round(scored[r.id], 6) if scored and r.id in scored else None,
    )


@dataclass
class _Keeping:
    """Which of a search's rows it keeps, and what it left out: one per search, read by every fetch of it.

    A row is kept when ``visible`` lets it through, it passes ``threshold`` (or holds every word ``asked``), its
    text is the one indexed, its path is in its place and collapse keeps it. ``bm25_listed``: the rows come from a
    BM25 list (bm25 or hybrid mode). ``per_page``: the places one file may take (0: any)."""

    visible: Visible
    threshold: float | None
    asked: set[str]
    collapse: str
    prepare: Callable[[str], str] | None
    bm25_listed: bool
    folders: frozenset[str]  # the index's folders (:func:`_in_place`)
    per_page: int = 0
    edited: set[str] = field(default_factory=set)  # the ids of rows left out: their text is not the one indexed
    misplaced: set[str] = field(default_factory=set)  # ... and those whose path is not in its place
    # per_page: a kept row's id -> its page's other kept rows, best first (not counted in k)
    attached: dict[str, list[Hit]] = field(default_factory=dict)

    def kept(self, rows: Iterable[Hit], k: int) -> list[Hit]:
        """The first ``k`` of ``rows`` that are kept: the threshold goes before the cut, so a search returns the
        k best that pass whatever k is. The rows left out as edited or misplaced, and those attached to their
        file's best kept row, are added to the search's."""
        visible, threshold, asked, collapse = self.visible, self.threshold, self.asked, self.collapse
        prepare, bm25_listed, folders, per_page = self.prepare, self.bm25_listed, self.folders, self.per_page
        edited, misplaced, attached = self.edited, self.misplaced, self.attached
        of_page: dict[str, list[Hit]] = {}  # a file's kept rows
        seen: set[tuple[object, ...]] = set()
        spans: dict[tuple[object, ...], list[tuple[int, int]]] = {}  # passage: each section's kept lines
        kept = []
        for r in rows:
            if not _shown(r, visible):
                continue
            if threshold is not None and _score(r) < threshold and not _holds(r, asked, prepare, bm25_listed):
                continue  # below the threshold, and not an exact match among BM25's first _EXACT_DEPTH
            if not _intact(r):
                edited.add(r.id)
                continue
            if not _in_place(r, folders):
                misplaced.add(r.id)
                continue
            if collapse == "passage":  # leave out a chunk whose lines overlap or touch a kept one's of its section
                unit, start, end = _span(r)
                near = spans.setdefault((*_section_key(r), unit), [])
                if any(start <= e + 1 and end >= s - 1 for s, e in near):
                    continue
                near.append((start, end))
            elif collapse != "none":
                key = (r.path,) if collapse == "file" else _section_key(r)
                if key in seen:
                    continue
                seen.add(key)
            held = of_page.setdefault(r.path, [])
            if per_page and len(held) >= per_page:
                attached.setdefault(held[0].id, []).append(r)
                continue
            held.append(r)
            kept.append(r)
            if len(kept) == k:
                break
        return kept


def _may_pass(candidates: Candidates, threshold: float) -> np.ndarray:
    """Which of a BM25-listed search's candidates :func:`_kept` may keep: those whose cosine passes
    ``threshold``, and those among BM25's first ``_EXACT_DEPTH`` (they may hold every word asked)."""
    cosine = candidates.scores
    clipped = np.where(np.isnan(cosine), 0.0, np.clip(cosine, 0.0, 1.0))
    ranks = candidates.bm25_ranks
    return (clipped >= threshold) | ((ranks >= 1) & (ranks <= _EXACT_DEPTH))


def _span(row: Hit) -> tuple[str, int, int]:
    """A chunk's first and last line, or where a format has no line numbers (HTML) its position in the file
    twice: what ``collapse="passage"`` compares within a section."""
    if row.line_start and row.line_end:
        return "lines", row.line_start, row.line_end
    return "positions", row.position, row.position


def _intact(row: Hit) -> bool:
    """Whether a row's text (with its heading context) has its content hash: the sha256 of the text that was
    embedded. A text a store may have cut to its field's size (:func:`~mdrag.store.base.cut_short`) passes."""
    return holds_its_text(row.text, row.context, row.content_hash) or cut_short(row.text, row.context)


def _in_place(row: Hit, folders: frozenset[str]) -> bool:
    """Whether a row's file is inside its folder, where its relative path puts it, and that folder is one of
    the index's ``folders`` (none given: not checked)."""
    root = row.root
    if not root or (folders and root not in folders):
        return False
    path = os.path.normpath(row.path)
    inside = path.startswith(root.rstrip(os.sep) + os.sep)
    return inside and path == os.path.normpath(os.path.join(root, row.rel_path))


def _shown(row: Hit, visible: Visible) -> bool:
    """Whether ``visible`` lets ``row`` through. visible.hidden held the invisible chunks when the search
    began; a run may have written more since (or a failed run left some), ranked among the first: not these."""
    return visible.ids is None or row.id in visible.ids or (visible.roots is not None and row.root not in visible.roots)


def _score(row: Hit) -> float:
    """A row's cosine, clipped to 0..1: what a result's ``score`` says and what the threshold reads."""
    return _clipped(float(row.score))


def _clipped(cosine: float) -> float:
    return min(1.0, max(0.0, cosine))


def _words(text: str, prepare: Callable[[str], str] | None) -> set[str]:
    """The distinct words of ``text`` as BM25 reads them (lower case; stemmed where the store stems)."""
    return set(prepare(text).split()) if prepare is not None else set(_WORD.findall(text.lower()))


def _holds(row: Hit, words: set[str], prepare: Callable[[str], str] | None, bm25_listed: bool) -> bool:
    """Whether the chunk's text as BM25 reads it (heading trail, then body) holds all of ``words``: an
    exact match of what was asked (a setting's name, a table row), whatever its cosine. Read only for a
    row among BM25's first ``_EXACT_DEPTH``, or of a dense-only search (no BM25 list: its rows are few)."""
    rank = row.bm25_rank if bm25_listed else 1  # a dense search's rows have no BM25 rank
    if rank is None or rank > _EXACT_DEPTH:
        return False
    return words <= _words(f"{row.context}\n\n{row.text}", prepare)


def _ranked(
    store: Store,
    vector: np.ndarray,
    query: str,
    n: int,
    where: Filter | None,
    options: SearchOptions,
    hidden: frozenset[str],
    k: int,
) -> tuple[Candidates, bool]:
    """The best rows for ``options.mode`` (``n`` of them; hybrid: every candidate of its two lists, fused),
    but ``hidden`` where the store hides them; and whether rows that ``options.threshold`` keeps may lie
    past them in the store.

    A dense list is ranked by the score the threshold reads: when its last row falls below the
    threshold, no row past it passes. BM25 ranks by other scores: its list grows to ``_BM25_DEPTH``
    rows at most. Hybrid fuses the store's dense and BM25 lists (mdrag.retrieval.fusion); its dense list says
    whether there may be more.
    """
    threshold = options.threshold
    mode = _mode(options.mode, store)

    def deeper(rows: Ranked, asked: int) -> bool:
        return len(rows) >= asked and (threshold is None or _clipped(float(rows.scores[-1])) >= threshold)

    if mode != "hybrid":
        found = _listed(store, vector, n, where, mode, query, hidden)
        rows = Candidates.of(found, mode == "dense", k)
        return rows, deeper(found, n) if mode == "dense" else len(rows) >= n and n < _BM25_DEPTH
    # Candidates from each list: fusion's fixed pool (never k's), more where the search needs more rows.
    depth = min(max(n, POOL), STORE_MAX_ROWS)
    dense = _listed(store, vector, depth, where, "dense", query, hidden)
    bm25 = _listed(store, vector, depth, where, "bm25", query, hidden)
    method, rrf_k = fusion_for(query, options.fusion)
    return fused(dense, bm25, method, options.dense_weight, k, POOL, rrf_k), deeper(dense, depth)


def _listed(
    store: Store, vector: np.ndarray, n: int, where: Filter | None, mode: str, query: str, hidden: frozenset[str]
) -> Ranked:
    """The store's ``n`` best rows for ``mode``, not read yet where the store can rank without reading them
    (its ``ranked``, as the FAISS store's), else read by its ``search``."""
    ranked: Callable[..., Ranked] | None = getattr(store, "ranked", None)
    if ranked is not None:
        return ranked(vector, n, where, mode=mode, text=query, hidden=hidden)
    return Ranked.of(store.search(vector, n, where, mode=mode, text=query, hidden=hidden))


def _mode(mode: str, store: Store) -> str:
    """The ranking ``mode`` asks of ``store``: hybrid is dense where the store has no BM25 field."""
    return "dense" if mode == "hybrid" and not store.has_bm25 else mode  # a collection from before BM25
