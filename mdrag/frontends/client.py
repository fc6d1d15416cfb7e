"""The client side of `mdrag serve`: the WebSocket client that `mdrag ask` uses.

Synchronous on purpose (``websockets.sync.client``): the CLI asks one question
at a time and needs no event loop. :class:`Client` holds one connection for
many questions; the `mdrag ask` command itself lives in mdrag.frontends.cli. Each request carries
an ``id`` and only the replies that repeat it are read as its answer. Every text that came from
the server goes through :func:`sanitize` before it is returned.

The messages are described in docs/protocol.md and built in mdrag.frontends.protocol.
"""

from __future__ import annotations

import json
import logging
import socket
import time
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, NoReturn

from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import ClientConnection
from websockets.sync.client import connect as ws_connect
from websockets.uri import parse_uri

from mdrag.answering.followup import Turn, bounded
from mdrag.errors import MdragError
from mdrag.frontends.protocol import MAX_QUESTION_CHARS, encode, is_loopback
from mdrag.frontends.terminal import sanitize
from mdrag.redact import redact_url

__all__ = ["DEFAULT_SERVER", "Client", "ServerUnavailableError", "sanitize"]

log = logging.getLogger("mdrag.frontends.client")

DEFAULT_SERVER = "ws://localhost:8765"

_START_HINT = "Start it with `mdrag serve DIR`."
_MAX_REPLY_BYTES = 16 * 2**20  # search results with long chunks can exceed websockets' 1 MiB default
_NOT_MDRAG = f"is it an mdrag server? {_START_HINT}"


class ServerUnavailableError(MdragError, ConnectionError):
    """The server cannot be reached, refused the connection, stopped answering or dropped it."""


class AnswerCutShortError(MdragError):
    """An answer that ended with an error after it began; ``sources``: the passages it was made from."""

    def __init__(self, message: str, sources: list[str]) -> None:
        super().__init__(message)
        self.sources = sources


def _one_line(text: str) -> str:
    """Sanitized, on one line: for error messages and paths."""
    return " ".join(sanitize(text).split())


def _closed_reason(e: ConnectionClosed) -> str:
    if e.rcvd is None:
        return "the connection dropped"
    reason = f": {_one_line(e.rcvd.reason)}" if e.rcvd.reason else ""
    return f"the server closed it with code {e.rcvd.code}{reason}"


def _websocket_url(url: str) -> str:
    """``url`` with http:// as ws:// and https:// as wss://: the address `mdrag serve` prints for a browser is
    its WebSocket's too (the page and the WebSocket share one port)."""
    scheme, sep, rest = url.partition("://")
    websocket = {"http": "ws", "https": "wss"}.get(scheme.lower()) if sep else None
    return f"{websocket}://{rest}" if websocket else url


def _check_question(question: str) -> str:
    if not isinstance(question, str) or not question.strip():
        raise MdragError("the question is empty")
    question = question.strip()
    if len(question) > MAX_QUESTION_CHARS:
        raise MdragError(f"the question is too long ({len(question)} characters, at most {MAX_QUESTION_CHARS})")
    return question


