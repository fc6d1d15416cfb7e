"""How a search's outcome reads: names that tell apart files of one relative path in two folders, and why a
search finds nothing whatever its words (an index with no files, a path under none of its folders); and
paths as the user typed them, through a symbolic link, read as the index records them."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from mdrag.ingest.manifest import Manifest

__all__ = ["as_held", "distinct_names", "held_filters", "why_nothing"]


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
