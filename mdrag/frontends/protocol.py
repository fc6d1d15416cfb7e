"""The WebSocket protocol of `mdrag serve`: messages in and out, no I/O.

Client to server (one JSON object per text frame; each may carry an ``"id"``, a string or an integer,
that every reply to it repeats):

    {"type": "query", "question": "...", "index": "name"?,
     "history": [{"question": "...", "answer": "..."?}, ...]?}  -> stream_start, stream_chunk*, stream_end
    {"type": "search", "query": "...", "k": 10?, "threshold": 0.4?, "filters": {...}?,
     "mode": "dense" | "bm25" | "hybrid"?, "collapse": "auto" | "none" | "passage" | "section" | "file"?,
     "index": "name"?}
                                                                 -> search_results
    {"type": "status"}                                           -> status

Server to client:

    {"type": "status", "state": "ready" | "loading" | "empty", "index": ..., "files": n, "chunks": n, "message": ...}
    {"type": "stream_start"}
    {"type": "stream_chunk", "chunk": "..."}
    {"type": "stream_end", "sources": ["/abs/path.md", ...], "locations": [{path, ref, line_start, ...}, ...]}
                                                                 [n] in the answer is sources[n-1], at locations[n-1]
    {"type": "search_results", "query": "...", "results": [result_fields(...), ...], "note": "..."?}
                                                                 note: why there are none
    {"type": "error", "message": "...", "sources": [...]?, "locations": [...]?}
                                                                 after stream_start: the sources found

docs/protocol.md describes every message; `parse` turns a frame into a
request or raises ProtocolError with the message the client will see. Each
field's JSON type and range is checked, and fields not listed are refused.
"""

from __future__ import annotations

import ipaddress
import json
import unicodedata
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StringConstraints, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from mdrag.errors import ProtocolError
from mdrag.frontends.received import describe
from mdrag.knobs import MAX_HISTORY_ANSWER_CHARS, MAX_HISTORY_CHARS, MAX_HISTORY_TURNS, MAX_QUESTION_CHARS
from mdrag.pageurls import page_url

if TYPE_CHECKING:
    from mdrag.answering.generate import Source

__all__ = [
    "MAX_QUESTION_CHARS",
    "MAX_TAGS",
    "Filters",
    "HistoryTurn",
    "QueryRequest",
    "Request",
    "SearchRequest",
    "StatusRequest",
    "encode",
    "error",
    "has_visible",
    "is_loopback",
    "parse",
    "reply",
    "request_id",
    "search_results",
    "source_location",
    "status",
    "stream_chunk",
    "stream_end",
    "stream_start",
]

MAX_TAGS = 100  # tags in one filter
_LOOPBACK_NAMES = {"localhost", "localhost.", "localhost.localdomain", "ip6-localhost"}

_BLANK = "blank_text"  # the pydantic error type of a text with no visible character


def has_visible(text: str) -> bool:
    """Whether ``text`` has a character a reader sees: not only white space and invisible format characters
    (Unicode category Cf: a zero-width space, a soft hyphen, a right-to-left override, a byte-order mark).
    A question or query without one is empty (the search refuses it the same way)."""
    return any(not ch.isspace() and unicodedata.category(ch) != "Cf" for ch in text)


def _visible(text: str) -> str:
    if not has_visible(text):
        raise PydanticCustomError(_BLANK, "no visible character")
    return text


_Text = Annotated[
    str,
    StringConstraints(strip_whitespace=True, min_length=1, max_length=MAX_QUESTION_CHARS),
    AfterValidator(_visible),
]
_Value = Annotated[str, StringConstraints(max_length=MAX_QUESTION_CHARS)]
MAX_ID_CHARS = 200  # a request id that is a string
MAX_ID_INT = 2**53 - 1  # one that is an integer: exact as a JavaScript number
# The id a request may carry, repeated by every reply to it (a client matches replies with it).
_Id = Annotated[str, StringConstraints(max_length=MAX_ID_CHARS)] | Annotated[int, Field(ge=-MAX_ID_INT, le=MAX_ID_INT)]


