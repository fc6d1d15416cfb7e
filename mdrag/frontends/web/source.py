"""The page's "open" of a source: ``GET /source?ref=REF&lines=A-B`` (or ``&page=N``) on the port of `mdrag serve`
answers one document of the index as JSON, for the page to show with those lines marked.

The document is read by :meth:`mdrag.index.Index.get` (mdrag.retrieval.documents), which reads only the
files the index holds and refuses any path that leaves its folders: this module adds no path rule of its
own. A document over what one ``get`` returns is answered with the lines around the cited ones (or the
cited page) instead, ``whole`` false; with nothing cited, with ``get``'s refusal, which says how to ask
for less.

Only mdrag's own page, or a client that is no browser, may read: the request must be a GET, not sent by
a page of another site (``Sec-Fetch-Site``, ``Origin``: the WebSocket's origin rule), and carry the token
when ``server.token`` is set (``Authorization: Bearer``, as the page sends it, or ``?token=``). Without a
token the ``Host`` must be loopback or an allowed origin's host: a DNS-rebinding page of another site,
which the browser takes for same-origin, is refused. The answer is ``application/json`` with
``nosniff``, the page's Content-Security-Policy, ``Cross-Origin-Resource-Policy: same-origin`` and no
CORS header, so no other origin can read it; the page shows the text as text, never as HTML.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.http11 import Request, Response

from mdrag.errors import MdragError
from mdrag.frontends.access import TOKEN_REFUSALS, origin_allowed, token_problem
from mdrag.frontends.protocol import is_loopback
from mdrag.frontends.web import base_headers
from mdrag.index import Index
from mdrag.retrieval.documents import Fetched, Part

__all__ = [
    "CONTEXT_LINES",
    "ROUTE",
    "Refused",
    "SourceAsk",
    "answer",
    "asks_for",
    "check",
    "parse",
    "read",
    "respond",
]

log = logging.getLogger(__name__)

ROUTE = "/source"
CONTEXT_LINES = 200  # lines shown above and below the cited ones when the whole document is too large
_PARAMS = ("ref", "lines", "page")  # and "token"
_LINES = re.compile(r"([1-9][0-9]{0,8})(?:-([1-9][0-9]{0,8}))?")
_PAGE = re.compile(r"[1-9][0-9]{0,8}")
_SITES = ("same-origin", "none")  # Sec-Fetch-Site values of the page's own requests and of a typed address


@dataclass(frozen=True)
class SourceAsk:
    """One request to open a source: the document, and the lines or page to mark."""

    ref: str  # what `get` takes: the path relative to an indexed folder, or absolute
    lines: tuple[int, int] | None = None  # first and last cited line
    page: int | None = None  # cited page (PDF)


class Refused(Exception):
    """A request this route does not answer: its HTTP status and the message that says why."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message  # said to the client


def asks_for(request: Request) -> bool:
    """Whether ``request`` is for this route (any method: another than GET is refused with 405)."""
    return urlsplit(request.path).path == ROUTE


def check(request: Request, token: str | None, allowed: Sequence[str]) -> None:
    """Refuse (:class:`Refused`) a request another site's page sent, or one without the token."""
    if request.method != "GET":
        raise Refused(HTTPStatus.METHOD_NOT_ALLOWED, "sources are read-only: use GET")
    headers = request.headers
    site = headers.get("Sec-Fetch-Site")
    origin = headers.get("Origin")
    if (site is not None and site not in _SITES) or (origin is not None and not origin_allowed(origin, allowed)):
        log.warning("refused to open a source for origin %s (%s)", (origin or "?")[:200], site)
        raise Refused(HTTPStatus.FORBIDDEN, "Origin not allowed: sources open from mdrag's own page only.")
    if token:
        problem = token_problem(headers.get("Authorization"), request.path, token)
        if problem is not None:
            raise Refused(HTTPStatus.UNAUTHORIZED, TOKEN_REFUSALS[problem])
        return
    try:
        host = urlsplit("//" + headers.get("Host", "")).hostname or ""
    except ValueError:
        host = ""
    if not is_loopback(host) and host not in {urlsplit(o).hostname for o in allowed}:
        log.warning("refused to open a source for Host %s", host[:200])
        raise Refused(
            HTTPStatus.FORBIDDEN,
            "Host not allowed: open the page at this server's loopback address (http://127.0.0.1:PORT/), "
            "or list the address in server.allowed_origins",
        )


