"""How a search's outcome reads: names that tell apart files of one relative path in two folders, and why a
search finds nothing whatever its words (an index with no files, a path under none of its folders)."""

from __future__ import annotations

import posixpath
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mdrag.ingest.manifest import Manifest

__all__ = ["distinct_names", "why_nothing"]


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
    prefix = prefix.removeprefix("./")  # as search reads it
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
