"""The WebSocket protocol of `mdrag serve`: messages in and out, no I/O.

Client to server (one JSON object per text frame):

    {"type": "query", "question": "...", "index": "name"?}      -> stream_start, stream_chunk*, stream_end
    {"type": "search", "query": "...", "k": 10?, "threshold": 0.4?, "filters": {...}?, "index": "name"?}
                                                                 -> search_results
    {"type": "status"}                                           -> status

Server to client:

    {"type": "status", "state": "ready" | "loading" | "empty", "index": ..., "files": n, "chunks": n, "message": ...}
    {"type": "stream_start"}
    {"type": "stream_chunk", "chunk": "..."}
    {"type": "stream_end", "sources": ["/abs/path.md", ...]}
    {"type": "search_results", "query": "...", "results": [SearchResult.to_dict(), ...]}
    {"type": "error", "message": "..."}

docs/protocol.md describes every message; `parse` turns a frame into a
request or raises ProtocolError with the message the client will see.
"""

from __future__ import annotations

import ipaddress
import json
import math
from dataclasses import dataclass, field
from typing import Any

from mdrag.errors import ProtocolError

__all__ = [
    "MAX_QUESTION_CHARS",
    "QueryRequest",
    "Request",
    "SearchRequest",
    "StatusRequest",
    "encode",
    "error",
    "is_loopback",
    "parse",
    "search_results",
    "status",
    "stream_chunk",
    "stream_end",
    "stream_start",
]

MAX_QUESTION_CHARS = 4000  # longer questions are refused, not truncated
_LOOPBACK_NAMES = {"localhost", "localhost.", "localhost.localdomain", "ip6-localhost"}


@dataclass(frozen=True)
class QueryRequest:
    question: str
    index: str | None = None


@dataclass(frozen=True)
class SearchRequest:
    query: str
    k: int | None = None
    threshold: float | None = None
    filters: dict[str, Any] = field(default_factory=dict)
    index: str | None = None


@dataclass(frozen=True)
class StatusRequest:
    pass


Request = QueryRequest | SearchRequest | StatusRequest

_TYPES = ("query", "search", "status")


def _text(msg: dict[str, Any], key: str, kind: str) -> str:
    if key not in msg:
        raise ProtocolError(f'"{kind}" message needs a "{key}" field (a non-empty string)')
    value = msg[key]
    if not isinstance(value, str) or not value.strip():
        raise ProtocolError(f'"{key}" must be a non-empty string')
    if len(value) > MAX_QUESTION_CHARS:
        raise ProtocolError(f'"{key}" is too long ({len(value)} characters, at most {MAX_QUESTION_CHARS})')
    return value.strip()


def _index(msg: dict[str, Any]) -> str | None:
    value = msg.get("index")
    if value is not None and (not isinstance(value, str) or not value):
        raise ProtocolError('"index" must be a non-empty string when given')
    return value


def parse(frame: str | bytes) -> Request:
    """One client frame to a request; ProtocolError says what is wrong with it."""
    if isinstance(frame, bytes):
        try:
            frame = frame.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("messages must be UTF-8 JSON text") from None
    try:
        msg = json.loads(frame)
    except ValueError as e:
        raise ProtocolError(f"invalid JSON: {e}") from None
    if not isinstance(msg, dict):
        raise ProtocolError('a message must be a JSON object with a "type" field')
    kind = msg.get("type")
    if not isinstance(kind, str):
        raise ProtocolError(f'a message needs a "type" field: one of {", ".join(_TYPES)}')
    if kind == "query":
        return QueryRequest(_text(msg, "question", kind), _index(msg))
    if kind == "search":
        k = msg.get("k")
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100):
            raise ProtocolError('"k" must be an integer from 1 to 100')
        threshold = msg.get("threshold")
        if threshold is not None and (
            isinstance(threshold, bool)
            or not isinstance(threshold, int | float)
            or not math.isfinite(threshold)
            or not 0 <= threshold <= 1
        ):
            raise ProtocolError('"threshold" must be a number from 0 to 1')
        filters = msg.get("filters") or {}
        if not isinstance(filters, dict):
            raise ProtocolError('"filters" must be an object')
        return SearchRequest(_text(msg, "query", kind), k, threshold, filters, _index(msg))
    if kind == "status":
        return StatusRequest()
    raise ProtocolError(f"unknown message type {kind!r}: use one of {', '.join(_TYPES)}")


def encode(msg: dict[str, Any]) -> str:
    return json.dumps(msg, ensure_ascii=False)


def status(state: str, index: str, files: int, chunks: int, message: str) -> dict[str, Any]:
    return {"type": "status", "state": state, "index": index, "files": files, "chunks": chunks, "message": message}


def stream_start() -> dict[str, Any]:
    return {"type": "stream_start"}


def stream_chunk(text: str) -> dict[str, Any]:
    return {"type": "stream_chunk", "chunk": text}


def stream_end(sources: list[str]) -> dict[str, Any]:
    """The end of an answer, with each source path once, in order of first use."""
    return {"type": "stream_end", "sources": list(dict.fromkeys(sources))}


def search_results(query: str, results: list[dict[str, Any]]) -> dict[str, Any]:
    return {"type": "search_results", "query": query, "results": results}


def error(message: str) -> dict[str, Any]:
    return {"type": "error", "message": message}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
