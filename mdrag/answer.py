"""Answers to questions: a prompt from search results, streamed from an LLM or extractively.

This module knows nothing about WebSockets or when to answer: :mod:`mdrag.qa`
plans the answer's :func:`numbered_sources` from the search results and calls
:func:`answer_stream` with them; a front end forwards each piece of text as it
arrives, then the sources' paths: the answer's ``[n]`` is the n-th path.

Three cases, decided by the caller's results and settings:

* no results (the caller already applied its relevance threshold): the answer is
  :data:`NO_RELEVANT`, and no model is asked, so nothing can be made up;
* no LLM configured: an extractive answer that quotes the best passages;
* an LLM configured: ``POST {base_url}/chat/completions`` with ``"stream": true``
  (any OpenAI-compatible server: OpenAI, vLLM, llama.cpp, Ollama's ``/v1``,
  LiteLLM ...), yielding each content delta of its server-sent events.

The API key goes into the ``Authorization`` header and nowhere else: it never
appears in a log record, an exception message or ``repr()``; a server that
echoes it back in an error has it replaced by ``***``.

Closing the generator (``aclose()``, or cancelling the task that iterates it)
closes the HTTP response and its connection, so a client that goes away stops
the model's work at once. Callers that may abandon the generator between two
pieces should iterate it inside ``contextlib.aclosing()``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
import urllib.parse
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx

from mdrag.errors import LLMError
from mdrag.httperrors import MAX_SERVER_MESSAGE, server_message
from mdrag.types import SearchResult

__all__ = [
    "LLMSettings",
    "MAX_EXTRACTIVE",
    "MAX_SOURCE_CHARS",
    "NO_LLM_NOTE",
    "NO_RELEVANT",
    "SYSTEM_PROMPT",
    "Source",
    "answer_stream",
    "build_messages",
    "numbered_sources",
]

logger = logging.getLogger(__name__)

NO_RELEVANT = "No relevant information was found in the indexed documents for this question."

#: First piece of an extractive answer (no LLM configured).
NO_LLM_NOTE = (
    "No LLM is configured, so here are the most relevant passages from the indexed documents. "
    "To get a written answer, set llm.base_url in the config file or MARKDOWN_QA_API_BASE_URL "
    "to an OpenAI-compatible API (e.g. http://127.0.0.1:8000/v1)."
)

MAX_SOURCE_CHARS = 12_000  # characters of passages put in the prompt
MAX_EXTRACTIVE = 5  # passages quoted by an extractive answer
MAX_ERROR_BODY = 64 * 1024  # bytes of an error response we read

SYSTEM_PROMPT = (
    "You answer questions about a set of documents using ONLY the numbered sources given "
    "in the user's message. Cite the sources you use as [1], [2] and so on, right after "
    "the statements they support. If the sources do not contain the answer, say plainly "
    "that the indexed documents do not answer the question; do not guess, and do not add "
    "facts, names, numbers, commands or links that are not in the sources. Be concise, and "
    "keep code, commands and identifiers exactly as the sources write them."
)


@dataclass(frozen=True, repr=False)
class LLMSettings:
    """How to reach an OpenAI-compatible chat completions API.

    >>> LLMSettings("http://127.0.0.1:8000/v1", api_key="sk-...")
    LLMSettings(base_url='http://127.0.0.1:8000/v1', api_key=set, model='qwen-flash', timeout=60.0, max_tokens=None)
    """

    base_url: str | None  # API root such as "http://127.0.0.1:8000/v1"; None = no LLM configured
    api_key: str | None = None  # secret; sent only as "Authorization: Bearer <key>"
    model: str = "qwen-flash"  # model name the server expects
    timeout: float = 60.0  # seconds: to connect, and the longest silence while streaming
    max_tokens: int | None = None  # cap on the answer's length; None = the server's default

    @property
    def configured(self) -> bool:
        """True when a base URL is set, i.e. answers come from the LLM."""
        return bool(self.base_url and self.base_url.strip())

    @property
    def url(self) -> str:
        """The chat completions endpoint (``{base_url}/chat/completions``); empty if not configured."""
        base = (self.base_url or "").strip().rstrip("/")
        if not base:
            return ""
        if base.endswith("/chat/completions"):
            return base
        return base + "/chat/completions"

    def __repr__(self) -> str:
        key = "set" if self.api_key else "none"
        return (
            f"LLMSettings(base_url={_display_url(self.base_url or '') or None!r}, api_key={key}, "
            f"model={self.model!r}, timeout={self.timeout!r}, max_tokens={self.max_tokens!r})"
        )


# -- numbered sources --------------------------------------------------------------


@dataclass(frozen=True)
class Source:
    """One numbered source of an answer: a file, and the passages of it that the answer was given.

    ``[number]`` in the answer (the LLM's or the extractive one) refers to this
    file, and ``stream_end.sources[number - 1]`` is its ``path``: both come from
    :func:`numbered_sources`, so they cannot disagree.
    """

    number: int  # 1 for the file of the best result, then each new file in rank order
    path: str  # absolute path, as sent in stream_end.sources
    title: str  # what the answer shows: the path relative to its indexed folder
    passages: tuple[SearchResult, ...]  # the file's passages the answer was given, best first


def numbered_sources(
    results: Sequence[SearchResult],
    llm: LLMSettings | None,
    *,
    max_chars: int = MAX_SOURCE_CHARS,
) -> list[Source]:
    """The sources an answer from ``results`` is given, numbered by file: the one place numbers come from.

    The passages are the results the answer will hold: with no LLM configured
    the best :data:`MAX_EXTRACTIVE` (the extractive answer quotes them); with an
    LLM, those that fit ``max_chars`` characters of prompt in rank order (the
    lowest-ranked ones are dropped whole; the best one is always kept). They are
    grouped by file; files are numbered in the rank order of their first passage.
    """
    if not results:
        return []
    chosen: list[SearchResult] = []
    if llm is None or not llm.configured:
        chosen = list(results[:MAX_EXTRACTIVE])
    else:
        used = 0
        for r in results:
            cost = len(_passage_text(r)) + (0 if any(c.path == r.path for c in chosen) else len(_title(r)))
            if chosen and used + cost > max_chars:
                logger.debug("Prompt holds %d of %d passages (%d characters)", len(chosen), len(results), used)
                break
            chosen.append(r)
            used += cost
    by_file: dict[str, list[SearchResult]] = {}
    for r in chosen:
        by_file.setdefault(r.path, []).append(r)
    return [
        Source(number, path, _title(passages[0]), tuple(passages))
        for number, (path, passages) in enumerate(by_file.items(), start=1)
    ]


def _title(result: SearchResult) -> str:
    return result.rel_path or result.path


def _passage_text(result: SearchResult) -> str:
    """One passage under its file's number: ``— heading (page n)`` on a line of its own, then the text."""
    label = result.heading
    if result.page is not None:
        label = f"{label} (page {result.page})" if label else f"page {result.page}"
    text = result.text.strip()
    return f"— {label}\n{text}" if label else text


def _source_text(source: Source) -> str:
    """A numbered source as the model and the reader see it: ``[n] rel_path``, then each passage."""
    passages = "\n\n".join(_passage_text(r) for r in source.passages)
    return f"[{source.number}] {source.title}\n{passages}"


# -- prompt ----------------------------------------------------------------------


def build_messages(question: str, sources: Sequence[Source]) -> list[dict[str, str]]:
    """OpenAI chat messages that ask the model to answer ``question`` from ``sources`` only.

    The system message sets the rules (answer only from the numbered sources,
    cite them as ``[1]``, say so when they do not hold the answer, invent
    nothing); the user message lists the sources (from :func:`numbered_sources`)
    in order, each file once under its number with its passages, then the question.
    """
    sources_text = "\n\n".join(_source_text(s) for s in sources) if sources else "(no sources)"
    user = f"Sources:\n\n{sources_text}\n\nQuestion: {question.strip()}"
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


# -- answers ---------------------------------------------------------------------


async def answer_stream(
    question: str,
    sources: Sequence[Source],
    llm: LLMSettings | None,
    client: httpx.AsyncClient | None = None,
) -> AsyncGenerator[str, None]:
    """Yield the answer to ``question`` piece by piece, from ``sources``.

    ``sources`` are :func:`numbered_sources` of the search results for the same
    ``llm``, so the answer's ``[n]`` is the n-th of them. ``client`` is an HTTP
    client to reuse (a server keeps one, so answers reuse connections); by
    default each answer opens its own.

    With no ``sources`` the answer is :data:`NO_RELEVANT` and no model is
    contacted. With no LLM configured (``llm`` is None or has no base URL) it
    quotes the passages, deterministically and without network. Otherwise it
    streams the configured model's answer, one content delta at a time.

    Raises:
        LLMError: the LLM could not be reached, refused the key or the request,
            went silent for ``llm.timeout`` seconds, or sent a malformed
            response. The message says what to change.
    """
    if not sources:
        yield NO_RELEVANT
        return
    if llm is None or not llm.configured:
        for piece in _extractive(sources):
            yield piece
        return
    async with contextlib.aclosing(_stream_llm(question, sources, llm, client)) as pieces:
        async for piece in pieces:
            yield piece


def _extractive(sources: Sequence[Source]) -> list[str]:
    """The pieces of an answer that quotes the passages, for when no LLM is set: one per source."""
    return [NO_LLM_NOTE] + [f"\n\n{_source_text(s)}" for s in sources]


def _display_url(url: str) -> str:
    """``url`` without any ``user:password@`` part, for messages and logs."""
    try:
        parts = urllib.parse.urlsplit(url)
    except ValueError:
        return "<invalid URL>"
    if "@" in parts.netloc:
        parts = parts._replace(netloc=parts.netloc.rsplit("@", 1)[1])
    return urllib.parse.urlunsplit(parts)


class _Call:
    """One chat completions request: its URL for messages, and redaction of the key."""

    def __init__(self, llm: LLMSettings) -> None:
        # The settings of this call.
        self.llm: LLMSettings = llm
        # Where the request goes, safe to show (no credentials).
        self.shown: str = _display_url(llm.url)
        # Secret; only removed from text here, never written into it.
        self._key: str | None = llm.api_key or None

    def redact(self, text: str) -> str:
        """Remove the API key should a server or library echo it back."""
        if self._key:
            text = text.replace(self._key, "***")
        return text

    def error(self, message: str) -> LLMError:
        """An LLMError whose text cannot hold the key."""
        return LLMError(self.redact(message))

    def check(self) -> None:
        """Raise LLMError for settings that cannot work."""
        parts = urllib.parse.urlsplit(self.llm.url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise self.error(
                f"llm.base_url must be an http:// or https:// URL such as 'http://127.0.0.1:8000/v1', "
                f"got {_display_url(self.llm.base_url or '')!r}: set llm.base_url or MARKDOWN_QA_API_BASE_URL"
            )
        if not self.llm.model:
            raise self.error("llm.model is empty: set it to the model name the server expects")
        if not self.llm.timeout > 0:
            raise self.error(f"llm.timeout must be a positive number of seconds, got {self.llm.timeout!r}")
        if self.llm.max_tokens is not None and self.llm.max_tokens < 1:
            raise self.error(f"llm.max_tokens must be at least 1, got {self.llm.max_tokens!r}")

    def timed_out(self) -> LLMError:
        return self.error(
            f"the LLM at {self.shown} did not answer within {self.llm.timeout:g} s: check that it is "
            f"running and not overloaded, or raise llm.timeout"
        )

    def malformed(self, what: str) -> LLMError:
        return self.error(
            f"the LLM at {self.shown} sent a malformed response ({what}): check that llm.base_url "
            f"points at an OpenAI-compatible /v1 API"
        )


async def _stream_llm(
    question: str, sources: Sequence[Source], llm: LLMSettings, client: httpx.AsyncClient | None = None
) -> AsyncGenerator[str, None]:
    """Stream the answer from ``POST {base_url}/chat/completions``."""
    call = _Call(llm)
    call.check()
    body: dict[str, Any] = {"model": llm.model, "messages": build_messages(question, sources), "stream": True}
    if llm.max_tokens is not None:
        body["max_tokens"] = llm.max_tokens
    headers = {"Accept": "text/event-stream, application/json"}
    if llm.api_key:
        headers["Authorization"] = f"Bearer {llm.api_key}"
    logger.debug("Asking %s (model %s) with %d sources", call.shown, llm.model, len(sources))
    started = time.monotonic()
    pieces = 0
    try:
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(httpx.AsyncClient(follow_redirects=False))
            response = await stack.enter_async_context(
                client.stream("POST", llm.url, json=body, headers=headers, timeout=httpx.Timeout(llm.timeout))
            )
            if not response.is_success:
                raise await _http_error(call, response)
            ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/json":
                raw = await response.aread()
                text = _parse_completion(call, raw)
                if text:
                    pieces += 1
                    yield text
            else:
                async with contextlib.aclosing(_read_events(call, response, ctype)) as events:
                    async for text in events:
                        pieces += 1
                        yield text
    except httpx.TimeoutException:
        logger.warning("LLM at %s timed out after %.1f s", call.shown, time.monotonic() - started)
        raise call.timed_out() from None
    except httpx.ConnectError as exc:
        reason = call.redact(str(exc) or type(exc).__name__)
        raise call.error(
            f"cannot reach the LLM at {call.shown}: {reason}: check that it is running and that "
            f"llm.base_url (or MARKDOWN_QA_API_BASE_URL) is right"
        ) from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        reason = call.redact(str(exc) or type(exc).__name__)
        raise call.error(
            f"the connection to the LLM at {call.shown} failed ({type(exc).__name__}: {reason}): "
            f"check that it is running and that llm.base_url is right"
        ) from None
    logger.info("LLM at %s answered in %.2f s (%d pieces)", call.shown, time.monotonic() - started, pieces)


async def _http_error(call: _Call, response: httpx.Response) -> LLMError:
    """The LLMError for a response whose status is not 2xx."""
    status = response.status_code
    detail = await _server_message(call, response)
    said = f" (server said: {detail})" if detail else ""
    logger.warning("LLM at %s answered HTTP %d", call.shown, status)
    if status in (401, 403):
        return call.error(
            f"the LLM at {call.shown} rejected the API key (HTTP {status}): set llm.api_key or "
            f"MARKDOWN_QA_API_KEY{said}"
        )
    if 300 <= status < 400:
        location = _display_url(response.headers.get("location", "")) or "another URL"
        return call.error(
            f"the LLM at {call.shown} redirects to {location} (HTTP {status}): set llm.base_url to the final URL"
        )
    if status == 404:
        return call.error(
            f"the LLM at {call.shown} answered HTTP 404{': ' + detail if detail else ''}: check llm.base_url "
            f"(it usually ends in /v1) and llm.model"
        )
    if status == 429:
        return call.error(
            f"the LLM at {call.shown} is rate limiting requests (HTTP 429){': ' + detail if detail else ''}: "
            f"try again later"
        )
    return call.error(f"the LLM at {call.shown} answered HTTP {status}{': ' + detail if detail else ''}")


async def _server_message(call: _Call, response: httpx.Response) -> str:
    """The server's error text, from ``{"error": {"message": ...}}`` or the raw body, on one short line."""
    raw = b""
    try:
        async for part in response.aiter_bytes():
            raw += part
            if len(raw) >= MAX_ERROR_BODY:
                break
    except httpx.HTTPError:
        pass  # what arrived is still worth quoting
    return server_message(raw[:MAX_ERROR_BODY], call.redact)


def _parse_completion(call: _Call, raw: bytes) -> str:
    """The answer of a non-streaming response: ``choices[0].message.content``."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise call.malformed("not JSON") from None
    if not isinstance(doc, dict):
        raise call.malformed("not a JSON object")
    _raise_in_band_error(call, doc)
    try:
        content = doc["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise call.malformed("no choices[0].message.content") from None
    if content is None:
        return ""
    if not isinstance(content, str):
        raise call.malformed("choices[0].message.content is not text")
    return content


def _raise_in_band_error(call: _Call, doc: dict[str, Any]) -> None:
    """Raise LLMError for an ``{"error": ...}`` object sent with a 200 status."""
    err = doc.get("error")
    if err is None:
        return
    if isinstance(err, dict):
        err = err.get("message", err)
    text = err if isinstance(err, str) else json.dumps(err)
    text = " ".join(text.split())
    if len(text) > MAX_SERVER_MESSAGE:
        text = text[: MAX_SERVER_MESSAGE - 3] + "..."
    raise call.error(f"the LLM at {call.shown} reported an error: {text}")


class _EventDecoder:
    """Server-sent events, line by line: no I/O, so it is tested without sockets.

    An event is one or more ``data:`` lines ended by a blank line (several
    ``data:`` lines are joined with newlines, as the SSE format says); comments
    (``:``) and the other fields (``event:``, ``id:``, ``retry:``) are ignored.
    """

    def __init__(self) -> None:
        # The data lines of the event being read.
        self._data: list[str] = []
        # How many events have been completed, to tell an empty stream from a short one.
        self.events: int = 0

    def feed(self, line: str) -> str | None:
        """Take one line (without its line ending); return the event's data when the line completes one."""
        if line == "":
            return self.end()
        if line.startswith(":"):
            return None
        field, _, value = line.partition(":")
        if field == "data":
            self._data.append(value[1:] if value.startswith(" ") else value)
        return None

    def end(self) -> str | None:
        """Complete the pending event, if any (also called when the stream ends without a blank line)."""
        if not self._data:
            return None
        payload = "\n".join(self._data)
        self._data = []
        self.events += 1
        return payload


async def _read_events(call: _Call, response: httpx.Response, ctype: str) -> AsyncGenerator[str, None]:
    """Yield the content deltas of an OpenAI-style event stream until ``data: [DONE]``."""
    decoder = _EventDecoder()
    async with contextlib.aclosing(cast("AsyncGenerator[str, None]", response.aiter_lines())) as lines:
        async for line in lines:
            payload = decoder.feed(line)
            if payload is None:
                continue
            if payload.strip() == "[DONE]":
                return
            text = _delta(call, payload)
            if text:
                yield text
    payload = decoder.end()  # the last event lacked its blank line
    if payload is not None and payload.strip() == "[DONE]":
        return
    if payload is not None:
        text = _delta(call, payload)
        if text:
            yield text
    if not decoder.events:
        raise call.malformed(f"no server-sent events in a {ctype or 'untyped'} response")
    logger.warning("LLM at %s ended its stream without data: [DONE]; the answer may be cut short", call.shown)


def _delta(call: _Call, payload: str) -> str:
    """The text of one streamed chunk: ``choices[0].delta.content``, or "" for role-only and empty deltas."""
    try:
        doc = json.loads(payload)
    except ValueError:
        snippet = " ".join(payload[:80].split())
        raise call.malformed(f"an event is not JSON: {snippet!r}") from None
    if not isinstance(doc, dict):
        raise call.malformed("an event is not a JSON object")
    _raise_in_band_error(call, doc)
    choices = doc.get("choices")
    if not isinstance(choices, list) or not choices:
        return ""  # e.g. a final usage-only chunk
    first = choices[0]
    if not isinstance(first, dict):
        raise call.malformed("choices[0] is not an object")
    delta = first.get("delta")
    if delta is None:
        delta = first.get("message")  # some servers repeat the message shape when streaming
    if not isinstance(delta, dict):
        return ""
    content = delta.get("content")
    return content if isinstance(content, str) else ""
