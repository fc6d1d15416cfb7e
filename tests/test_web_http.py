"""The page's HTTP side of `mdrag serve`: plain HTTP requests on the WebSocket's port, over real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from websockets.asyncio.client import connect

from mdrag.config import load_config
from mdrag.frontends.server import QAServer
from mdrag.frontends.web import STATIC, load_static
from mdrag.index import Index
from tests.conftest import HashEmbedder

PAGE_FILES = {
    "/",
    "/index.html",
    "/app.js",
    "/copy.js",
    "/markdown.js",
    "/saved.js",
    "/viewer.js",
    "/style.css",
    "/favicon.svg",
}


def http(port: int, request: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send one raw HTTP request to 127.0.0.1:port; the status, headers (lower-case names) and body."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(request)
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return int(status_line.split()[1]), headers, body


def get(port: int, path: str, method: str = "GET") -> tuple[int, dict[str, str], bytes]:
    return http(port, f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())


def _serve_and_run(tmp_path: Path, scenario, **settings: object) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "docs").mkdir(exist_ok=True)
    (tmp_path / "docs" / "a.md").write_text("# A\n\nThe installer restarts the service.\n")

    async def main() -> None:
        config = load_config({"index": "w" + os.urandom(4).hex(), "server.port": 0, **settings})
        index = Index(config, embedder=HashEmbedder())
        server = QAServer(config, [tmp_path / "docs"], overrides={"server.port": 0}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 120)
            assert await asyncio.to_thread(server.keeper.wait, None, 120)  # type: ignore[union-attr]  # built whole
            await scenario(server)
        finally:
            await server.stop()

    asyncio.run(main())


def test_the_page_is_served_on_the_websocket_port_with_strict_headers(tmp_path: Path) -> None:
    async def scenario(server: QAServer) -> None:
        port = server.port
        status, headers, body = await asyncio.to_thread(get, port, "/")
        assert status == 200
        assert headers["content-type"] == "text/html; charset=utf-8"
        assert body == (STATIC / "index.html").read_bytes()
        assert headers["x-content-type-options"] == "nosniff"
        csp = headers["content-security-policy"]
        assert "default-src 'none'" in csp and "script-src 'self';" in csp and "unsafe-inline" not in csp
        assert f"connect-src 'self' ws://127.0.0.1:{port};" in csp
        assert "frame-ancestors 'none'" in csp
        for path, kind in (("/app.js", "text/javascript"), ("/style.css", "text/css"), ("/favicon.svg", "image/svg")):
            status, headers, body = await asyncio.to_thread(get, port, path)
            assert status == 200 and headers["content-type"].startswith(kind) and body
        # HEAD: the same headers, no body; other methods are refused
        status, headers, body = await asyncio.to_thread(get, port, "/app.js", "HEAD")
        assert status == 200 and body == b"" and int(headers["content-length"]) == len(load_static()["/app.js"].body)
        status, headers, _ = await asyncio.to_thread(get, port, "/", "DELETE")
        assert status == 405 and headers["allow"] == "GET, HEAD"
        # the WebSocket on the same port is unchanged: greeting, then answers
        async with connect(server.url) as ws:
            hello = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert hello["type"] == "status" and hello["state"] == "ready"
            await ws.send(json.dumps({"type": "search", "query": "installer", "threshold": 0}))
            results = json.loads(await asyncio.wait_for(ws.recv(), 30))
            assert results["results"][0]["path"].endswith("a.md")

    _serve_and_run(tmp_path, scenario)


def test_paths_outside_the_static_folder_are_refused(tmp_path: Path) -> None:
    secret = b"def load_static"  # in mdrag/frontends/web/__init__.py, just above the static folder

    async def scenario(server: QAServer) -> None:
        port = server.port
        hostile = [
            "/../__init__.py",
            "/static/../__init__.py",
            "/%2e%2e/__init__.py",
            "/%2E%2E%2F__init__.py",
            "/..%2f__init__.py",
            "/app.js/../../__init__.py",
            "//etc/passwd",
            "/etc/passwd",
            f"/{STATIC.parent / '__init__.py'}",
            f"/{STATIC / 'app.js'}",
            "/__init__.py",
            "/static/app.js",
            "/app.js%00.html",
            "/.",
            "/..",
        ]
        for path in hostile:
            status, _, body = await asyncio.to_thread(get, port, path)
            assert status == 404, path
            assert secret not in body and b"import" not in body, path
        status, _, body = await asyncio.to_thread(get, port, "/app.js?v=1#x")  # a query string is no other file
        assert status == 200 and body == (STATIC / "app.js").read_bytes()

    _serve_and_run(tmp_path, scenario)


def test_only_regular_files_directly_in_the_folder_are_served(tmp_path: Path) -> None:
    folder = tmp_path / "static"
    (folder / "sub").mkdir(parents=True)
    (folder / "index.html").write_text("<!doctype html><title>t</title>")
    (folder / "sub" / "inner.js").write_text("inner")
    (tmp_path / "secret.txt").write_text("secret")
    (folder / "link.txt").symlink_to(tmp_path / "secret.txt")
    (folder / "notes.py").write_text("print('x')")
    files = load_static(folder)
    assert set(files) == {"/", "/index.html"}
    assert files["/"].body == b"<!doctype html><title>t</title>"


def test_the_whole_page_is_small_and_every_file_it_names_is_served() -> None:
    files = load_static()
    assert set(files) == PAGE_FILES
    assert sum(len(f.body) for k, f in files.items() if k != "/") < 100_000
    html = files["/"].body.decode()
    for name in ("app.js", "style.css", "favicon.svg"):
        assert f'"{name}"' in html
    assert "<script>" not in html and " style=" not in html and "http" not in html  # nothing inline, no CDN
    assert b'from "./markdown.js"' in files["/app.js"].body and b'from "./viewer.js"' in files["/app.js"].body


# -- opening a source: GET /source (mdrag.frontends.web.source) -------------------------------------------
def source(port: int, query: str, *headers: str, method: str = "GET") -> tuple[int, dict[str, str], Any]:
    """GET /source?QUERY with extra header lines; the status, headers and the JSON body."""
    extra = "".join(h + "\r\n" for h in headers)
    if not any(h.lower().startswith("host:") for h in headers):
        extra = f"Host: 127.0.0.1:{port}\r\n" + extra
    status, head, body = http(port, f"{method} /source?{query} HTTP/1.1\r\n{extra}\r\n".encode())
    return status, head, json.loads(body)


GUIDE = "# Guide\n\nIntro.\n\n## Install\n\n<script>alert(1)</script> Run the installer.\nThen restart.\n"


def test_a_source_opens_at_its_lines_as_json_no_other_origin_can_read(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(GUIDE)

    async def scenario(server: QAServer) -> None:
        port = server.port
        for ref in ("guide.md", str(tmp_path / "docs" / "guide.md")):
            status, headers, body = await asyncio.to_thread(
                source, port, f"ref={quote(ref)}&lines=7-8", "Sec-Fetch-Site: same-origin"
            )
            assert status == 200, body
            assert body["document"]["text"] == GUIDE and body["document"]["rel_path"] == "guide.md"
            assert body["highlight"] == {"line_start": 7, "line_end": 8} and body["whole"] is True
            assert headers["content-type"] == "application/json; charset=utf-8"
            assert headers["x-content-type-options"] == "nosniff" and headers["cache-control"] == "no-store"
            assert "default-src 'none'" in headers["content-security-policy"]
            assert headers["cross-origin-resource-policy"] == "same-origin"
            assert not any(h.startswith("access-control-") for h in headers)
        # a typed address (Sec-Fetch-Site: none) and a client without browser headers read it too
        status, _, body = await asyncio.to_thread(source, port, "ref=guide.md", "Sec-Fetch-Site: none")
        assert status == 200 and body["highlight"] is None
        # read-only: another method is refused
        status, headers, body = await asyncio.to_thread(source, port, "ref=guide.md", method="POST")
        assert status == 405 and headers["allow"] == "GET" and "read-only" in body["error"]
        status, _, body = await asyncio.to_thread(source, port, "ref=guide.md&lines=x")
        assert status == 400 and "lines=12-30" in body["error"]
        status, _, body = await asyncio.to_thread(source, port, "lines=1")
        assert status == 400 and "ref=PATH" in body["error"]

    _serve_and_run(tmp_path, scenario)


def test_a_source_outside_the_index_or_for_another_site_is_refused(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / ".env").write_text("API_KEY=sk-secret-in-the-folder\n")
    (tmp_path / "docs" / "notes.adoc").write_text("sk-secret-unsupported\n")
    (tmp_path / "secret.md").write_text("# Secret\n\nsk-secret-next-to-the-folder\n")

    async def scenario(server: QAServer) -> None:
        port = server.port
        refused = {
            "../secret.md": "leaves the index's folders",
            "docs/../../secret.md": "leaves the index's folders",
            str(tmp_path / "secret.md"): "leaves the index's folders",
            "/etc/passwd": "leaves the index's folders",
            ".env": "is not a file of the index",
            str(tmp_path / "docs" / ".env"): "is not a file of the index",
            "notes.adoc": "is not a file of the index",
        }
        for ref, why in refused.items():
            status, _, body = await asyncio.to_thread(source, port, f"ref={quote(ref)}&lines=1-3")
            assert status == 404 and why in body["error"], (ref, body)
            assert "sk-secret" not in json.dumps(body)
        # a page of another site (its fetch, or a DNS-rebinding page whose Host is not this server's)
        for headers in (
            ("Origin: http://evil.example",),
            ("Sec-Fetch-Site: cross-site",),
            ("Sec-Fetch-Site: same-site", "Origin: http://localhost:1234"),
            (f"Host: evil.example:{port}",),
            # one origin only: a list that starts with a loopback one is no page of this machine
            ("Origin: http://127.0.0.1:1 https://evil.example",),
            ("Origin: http://127.0.0.1:1,https://evil.example",),
            ("Origin: http://127.0.0.1:1/x",),
        ):
            status, _, body = await asyncio.to_thread(source, port, "ref=a.md", *headers)
            assert status == 403 and "not allowed" in body["error"] and "installer" not in json.dumps(body), headers
        status, _, body = await asyncio.to_thread(source, port, "ref=a.md", f"Host: localhost:{port}")
        assert status == 200 and "installer" in body["document"]["text"]

    _serve_and_run(tmp_path, scenario)


def test_a_header_sent_twice_is_refused_at_every_door(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    handshake = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    handshake += "Sec-WebSocket-Version: 13\r\n"

    async def scenario(server: QAServer) -> None:
        port = server.port
        host, local, evil = f"Host: 127.0.0.1:{port}\r\n", f"http://127.0.0.1:{port}", "https://evil.example"
        caplog.clear()
        for first, second in ((local, evil), (evil, local)):
            origins = f"Origin: {first}\r\nOrigin: {second}\r\n"
            for target, extra in (("/source?ref=a.md", ""), ("/", handshake), ("/", "")):
                request = f"GET {target} HTTP/1.1\r\n{host}{origins}{extra}\r\n"
                status, _, body = await asyncio.to_thread(http, port, request.encode())
                assert status == 403 and b"several Origin headers" in body, (target, extra, body)
                assert b"installer" not in body and b"Traceback" not in body
        refusals = [r for r in caplog.records if "several origin headers" in r.getMessage()]
        assert len(refusals) == 6 and all(r.levelname == "WARNING" for r in refusals)
        assert not [r for r in caplog.records if r.levelname == "ERROR"], caplog.text
        two_hosts = f"GET /source?ref=a.md HTTP/1.1\r\n{host}Host: evil.example\r\n\r\n"
        status, _, body = await asyncio.to_thread(http, port, two_hosts.encode())
        assert status == 400 and b"several Host headers" in body, body
        two_tokens = f"GET /source?ref=a.md HTTP/1.1\r\n{host}Authorization: Bearer a\r\nAuthorization: b\r\n\r\n"
        status, _, body = await asyncio.to_thread(http, port, two_tokens.encode())
        assert status == 400 and b"several Authorization headers" in body, body
        # one Origin of this machine opens the source as before
        status, _, body = await asyncio.to_thread(source, port, "ref=a.md", f"Origin: {local}")
        assert status == 200 and "installer" in body["document"]["text"]

    _serve_and_run(tmp_path, scenario)


def test_a_source_needs_the_token_when_the_server_has_one(tmp_path: Path) -> None:
    async def scenario(server: QAServer) -> None:
        port = server.port
        for headers, said in (((), "none was sent"), (("Authorization: Bearer wrong",), "The token sent is wrong")):
            status, head, body = await asyncio.to_thread(source, port, "ref=a.md", *headers)
            assert status == 401 and said in body["error"] and head["www-authenticate"].startswith("Bearer")
        status, _, body = await asyncio.to_thread(source, port, "ref=a.md", "Authorization: Bearer s3cret")
        assert status == 200 and "installer" in body["document"]["text"]
        status, _, body = await asyncio.to_thread(source, port, "ref=a.md&token=s3cret", "Host: 192.0.2.1")
        assert status == 200  # with the token, any Host (a server bound to the network)
        status, _, _ = await asyncio.to_thread(
            source, port, "ref=a.md", "Authorization: Bearer s3cret", "Origin: http://evil.example"
        )
        assert status == 403

    _serve_and_run(tmp_path, scenario, **{"server.token": "s3cret"})


def test_a_source_too_large_to_show_whole_opens_around_its_lines(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    lines = [f"Line {n} of the long guide says something about the installer." for n in range(1, 3001)]
    (tmp_path / "docs" / "long.md").write_text("# Long\n\n" + "\n".join(lines) + "\n")

    async def scenario(server: QAServer) -> None:
        port = server.port
        status, _, body = await asyncio.to_thread(source, port, "ref=long.md&lines=1500-1501")
        assert status == 200 and body["whole"] is False
        doc = body["document"]
        assert (doc["line_start"], doc["line_end"], doc["lines"]) == (1300, 1701, 3002)
        assert doc["text"].split("\n")[1500 - 1300] == "Line 1498 of the long guide says something about the installer."
        assert body["highlight"] == {"line_start": 1500, "line_end": 1501}
        status, _, body = await asyncio.to_thread(source, port, "ref=long.md")  # nothing cited: get's advice
        assert status == 404 and "ask for part of it" in body["error"] and "long.md:1-" in body["error"]

    _serve_and_run(tmp_path, scenario)


def test_a_big_source_opens_at_its_lines_and_the_200_around_them_without_a_parse(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A 1 MB Markdown file: its lines are the file's lines, read without parsing it, in time for
    the handshake's deadline whatever its size."""
    import mdrag.parsers.markdown as markdown

    (tmp_path / "docs").mkdir()
    line = "The same line about the installer, again and again."
    (tmp_path / "docs" / "biglines.md").write_text("# Big\n\n" + (line + "\n") * 20_000)
    parsed: list[str] = []

    async def scenario(server: QAServer) -> None:
        parse = markdown.parse
        monkeypatch.setattr(markdown, "parse", lambda data, path: parsed.append(path) or parse(data, path))
        for lines, (first, last) in (("5-6", (1, 206)), ("10000-10001", (9800, 10201)), ("20002", (19802, 20002))):
            status, _, body = await asyncio.to_thread(source, server.port, f"ref=biglines.md&lines={lines}")
            assert status == 200 and body["whole"] is False, body
            doc = body["document"]
            assert (doc["line_start"], doc["line_end"], doc["lines"]) == (first, last, 20_002)
            cited = [int(n) for n in lines.split("-")]
            assert doc["text"].split("\n")[cited[0] - first] == line and doc["source_lines"] is True
            assert body["highlight"] == {"line_start": cited[0], "line_end": cited[-1]}
        assert parsed == []

    _serve_and_run(tmp_path, scenario)