class _Message(BaseModel):
    # JSON types as sent (no "5" for 5, no true for 1), and no field that the protocol does not define.
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class Filters(_Message):
    """The ``filters`` of a search (mdrag.retrieval.search.FILTER_KEYS); a value that matches nothing is no error."""

    path_prefix: _Value | None = None
    tags: _Value | Annotated[list[_Value], Field(max_length=MAX_TAGS)] | None = None
    root: _Value | None = None


class HistoryTurn(_Message):
    """One earlier turn of the conversation a query follows (mdrag.answering.followup.Turn)."""

    question: _Text
    answer: Annotated[str, StringConstraints(max_length=MAX_HISTORY_ANSWER_CHARS)] | None = None  # its beginning


class QueryRequest(_Message):
    type: Literal["query"] = "query"
    id: _Id | None = None
    question: _Text
    index: _Text | None = None
    history: Annotated[list[HistoryTurn], Field(max_length=MAX_HISTORY_TURNS)] | None = None  # oldest first


class SearchRequest(_Message):
    type: Literal["search"] = "search"
    id: _Id | None = None
    query: _Text
    k: Annotated[int, Field(ge=1, le=100)] | None = None
    threshold: Annotated[float, Field(ge=0, le=1, allow_inf_nan=False)] | None = None
    filters: Filters | None = None
    mode: Literal["dense", "bm25", "hybrid"] | None = None  # the ranking; None: setting search.mode
    collapse: Literal["auto", "none", "passage", "section", "file"] | None = None  # None: setting search.collapse
    index: _Text | None = None


class StatusRequest(_Message):
    type: Literal["status"] = "status"
    id: _Id | None = None


class _IdOnly(BaseModel):
    """The ``id`` of a frame that is not a valid request, so that the error can repeat it."""

    model_config = ConfigDict(extra="ignore", strict=True)
    id: _Id | None = None


Request = QueryRequest | SearchRequest | StatusRequest

_REQUEST: TypeAdapter[Request] = TypeAdapter(Annotated[Request, Field(discriminator="type")])
_ID_ONLY: TypeAdapter[_IdOnly] = TypeAdapter(_IdOnly)
_TYPES = "query, search, status"
_FILTERS = ", ".join(Filters.model_fields)
_FIELDS = {  # as error messages list them: the request's own fields, then "id"
    m.model_fields["type"].default: [f for f in m.model_fields if f not in ("type", "id")] + ["id"]
    for m in (QueryRequest, SearchRequest, StatusRequest)
}
# What each field must be, for error messages: '"k" must be an integer from 1 to 100, not 0'.
_EXPECTED = {
    "question": f"a non-empty string of at most {MAX_QUESTION_CHARS} characters",
    "query": f"a non-empty string of at most {MAX_QUESTION_CHARS} characters",
    "index": "an index name (a non-empty string)",
    "k": "an integer from 1 to 100",
    "threshold": "a number from 0 to 1",
    "filters": f"an object with any of {_FILTERS}",
    "mode": 'one of "dense", "bm25", "hybrid"',
    "collapse": 'one of "auto", "none", "passage", "section", "file"',
    "path_prefix": f"a path (absolute, or relative to the indexed folder) of at most {MAX_QUESTION_CHARS} characters",
    "tags": f"a tag or a list of at most {MAX_TAGS} tags (strings of at most {MAX_QUESTION_CHARS} characters)",
    "root": f"an indexed folder (a path of at most {MAX_QUESTION_CHARS} characters)",
    "history": f"a list of at most {MAX_HISTORY_TURNS} earlier turns, oldest first",
    "id": f"a string of at most {MAX_ID_CHARS} characters or an integer from -{MAX_ID_INT} to {MAX_ID_INT}",
}
_TURN = '{"question": "...", "answer": "..."}'


