"""How a search's outcome reads, the same in every front end (`mdrag search`, the WebSocket server and its page,
MCP): a result's fields (:func:`result_fields`), what a search that found nothing says (:func:`no_results`),
names that tell apart files of one relative path in two folders, why a search finds nothing whatever its
words (an index with no files, a path under none of its folders), and paths as the user typed them, through a
symbolic link, read as the index records them."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mdrag.ingest.manifest import Manifest
from mdrag.pageurls import page_url
from mdrag.types import SearchResult

__all__ = ["as_held", "distinct_names", "held_filters", "no_results", "result_fields", "why_nothing"]


def result_fields(result: SearchResult, shared: Collection[str] = ()) -> dict[str, Any]:
    """A search result as every front end shows it: `mdrag search --json` prints these fields, the WebSocket
    ``search_results`` sends them, MCP's ``search`` picks from them (docs/protocol.md lists them).

    ``score`` is the score that ordered the list (:attr:`~mdrag.types.SearchResult.order_score`), ``cosine``
    the one the threshold reads. ``ref`` is what `get` takes: the relative path, or the absolute one where
    files of two indexed folders share it (``shared``: :attr:`mdrag.index.Index.shared_names`). ``url``: the
    address a page of a website docset was crawled from. ``links`` and ``backlinks``: a vault note's (its
    ``metadata`` holds them too). ``copies``: the other files of the index with the same bytes, indexed once
    with this one (each with its ``ref``, ``path``, ``rel_path`` and ``url``); empty when there are none.
    ``also``: the other pages of its folder holding a passage of it, which leave it out of their chunks (each
    as in ``copies``); empty when there are none. ``sections``: the file's other sections the search kept past
    its places (``search.per_page``), best first, each with its heading, lines, scores, chunk id and text; empty
    when there are none. A field that does not apply is None.
    """
    r = result
    return {
        "ref": r.path if r.rel_path in shared else r.rel_path,
        "url": page_url(r.path, r.rel_path),
        "path": r.path,
        "rel_path": r.rel_path,
        "heading": r.heading,
        "heading_path": list(r.heading_path),
        "page": r.page,
        "line_start": r.line_start,
        "line_end": r.line_end,
        "score": r.order_score,
        "cosine": r.score,
        "rank_score": r.rank_score,
        "rerank_score": r.rerank_score,
        "dense_rank": r.dense_rank,
        "bm25_rank": r.bm25_rank,
        "chunk_id": r.chunk_id,
        "links": r.metadata.get("links"),
        "backlinks": r.metadata.get("backlinks"),
        "copies": [
            {"ref": path if rel in shared else rel, "path": path, "rel_path": rel, "url": page_url(path, rel)}
            for path, rel in r.copies
        ],
        "also": [
            {"ref": path if rel in shared else rel, "path": path, "rel_path": rel, "url": page_url(path, rel)}
            for path, rel in r.also
        ],
        "metadata": dict(r.metadata),
        "text": r.text,
        "sections": [_section(s) for s in r.sections],
    }


def _section(section: SearchResult) -> dict[str, Any]:
    """A section attached to a result (``search.per_page``): where it is in the file, its scores and text."""
    s = section
    return {
        "heading": s.heading,
        "heading_path": list(s.heading_path),
        "page": s.page,
        "line_start": s.line_start,
        "line_end": s.line_end,
        "score": s.order_score,
        "cosine": s.score,
        "chunk_id": s.chunk_id,
        "text": s.text,
    }


def no_results(threshold: float | None, filtered: bool = False) -> str:
    """What a search that returned nothing says, in every front end (each may add its own ways to widen it):
    ``threshold`` is the one it ran with (None or 0: none), ``filtered`` whether filters narrowed it."""
    among = " of the files the filters let through" if filtered else ""
    if not threshold:
        return f"no results: no passage{among} matches the query; try other words"
    return (
        f"no results: no passage{among} scores above the relevance threshold (search.threshold {threshold:g}, "
        "read on the cosine similarity): the documents may not cover this; try other words"
    )


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def as_held(path: str, roots: Collection[str]) -> str:
    """An absolute ``path`` (or path prefix) as the index records it, whose folders are ``roots``: as given
    when it is under one of them; else with its symbolic links resolved, when that puts it under one (a
    folder indexed through a link is recorded by its resolved path); else as given. A relative path is
    returned as given. Only a path's lookup changes: what the index does not hold is still not read."""
    if not os.path.isabs(path) or any(_under(path, r) for r in roots):
        return path
    real = os.path.realpath(path)
    if path.endswith("/") and not real.endswith("/"):
        real += "/"
    return real if any(_under(real, r) for r in roots) else path


