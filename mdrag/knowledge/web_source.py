"""Website sources as docset loaders: :class:`WebsiteLoader` crawls a site and records its pages in the metadata.

The metadata entry of a website source lists its files and their hashes as a git source's does, plus each
page's URL, ETag and Last-Modified (``pages``: URL -> {path, etag, last_modified, sha256}), so a refresh
asks only for what changed and results can cite the page's URL (:mod:`mdrag.pageurls` reads it back).
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from mdrag.errors import DocsetError
from mdrag.knowledge.metadata import read_metadata, write_metadata
from mdrag.knowledge.model import SourceResult, WebSource
from mdrag.knowledge.web import MAX_PAGES, CrawlResult, Page, WebsiteCrawler, remove_pages

__all__ = ["WebsiteLoader"]


class WebsiteLoader:
    """Crawls ``website`` sources into a docset folder (see :mod:`mdrag.knowledge.web`)."""

    def __init__(self, delay: float = 0.5, timeout: float = 20.0) -> None:
        self.delay = delay
        self.timeout = timeout

    def load(self, source: WebSource, dest: Path, allow_local: bool) -> SourceResult:
        """Crawl ``source`` into ``dest``: new and changed pages written, pages gone (404/410) removed.

        Raises DocsetError, removing nothing, when the start page failed (refused, unreachable, an HTTP error,
        gone): a site that moved or is down does not take its pages with it.
        """
        dest = Path(dest)
        meta = read_metadata(dest)
        prev = meta.get(source.url, {})
        previous = {
            url: Page(url, p["path"], p.get("etag"), p.get("last_modified"), p.get("sha256", ""))
            for url, p in (prev.get("pages") or {}).items()
            if isinstance(p, dict) and isinstance(p.get("path"), str)
        }
        try:
            crawler = WebsiteCrawler(
                source.url,
                allow_local=allow_local,
                max_pages=source.max_pages or MAX_PAGES,
                delay=self.delay,
                timeout=self.timeout,
            )
        except ValueError as e:
            raise DocsetError(str(e)) from None
        result = crawler.crawl(dest, previous)
        if crawler.start in result.skipped or crawler.start not in result.pages:  # a site moved or down
            why = result.skipped.get(crawler.start, "it could not be fetched")
            raise DocsetError(
                f"website {source.url} not loaded: its start page failed ({why}), so no page was removed; "
                "check the url and that the site is up, then refresh again"
            )
        kept = {p.path for p in result.pages.values()}
        result.removed = [u for u in result.removed if previous[u].path not in kept]  # its file is another page's
        remove_pages(dest, [previous[u].path for u in result.removed])
        return self._record(source, dest, meta, result, previous)

    @staticmethod
    def _record(
        source: WebSource, dest: Path, meta: dict[str, dict[str, Any]], crawl: CrawlResult, previous: dict[str, Page]
    ) -> SourceResult:
        files = sorted(p.path for p in crawl.pages.values())
        hashes = {p.path: p.sha256 for p in crawl.pages.values()}
        digest = hashlib.sha256()
        for rel in files:
            digest.update(f"{rel}\0{hashes[rel]}\n".encode())
        meta[source.url] = {
            "type": "website",
            "last_fetched": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "content_hash": digest.hexdigest(),
            "files": files,
            "hashes": hashes,
            "commit": None,
            "pages": {
                u: {"path": p.path, "etag": p.etag, "last_modified": p.last_modified, "sha256": p.sha256}
                for u, p in sorted(crawl.pages.items())
            },
            "skipped": dict(sorted(crawl.skipped.items())),  # URL -> why the last crawl did not keep it
        }
        write_metadata(dest, meta)
        path_of = {u: p.path for u, p in crawl.pages.items()}
        warning = _not_kept(crawl.skipped) if crawl.skipped else None
        return SourceResult(
            url=source.url,
            ok=True,
            files=files,
            added=sorted(path_of[u] for u in crawl.added),
            changed=sorted(path_of[u] for u in crawl.changed),
            removed=sorted(previous[u].path for u in crawl.removed),
            content_hash=digest.hexdigest(),
            warning=warning,
        )


_LISTED = 5  # pages not kept named in the warning; `mdrag knowledge status --json` lists them all


def _not_kept(skipped: dict[str, str]) -> str:
    """The warning of a crawl that did not keep some pages: how many, the first few with their reasons."""
    shown = "; ".join(f"{url} ({why})" for url, why in list(skipped.items())[:_LISTED])
    more = f"; and {len(skipped) - _LISTED} more" if len(skipped) > _LISTED else ""
    return f"{len(skipped)} pages not kept: {shown}{more} (each with its reason: mdrag knowledge status --json)"