def parse(frame: str | bytes) -> Request:
    """One client frame to a request; ProtocolError says what is wrong with it and what to send instead.

    The JSON is parsed by pydantic (a Rust parser with a nesting limit), so no
    frame can exhaust the stack; every field is checked for its JSON type and range.
    """
    if isinstance(frame, bytes):
        try:
            frame = frame.decode("utf-8")
        except UnicodeDecodeError:
            raise ProtocolError("messages must be UTF-8 JSON text") from None
    try:
        request = _REQUEST.validate_json(frame)
    except ValidationError as e:
        # The deepest problem is the most precise one: tags [1] is about the item 1, not the list.
        raise ProtocolError(_problem(max(e.errors(include_url=False), key=lambda d: len(d["loc"])))) from None
    if isinstance(request, QueryRequest) and request.history:
        size = sum(len(t.question) + len(t.answer or "") for t in request.history)
        if size > MAX_HISTORY_CHARS:
            raise ProtocolError(
                f'"history" is too long ({size} characters of questions and answers, at most {MAX_HISTORY_CHARS}): '
                "send the newest turns, and only the beginning of each answer"
            )
    return request


def request_id(frame: str | bytes) -> str | int | None:
    """The ``id`` of a frame that :func:`parse` refused, when it has a valid one (None: no id can be told)."""
    try:
        return _ID_ONLY.validate_json(frame).id
    except ValidationError:
        return None


def _problem(err: ErrorDetails) -> str:
    """One pydantic error as a sentence that says what to change."""
    kind, loc, value = err["type"], err["loc"], err["input"]
    if kind == "json_invalid":
        reason = err["msg"].removeprefix("Invalid JSON: ")
        if "surrogate" in reason or "hex escape" in reason:
            reason += " (text must be valid Unicode: a \\uD800-\\uDFFF surrogate escape needs its pair)"
        return f"invalid JSON: {reason}"
    if kind == "union_tag_invalid":
        return f"unknown message type {describe(value.get('type'))}: use one of {_TYPES}"
    if kind == "union_tag_not_found":
        return f'a message needs a "type" field: one of {_TYPES}'
    if not loc:
        return f'a message must be a JSON object with a "type" field, not {describe(value)}'
    message, name = loc[0], loc[-1]
    if len(loc) > 1 and loc[1] == "history":
        return _history_problem(kind, loc, value)
    if kind == "extra_forbidden":
        if len(loc) > 2 and loc[1] == "filters":
            return f"unknown filter {describe(name)}: use {_FILTERS}"
        allowed = ", ".join(_FIELDS[message])
        return f'unknown field {describe(name)} in a "{message}" message: use {allowed}'
    field = next((p for p in reversed(loc) if isinstance(p, str) and p in _EXPECTED), str(name))
    expected = _EXPECTED.get(field, "valid")
    if kind == "missing":
        return f'a "{message}" message needs a "{field}" field: {expected}'
    if kind == "string_too_long" and isinstance(value, str) and field != "id":
        return f'"{field}" is too long ({len(value)} characters, at most {MAX_QUESTION_CHARS})'
    if kind == _BLANK and field in ("question", "query"):
        return f'the search query is empty: "{field}" has no visible character; give some words to search for'
    if isinstance(loc[-1], int):
        return f'"{field}" must be {expected}; item {loc[-1] + 1} is {describe(value)}'
    return f'"{field}" must be {expected}, not {describe(value)}'


def _history_problem(kind: str, loc: tuple[int | str, ...], value: Any) -> str:
    """A problem with the ``history`` of a query, as a sentence: which turn, which field, what to send."""
    if len(loc) == 2:  # the list itself
        if kind == "too_long":
            return f'"history" has {len(value)} turns, at most {MAX_HISTORY_TURNS}: send the newest ones'
        return f'"history" must be {_EXPECTED["history"]}, each {_TURN}, not {describe(value)}'
    turn = f'"history" item {int(loc[2]) + 1}'
    if len(loc) == 3:
        return f"{turn} must be an object {_TURN}, not {describe(value)}"
    field = loc[3]
    if kind == "extra_forbidden":
        return f"unknown field {describe(field)} in {turn}: use question, answer"
    if kind == "missing":
        return f'{turn} needs a "question" field: a non-empty string of at most {MAX_QUESTION_CHARS} characters'
    if field == "answer":
        if kind == "string_too_long" and isinstance(value, str):
            return (
                f'"answer" of {turn} is too long ({len(value)} characters, at most {MAX_HISTORY_ANSWER_CHARS}): '
                "send the beginning of the answer"
            )
        expected = f"a string of at most {MAX_HISTORY_ANSWER_CHARS} characters"
        return f'"answer" of {turn} must be {expected}, not {describe(value)}'
    if kind == _BLANK:
        return f'"question" of {turn} is empty (no visible character): send the question that was asked'
    if kind == "string_too_long" and isinstance(value, str):
        return f'"question" of {turn} is too long ({len(value)} characters, at most {MAX_QUESTION_CHARS})'
    return f'"question" of {turn} must be {_EXPECTED["question"]}, not {describe(value)}'