def held_filters(filters: Mapping[str, Any] | None, roots: Collection[str]) -> Mapping[str, Any] | None:
    """``filters`` with an absolute ``path_prefix`` or ``root`` as the index records it (:func:`as_held`)."""
    if not filters:
        return filters
    held = {k: as_held(v, roots) for k in ("path_prefix", "root") if isinstance(v := filters.get(k), str)}
    return {**filters, **held} if any(held[k] != filters[k] for k in held) else filters


def _root(path: str, rel_path: str) -> str:
    """The indexed folder of a file at ``path`` whose path relative to it is ``rel_path``."""
    return path[: -len(rel_path)].rstrip("/") if path.endswith("/" + rel_path) else posixpath.dirname(path)


def _tail(root: str, roots: Collection[str]) -> str:
    """The fewest last parts of ``root`` that no other of ``roots`` ends with (all of it when none do)."""
    parts = root.strip("/").split("/")
    others = [r.strip("/").split("/") for r in roots if r.rstrip("/") != root]
    for n in range(1, len(parts)):
        if all(o[-n:] != parts[-n:] for o in others):
            return "/".join(parts[-n:])
    return root


def distinct_names(
    results: Sequence[tuple[str, str]], roots: Collection[str] = (), shared: Collection[str] = ()
) -> list[str]:
    """A name for each result, given as (absolute path, path relative to its folder): the relative path, or,
    when files of several folders have it (it is in ``shared``, or two results have it), the relative path
    under as much of its folder's path as tells that folder from the others (``roots``, the index's folders,
    and the results' own): ``a/docs/x.md`` and ``b/docs/x.md``."""
    paths_of: dict[str, set[str]] = {}
    for path, rel in results:
        paths_of.setdefault(rel, set()).add(path)
    every_root = {*(r.rstrip("/") for r in roots), *(_root(path, rel) for path, rel in results)}
    names = []
    for path, rel in results:
        if rel in shared or len(paths_of[rel]) > 1:
            names.append(f"{_tail(_root(path, rel), every_root)}/{rel}")
        else:
            names.append(rel)
    return names


def why_nothing(manifest: Manifest | None, index: str, filters: Mapping[str, Any] | None = None) -> str | None:
    """Why a search of index ``index`` (its ``manifest``) finds nothing whatever its words, when that is so:
    the index holds no files, or no file of it is under the ``path_prefix`` of ``filters``; else None."""
    if manifest is None or not manifest.files:
        return f"index {index!r} holds no files yet: run `mdrag index DIR` to add a folder of documents to it"
    prefix = (filters or {}).get("path_prefix")
    if not isinstance(prefix, str) or not prefix.strip():
        return None
    prefix = as_held(prefix.removeprefix("./"), manifest.roots)  # as search reads it
    if prefix.startswith("/"):
        matched = any(path.startswith(prefix) for path in manifest.files)
    else:
        matched = any(f.rel_path.startswith(prefix) for f in manifest.files.values())
    if matched:
        return None
    return (
        f"no indexed folder matches the path {prefix!r}: it is under none of the index's folders "
        f"({', '.join(manifest.roots) or '-'}); give a path relative to one of them (docs/api/ for the files "
        "under FOLDER/docs/api/), or an absolute path under one"
    )
