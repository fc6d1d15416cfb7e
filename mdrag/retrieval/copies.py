"""Copies in search results: files of one index with the same bytes are indexed once (mdrag.ingest.copies), and
a result from that file lists the others' paths.

A search filtered by path (``path_prefix``, ``root``) finds a copy's text too: the filter also lets through
the files whose copies it matches (:meth:`Copies.widen`), and such a result is shown under the path of its
first copy that the filter matches, the file indexed listed among its copies (:meth:`Copies.shown`).

A result lists a copy only when its chunk is one of the chunks the manifest lists for the file indexed: a
search that reads a committed state older than the manifest (a run is writing) never lists a copy whose
bytes are not that chunk's file's.

A passage that several HTML pages of a folder repeat is kept on one of them (mdrag.ingest.passages): a result
whose lines hold such a passage lists, in ``also``, the pages that left it out (:meth:`Copies.shown`).
"""

from __future__ import annotations

from dataclasses import replace

from mdrag.ingest.manifest import FileState, Manifest
from mdrag.store.base import Filter
from mdrag.types import SearchResult

__all__ = ["Copies"]


class Copies:
    """The copies of an index's files, by the file indexed for them (its *original*)."""

    def __init__(self, manifest: Manifest | None) -> None:
        self.files: dict[str, FileState] = manifest.files if manifest is not None else {}  # path -> state
        self.of: dict[str, list[str]] = {}  # original -> its copies, sorted
        for path, state in sorted(self.files.items()):
            original = self.files.get(state.copy_of) if state.copy_of else None
            if original is not None and original.copy_of is None and original.hash == state.hash:
                self.of.setdefault(str(state.copy_of), []).append(path)
        kept = {fp for state in self.files.values() for fp in state.kept or ()}
        self.left: dict[str, list[str]] = {}  # a passage kept on one page -> the pages that leave it out, sorted
        for path, state in sorted(self.files.items()):
            for fp in kept.intersection(state.dropped or ()):
                self.left.setdefault(fp, []).append(path)

    def _row(self, path: str) -> dict[str, str]:
        state = self.files[path]
        return {"path": path, "rel_path": state.rel_path, "root": state.root}

    def widen(self, where: Filter | None) -> Filter | None:
        """``where``, letting through besides the originals of the copies that its ``path_prefix`` and
        ``root`` match."""
        if where is None or not (where.path_prefix or where.root) or not self.of:
            return where
        extra = [
            original
            for original, copies in self.of.items()
            if not where.located(self._row(original)) and any(where.located(self._row(c)) for c in copies)
        ]
        return replace(where, paths=tuple(extra)) if extra else where

    def shown(self, results: list[SearchResult], where: Filter | None) -> list[SearchResult]:
        """``results`` with the copies of each one's file (``copies``: (path, path relative to its folder)),
        a result that ``where`` let through for a copy shown under that copy's path (and left out where its
        chunk is not one the manifest lists for its file: the file changed since)."""
        out = []
        for r in results:
            copies = self.of.get(r.path, [])
            if copies and r.chunk_id not in self.files[r.path].chunks:
                copies = []
            if where is not None and r.path in where.paths and not where.located(self._row(r.path)):
                into = next((c for c in copies if where.located(self._row(c))), None)
                if into is None:
                    continue
                copies = [r.path, *(c for c in copies if c != into)]
                r.path, r.rel_path = into, self.files[into].rel_path
            r.copies = [(c, self.files[c].rel_path) for c in copies]
            r.also = [(p, self.files[p].rel_path) for p in self._also(r)]
            out.append(r)
        return out

    def _also(self, r: SearchResult) -> list[str]:
        """The pages that leave out a passage of ``r``'s chunk, kept on its page (by the passage's lines)."""
        state = self.files.get(r.path)
        if state is None or not state.kept or r.line_start is None or r.chunk_id not in state.chunks:
            return []
        end = r.line_end or r.line_start
        found = {
            p
            for fp, (first, last) in state.kept.items()
            if first and first <= end and last >= r.line_start
            for p in self.left.get(fp, ())
        }
        return sorted(found - {r.path})