def encode(msg: dict[str, Any]) -> str:
    return json.dumps(msg, ensure_ascii=False)


def status(state: str, index: str, files: int, chunks: int, message: str) -> dict[str, Any]:
    return {"type": "status", "state": state, "index": index, "files": files, "chunks": chunks, "message": message}


def stream_start() -> dict[str, Any]:
    return {"type": "stream_start"}


def stream_chunk(text: str) -> dict[str, Any]:
    return {"type": "stream_chunk", "chunk": text}


def stream_end(sources: list[str], locations: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The end of an answer: its numbered sources' paths, ``[n]`` in the answer being ``sources[n-1]``, and
    ``locations[n-1]`` where to open it (:func:`source_location`)."""
    msg: dict[str, Any] = {"type": "stream_end", "sources": list(dict.fromkeys(sources))}
    if locations is not None:
        msg["locations"] = locations
    return msg


def _ref(path: str, rel_path: str, shared: frozenset[str]) -> str:
    """What `get` takes for a file: its relative path, or its absolute one where files of two indexed folders
    share that relative path (``shared``: :attr:`mdrag.index.Index.shared_names`)."""
    return path if rel_path in shared else rel_path


def source_location(source: Source, shared: frozenset[str] = frozenset()) -> dict[str, Any]:
    """Where to open an answer's source: its path, the ``ref`` that `get` (CLI, MCP) takes, the lines
    (or the page) of its best passage, and the ``copies`` (refs) of the files with the same bytes."""
    best = source.passages[0]
    return _with_url(
        {
            "path": source.path,
            "ref": _ref(source.path, best.rel_path, shared),
            "line_start": best.line_start,
            "line_end": best.line_end,
            "page": best.page,
            "copies": [_ref(path, rel, shared) for path, rel in best.copies],
        },
        best.rel_path,
    )


def _with_url(d: dict[str, Any], rel_path: str) -> dict[str, Any]:
    """``d`` with ``url``, the page's address, where its ``path`` (``rel_path`` in its indexed folder) is a page
    crawled from a website source."""
    if url := page_url(d["path"], rel_path):
        d["url"] = url
    return d


def search_results(query: str, results: list[dict[str, Any]], note: str | None = None) -> dict[str, Any]:
    """Ranked results, best first, each as every front end shows it (:func:`mdrag.retrieval.shown.result_fields`);
    with none, ``note`` says why (:func:`mdrag.retrieval.shown.no_results`)."""
    msg: dict[str, Any] = {"type": "search_results", "query": query, "results": results}
    if not results and note:
        msg["note"] = note
    return msg


def error(
    message: str, sources: list[str] | None = None, locations: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """An error; one that ends an answer after ``stream_start`` also carries the ``sources`` (and their
    ``locations``) the answer was being made from, as ``stream_end`` would have."""
    msg: dict[str, Any] = {"type": "error", "message": message}
    if sources is not None:
        msg["sources"] = list(dict.fromkeys(sources))
        msg["locations"] = locations if locations is not None else []
    return msg


def reply(msg: dict[str, Any], request: str | int | None) -> dict[str, Any]:
    """``msg`` as a reply to the request whose ``id`` was ``request``: with that id, right after its type."""
    if request is None:
        return msg
    return {"type": msg["type"], "id": request, **{k: v for k, v in msg.items() if k != "type"}}


def is_loopback(host: str) -> bool:
    """Whether ``host`` (a name or address) only reaches this machine."""
    host = host.strip("[]").lower()
    if host in _LOOPBACK_NAMES or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
