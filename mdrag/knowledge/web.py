"""Website sources: :class:`WebsiteCrawler` crawls a documentation site into a docset folder, page by page.

Scope is the start URL's scheme, host and path prefix: links, sitemap entries, llms.txt links and
redirects outside it are not followed (a sitemap index's sitemaps are read on the same host, up to
``MAX_SITEMAPS``). robots.txt is obeyed, requests go one at a time with a delay,
and every page that cannot be kept (timeout, size, type, redirect loop, crawl trap) is logged with its
reason while the crawl goes on (and listed in the crawl's result). Links are read as a browser sends them
(non-ASCII characters percent-encoded); ``dir/`` and ``dir/index.html`` are one page, and a page whose
``<link rel="canonical">`` names another page of the source is kept once, under that page's URL. HTML
pages are stored as served (the HTML parser keeps their main content at index time), Markdown as served;
each file's path mirrors its URL inside the folder.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
import urllib.robotparser
import zlib
from collections import deque
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from urllib.parse import unquote, urldefrag, urljoin, urlsplit

from mdrag.knowledge.web_fetch import USER_AGENT, FetchError, browser_url, fetch

__all__ = ["CrawlResult", "Page", "WebsiteCrawler", "inside", "remove_pages", "url_to_path"]

log = logging.getLogger(__name__)

MAX_PAGES = 2000
MAX_BYTES = 5 * 1024 * 1024
MAX_DEPTH = 20  # links followed from the start page
MAX_QUERY_VARIANTS = 5  # distinct query strings kept per path (calendars, endless filters)
MAX_REDIRECTS = 5
MAX_SITEMAPS = 10  # sitemaps read per crawl, those a sitemap index lists included
_TYPES = {"text/html": ".html", "application/xhtml+xml": ".html", "text/markdown": ".md", "text/x-markdown": ".md"}
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
_MD_LINK = re.compile(r"\]\(([^)\s]+)")
_LOC = re.compile(r"<loc>\s*([^<\s]+)\s*</loc>")
_SITEMAP_INDEX = re.compile(r"<(?:\w+:)?sitemapindex[\s>]")  # its <loc>s are sitemaps, not pages


@dataclass
class Page:
    """One kept page: where it came from, where it is stored and its validators for the next refresh."""

    url: str
    path: str  # relative to the docset folder, posix
    etag: str | None = None
    last_modified: str | None = None
    sha256: str = ""


@dataclass
class CrawlResult:
    """What a crawl did: the pages kept (by URL) and what changed since the previous crawl."""

    pages: dict[str, Page] = field(default_factory=dict)
    added: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # URL -> why it was not kept
    fetched: int = 0


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []
        self.base: str | None = None
        self.canonical: str | None = None  # <link rel="canonical" href=...>

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if tag == "a" and values.get("href"):
            self.links.append(str(values["href"]))
        elif tag == "base" and values.get("href") and self.base is None:
            self.base = values["href"]
        elif tag == "link" and values.get("href") and self.canonical is None:
            if "canonical" in (values.get("rel") or "").lower().split():
                self.canonical = values["href"]


def page_key(url: str) -> str:
    """What names one page whatever link reached it: the URL as a browser sends it, without its fragment,
    and ``dir/index.html`` (or ``index.htm``) read as ``dir/``, which servers answer with the same page."""
    url = urldefrag(browser_url(url))[0]
    head, _, query = url.partition("?")
    for name in ("index.html", "index.htm"):
        if head.endswith("/" + name):
            head = head[: -len(name)]
    return head + ("?" + query if query else "")


def url_to_path(url: str, prefix_path: str, ext: str) -> str:
    """The docset-relative file for ``url``: its path under the prefix, made safe; a query gets a hash suffix.

    Every segment keeps only ``[A-Za-z0-9._-]``; ``.`` and ``..`` segments are dropped, so the result
    never leaves the folder. A folder URL becomes ``index`` + ``ext``; a name without ``ext`` gets it.
    """
    parts = urlsplit(url)
    rel = unquote(parts.path)[len(prefix_path) :] if unquote(parts.path).startswith(prefix_path) else parts.path
    segments = [_SAFE.sub("_", s)[:120] for s in rel.split("/") if s not in ("", ".", "..")]
    segments = [s for s in segments if s.strip(".")]
    if not segments or parts.path.endswith("/"):
        segments.append("index")
    name = segments[-1]
    stem, dot, suffix = name.rpartition(".")
    if dot and "." + suffix.lower() in (".html", ".htm", ".md", ".markdown"):
        name = stem
    if parts.query:
        name += "__q" + hashlib.sha256(parts.query.encode()).hexdigest()[:10]
    segments[-1] = name + ext
    return str(PurePosixPath(*segments))


class WebsiteCrawler:
    """Crawls the pages under a start URL into a folder; see the module docstring for the rules."""

    def __init__(
        self,
        start_url: str,
        *,
        allow_local: bool = False,
        max_pages: int = MAX_PAGES,
        delay: float = 0.5,
        timeout: float = 20.0,
        max_bytes: int = MAX_BYTES,
    ) -> None:
        start_url = urldefrag(browser_url(start_url))[0]
        parts = urlsplit(start_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"website URL {start_url!r} must be an http:// or https:// URL with a host")
        self.start = start_url
        self.origin = f"{parts.scheme}://{parts.netloc}"
        path = parts.path or "/"
        self.prefix = path if path.endswith("/") else path.rsplit("/", 1)[0] + "/"
        self.allow_local = allow_local
        self.max_pages = max_pages
        self.delay = delay
        self.timeout = timeout
        self.max_bytes = max_bytes
        self.robots = urllib.robotparser.RobotFileParser()
        self._last = 0.0

    def in_scope(self, url: str) -> bool:
        """Same scheme and host as the start URL, and a path under its prefix."""
        parts = urlsplit(url)
        return f"{parts.scheme}://{parts.netloc}" == self.origin and unquote(parts.path or "/").startswith(
            unquote(self.prefix)
        )

    def _pause(self) -> None:
        """Wait until ``delay`` seconds have passed since the last request ended."""
        wait = self._last + self.delay - time.monotonic()
        if wait > 0:
            time.sleep(wait)

    def _get(self, url: str, headers: dict[str, str] | None = None) -> tuple[str, int, dict[str, str], bytes]:
        """GET with the politeness delay, following redirects that stay in scope (or reach robots/sitemap)."""
        seen = {url}
        for _ in range(MAX_REDIRECTS + 1):
            self._pause()
            try:
                resp = fetch(
                    url, allow_local=self.allow_local, timeout=self.timeout, max_bytes=self.max_bytes, headers=headers
                )
            finally:
                self._last = time.monotonic()
            if resp.status not in (301, 302, 303, 307, 308):
                return url, resp.status, resp.headers, resp.body
            target = urldefrag(urljoin(url, resp.headers.get("location", "")))[0]
            if not self.in_scope(target):
                raise FetchError(f"{url} redirects to {target}, outside {self.origin}{self.prefix}; not followed")
            if target in seen:
                raise FetchError(f"{url}: redirect loop through {target}")
            seen.add(target)
            url = target
        raise FetchError(f"{url}: more than {MAX_REDIRECTS} redirects")

    def _aux(self, url: str) -> str:
        """robots.txt, sitemap.xml or llms.txt: its text, or '' when absent or unreadable."""
        try:
            _, status, _, body = self._get_aux(url)
        except FetchError as exc:
            log.info("%s not read: %s", url, exc)
            return ""
        if status != 200:
            return ""
        if body[:2] == b"\x1f\x8b":  # gzip: a sitemap.xml.gz, read up to the same size limit as a page
            unzip = zlib.decompressobj(16 + zlib.MAX_WBITS)
            try:
                body = unzip.decompress(body, self.max_bytes + 1)
            except zlib.error as exc:
                log.warning("%s not read: not valid gzip (%s)", url, exc)
                return ""
            if len(body) > self.max_bytes:
                log.warning("%s not read: over %d bytes once unpacked", url, self.max_bytes)
                return ""
        return body.decode("utf-8", "replace")

    def _get_aux(self, url: str) -> tuple[str, int, dict[str, str], bytes]:
        self._pause()
        try:
            resp = fetch(url, allow_local=self.allow_local, timeout=self.timeout, max_bytes=self.max_bytes)
        finally:
            self._last = time.monotonic()
        return url, resp.status, resp.headers, resp.body

    def _seeds(self) -> list[str]:
        robots = self._aux(self.origin + "/robots.txt")
        self.robots.parse(robots.splitlines())
        asked = self.robots.crawl_delay(USER_AGENT)
        if asked is not None and float(asked) > self.delay:  # the site's Crawl-delay, up to a minute
            self.delay = min(float(asked), 60.0)
        seeds = [self.start]
        maps = list(self.robots.site_maps() or []) + [self.origin + self.prefix + "sitemap.xml"]
        if self.prefix != "/":
            maps.append(self.origin + "/sitemap.xml")
        seeds += self._sitemap_pages(maps)
        for llms in dict.fromkeys([self.origin + self.prefix + "llms.txt", self.origin + "/llms.txt"]):
            text = self._aux(llms)
            seeds += [browser_url(urljoin(llms, u)) for u in _MD_LINK.findall(text)]
        return seeds

    def _sitemap_pages(self, maps: list[str]) -> list[str]:
        """The page URLs the sitemaps list; a sitemap index's sitemaps are read too, on the start URL's host
        only and at most MAX_SITEMAPS sitemaps in all (pages out of scope are dropped later, as any link)."""
        host = urlsplit(self.origin).netloc
        todo = deque(dict.fromkeys(maps))
        done: set[str] = set()
        pages: list[str] = []
        while todo and len(done) < MAX_SITEMAPS:
            sm = todo.popleft()
            if sm in done or urlsplit(sm).netloc != host:
                continue
            done.add(sm)
            text = self._aux(sm)
            locs = [browser_url(unquote_amp(u)) for u in _LOC.findall(text)]
            if _SITEMAP_INDEX.search(text):
                todo.extend(locs)
            else:
                pages += locs
        if todo:
            log.info("%s: more than %d sitemaps; %d not read", self.start, MAX_SITEMAPS, len(todo))
        return pages

    def crawl(self, dest: Path, previous: dict[str, Page] | None = None) -> CrawlResult:
        """Crawl into ``dest``; ``previous`` (the last crawl's pages) enables conditional GETs and removals.

        A page answered 304 is kept untouched; a changed one is rewritten; a previous page that now
        answers 404 or 410 is listed in ``removed`` (its file is left for :func:`remove_pages`, once the
        crawl is accepted). A previous page the crawl did not reach (or that failed for another reason) is
        kept as it was.
        """
        previous = dict(previous or {})
        result = CrawlResult()
        dest.mkdir(parents=True, exist_ok=True)
        queue: deque[tuple[str, int]] = deque()
        seen: set[str] = set()  # the pages (page_key) queued or kept
        kept: set[str] = set()  # the pages (page_key) kept by this crawl
        variants: dict[str, set[str]] = {}

        def push(url: str, depth: int) -> None:
            url = urldefrag(browser_url(url))[0]
            key = page_key(url)
            if not url or key in seen or not self.in_scope(url):
                return
            parts = urlsplit(url)
            if parts.query:
                keys = variants.setdefault(parts.path, set())
                if parts.query not in keys and len(keys) >= MAX_QUERY_VARIANTS:
                    if url not in result.skipped:
                        _skip(result, url, f"more than {MAX_QUERY_VARIANTS} query variants of {parts.path}")
                    return
                keys.add(parts.query)
            seen.add(key)
            queue.append((url, depth))

        for seed in self._seeds():
            push(seed, 0)
        for url in previous:
            push(url, 0)
        while queue and len(result.pages) < self.max_pages:
            url, depth = queue.popleft()
            if not self.robots.can_fetch(USER_AGENT, url):
                _skip(result, url, "disallowed by robots.txt")
                continue
            old = previous.get(url)
            stored = inside(dest, old.path) if old else None
            headers: dict[str, str] = {}
            if old and stored and stored.is_file():
                if old.etag:
                    headers["If-None-Match"] = old.etag
                if old.last_modified:
                    headers["If-Modified-Since"] = old.last_modified
            try:
                final, status, got, body = self._get(url, headers)
            except FetchError as exc:
                _skip(result, url, str(exc), logging.WARNING)
                if old:
                    result.pages[url] = old
                continue
            result.fetched += 1
            if status == 304 and old:
                result.pages[url] = old
                result.unchanged.append(url)
                kept.add(page_key(url))
                if stored and old.path.endswith(".html") and depth < MAX_DEPTH:
                    for link in self._parse(final, stored.read_bytes())[0]:
                        push(link, depth + 1)
                continue
            if status in (404, 410):
                _skip(result, url, f"HTTP {status}")
                if old:
                    result.removed.append(url)
                continue
            if status != 200:
                _skip(result, url, f"HTTP {status}", logging.WARNING)
                if old:
                    result.pages[url] = old
                continue
            ctype = got.get("content-type", "").split(";", 1)[0].strip().lower()
            ext = _TYPES.get(ctype)
            if ext is None and ctype == "text/plain" and urlsplit(final).path.endswith((".md", ".markdown")):
                ext = ".md"
            if ext is None:
                _skip(result, url, f"content type {ctype or 'unknown'} is neither HTML nor Markdown")
                continue
            parsed = self._parse(final, body) if ext == ".html" else None
            canonical = self._canonical(url, final, parsed)
            if canonical is not None:
                if page_key(canonical) in kept or canonical in result.skipped:
                    _skip(result, url, f"the same page as {canonical} (its canonical URL), kept once")
                    continue
                seen.add(page_key(canonical))
                url, old = canonical, previous.get(canonical, old)
            kept.add(page_key(url))
            rel = old.path if old else url_to_path(url, unquote(self.prefix), ext)
            rel = self._unique(rel, url, result, previous)
            target = inside(dest, rel)
            if target is None:  # url_to_path never leaves the folder: a symbolic link in it leads out
                _skip(
                    result,
                    url,
                    f"{rel} would be written through a symbolic link leading out of {dest}",
                    logging.WARNING,
                )
                continue
            digest = hashlib.sha256(body).hexdigest()
            page = Page(url, rel, got.get("etag"), got.get("last-modified"), digest)
            if old and old.sha256 == digest and target.is_file():
                result.unchanged.append(url)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(body)
                (result.changed if old else result.added).append(url)
            result.pages[url] = page
            if parsed is not None and depth < MAX_DEPTH:
                for link in parsed[0]:
                    push(link, depth + 1)
        if queue:
            log.info("crawl of %s stopped at max_pages=%d", self.start, self.max_pages)
        for url, old in previous.items():
            if url not in result.pages and url not in result.removed and url not in result.skipped:
                result.pages[url] = old  # not reached this time: kept until a 404/410 confirms it is gone
        return result

    @staticmethod
    def _unique(rel: str, url: str, result: CrawlResult, previous: dict[str, Page]) -> str:
        """``rel``, or where another page (of this crawl or the last) has it, the first free ``name-2.ext``,
        ``name-3.ext``, ... (the name stays readable)."""
        taken = {p.path for pages in (result.pages, previous) for u, p in pages.items() if u != url}
        stem, _, ext = rel.rpartition(".")
        n = 1
        while rel in taken:
            n += 1
            rel = f"{stem}-{n}.{ext}"
        return rel

    @staticmethod
    def _parse(base: str, body: bytes) -> tuple[list[str], str | None]:
        """A page's links, and its canonical URL (None: it names none), made absolute."""
        parser = _Links()
        try:
            parser.feed(body.decode("utf-8", "replace"))
        except Exception as exc:  # html.parser is lenient; a broken page just yields fewer links
            log.info("%s: links not all read (%s)", base, exc)
        root = urljoin(base, parser.base) if parser.base else base
        canonical = urljoin(root, parser.canonical) if parser.canonical else None
        return [urljoin(root, link) for link in parser.links], canonical

    def _canonical(self, url: str, final: str, parsed: tuple[list[str], str | None] | None) -> str | None:
        """The other page of this source that ``url``'s page names as its canonical URL; None when it names
        itself, none, or one outside the source (then ignored: it could pull in any page)."""
        if parsed is None or parsed[1] is None or url == self.start:  # the start page is kept as the start URL
            return None
        canonical = urldefrag(browser_url(parsed[1]))[0]
        if page_key(canonical) in (page_key(url), page_key(final)) or not self.in_scope(canonical):
            return None
        return canonical


def _skip(result: CrawlResult, url: str, why: str, level: int = logging.INFO) -> None:
    """Record that ``url`` was not kept and why, and log it (a failure as a warning, a rule as info: -v)."""
    result.skipped[url] = why
    log.log(level, "page not kept: %s: %s", url, why)


def inside(dest: Path, rel: str) -> Path | None:
    """``dest/rel``; None where it, or a folder on the way, is a symbolic link that leads out of ``dest``."""
    path = dest / rel
    try:
        return path if path.resolve().is_relative_to(dest.resolve()) else None
    except (OSError, RuntimeError):  # a link loop
        return None


def remove_pages(dest: Path, rels: list[str]) -> None:
    """Remove the files of pages gone; one reached through a symbolic link leading out of ``dest`` is left."""
    for rel in rels:
        path = inside(dest, rel)
        if path is None:
            log.warning("%s not removed: a symbolic link in %s leads it out of the folder", rel, dest)
        else:
            path.unlink(missing_ok=True)


def unquote_amp(url: str) -> str:
    """A sitemap <loc> with XML entities resolved."""
    return url.replace("&amp;", "&")
