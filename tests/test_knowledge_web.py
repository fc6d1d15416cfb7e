"""The website crawler (mdrag/knowledge/web.py) against a real http.server on 127.0.0.1."""

from __future__ import annotations

import email.utils
import functools
import hashlib
import json
import os
import re
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from mdrag import knowledge
from mdrag.errors import DocsetError, KnowledgeConfigError
from mdrag.frontends.mcp.resources import Target
from mdrag.frontends.mcp.tools import _result_dict
from mdrag.knowledge import KnowledgeBase
from mdrag.knowledge.docsets import docset_index, update_docset_index
from mdrag.knowledge.model import WebSource
from mdrag.knowledge.web import MAX_SITEMAPS, WebsiteCrawler, url_to_path
from mdrag.knowledge.web_fetch import FetchError, check_address, fetch
from mdrag.knowledge.web_source import WebsiteLoader
from mdrag.pageurls import METADATA_FILE, page_url, page_urls
from mdrag.retrieval.shown import result_fields
from tests.test_knowledge import write_config

PAGES = {
    "/docs/": b'<html><body><h1>Home</h1><p>Welcome.</p><a href="guide.html">g</a><a href="/other/x.html">o</a>'
    b'<a href="loop">l</a><a href="out">r</a><a href="cal?d=1">c</a><a href="data.json">j</a>'
    b'<a href="secret/a.html">s</a></body></html>',
    "/docs/guide.html": b"<html><body><h1>Guide</h1><p>Install the widget.</p></body></html>",
    "/docs/secret/a.html": b"<html><body><p>secret</p></body></html>",
    "/docs/only-in-sitemap.md": b"# Sitemap page\n\nFound through the sitemap.\n",
    "/other/x.html": b"<html><body>outside</body></html>",
}


SERVERS: dict[str, ThreadingHTTPServer] = {}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
        self.server.asked.append((path, time.monotonic()))  # type: ignore[attr-defined]
        answers = self.server.answers.get(path)  # type: ignore[attr-defined]
        if answers:  # a test's answers for this path, in turn; the last one repeats
            status, headers, body = answers.pop(0) if len(answers) > 1 else answers[0]
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(body))}.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
            return
        if path == "/robots.txt":
            return self._send(200, b"User-agent: *\nDisallow: /docs/secret/\n", "text/plain")
        if path == "/docs/sitemap.xml":
            loc = b"http://127.0.0.1:%d/docs/only-in-sitemap.md" % self.server.server_address[1]
            return self._send(200, b"<urlset><url><loc>" + loc + b"</loc></url></urlset>", "application/xml")
        if path == "/docs/loop":
            return self._redirect("/docs/loop2")
        if path == "/docs/loop2":
            return self._redirect("/docs/loop")
        if path == "/docs/out":
            return self._redirect("/other/x.html")
        if path == "/docs/cal":
            n = int(query.split("=")[1])
            return self._send(200, b'<html><body><a href="cal?d=%d">next</a></body></html>' % (n + 1), "text/html")
        if path == "/docs/data.json":
            return self._send(200, b"{}", "application/json")
        if path == "/docs/slow.html":
            time.sleep(2)
            return self._send(200, b"<html><body>late</body></html>", "text/html")
        if path == "/docs/huge.html":
            return self._send(200, b"<html><body>" + b"x" * 300_000 + b"</body></html>", "text/html")
        if path == "/docs/private.html":
            return self._redirect("http://10.1.2.3/docs/x.html")
        self.server.hosts.append(self.headers.get("Host"))  # type: ignore[attr-defined]
        pages: dict[str, bytes] = self.server.pages  # type: ignore[attr-defined]
        self.server.hits.append(path)  # type: ignore[attr-defined]
        if path in pages:
            body = pages[path]
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            ctype = "text/markdown" if path.endswith(".md") else "text/html; charset=utf-8"
            return self._send(200, body, ctype, etag)
        self._send(410 if path in self.server.gone else 404, b"not found", "text/plain")  # type: ignore[attr-defined]

    def _redirect(self, to: str) -> None:
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, status: int, body: bytes, ctype: str, etag: str | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if etag:
            self.send_header("ETag", etag)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.pages = dict(PAGES)  # type: ignore[attr-defined]
    server.hits = []  # type: ignore[attr-defined]
    server.gone = set()  # type: ignore[attr-defined]
    server.hosts = []  # type: ignore[attr-defined]
    server.asked = []  # type: ignore[attr-defined]
    server.answers = {}  # type: ignore[attr-defined]
    SERVERS[f"http://127.0.0.1:{server.server_address[1]}/docs/"] = server
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/docs/"
    server.shutdown()
    server.server_close()


