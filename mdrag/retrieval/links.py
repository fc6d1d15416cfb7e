"""Notes vaults' links as data: a note found by its name or an alias, links resolved, backlinks.

The manifest holds, for each vault note (:mod:`mdrag.parsers.vault`), its aliases and the notes its
links name as written; a chunk's metadata holds the notes its own lines link to. Links are resolved
when read, as the vault's app resolves them, so that a note added or renamed since counts at once:

- ``Folder/Note`` (with a folder): the note at that path under the indexed folder, else the shortest
  path ending with it;
- ``Note``: the note of that file name anywhere under the folder, the shortest path first
  (fewest folders, then fewest characters);
- else a note with that alias;

all without regard to case, within the indexed folder of the note that links.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mdrag.errors import MdragError
from mdrag.ingest.manifest import FileState, Manifest
from mdrag.types import SearchResult

__all__ = ["Notes", "notes_at", "notes_of", "with_links"]

_NOTE_SUFFIXES = (".md", ".markdown")


def _stem(rel_path: str) -> str:
    """``Folder/Note.md`` -> ``folder/note``: how links name a note, less case."""
    low = rel_path.lower()
    for suffix in _NOTE_SUFFIXES:
        if low.endswith(suffix):
            return low[: -len(suffix)]
    return low


def _order(rel_path: str) -> tuple[int, int, str]:
    """Shortest path first: fewest folders, then fewest characters."""
    return rel_path.count("/"), len(rel_path), rel_path


def _note(state: FileState) -> dict[str, list[str]]:
    """A file's vault data from the manifest (empty for another file, or a malformed entry)."""
    note = state.note if isinstance(state.note, dict) else {}
    return {k: [str(v) for v in note.get(k) or [] if isinstance(v, str)] for k in ("aliases", "links")}


@dataclass
class _Folder:
    """The notes under one indexed folder, looked up the ways a link names them."""

    by_path: dict[str, str] = field(default_factory=dict)  # lower rel path without suffix -> absolute path
    by_name: dict[str, list[str]] = field(default_factory=dict)  # lower file name without suffix -> paths
    by_alias: dict[str, list[str]] = field(default_factory=dict)  # lower alias -> paths


