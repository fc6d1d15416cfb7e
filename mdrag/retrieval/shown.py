"""How a search's outcome reads: why a search finds nothing whatever its words (an index with no files, a path
under none of its folders)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mdrag.ingest.manifest import Manifest

__all__ = ["why_nothing"]


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