def test_crawl_keeps_pages_in_scope_and_logs_the_rest(site: str, tmp_path: Path) -> None:
    result = WebsiteCrawler(site, allow_local=True, delay=0).crawl(tmp_path)
    paths = {p.path for p in result.pages.values()}
    assert {"index.html", "guide.html", "only-in-sitemap.md"} <= paths
    assert (tmp_path / "guide.html").read_bytes() == PAGES["/docs/guide.html"]
    assert result.skipped[site + "secret/a.html"] == "disallowed by robots.txt"
    assert "outside" in result.skipped[site + "out"]
    assert "redirect loop" in result.skipped[site + "loop"]
    assert "neither HTML nor Markdown" in result.skipped[site + "data.json"]
    assert sum(1 for p in paths if p.startswith("cal__q")) == 5
    assert not any("other" in p for p in paths)


def test_slow_huge_and_private_pages_end_with_a_reason(site: str, tmp_path: Path) -> None:
    SERVERS[site].pages["/docs/"] += b'<a href="slow.html">s</a><a href="huge.html">h</a><a href="private.html">p</a>'
    result = WebsiteCrawler(site, allow_local=True, delay=0, timeout=0.5, max_bytes=200_000).crawl(tmp_path)
    assert "no answer within" in result.skipped[site + "slow.html"]
    assert "page limit" in result.skipped[site + "huge.html"]
    assert "outside" in result.skipped[site + "private.html"]
    assert "guide.html" in {p.path for p in result.pages.values()}  # the crawl went on


HTML = {"Content-Type": "text/html"}
XML = {"Content-Type": "application/xml"}


def test_retry_after_is_waited_for_once_and_a_long_one_ends_the_page(site: str, tmp_path: Path) -> None:
    """A 429 or 503 with a Retry-After (seconds or a date) is asked again after that wait; one over a minute
    is not waited for: the page ends with its status and the crawl goes on."""
    server = SERVERS[site]
    server.pages["/docs/"] += b'<a href="busy.html">b</a><a href="down.html">d</a><a href="away.html">a</a>'
    page = b"<html><body><p>Busy page.</p></body></html>"
    server.answers["/docs/busy.html"] = [(429, {"Retry-After": "1"}, b""), (200, HTML, page)]
    soon = email.utils.formatdate(time.time() + 1, usegmt=True)
    server.answers["/docs/down.html"] = [(503, {"Retry-After": soon}, b""), (200, HTML, page)]
    server.answers["/docs/away.html"] = [(429, {"Retry-After": "3600"}, b""), (200, HTML, page)]
    result = WebsiteCrawler(site, allow_local=True, delay=0).crawl(tmp_path)
    assert (tmp_path / "busy.html").read_bytes() == page and (tmp_path / "down.html").read_bytes() == page
    asked = {p: [t for q, t in server.asked if q == p] for p in ("/docs/busy.html", "/docs/away.html")}
    assert len(asked["/docs/busy.html"]) == 2
    assert asked["/docs/busy.html"][1] - asked["/docs/busy.html"][0] >= 1.0  # it waited as asked
    assert len(asked["/docs/away.html"]) == 1 and result.skipped[site + "away.html"] == "HTTP 429"
    assert "guide.html" in {p.path for p in result.pages.values()}


def test_llms_txt_links_under_the_start_url_are_crawled(site: str, tmp_path: Path) -> None:
    """The llms.txt of the start URL's folder and of the host: their Markdown links in scope are crawled."""
    server = SERVERS[site]
    server.pages["/docs/only-in-llms.md"] = b"# Listed\n\nOnly llms.txt lists this page.\n"
    server.pages["/docs/api/from-root-llms.md"] = b"# Root\n\nThe host's llms.txt lists it.\n"
    server.pages["/other/llms-out.md"] = b"# Out\n"
    text = b"# Docs\n\n> The docs.\n\n- [Listed](only-in-llms.md): a page\n- [Out](/other/llms-out.md)\n"
    server.answers["/docs/llms.txt"] = [(200, {"Content-Type": "text/plain"}, text)]
    server.answers["/llms.txt"] = [(200, {"Content-Type": "text/plain"}, b"- [Root](/docs/api/from-root-llms.md)\n")]
    result = WebsiteCrawler(site, allow_local=True, delay=0).crawl(tmp_path)
    assert (tmp_path / "only-in-llms.md").read_bytes() == server.pages["/docs/only-in-llms.md"]
    assert result.pages[site + "api/from-root-llms.md"].path == "api/from-root-llms.md"
    assert "/other/llms-out.md" not in {p for p, _ in server.asked}


