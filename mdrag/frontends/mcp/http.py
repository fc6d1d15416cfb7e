"""The MCP server over HTTP (`mdrag mcp --http`): the SDK's streamable HTTP transport at
:data:`~mdrag.knobs.MCP_HTTP_PATH`, served by uvicorn.

The tools are the stdio server's (:func:`~mdrag.frontends.mcp.tools.build_server`), built once:
every client session shares them, and so one index keeper per docset. The requests pass the
WebSocket server's checks first (:mod:`mdrag.frontends.access`): a browser page from an origin
that is not loopback nor in ``server.allowed_origins`` is refused (403: the MCP specification
asks for it, against DNS rebinding), so is a request that sends its Origin, Host or token twice,
a request without ``server.token`` when one is set is refused (401), and an address other than
loopback needs a token. So many POSTs are served at once (:data:`~mdrag.knobs.MCP_HTTP_MAX_REQUESTS`);
another waits its turn, and one that waited too long is refused with 503 and ``Retry-After``, and
logged: none is dropped unanswered. An idle connection is kept open longer than clients keep theirs
(:data:`~mdrag.knobs.MCP_HTTP_KEEP_ALIVE_S`). A POST's body is then checked as a stdio line is
(:func:`~mdrag.frontends.mcp.wire.check_message`): one the SDK should not read, an empty one
included, gets its JSON-RPC error (400) and the server goes on.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import threading
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import anyio.to_thread
import uvicorn
from mcp import types
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from starlette.applications import Starlette
from starlette.datastructures import Headers
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mdrag.config import Config, load_config
from mdrag.frontends.access import (
    TOKEN_REFUSALS,
    cannot_listen,
    check_bind,
    origin_allowed,
    repeated_header,
    repeated_refusal,
    token_problem,
)
from mdrag.frontends.mcp.tools import serving
from mdrag.frontends.mcp.wire import check_message, error_reply, not_utf8_reply, oversized_reply
from mdrag.knobs import (
    MCP_CHECK_INLINE_CHARS,
    MCP_HTTP_KEEP_ALIVE_S,
    MCP_HTTP_MAX_REQUESTS,
    MCP_HTTP_PATH,
    MCP_HTTP_QUEUE_S,
    MCP_HTTP_RETRY_AFTER_S,
    MCP_HTTP_STOP_S,
    MCP_MAX_MESSAGE_BYTES,
)

__all__ = ["MCPHTTPServer"]

log = logging.getLogger(__name__)


class _Gate:
    """At most ``limit`` requests served at once, in the order they came; another waits its turn up to
    ``wait_s`` seconds, then :meth:`enter` says no."""

    def __init__(self, limit: int, wait_s: float) -> None:
        self.limit = limit  # requests served at once
        self.wait_s = wait_s  # how long a request waits for its turn
        self._slots = anyio.Semaphore(limit)  # fair: the longest waiting gets the next free slot

    async def enter(self) -> bool:
        """Take a slot (then :meth:`leave` when done): False when none came free within ``wait_s``."""
        with anyio.move_on_after(self.wait_s):
            await self._slots.acquire()
            return True
        return False

    def leave(self) -> None:
        self._slots.release()

    def waiting(self) -> int:
        """Requests waiting for their turn now."""
        return self._slots.statistics().tasks_waiting


def _busy(gate: _Gate) -> Response:
    """The refusal of a request that waited its turn too long (logged): 503, Retry-After, a JSON-RPC error."""
    log.warning(
        "busy: refused a request that waited %g s for its turn (%d requests served at once, %d more waiting)",
        gate.wait_s,
        gate.limit,
        gate.waiting(),
    )
    said = f"busy, try again in {MCP_HTTP_RETRY_AFTER_S} s: the server is answering as many requests as it can"
    reply = error_reply(None, types.INTERNAL_ERROR, said)  # id unknown: the body is read once it is its turn
    return Response(
        reply.model_dump_json(by_alias=True, exclude_unset=True),
        503,
        headers={"Retry-After": str(MCP_HTTP_RETRY_AFTER_S)},
        media_type="application/json",
    )


class _Guard:
    """The ASGI app in front of the SDK's: the Origin and token checks, then a POST's turn (``gate``: so many
    at once, their bodies included), then its body's JSON-RPC check."""

    def __init__(self, app: ASGIApp, config: Config, gate: _Gate) -> None:
        self.app = app  # the Starlette app holding the SDK's endpoint
        self.config = config  # server.token and server.allowed_origins, read at each request
        self.gate = gate  # the POSTs served at once

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":  # the lifespan
            await self.app(scope, receive, send)
            return
        repeated = repeated_header(name.decode("latin-1") for name, _ in scope["headers"])
        if repeated is not None:
            status, message = repeated_refusal(repeated)
            log.warning("refused a request with several %s headers", repeated)
            await PlainTextResponse(message + "\n", status)(scope, receive, send)
            return
        headers = Headers(scope=scope)
        origin = headers.get("origin")
        if origin is not None and not origin_allowed(origin, self.config["server.allowed_origins"]):
            log.warning("refused a request from origin %s", origin[:200])
            refused = PlainTextResponse("Origin not allowed: mdrag serves local pages only.\n", 403)
            await refused(scope, receive, send)
            return
        token = self.config["server.token"]
        target = scope["path"] + ("?" + scope["query_string"].decode("latin-1") if scope["query_string"] else "")
        problem = token_problem(headers.get("authorization"), target, token) if token else None
        if problem is not None:
            challenge = "Bearer" if problem == "missing" else 'Bearer error="invalid_token"'  # RFC 6750
            unauthorized = PlainTextResponse(
                TOKEN_REFUSALS[problem] + "\n", 401, headers={"WWW-Authenticate": challenge}
            )
            await unauthorized(scope, receive, send)
            return
        if scope["method"] != "POST":  # a GET stream lasts the session, a DELETE ends it: neither waits
            await self.app(scope, receive, send)
            return
        if not await self.gate.enter():
            await _busy(self.gate)(scope, receive, send)
            return
        try:
            await self._post(scope, receive, send)
        finally:
            self.gate.leave()

    async def _post(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        refusal = await _refusal(body)
        if refusal is not None:
            await refusal(scope, receive, send)
            return
        assert body is not None  # one too long is refused
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive) -> bytes | None:
    """The request's body, or None when it is longer than MCP_MAX_MESSAGE_BYTES (the rest is left unread)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)
        body += message.get("body", b"")
        if len(body) > MCP_MAX_MESSAGE_BYTES:
            return None
        if not message.get("more_body", False):
            return bytes(body)


async def _refusal(body: bytes | None) -> Response | None:
    """The answer to a body the SDK should not read (a JSON-RPC error; 202 for a dropped notification), or None."""
    if body is None:
        reply: types.JSONRPCError | None = oversized_reply(MCP_MAX_MESSAGE_BYTES)
        status = 413
    else:
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as e:
            reply = not_utf8_reply(e)
        else:
            if not text.strip():  # no message at all (a stdio transport skips a blank line; a POST must hold one)
                empty = "Parse error: the request has no body: POST one JSON-RPC message"
                return _malformed(error_reply(None, types.PARSE_ERROR, empty))
            if len(text) < MCP_CHECK_INLINE_CHARS:
                forward, reply = check_message(text)
            else:  # a long one could hold up the other requests for a while
                forward, reply = await anyio.to_thread.run_sync(check_message, text)
            if forward:
                return None
            if reply is None:  # a notification or a response that is dropped: never answered
                return Response(status_code=202)
        status = 400
    assert reply is not None
    return _malformed(reply, status)


def _malformed(reply: types.JSONRPCError, status: int = 400) -> Response:
    """The JSON-RPC error ``reply`` to a body the SDK does not read, as an HTTP answer (logged)."""
    log.warning("malformed message from a client: %s", reply.error.message)
    return Response(reply.model_dump_json(by_alias=True, exclude_unset=True), status, media_type="application/json")


def _replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the SDK, which reads the body again: the body read, then what comes next."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on ``host``:``port``, or an MdragError that says what to change."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen()
        except BaseException:
            sock.close()
            raise
    except OSError as e:  # the port is taken, the address is not this machine's, ...
        raise cannot_listen(e, host, port, "mdrag mcp --http", "mcp.port") from None
    return sock


class MCPHTTPServer:
    """The MCP tools over HTTP: listening once made (``url`` known, port 0 resolved), served by :meth:`run`
    until Ctrl+C or SIGTERM, which close the docsets' indexes.

    ``start``, ``indexes``, ``project``: what to serve (as for :func:`~.stdio.run_stdio`);
    ``config``: the settings (``server.host``, ``mcp.port``, ``server.token``,
    ``server.allowed_origins``, and those the docsets' indexes start from; default: the user's);
    ``max_requests``: the POSTs served at once; another waits its turn up to ``queue_s`` seconds, then is
    refused (503, Retry-After, a JSON-RPC error that says "busy, try again").
    """

    def __init__(
        self,
        start: Path | None = None,
        config: Config | None = None,
        indexes: Sequence[str] = (),
        project: Path | None = None,
        max_requests: int = MCP_HTTP_MAX_REQUESTS,
        queue_s: float = MCP_HTTP_QUEUE_S,
    ) -> None:
        config = config or load_config()
        host = config["server.host"]
        check_bind(host, config["server.token"])
        self.config = config  # the settings the server started with
        server = serving(config, indexes, project, start)
        self._sessions = StreamableHTTPSessionManager(  # every session shares `server`, and so its tools
            server,
            security_settings=TransportSecuritySettings(enable_dns_rebinding_protection=False),  # _Guard checks
            max_request_body_size=MCP_MAX_MESSAGE_BYTES,
        )
        self._socket = _listen(host, config["mcp.port"])  # bound here: the port is known before run()
        bound = self._socket.getsockname()
        shown = f"[{bound[0]}]" if ":" in bound[0] else bound[0]
        self.url = f"http://{shown}:{bound[1]}{MCP_HTTP_PATH}"  # what a client connects to (no token in it)
        app = Starlette(
            routes=[Route(MCP_HTTP_PATH, endpoint=StreamableHTTPASGIApp(self._sessions))], lifespan=self._lifespan
        )
        self._uvicorn = uvicorn.Server(
            uvicorn.Config(
                _Guard(app, config, _Gate(max_requests, queue_s)),
                lifespan="on",
                log_config=None,  # mdrag's logging as the command line set it up
                access_log=False,
                server_header=False,
                proxy_headers=False,
                ws="none",
                timeout_graceful_shutdown=MCP_HTTP_STOP_S,
                timeout_keep_alive=MCP_HTTP_KEEP_ALIVE_S,
            )
        )

    @contextlib.asynccontextmanager
    async def _lifespan(self, _: Starlette) -> AsyncIterator[None]:
        async with self._sessions.run():  # starts the tools (and the docsets' index updates), once
            log.info("MCP server listening on %s", self.url)
            yield
        log.info("MCP server stopped; the docsets' indexes are closed")

    def stop(self) -> None:
        """Make :meth:`run` return (from another thread), as Ctrl+C does."""
        self._uvicorn.should_exit = True

    def run(self) -> None:
        """Serve until Ctrl+C or SIGTERM; the docsets' indexes are closed on the way out."""
        main = threading.current_thread() is threading.main_thread()
        # uvicorn stops on SIGTERM, then raises it again: with this handler, as Ctrl+C, caught below
        previous = signal.signal(signal.SIGTERM, signal.default_int_handler) if main else None
        try:
            self._uvicorn.run(sockets=[self._socket])
        except KeyboardInterrupt:
            pass
        finally:
            self._socket.close()
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
