"""How a search's outcome reads: why a search finds nothing whatever its words (an index with no files)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mdrag.ingest.manifest import Manifest

__all__ = ["why_nothing"]


def why_nothing(manifest: Manifest | None, index: str, filters: Mapping[str, Any] | None = None) -> str | None:
    """Why a search of index ``index`` (its ``manifest``) finds nothing whatever its words, when that is so:
    the index holds no files; else None. ``filters``: the search's."""
    if manifest is None or not manifest.files:
        return f"index {index!r} holds no files yet: run `mdrag index DIR` to add a folder of documents to it"
    return None