def test_a_sitemap_index_is_followed_on_the_same_host_up_to_a_cap(site: str, tmp_path: Path) -> None:
    """The host's sitemap.xml is an index: its sitemaps on the host are read (at most MAX_SITEMAPS in all,
    those of other hosts never) and their pages under the start URL crawled."""
    server = SERVERS[site]
    port = urlsplit(site).port
    base = f"http://127.0.0.1:{port}"

    def xml(tag: str, item: str, *locs: str) -> bytes:
        entries = "".join(f"<{item}><loc>{loc}</loc></{item}>" for loc in locs)
        return f'<?xml version="1.0"?><{tag} xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">{entries}</{tag}>'.encode()

    nested = [f"{base}/sitemap-docs.xml", f"http://localhost:{port}/sitemap-elsewhere.xml"]
    nested += [f"{base}/sitemap-{i}.xml" for i in range(20)]
    server.answers["/sitemap.xml"] = [(200, XML, xml("sitemapindex", "sitemap", *nested))]
    pages = xml("urlset", "url", f"{base}/docs/from-index.md", f"{base}/other/x.html")
    server.answers["/sitemap-docs.xml"] = [(200, XML, pages)]
    for i in range(20):
        server.answers[f"/sitemap-{i}.xml"] = [(200, XML, xml("urlset", "url"))]
    server.pages["/docs/from-index.md"] = b"# From the index\n\nA nested sitemap lists it.\n"
    result = WebsiteCrawler(site, allow_local=True, delay=0).crawl(tmp_path)
    assert result.pages[site + "from-index.md"].path == "from-index.md"
    asked = [p for p, _ in server.asked]
    assert "/other/x.html" not in asked and "/sitemap-elsewhere.xml" not in asked  # another host name
    assert sum(p.endswith(".xml") for p in asked) == MAX_SITEMAPS
    assert "/sitemap-19.xml" not in asked


def test_max_pages_stops_the_crawl(site: str, tmp_path: Path) -> None:
    result = WebsiteCrawler(site, allow_local=True, delay=0, max_pages=2).crawl(tmp_path)
    assert len(result.pages) == 2


def test_start_page_on_loopback_refused_without_allow_local(site: str, tmp_path: Path) -> None:
    result = WebsiteCrawler(site, delay=0).crawl(tmp_path)
    assert result.pages == {}
    assert "allow_local_web" in result.skipped[site]
    assert SERVERS[site].hits == []


def test_private_address_refused_without_allow_local() -> None:
    with pytest.raises(FetchError, match="allow_local_web"):
        check_address("127.0.0.1", 80, False)
    check_address("127.0.0.1", 80, True)


@pytest.mark.parametrize(
    "address",
    ["10.1.2.3", "169.254.169.254", "0.0.0.0", "::1", "::ffff:127.0.0.1", "2002:7f00:1::1", "64:ff9b::a01:203"],
)
def test_non_public_addresses_refused_even_inside_an_ipv6_one(address: str) -> None:
    """Loopback, private, cloud metadata, and IPv6 addresses that carry one (mapped, 6to4, NAT64)."""
    with pytest.raises(FetchError, match="allow_local_web"):
        check_address(address, 80, False)
    assert check_address("8.8.8.8", 80, False) == ["8.8.8.8"]  # a public address passes, as given
    assert check_address("::ffff:8.8.8.8", 80, False) == ["::ffff:8.8.8.8"]