def parse(target: str) -> SourceAsk:
    """The request's ``ref`` and ``lines`` or ``page`` (:class:`Refused` with 400 for anything else)."""
    query = parse_qs(urlsplit(target).query, keep_blank_values=True)
    unknown = sorted(set(query) - {*_PARAMS, "token"})
    if unknown:
        raise Refused(HTTPStatus.BAD_REQUEST, f"unknown parameter {unknown[0]!r}: use {', '.join(_PARAMS)}")
    if any(len(v) > 1 for v in query.values()):
        raise Refused(HTTPStatus.BAD_REQUEST, "each parameter may be given once")
    ref = query.get("ref", [""])[0]
    if not ref.strip():
        raise Refused(HTTPStatus.BAD_REQUEST, "name the document: /source?ref=PATH (a search result's ref or path)")
    lines, page = query.get("lines", [None])[0], query.get("page", [None])[0]
    if lines is not None and page is not None:
        raise Refused(HTTPStatus.BAD_REQUEST, "give lines or page, not both")
    if lines is not None:
        m = _LINES.fullmatch(lines)
        if not m or int(m[2] or m[1]) < int(m[1]):
            raise Refused(HTTPStatus.BAD_REQUEST, f"lines={lines[:40]!r}: give FIRST-LAST or LINE, e.g. lines=12-30")
        return SourceAsk(ref, lines=(int(m[1]), int(m[2] or m[1])))
    if page is not None:
        if not _PAGE.fullmatch(page):
            raise Refused(HTTPStatus.BAD_REQUEST, f"page={page[:40]!r}: give a page number, e.g. page=3")
        return SourceAsk(ref, page=int(page))
    return SourceAsk(ref)


def _one(fetched: Fetched, ref: str) -> Part:
    count = len(fetched.parts) + len(fetched.omitted)
    if count != 1:
        raise MdragError(f"{ref!r} names {count} documents: open one file (a glob is for `mdrag get`)")
    return fetched.parts[0]


def _near(index: Index, ask: SourceAsk, stop: threading.Event | None = None) -> Part | None:
    """The cited lines with :data:`CONTEXT_LINES` around them (else the cited lines alone), or the cited page."""
    if ask.lines is not None:
        first, last = ask.lines
        refs = [f"{ask.ref}:{max(1, first - CONTEXT_LINES)}-{last + CONTEXT_LINES}", f"{ask.ref}:{first}-{last}"]
    else:
        refs = [f"{ask.ref}#page={ask.page}"] if ask.page is not None else []
    for ref in refs:
        try:
            return _one(index.get(ref, stop), ref)
        except MdragError:
            if stop is not None and stop.is_set():
                raise
            continue
    return None


def read(index: Index, ask: SourceAsk, stop: threading.Event | None = None) -> dict[str, Any]:
    """The JSON answer: ``document`` (a :class:`~mdrag.retrieval.documents.Part`), ``highlight`` (the cited
    lines of its text, or null) and ``whole`` (false: the part around the cited lines only).

    Raises MdragError with `get`'s refusal (a path outside the index's folders, a file it does not hold,
    a document too large with nothing cited); ``stop``: set when the client has gone, to read no more."""
    try:
        part, whole = _one(index.get(ask.ref, stop), ask.ref), True
    except MdragError:
        if stop is not None and stop.is_set():
            raise
        near = _near(index, ask, stop)
        if near is None:
            raise
        part, whole = near, False
    cited: tuple[int, int] | None = ask.lines
    if ask.page is not None:
        page = part if not whole else _near(index, ask, stop)  # the page's lines in the document's text
        cited = (page.line_start, page.line_end) if page is not None else None
    highlight = None
    if cited is not None and cited[0] <= part.line_end and cited[1] >= part.line_start:
        highlight = {"line_start": max(cited[0], part.line_start), "line_end": min(cited[1], part.line_end)}
    return {"document": part.to_dict(), "highlight": highlight, "whole": whole}


def answer(request: Request, status: HTTPStatus, body: dict[str, Any]) -> Response:
    """``body`` as a JSON answer that no other origin can read and no browser renders."""
    headers = base_headers(request, cache="no-store")
    headers["Content-Type"] = "application/json; charset=utf-8"
    headers["Cross-Origin-Resource-Policy"] = "same-origin"
    if status == HTTPStatus.METHOD_NOT_ALLOWED:
        headers["Allow"] = "GET"
    if status == HTTPStatus.UNAUTHORIZED:
        headers["WWW-Authenticate"] = 'Bearer realm="mdrag"'
    data = json.dumps(body, ensure_ascii=False).encode()
    headers["Content-Length"] = str(len(data))
    return Response(status.value, status.phrase, headers, data)


async def respond(request: Request, index: Index | None, token: str | None, allowed: Sequence[str]) -> Response:
    """The answer to a request for :data:`ROUTE`: the document, or why not (``{"error": message}``)."""
    try:
        check(request, token, allowed)
        ask = parse(request.path)
        if index is None:
            raise Refused(HTTPStatus.SERVICE_UNAVAILABLE, "the index is still loading: open the source again shortly")
        stop = threading.Event()  # set when this request is cancelled: its client has gone, or its deadline passed
        try:
            body = await asyncio.to_thread(read, index, ask, stop)
        finally:
            stop.set()
    except Refused as e:
        return answer(request, e.status, {"error": e.message})
    except MdragError as e:  # get's refusal: says what to ask for instead
        return answer(request, HTTPStatus.NOT_FOUND, {"error": str(e)})
    except Exception:
        log.exception("unexpected error while opening a source")
        return answer(request, HTTPStatus.INTERNAL_SERVER_ERROR, {"error": "internal error; see the server log"})
    return answer(request, HTTPStatus.OK, body)