class Notes:
    """The notes of an index (its Markdown files), by name and alias, with their links and backlinks."""

    def __init__(self, manifest: Manifest) -> None:
        self.files = manifest.files  # absolute path -> state
        self._folders: dict[str, _Folder] = {}  # indexed folder -> its notes
        ordered = sorted(
            (p for p, s in manifest.files.items() if s.rel_path.lower().endswith(_NOTE_SUFFIXES)),
            key=lambda p: _order(manifest.files[p].rel_path),
        )
        for path in ordered:
            state = manifest.files[path]
            folder = self._folders.setdefault(state.root, _Folder())
            stem = _stem(state.rel_path)
            folder.by_path.setdefault(stem, path)
            folder.by_name.setdefault(stem.rsplit("/", 1)[-1], []).append(path)
            for alias in _note(state)["aliases"]:
                folder.by_alias.setdefault(alias.lower(), []).append(path)
        self._backlinks: dict[str, list[str]] | None = None  # target path -> linking paths, made on first use

    def named(self, name: str) -> list[str]:
        """The notes ``name`` names in any indexed folder: by path without its suffix or by file name
        without folder or suffix, else by alias (without regard to case); shortest paths first."""
        key = _stem(name.strip())
        by_path = [f.by_path[key] for f in self._folders.values() if key in f.by_path]
        found = by_path + [p for f in self._folders.values() for p in f.by_name.get(key, [])]
        if not found:
            found = [p for f in self._folders.values() for p in f.by_alias.get(key, [])]
        return sorted(dict.fromkeys(found), key=lambda p: _order(self.files[p].rel_path))

    def resolve(self, source: str, target: str) -> str | None:
        """The note that a link written ``target`` in the note at ``source`` leads to, or None."""
        state = self.files.get(source)
        folder = self._folders.get(state.root) if state else None
        if folder is None or state is None:
            return None
        key = _stem(target.strip())
        if "/" in key:
            relative = posixpath.normpath(posixpath.join(posixpath.dirname(_stem(state.rel_path)), key))
            for candidate in (key.lstrip("/"), relative):
                if candidate in folder.by_path:
                    return folder.by_path[candidate]
            ends = [p for s, p in folder.by_path.items() if s.endswith("/" + key)]
            return min(ends, key=lambda p: _order(self.files[p].rel_path)) if ends else None
        names = folder.by_name.get(key) or folder.by_alias.get(key)
        return names[0] if names else None

    def links(self, path: str) -> list[dict[str, str | None]]:
        """The notes the note at ``path`` links to: each ``{"note": as written, "rel_path": resolved or None}``."""
        out: list[dict[str, str | None]] = []
        for target in _note(self.files[path])["links"] if path in self.files else []:
            hit = self.resolve(path, target)
            out.append({"note": target, "rel_path": self.files[hit].rel_path if hit else None})
        return out

    def backlinks(self, path: str) -> list[str]:
        """The relative paths of the notes that link to the note at ``path``, sorted."""
        if self._backlinks is None:
            self._backlinks = {}
            for source, state in self.files.items():
                for target in _note(state)["links"]:
                    hit = self.resolve(source, target)
                    if hit is not None and hit != source:
                        self._backlinks.setdefault(hit, []).append(source)
        return sorted({self.files[p].rel_path for p in self._backlinks.get(path, [])})

    def ambiguous(self, name: str, paths: Sequence[str]) -> MdragError:
        """The error for a name that names several notes: which ones, and what to give instead."""
        listed = ", ".join(self.files[p].rel_path for p in paths[:10])
        more = f" and {len(paths) - 10} more" if len(paths) > 10 else ""
        return MdragError(f"{name!r} names {len(paths)} notes: {listed}{more}; give the path of the one you mean")


_last: tuple[Manifest, Notes] | None = None  # the notes of the manifest read last by notes_of
_loaded: dict[Path, tuple[object, Notes]] = {}  # manifest file -> (its stamp, its notes), for searches
_LOADED_MAX = 8  # manifest files whose notes are kept (one per index a process searches)


def notes_of(manifest: Manifest) -> Notes:
    """The notes of ``manifest``, made once per manifest object."""
    global _last
    last = _last
    if last is None or last[0] is not manifest:
        last = _last = (manifest, Notes(manifest))
    return last[1]


def notes_at(path: Path, stamp: object) -> Notes | None:
    """The notes of the manifest file at ``path``, read again only when ``stamp`` (its inode, mtime and
    size) changes; None without a manifest."""
    kept = _loaded.get(path)
    if kept is not None and stamp is not None and kept[0] == stamp:
        return kept[1]
    manifest = Manifest.load(path)
    if manifest is None:
        return None
    if len(_loaded) >= _LOADED_MAX:
        _loaded.pop(next(iter(_loaded)))
    notes = _loaded[path] = (stamp, Notes(manifest))
    return notes[1]


def with_links(results: list[SearchResult], notes: Callable[[], Notes | None]) -> list[SearchResult]:
    """``results`` with, for each chunk of a vault note, ``metadata["links"]`` resolved to the relative
    paths of the notes its lines link to (links to no note of the index left out) and
    ``metadata["backlinks"]``, the notes that link to its note. Other results are left as they are, and
    ``notes`` (the index's) is called only when there is a vault note among them."""
    if not any("links" in r.metadata for r in results):
        return results
    held = notes()
    for r in results:
        if held is None or "links" not in r.metadata or r.path not in held.files:
            continue
        meta: dict[str, Any] = r.metadata
        resolved = (held.resolve(r.path, str(t)) for t in meta.get("links") or [])
        meta["links"] = list(dict.fromkeys(held.files[p].rel_path for p in resolved if p is not None))
        meta["backlinks"] = held.backlinks(r.path)
    return results
