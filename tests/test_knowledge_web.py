"""The website crawler (mdrag/knowledge/web.py) against a real http.server on 127.0.0.1."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from mdrag.knowledge.web import WebsiteCrawler, url_to_path
from mdrag.knowledge.web_fetch import FetchError, check_address

PAGES = {
    "/docs/": b'<html><body><h1>Home</h1><p>Welcome.</p><a href="guide.html">g</a><a href="/other/x.html">o</a>'
    b'<a href="loop">l</a><a href="out">r</a><a href="cal?d=1">c</a><a href="data.json">j</a>'
    b'<a href="secret/a.html">s</a></body></html>',
    "/docs/guide.html": b"<html><body><h1>Guide</h1><p>Install the widget.</p></body></html>",
    "/docs/secret/a.html": b"<html><body><p>secret</p></body></html>",
    "/docs/only-in-sitemap.md": b"# Sitemap page\n\nFound through the sitemap.\n",
    "/other/x.html": b"<html><body>outside</body></html>",
}


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args: object) -> None:
        pass

    def do_GET(self) -> None:  # noqa: N802
        path, _, query = self.path.partition("?")
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
        if path in PAGES:
            ctype = "text/markdown" if path.endswith(".md") else "text/html; charset=utf-8"
            return self._send(200, PAGES[path], ctype)
        self._send(404, b"not found", "text/plain")

    def _redirect(self, to: str) -> None:
        self.send_response(302)
        self.send_header("Location", to)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _send(self, status: int, body: bytes, ctype: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
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


def test_private_address_refused_without_allow_local() -> None:
    with pytest.raises(FetchError, match="allow_local_web"):
        check_address("127.0.0.1", 80, False)
    check_address("127.0.0.1", 80, True)


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
