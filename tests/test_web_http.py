"""The page's HTTP side of `mdrag serve`: plain HTTP requests on the WebSocket's port, over real sockets."""

from __future__ import annotations

import asyncio
import json
import os
import socket
from pathlib import Path

from websockets.asyncio.client import connect

from mdrag.config import load_config
from mdrag.frontends.server import QAServer
from mdrag.frontends.web import STATIC, load_static
from mdrag.index import Index
from tests.conftest import HashEmbedder

PAGE_FILES = {"/", "/index.html", "/app.js", "/markdown.js", "/style.css", "/favicon.svg"}


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


def _serve_and_run(tmp_path: Path, scenario) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\nThe installer restarts the service.\n")

    async def main() -> None:
        config = load_config({"index": "w" + os.urandom(4).hex(), "server.port": 0})
        index = Index(config, embedder=HashEmbedder())
        server = QAServer(config, [tmp_path / "docs"], overrides={"server.port": 0}, index=index)
        await server.start()
        try:
            await asyncio.wait_for(server.ready.wait(), 120)
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
    assert b'from "./markdown.js"' in files["/app.js"].body