def _rebinding(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make docs.rebind.test resolve to 127.0.0.1 once (the check's lookup), then to 127.0.0.2, a loopback
    address where nothing listens (a second lookup, as DNS rebinding would answer it)."""
    real = socket.getaddrinfo
    answers = iter(["127.0.0.1"])

    def rebinding(host: Any, *args: Any, **kwargs: Any) -> Any:
        return real(next(answers, "127.0.0.2") if host == "docs.rebind.test" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)


def test_the_connection_goes_to_the_address_checked_not_to_a_second_lookup(
    site: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DNS rebinding: a host that resolves to an allowed address when checked, and to another one when
    connected to, is connected to at the address checked, with its own name in the Host header."""
    port = urlsplit(site).port
    _rebinding(monkeypatch)
    got = fetch(f"http://docs.rebind.test:{port}/docs/guide.html", allow_local=True, timeout=5, max_bytes=10**6)
    assert (got.status, got.body) == (200, PAGES["/docs/guide.html"])
    assert SERVERS[site].hosts == [f"docs.rebind.test:{port}"]
    with pytest.raises(FetchError):  # the next fetch checks again, and is given the other address
        fetch(f"http://docs.rebind.test:{port}/docs/guide.html", allow_local=True, timeout=5, max_bytes=10**6)


def test_https_is_pinned_too_and_its_certificate_checked_against_the_host_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Over TLS the pinned connection still sends the host name (SNI, Host) and checks the certificate
    against it: a certificate for another name is refused."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to make the test's self-signed certificate")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-keyout", str(key)]
        + ["-out", str(cert), "-subj", "/CN=docs.rebind.test", "-addext", "subjectAltName=DNS:docs.rebind.test"],
        check=True,
        capture_output=True,
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.pages, server.hits, server.gone, server.hosts = dict(PAGES), [], set(), []  # type: ignore[attr-defined]
    server.asked, server.answers = [], {}  # type: ignore[attr-defined]
    names: list[str | None] = []
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    tls.sni_callback = lambda sock, name, ctx: names.append(name)  # type: ignore[assignment,misc]
    server.socket = tls.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        port = server.server_address[1]
        monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client trusts the test's certificate, and only it
        _rebinding(monkeypatch)
        got = fetch(f"https://docs.rebind.test:{port}/docs/guide.html", allow_local=True, timeout=5, max_bytes=10**6)
        assert (got.status, got.body) == (200, PAGES["/docs/guide.html"])
        assert names == ["docs.rebind.test"] and server.hosts == [f"docs.rebind.test:{port}"]  # type: ignore[attr-defined]
        with pytest.raises(FetchError, match="CERTIFICATE_VERIFY_FAILED|certificate"):
            fetch(f"https://localhost:{port}/docs/guide.html", allow_local=True, timeout=5, max_bytes=10**6)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("http://h/docs/", "index.html"),
        ("http://h/docs/a/b", "a/b.html"),
        ("http://h/docs/../../etc/passwd", "etc/passwd.html"),
        ("http://h/docs/%2e%2e/x.md", "x.html"),
    ],
)
def test_url_to_path_stays_inside(url: str, expected: str) -> None:
    assert url_to_path(url, "/docs/", ".html") == expected


def _website_kb(project: Path, site: str, allow: bool = True) -> KnowledgeBase:
    write_config(
        project,
        f"allow_local_web: {'true' if allow else 'false'}\ndocsets:\n  - id: site\n    web_sources:\n"
        f"      - type: website\n        url: {site}\n",
    )
    return KnowledgeBase(start=project)


