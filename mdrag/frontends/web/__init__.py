"""The browser page of `mdrag serve`: static files answered over plain HTTP on the WebSocket's port.

The server's ``process_request`` hook hands every request that is not a
WebSocket handshake to :func:`respond`. Only the regular files directly in
``static/`` are served, read once at start into a table keyed by URL path: a
request can name nothing else (no ``..``, no encoded ``%2e%2e``, no absolute
path, no symlink reaches the file system). Every answer carries a strict
Content-Security-Policy (scripts, styles and images from this origin only, no
inline script, WebSocket connections to this host and port only) and
``X-Content-Type-Options: nosniff``.
"""

from __future__ import annotations

import email.utils
import re
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from urllib.parse import urlsplit

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

__all__ = ["STATIC", "StaticFile", "base_headers", "is_handshake", "load_static", "respond"]

STATIC = Path(__file__).with_name("static")
_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".svg": "image/svg+xml",
    ".png": "image/png",
    ".txt": "text/plain; charset=utf-8",
}
_HOST = re.compile(r"^(?:[A-Za-z0-9.-]+|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$")  # a Host header safe to echo


@dataclass(frozen=True)
class StaticFile:
    body: bytes
    content_type: str


def load_static(folder: Path = STATIC) -> dict[str, StaticFile]:
    """URL path (``"/app.js"``) to file, for the regular files directly in ``folder`` of a known type.

    Symlinks and subfolders are left out; ``"/"`` is ``index.html``.
    """
    files = {
        "/" + p.name: StaticFile(p.read_bytes(), _TYPES[p.suffix])
        for p in sorted(folder.iterdir())
        if p.suffix in _TYPES and not p.is_symlink() and p.is_file()
    }
    if "/index.html" in files:
        files["/"] = files["/index.html"]
    return files


def is_handshake(request: Request) -> bool:
    """Whether ``request`` asks for a WebSocket (anything else is a request for the page)."""
    return "websocket" in request.headers.get("Upgrade", "").lower()


def _csp(host: str) -> str:
    # 'self' covers ws: of the same host in CSP 3; the explicit ws:// source is for browsers without it.
    ws = f" ws://{host}" if _HOST.match(host) else ""
    return (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        f"connect-src 'self'{ws}; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    )


def base_headers(request: Request, cache: str = "no-cache") -> Headers:
    """The headers of every plain HTTP answer: the page's Content-Security-Policy, ``nosniff``, no referrer."""
    return Headers(
        [
            ("Date", email.utils.formatdate(usegmt=True)),
            ("Connection", "close"),
            ("Content-Security-Policy", _csp(request.headers.get("Host", ""))),
            ("X-Content-Type-Options", "nosniff"),
            ("Referrer-Policy", "no-referrer"),
            ("Cache-Control", cache),
        ]
    )


def respond(files: dict[str, StaticFile], request: Request) -> Response:
    """The HTTP answer to a GET or HEAD of one of ``files``; 404 for any other path, 405 for other methods."""
    headers = base_headers(request)
    method = request.method
    page = files.get(urlsplit(request.path).path)
    if method not in ("GET", "HEAD"):
        status, page = HTTPStatus.METHOD_NOT_ALLOWED, None
        headers["Allow"] = "GET, HEAD"
    elif page is None:
        status = HTTPStatus.NOT_FOUND
    else:
        status = HTTPStatus.OK
    if page is None:
        page = StaticFile(f"{status.value} {status.phrase}\n".encode(), _TYPES[".txt"])
    headers["Content-Type"] = page.content_type
    headers["Content-Length"] = str(len(page.body))
    return Response(status.value, status.phrase, headers, b"" if method == "HEAD" else page.body)