class Client:
    """One connection to `mdrag serve` for many questions; use it as a context manager.

    ``timeout`` is how long to wait for each message of a reply, and, while the
    server is still loading its index, how long to keep resending a question
    once its progress (files indexed) stops moving: a first build of many files
    is waited for as long as it moves. ``progress`` gets each new line of that
    progress (``26 of 119 files indexed``). ``open_timeout`` bounds the TCP and
    WebSocket handshake and the wait for the status the server sends on connect.
    """

    retry_delay = 1.0  # seconds between two tries while the server loads its index

    def __init__(
        self,
        url: str = DEFAULT_SERVER,
        token: str | None = None,
        timeout: float = 30.0,
        open_timeout: float = 5.0,
        progress: Callable[[str], None] | None = None,
    ) -> None:
        url = _websocket_url(url)
        try:
            uri = parse_uri(url)
        except InvalidURI:
            raise ValueError(
                f"invalid server address {redact_url(url)!r}: use ws://HOST:PORT or wss://HOST:PORT (or the "
                f"http:// address `mdrag serve` prints for a browser), e.g. {DEFAULT_SERVER}"
            ) from None
        self.url = url  # as given; messages show redact_url(url)
        self.token = token  # sent as "Authorization: Bearer <token>"
        self.timeout = timeout  # the most seconds to wait for one message of a reply
        self.open_timeout = open_timeout  # the most seconds for the handshake and the first status
        self.progress = progress  # told each new line of the server's progress while it loads its index
        self.server_status: dict[str, Any] = {}  # the status the server sent on connect ({} if none came)
        self._loopback = is_loopback(uri.host)  # no HTTP(S)_PROXY for a server on this machine
        self._ws: ClientConnection | None = None  # the open connection, None before connect() and after close()
        self._requests = 0  # requests sent: the next one's "id", which every reply to it repeats

    # -- connection ---------------------------------------------------------------------------------

    def __enter__(self) -> Client:
        self.connect()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def connect(self) -> dict[str, Any]:
        """Open the connection and return the status the server sends first ({} if none came in time).

        Already connected: returns that status again. ServerUnavailableError says
        why the connection could not be made.
        """
        if self._ws is not None:
            return self.server_status
        shown = redact_url(self.url)
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        try:
            self._ws = ws_connect(
                self.url,
                additional_headers=headers,
                open_timeout=self.open_timeout,
                max_size=_MAX_REPLY_BYTES,
                close_timeout=2,
                # No keepalive pings: the reply timeout gives up on a silent server. A ping unanswered for 20 s
                # dropped whole answers of a server that was slow to answer it (seen under load, 2 cores).
                ping_interval=None,
                proxy=None if self._loopback else True,
            )
        except InvalidStatus as e:
            raise ServerUnavailableError(self._refused(e)) from None
        except InvalidURI as e:
            raise ServerUnavailableError(f"invalid server address {shown!r}: {_one_line(str(e))}") from None
        except InvalidHandshake as e:
            raise ServerUnavailableError(
                f"the server at {shown} did not accept a WebSocket connection ({_one_line(str(e))}); {_NOT_MDRAG}"
            ) from None
        except ConnectionRefusedError:
            raise ServerUnavailableError(self._unreachable("connection refused")) from None
        except socket.gaierror as e:
            raise ServerUnavailableError(self._unreachable(f"unknown host: {e.strerror or e}")) from None
        except TimeoutError:
            raise ServerUnavailableError(self._unreachable(f"no answer in {self.open_timeout:g} s")) from None
        except (OSError, WebSocketException) as e:
            raise ServerUnavailableError(self._unreachable(_one_line(str(e)) or type(e).__name__)) from None

        try:
            first = self._receive(self.open_timeout)
        except TimeoutError:
            log.debug("no status from %s on connect", shown)
            return self.server_status
        except ConnectionClosed as e:
            self._ws = None
            raise ServerUnavailableError(
                f"the mdrag server at {shown} closed the connection right away ({_closed_reason(e)})"
            ) from None
        if first.get("type") == "error":
            self.close()
            message = _one_line(str(first.get("message", "")))
            raise ServerUnavailableError(f"the mdrag server at {shown} refused the connection: {message}")
        if first.get("type") == "status":
            self.server_status = first
        return self.server_status

    def close(self) -> None:
        """Close the connection (the server then cancels whatever it was still answering)."""
        ws, self._ws = self._ws, None
        if ws is not None:
            ws.close()

    def _unreachable(self, why: str) -> str:
        return f"cannot reach the mdrag server at {redact_url(self.url)} ({why}). {_START_HINT}"

    def _refused(self, e: InvalidStatus) -> str:
        status = e.response.status_code
        why = f"HTTP {status} {_one_line(e.response.reason_phrase)}".rstrip()
        body = _one_line(e.response.body.decode("utf-8", "replace"))[:200].rstrip(".") if e.response.body else ""
        if body:
            why += f": {body}"
        if status < 400:
            return f"the server at {redact_url(self.url)} did not accept a WebSocket connection ({why}); {_NOT_MDRAG}"
        hint = ""
        if status == 401 and self.token:
            hint = (
                " The token given (--token, MDRAG_TOKEN or the setting server.token) is not the server's: "
                "check it against the server's server.token."
            )
        elif status in (401, 403):
            hint = (
                " Give the server's token: --token TOKEN, the environment variable MDRAG_TOKEN, or the setting "
                "server.token in your config (it is sent as `Authorization: Bearer TOKEN`)."
            )
        return f"the mdrag server at {redact_url(self.url)} refused the connection ({why}).{hint}"

    # -- messages -----------------------------------------------------------------------------------

    def _connection(self) -> ClientConnection:
        if self._ws is None:
            self.connect()
        assert self._ws is not None
        return self._ws

    def _send(self, message: dict[str, Any]) -> None:
        try:
            self._connection().send(encode(message))
        except ConnectionClosed as e:
            self._lost(e)

    def _receive(self, timeout: float) -> dict[str, Any]:
        """The next JSON object from the server; frames that are not one are skipped."""
        ws = self._connection()
        while True:
            frame = ws.recv(timeout=timeout)  # TimeoutError, ConnectionClosed
            try:
                message = json.loads(frame)
            except ValueError:
                log.debug("skipped a frame that is not JSON: %.80r", frame)
                continue
            if isinstance(message, dict):
                return message
            log.debug("skipped a frame that is not a JSON object: %.80r", frame)

    def _numbered(self, message: dict[str, Any]) -> dict[str, Any]:
        """``message`` with a new request id (docs/protocol.md): replies to it repeat it."""
        self._requests += 1
        return {**message, "id": self._requests}

    def _reply(self, request: dict[str, Any]) -> dict[str, Any]:
        """The next message of the reply to ``request``; a silent server is given up on and the connection closed.

        A message that carries another request's id (a late reply to an earlier one) is skipped; one with no
        id is taken as this reply's (a server that does not repeat ids answers in order).
        """
        try:
            while True:
                message = self._receive(self.timeout)
                if message.get("id") in (None, request["id"]):
                    return message
                log.debug("skipped a %r message for request %r", message.get("type"), message.get("id"))
        except ConnectionClosed as e:
            self._lost(e)
        except TimeoutError:
            self.close()  # a late reply would be read as the answer to the next question
            raise ServerUnavailableError(
                f"no reply from the mdrag server at {redact_url(self.url)} in {self.timeout:g} s"
            ) from None

    def _lost(self, e: ConnectionClosed) -> NoReturn:
        self._ws = None
        raise ServerUnavailableError(
            f"lost the connection to the mdrag server at {redact_url(self.url)} ({_closed_reason(e)})"
        ) from None

    def ask(
        self,
        question: str,
        on_chunk: Callable[[str], None],
        index: str | None = None,
        history: Sequence[Turn] = (),
    ) -> list[str]:
        """Ask one question: on_chunk gets each piece of the answer as it comes; returns the source paths
        (the answer's ``[n]`` is the n-th). ``history``: the earlier turns of the conversation, oldest
        first, for a follow-up question; its newest turns within the protocol's bounds are sent.

        Text is sanitized. AnswerCutShortError: the answer began and then ended with an
        error (the LLM failed mid-answer); it carries the sources. MdragError: the server answered with an error, or is
        still loading and its progress has not moved in ``timeout`` seconds. ServerUnavailableError: the
        connection is gone.
        """
        message: dict[str, Any] = {"type": "query", "question": _check_question(question)}
        if index is not None:
            message["index"] = index
        turns = bounded(history)
        if turns:
            message["history"] = [{"question": t.question, "answer": t.answer} for t in turns]
        message = self._numbered(message)
        loading = _Loading(self)
        self._send(message)
        started = False
        while True:
            reply = self._reply(message)
            kind = reply.get("type")
            if kind == "stream_start":
                started = True
            elif kind == "stream_chunk":
                started = True
                chunk = reply.get("chunk")
                if isinstance(chunk, str) and chunk:
                    on_chunk(sanitize(chunk))
            elif kind == "stream_end":
                partial = reply.get("partial")  # made from part of the files: the server's line, on stderr
                if isinstance(partial, dict) and isinstance(partial.get("message"), str):
                    log.warning("%s", _one_line(partial["message"]))
                return _sources(reply)
            elif kind == "answer":  # a server that does not stream: the whole answer at once
                answer = reply.get("answer")
                if isinstance(answer, str) and answer:
                    on_chunk(sanitize(answer))
                return _sources(reply)
            elif kind == "error":
                said = _one_line(str(reply.get("message") or "the server reported an error"))
                if started and isinstance(reply.get("sources"), list):
                    raise AnswerCutShortError(said, _sources(reply))
                raise MdragError(said)
            elif kind == "status" and not started and reply.get("state") == "loading":
                loading(reply)
                self._send(message)
            elif kind == "status" and not started and reply.get("state") == "empty":
                raise MdragError(
                    _one_line(str(reply.get("message") or "the server has no documents indexed"))
                    + "; start it with folders to index: `mdrag serve DIR`"
                )
            else:
                log.debug("ignored a %r message while waiting for an answer", kind)

    def request(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request (search, status) and return the reply; an error reply raises MdragError.

        A search made while the server is loading is resent, like a question.
        """
        kind = message.get("type")
        if kind == "query":
            raise ValueError("use Client.ask() for questions: the answer comes in several messages")
        message = self._numbered(message)
        loading = _Loading(self)
        self._send(message)
        while True:
            reply = self._reply(message)
            if reply.get("type") == "error":
                raise MdragError(_one_line(str(reply.get("message") or "the server reported an error")))
            if kind != "status" and reply.get("type") == "status" and reply.get("state") == "loading":
                loading(reply)
                self._send(message)
                continue
            return reply


class _Loading:
    """A request resent while the server loads its index: says the progress when it moves, and gives up
    (MdragError, saying how far it got) once it has not moved in the client's ``timeout``."""

    def __init__(self, client: Client) -> None:
        self.client = client  # its timeout, retry_delay and progress
        self.seen: str | None = None  # the last progress line
        self.moved = time.monotonic()  # when it last changed (or the request was first sent)

    def __call__(self, status: dict[str, Any]) -> None:
        """One more "loading" ``status``: wait ``retry_delay`` to resend, or give up."""
        line, now = _progress(status), time.monotonic()
        if line != self.seen:
            self.seen, self.moved = line, now
            if line and self.client.progress is not None:
                self.client.progress(line)
        if now + self.client.retry_delay - self.moved > self.client.timeout:
            how_far = f"{self.seen}, " if self.seen else ""
            raise MdragError(
                f"the server is still loading the index ({how_far}no progress in {self.client.timeout:g} s); "
                "try again shortly"
            )
        time.sleep(self.client.retry_delay)


def _progress(status: dict[str, Any]) -> str | None:
    """How far a loading server's index is, in a few words (``26 of 119 files indexed``), or None."""
    indexing = status.get("indexing")
    if isinstance(indexing, dict):
        done, total = indexing.get("files_done"), indexing.get("files_total")
        if isinstance(done, int) and isinstance(total, int):
            return f"{done} of {total} files indexed"
        if isinstance(done, int):
            return "scanning the folders"
    return None


def _sources(reply: dict[str, Any]) -> list[str]:
    """The sources of an answer, sanitized, each once, in order; a page crawled from a website with its URL
    (``path <url>``, from the reply's ``locations``), a file with the same bytes as others with theirs."""
    sources = reply.get("sources")
    if not isinstance(sources, list):
        return []
    locations = reply.get("locations")
    locs = [loc if isinstance(loc, dict) else {} for loc in locations] if isinstance(locations, list) else []
    shown = []
    for i, s in enumerate(sources):
        if isinstance(s, str) and s:
            url = locs[i].get("url") if i < len(locs) else None
            copies = locs[i].get("copies") if i < len(locs) else None
            copies = [sanitize(c) for c in copies if isinstance(c, str)] if isinstance(copies, list) else []
            also = f" (the same as {', '.join(copies)})" if copies else ""
            shown.append(sanitize(s) + (f" <{sanitize(url)}>" if isinstance(url, str) and url else "") + also)
    return list(dict.fromkeys(shown))