@pytest.fixture
def fast_loader(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("mdrag.knowledge.web_source.WebsiteLoader.__init__.__defaults__", (0.0, 5.0))


def test_init_indexes_pages_with_their_urls_and_refresh_fetches_only_changes(
    site: str, tmp_path: Path, mdrag_home: Path, hash_embedder: Any, monkeypatch: pytest.MonkeyPatch, fast_loader: None
) -> None:
    monkeypatch.setattr("mdrag.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    project = tmp_path / "project"
    kb = _website_kb(project, site)
    (result,) = knowledge.init_docset(kb, "site")
    assert result.ok, result.error
    assert {"index.html", "guide.html", "only-in-sitemap.md"} <= set(result.added)
    folder = Path(kb.resolve("site").local_path)
    assert page_urls(folder)["guide.html"] == site + "guide.html"
    with docset_index("site", project) as index:
        summary = update_docset_index(index, kb.resolve("site"))
        assert summary.added >= 3
        hits = index.search("Install the widget", k=3)
        hit = next(h for h in hits if h.rel_path.endswith("guide.html"))
    assert result_fields(hit)["url"] == site + "guide.html"  # `search --json`, and the web page's "page" link
    target = Target("docset", "site", None)  # type: ignore[arg-type]  # the entry is not read
    assert _result_dict(target, hit, frozenset())["url"] == site + "guide.html"  # the MCP search tool's result
    assert page_url(folder / ".agentic-metadata.json") is None  # not a page

    server = SERVERS[site]
    server.pages["/docs/guide.html"] = b"<html><body><h1>Guide</h1><p>Install the gadget now.</p></body></html>"
    del server.pages["/docs/only-in-sitemap.md"]
    server.gone.add("/docs/only-in-sitemap.md")
    server.hits.clear()
    mtime = (folder / "index.html").stat().st_mtime_ns
    (again,) = knowledge.refresh(kb, "site")["site"]
    assert again.ok, again.error
    assert again.changed == ["guide.html"]
    assert again.removed == ["only-in-sitemap.md"]
    assert again.added == []
    assert not (folder / "only-in-sitemap.md").exists()
    assert (folder / "index.html").stat().st_mtime_ns == mtime  # answered 304: not rewritten
    with docset_index("site", project) as index:
        summary = update_docset_index(index, kb.resolve("site"))
        assert (summary.added, summary.modified, summary.deleted) == (0, 1, 1)
    rows = knowledge.status(kb)
    assert rows[0]["files"] == len(again.files)


def test_a_failing_website_is_recorded_and_loopback_needs_allow_local_web(
    site: str, tmp_path: Path, fast_loader: None
) -> None:
    kb = _website_kb(tmp_path / "project", site, allow=False)
    (result,) = knowledge.init_docset(kb, "site")
    assert not result.ok
    assert "allow_local_web" in (result.error or "")
    assert "allow_local_web" in (knowledge.status(kb)[0]["last_error"] or "")


@pytest.mark.parametrize(
    ("source", "message"),
    [("url: ftp://h/docs/", "http:// or https://"), ("url: https://h/\n        max_pages: 0", "max_pages")],
)
def test_bad_website_sources_are_refused(tmp_path: Path, source: str, message: str) -> None:
    write_config(tmp_path, f"docsets:\n  - id: s\n    web_sources:\n      - type: website\n        {source}\n")
    with pytest.raises(KnowledgeConfigError, match=message):
        KnowledgeBase(start=tmp_path).config()


PAGES_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "html_readability_pages"


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def saved_site() -> Iterator[str]:
    """The saved pages of ../shared/data/html_readability_pages served as they are, with http.server's folder
    listings linking them (each folder's source.html and expected.html; expected-metadata.json is not a page)."""
    if not PAGES_DIR.is_dir():
        pytest.skip(f"{PAGES_DIR} is absent: the shared corpora are not checked out here")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(_Quiet, directory=str(PAGES_DIR.parent)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/{PAGES_DIR.name}/"
    server.shutdown()
    server.server_close()


def test_saved_pages_are_crawled_indexed_and_cited(
    saved_site: str,
    tmp_path: Path,
    mdrag_home: Path,
    hash_embedder: Any,
    monkeypatch: pytest.MonkeyPatch,
    fast_loader: None,
) -> None:
    monkeypatch.setattr("mdrag.index.make_embedder", lambda config: hash_embedder)
    (mdrag_home / "config.yaml").write_text("search:\n  threshold: 0.0\n")
    project = tmp_path / "project"
    write_config(
        project,
        "allow_local_web: true\ndocsets:\n  - id: pages\n    web_sources:\n"
        f"      - type: website\n        url: {saved_site}\n        max_pages: 150\n",
    )
    kb = KnowledgeBase(start=project)
    (result,) = knowledge.init_docset(kb, "pages")
    assert result.ok, result.error
    assert len(result.files) == 150  # max_pages: the folder listings first, then the pages they link
    assert "001/source.html" in result.files
    folder = Path(kb.resolve("pages").local_path)
    assert (folder / "001" / "source.html").read_bytes() == (PAGES_DIR / "001" / "source.html").read_bytes()
    assert not any(f.startswith("..") or f.endswith(".json") for f in result.files)  # metadata JSON: not a page
    with docset_index("pages", project) as index:
        update_docset_index(index, kb.resolve("pages"))
        hits = index.search("Get your Frontend JavaScript Code Covered", k=5)
    urls = {h.rel_path: page_url(h.path) for h in hits}
    assert urls.get("001/source.html") == saved_site + "001/source.html"


def test_cli_search_and_get_show_a_pages_url_beside_its_path(
    site: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], fast_loader: None
) -> None:
    """`mdrag search` (text and --json) and `mdrag get` of an index holding a crawled docset folder name each
    page's URL; a file of another indexed folder has none."""
    from mdrag.frontends.cli import main
    from tests.conftest import HashEmbedder

    monkeypatch.setattr("mdrag.index.Index.__init__.__defaults__", (None, HashEmbedder()))
    kb = _website_kb(tmp_path / "project", site)
    (result,) = knowledge.init_docset(kb, "site")
    assert result.ok, result.error
    folder = kb.resolve("site").local_path
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "widget.md").write_text("# Widget notes\n\nInstall the widget from the shop.\n")
    assert main(["index", folder, str(notes), "-q"]) == 0
    capsys.readouterr()

    assert main(["search", "Install the widget", "--threshold", "0", "--json"]) == 0
    results = {r["rel_path"]: r for r in json.loads(capsys.readouterr().out)}
    assert results["guide.html"]["url"] == site + "guide.html"
    assert results["widget.md"]["url"] is None  # not a crawled page
    assert main(["search", "Install the widget", "--threshold", "0"]) == 0
    lines = capsys.readouterr().out.splitlines()
    # a crawled page's passage has its lines (of the text mdrag reads from it), as in docs/cli.md
    assert any(re.search(rf"guide\.html:\d+ <{re.escape(site)}guide\.html>", line) for line in lines), lines
    assert not any("widget.md <" in line for line in lines), lines

    assert main(["get", "guide.html", "--json"]) == 0
    (doc,) = json.loads(capsys.readouterr().out)["documents"]
    assert doc["url"] == site + "guide.html"
    assert main(["get", "guide.html"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"==> guide.html <{site}guide.html> (lines ") and "Install the widget" in out
    assert main(["get", "widget.md"]) == 0
    assert capsys.readouterr().out.startswith("# Widget notes")  # one file, no URL: only its text, as before


def test_cli_search_get_and_status_of_a_docset_by_its_id(
    site: str,
    tmp_path: Path,
    mdrag_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    fast_loader: None,
) -> None:
    """`--docset ID` reads the index `mdrag knowledge init` built for that docset of the project (by id or
    alias), from the project's folder; a docset not built yet, an unknown one and --index beside it are errors."""
    from mdrag.frontends.cli import main
    from tests.conftest import HashEmbedder

    monkeypatch.setattr("mdrag.index.make_embedder", lambda config: HashEmbedder())
    project = tmp_path / "project"
    write_config(
        project,
        "allow_local_web: true\ndocsets:\n  - id: site\n    aliases: [handbook]\n    web_sources:\n"
        f"      - type: website\n        url: {site}\n  - id: later\n    local_path: ./later\n",
    )
    monkeypatch.chdir(project)
    assert main(["knowledge", "init", "site", "-q"]) == 0
    capsys.readouterr()
    assert main(["search", "Install the widget", "--docset", "handbook", "--threshold", "0", "--json"]) == 0
    results = {r["rel_path"]: r for r in json.loads(capsys.readouterr().out)}
    assert results["guide.html"]["url"] == site + "guide.html"
    assert main(["get", "guide.html", "--docset", "site"]) == 0
    assert capsys.readouterr().out.startswith(f"==> guide.html <{site}guide.html>")
    assert main(["status", "--docset", "site", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["index"].startswith("docset_site_")
    assert main(["search", "widget"]) != 0  # the default index holds nothing: the docset's is its own
    capsys.readouterr()
    assert main(["search", "widget", "--docset", "later"]) == 2
    assert "docset 'later' has no index yet: run `mdrag knowledge init later`" in capsys.readouterr().err
    assert main(["search", "widget", "--docset", "nope"]) != 0
    assert "unknown docset 'nope'" in capsys.readouterr().err
    assert main(["search", "widget", "--docset", "site", "--index", "other"]) == 2
    assert "give --docset or --index, not both" in capsys.readouterr().err


def test_page_url_reads_http_urls_only_and_no_folder_above_the_indexed_one(tmp_path: Path) -> None:
    docset = tmp_path / "docset"
    (docset / "a").mkdir(parents=True)
    for rel in ("a/p.html", "x.html", "a/p.txt"):
        (docset / rel).write_text("<p>page</p>")
    pages = {"https://h.org/a/p.html": {"path": "a/p.html"}, "javascript:alert(1)": {"path": "x.html"}}
    meta = docset / METADATA_FILE
    meta.write_text(json.dumps({"version": 1, "sources": {"https://h.org/": {"pages": pages}}}))
    assert page_url(docset / "a" / "p.html") == "https://h.org/a/p.html"
    assert page_url(docset / "a" / "p.html", "a/p.html") == "https://h.org/a/p.html"
    assert page_url(docset / "a" / "p.html", "p.html") is None  # indexed folder a/: the docset's metadata is above it
    assert page_url(docset / "x.html") is None  # not an http(s) URL: never shown nor offered as a link
    assert page_url(docset / "a" / "p.txt") is None  # not what a page is stored as
    pages["https://h.org/a/moved.html"] = pages.pop("https://h.org/a/p.html")
    meta.write_text(json.dumps({"version": 1, "sources": {"https://h.org/": {"pages": pages}}}))
    os.utime(meta, ns=(meta.stat().st_atime_ns, meta.stat().st_mtime_ns + 10**9))
    assert page_url(docset / "a" / "p.html") == "https://h.org/a/moved.html"  # read again once it changed
    meta.write_text("{not json")
    os.utime(meta, ns=(meta.stat().st_atime_ns, meta.stat().st_mtime_ns + 2 * 10**9))
    assert page_url(docset / "a" / "p.html") is None


def test_a_start_page_that_fails_fails_its_source_and_removes_nothing(site: str, tmp_path: Path) -> None:
    """A site that moved (its start page gone) or is down (an HTTP error) does not take its pages with it:
    the refresh fails with the reason and every file and the metadata stay as they were."""
    loader, source = WebsiteLoader(delay=0.0, timeout=5.0), WebSource("website", site)
    dest = tmp_path / "docset"
    first = loader.load(source, dest, allow_local=True)
    assert {"index.html", "guide.html", "only-in-sitemap.md"} <= set(first.files)
    meta = (dest / METADATA_FILE).read_bytes()
    server = SERVERS[site]
    del server.pages["/docs/"], server.pages["/docs/guide.html"]  # the site moved: these answer 404 now
    with pytest.raises(DocsetError, match=r"start page failed \(HTTP 404\), so no page was removed"):
        loader.load(source, dest, allow_local=True)
    server.answers["/docs/"] = [(500, HTML, b"down for maintenance")]
    with pytest.raises(DocsetError, match=r"start page failed \(HTTP 500\)"):
        loader.load(source, dest, allow_local=True)
    assert all((dest / f).is_file() for f in first.files)
    assert (dest / METADATA_FILE).read_bytes() == meta
    server.answers.clear()
    server.pages["/docs/"] = PAGES["/docs/"]  # back, but guide.html is gone for good
    again = loader.load(source, dest, allow_local=True)
    assert again.removed == ["guide.html"] and not (dest / "guide.html").exists()


def test_no_page_is_written_or_removed_through_a_link_leading_out_of_the_folder(site: str, tmp_path: Path) -> None:
    """A folder of the docset that is a symbolic link to elsewhere: a page under it is neither written there
    nor, once gone, removed there."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "old.html").write_text("not the crawler's")
    dest = tmp_path / "docset"
    dest.mkdir()
    (dest / "api").symlink_to(outside, target_is_directory=True)
    server = SERVERS[site]
    server.pages["/docs/"] += b'<a href="api/new.html">n</a>'
    server.pages["/docs/api/new.html"] = b"<html><body>new</body></html>"
    server.gone.add("/docs/api/old.html")
    old = site + "api/old.html"
    (dest / METADATA_FILE).write_text(
        json.dumps({"version": 1, "sources": {site: {"files": [], "pages": {old: {"path": "api/old.html"}}}}})
    )
    result = WebsiteLoader(delay=0.0, timeout=5.0).load(WebSource("website", site), dest, allow_local=True)
    assert result.ok and "guide.html" in result.files
    assert sorted(p.name for p in outside.iterdir()) == ["old.html"]  # new.html not written there
    assert (outside / "old.html").read_text() == "not the crawler's"  # answered 410, and still there


def test_a_page_gone_does_not_take_the_file_of_a_page_with_the_same_name(site: str, tmp_path: Path) -> None:
    """/docs/guide (crawled before, gone now) and /docs/guide.html (linked now) both make guide.html: the
    new page gets a name of its own and removing the old one leaves it."""
    dest = tmp_path / "docset"
    dest.mkdir()
    (dest / "guide.html").write_text("<p>the old guide</p>")
    pages = {site + "guide": {"path": "guide.html"}}
    (dest / METADATA_FILE).write_text(json.dumps({"version": 1, "sources": {site: {"files": [], "pages": pages}}}))
    result = WebsiteLoader(delay=0.0, timeout=5.0).load(WebSource("website", site), dest, allow_local=True)
    assert result.removed == ["guide.html"] and not (dest / "guide.html").exists()
    (new,) = [f for f in result.added if f.startswith("guide")]
    assert (dest / new).read_bytes() == PAGES["/docs/guide.html"]


# -- links as a browser sends them, pages once, a deadline per request, every page not kept with its reason --


class Drip(BaseHTTPRequestHandler):
    """Answers every page at once, but /docs/drip.html one byte every 0.05 s, as long as the client listens;
    ``sent`` records how many bytes of it went out before the client went away (or all of them)."""

    sent: list[int] = []

    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/docs/drip.html":
            body = b"<html><body>" + b"x" * 2_000 + b"</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for n, byte in enumerate(body):
                try:
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                except OSError:  # the crawler cut it
                    Drip.sent.append(n)
                    return
                time.sleep(0.05)
            Drip.sent.append(len(body))
            return
        pages = {
            "/docs/": '<html><body><h1>Home</h1><a href="/docs/été.html">e</a><a href="drip.html">d</a>'
            '<a href="index.html">self</a><a href="guide.html">g</a><a href="copy.html">c</a></body></html>',
            "/docs/%C3%A9t%C3%A9.html": "<html><body><h1>Été</h1><p>Summer settings.</p></body></html>",
            "/docs/index.html": '<html><body><h1>Home</h1><a href="guide.html">g</a></body></html>',
            "/docs/guide.html": "<html><body><h1>Guide</h1><p>Install the widget.</p></body></html>",
            "/docs/copy.html": '<html><head><link rel="canonical" href="/docs/guide.html"></head>'
            "<body><h1>Guide</h1><p>Install the widget.</p></body></html>",
        }
        if self.path not in pages:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = pages[self.path].encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def drip_site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/docs/"
    server.shutdown()
    server.server_close()


def test_a_non_ascii_link_and_a_dripping_page_end_with_their_reasons(drip_site: str, tmp_path: Path) -> None:
    """A raw non-ASCII link is percent-encoded as a browser does and crawled; a page that drips one byte at a
    time is cut at the request's deadline, not after it drips whole; dir/ and dir/index.html are one page, a
    page whose canonical URL is another page is kept once; every page not kept is listed with its reason."""
    Drip.sent.clear()
    result = WebsiteCrawler(drip_site, allow_local=True, delay=0, timeout=2.0).crawl(tmp_path)
    urls = set(result.pages)
    assert drip_site + "%C3%A9t%C3%A9.html" in urls
    assert "Summer settings" in (tmp_path / result.pages[drip_site + "%C3%A9t%C3%A9.html"].path).read_text()
    assert "no answer within 2 s (the whole page must arrive" in result.skipped[drip_site + "drip.html"]
    while not Drip.sent:  # the server's thread notices the closed connection at its next write
        time.sleep(0.05)
    assert Drip.sent[0] < 2_000  # cut while it dripped, not read to its end (which takes 100 s)
    assert drip_site + "index.html" not in urls and drip_site in urls  # one page, stored as index.html
    assert "canonical" in result.skipped[drip_site + "copy.html"] and drip_site + "guide.html" in urls
    paths = sorted(p.path for p in result.pages.values())
    assert not any("__" in p for p in paths), paths  # readable names: no hashed duplicates
    assert len(paths) == len(set(paths)) == 3


def test_a_gzipped_sitemap_is_read(site: str, tmp_path: Path) -> None:
    import gzip

    server = SERVERS[site]
    port = server.server_address[1]
    server.answers["/robots.txt"] = [(200, {"Content-Type": "text/plain"}, f"Sitemap: {site}maps.xml.gz\n".encode())]
    xml = f"<urlset><url><loc>http://127.0.0.1:{port}/docs/zipped.md</loc></url></urlset>".encode()
    server.answers["/docs/maps.xml.gz"] = [(200, {"Content-Type": "application/gzip"}, gzip.compress(xml))]
    server.pages["/docs/zipped.md"] = b"# Zipped\n\nListed only in a gzipped sitemap.\n"
    result = WebsiteCrawler(site, allow_local=True, delay=0).crawl(tmp_path)
    assert site + "zipped.md" in result.pages


def test_every_page_not_kept_is_in_the_warning_and_in_status(
    site: str, tmp_path: Path, fast_loader: None, caplog: pytest.LogCaptureFixture
) -> None:
    kb = _website_kb(tmp_path / "project", site, allow=True)
    with caplog.at_level("INFO", logger="mdrag.knowledge.web"):
        (result,) = knowledge.init_docset(kb, "site")
    assert result.ok and result.warning is not None
    assert "disallowed by robots.txt" in result.warning or "redirect loop" in result.warning
    skipped = knowledge.status(kb)[0]["skipped"]
    assert skipped[site + "secret/a.html"] == "disallowed by robots.txt"
    assert "redirect loop" in skipped[site + "loop"]
    assert f"page not kept: {site}secret/a.html: disallowed by robots.txt" in caplog.text
