"""The URL a page of a website docset was crawled from, read from the docset's metadata file.

Light on purpose (json and pathlib only): the one-shot ``mdrag search`` and ``get`` show a page's URL beside
its path without importing :mod:`mdrag.knowledge`, which writes the metadata (``pages``: URL -> {path, ...}
per source, see :mod:`mdrag.knowledge.web_source`). A file can be a crawled page only when it is HTML or
Markdown and a metadata file lies in a folder above it; each metadata file is read again only when it changes.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path, PurePosixPath

__all__ = ["METADATA_FILE", "page_url", "page_urls"]

log = logging.getLogger(__name__)

#: In a docset folder: what its loaded sources are (files, hashes, a website's pages).
METADATA_FILE = ".agentic-metadata.json"
PAGE_SUFFIXES = (".html", ".md")  # what the crawler stores a page as
_MAX_UP = 12  # folders above a file searched for the metadata of the docset that holds it
_URLS: dict[Path, tuple[int, dict[str, str]]] = {}  # metadata file -> (its mtime, page_urls of its folder)


def page_urls(folder: Path) -> dict[str, str]:
    """Docset-relative path -> page URL for every website page recorded in ``folder``'s metadata.

    Only http and https URLs count: a URL is shown and offered as a link. A metadata file that cannot be
    read gives {} (loading the docset logs it and writes it again).
    """
    try:
        data = json.loads((Path(folder) / METADATA_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        log.debug("no page URLs from %s: %s", folder, e)
        return {}
    sources = data.get("sources") if isinstance(data, dict) else None
    urls: dict[str, str] = {}
    for entry in sources.values() if isinstance(sources, dict) else ():
        pages = entry.get("pages") if isinstance(entry, dict) else None
        for url, page in pages.items() if isinstance(pages, dict) else ():
            path = page.get("path") if isinstance(page, dict) else None
            if isinstance(path, str) and url.lower().startswith(("http://", "https://")):
                urls[path] = url
    return urls


def page_url(path: str | Path, rel_path: str | None = None) -> str | None:
    """The URL a crawled page was fetched from, for a file of a website docset; None for any other file.

    The nearest folder above ``path`` with a metadata file says, looked for only for an HTML or Markdown file
    and, when ``rel_path`` (the file's path relative to its indexed folder) is given, no higher than that folder.
    """
    p = Path(path)
    if p.suffix.lower() not in PAGE_SUFFIXES:
        return None
    up = _MAX_UP
    if rel_path is not None:
        depth = len(PurePosixPath(rel_path).parts)
        if not 0 < depth <= len(p.parents) or p.parents[depth - 1] / rel_path != p:
            return None  # not the file's path under a folder: nothing to look at
        up = min(depth, _MAX_UP)
    for folder in list(p.parents)[:up]:
        meta = folder / METADATA_FILE
        try:
            mtime = meta.stat().st_mtime_ns
        except OSError:
            continue
        cached = _URLS.get(meta)
        if cached is None or cached[0] != mtime:
            cached = _URLS[meta] = (mtime, page_urls(folder))
        return cached[1].get(p.relative_to(folder).as_posix())
    return None
