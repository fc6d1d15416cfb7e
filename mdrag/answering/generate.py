"""Answers to questions: a prompt from search results, streamed from an LLM or extractively.

This module knows nothing about WebSockets or when to answer: :mod:`mdrag.answering.ask`
plans the answer's :func:`numbered_sources` from the search results and calls
:func:`answer_stream` with them; a front end forwards each piece of text as it
arrives, then the sources' paths: the answer's ``[n]`` is the n-th path.

Three cases, decided by the caller's results and settings:

* no results (the caller already applied its relevance threshold): the answer is
  :data:`NO_RELEVANT`, and no model is asked, so nothing can be made up;
* no LLM configured: an extractive answer that quotes the best passages;
* an LLM configured: ``POST {base_url}/chat/completions`` with ``"stream": true``
  (any OpenAI-compatible server: OpenAI, vLLM, llama.cpp, Ollama's ``/v1``,
  LiteLLM ...) through the official ``openai`` client, yielding each content
  delta of its stream; its exceptions become :class:`LLMError` with mdrag's words.
  The model is told to reply :data:`DECLINE` when its sources do not answer;
  :func:`declined` recognises that reply (:mod:`mdrag.answering.ask` turns it into
  :data:`NO_RELEVANT`).

An LLM answer is whole only when the model says it finished (a
``finish_reason`` such as ``"stop"``). A stream that ends without one (the
server closed it early), or that ends on ``"length"`` (the token limit) or
``"content_filter"``, raises :class:`LLMError` ("the answer is cut short: ...")
after the text that came: every front end then shows an error, never a
finished answer.

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
import re
import time
import urllib.parse
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import httpx2
import openai
from openai.types.chat import ChatCompletionChunk

from mdrag.answering.quote import visible_text
from mdrag.config import Config
from mdrag.errors import LLMError
from mdrag.httperrors import NO_KEY, auth_headers, one_line, server_message
from mdrag.knobs import MAX_ERROR_BODY, MAX_EXTRACTIVE, MAX_SOURCE_CHARS
from mdrag.redact import redact, redact_url
from mdrag.types import SearchResult

__all__ = [
    "DECLINE",
    "LLMSettings",
    "NO_LLM_NOTE",
    "NO_RELEVANT",
    "SYSTEM_PROMPT",
    "Source",
    "answer_stream",
    "build_messages",
    "complete",
    "declined",
    "llm_settings",
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

_CUT_SHORT = "the answer is cut short"  # how the error of an answer that did not finish begins

SYSTEM_PROMPT = (
    "You answer questions about a set of documents using ONLY the numbered sources given "
    "in the user's message. Cite the sources you use as [1], [2] and so on, right after "
    "the statements they support. If the sources do not contain the answer, reply with the "
    "single word NO_ANSWER and nothing else; do not guess, and do not add "
    "facts, names, numbers, commands or links that are not in the sources. Be concise, and "
    "keep code, commands and identifiers exactly as the sources write them."
)

#: What the system prompt tells the LLM to reply when its sources do not answer; see :func:`declined`.
DECLINE = "NO_ANSWER"
_DECLINE_KEY = "NOANSWER"
_DECORATION = re.compile(r"[\s*_`'\"]+")  # what a model may wrap the word in, or write for its underscore


def declined(text: str) -> bool | None:
    """Whether an LLM answer that begins with ``text`` is :data:`DECLINE` (the sources do not answer).

    True: it is ("NO_ANSWER", "**No answer.**", "no_answer"); False: it is an
    answer; None: ``text`` is too short to tell (empty, "NO_", "No an"). Case,
    white space, underscores, emphasis and quotes do not count.
    """
    head = _DECORATION.sub("", text).upper()
    if head.startswith(_DECLINE_KEY):
        return True
    return None if _DECLINE_KEY.startswith(head) else False


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
            f"LLMSettings(base_url={redact_url(self.base_url or '') or None!r}, api_key={key}, "
            f"model={self.model!r}, timeout={self.timeout!r}, max_tokens={self.max_tokens!r})"
        )


def llm_settings(config: Config) -> LLMSettings:
    """The LLM that answers (``llm.*``, falling back to the shared ``api.*``); no base URL: none."""
    return LLMSettings(
        base_url=config.effective("llm.base_url"),
        api_key=config.effective("llm.api_key"),
        model=config["llm.model"],
        timeout=float(config["llm.timeout"]),
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
    lowest-ranked ones are dropped whole; the best one is always kept). A result's attached ``sections``
    (``search.per_page``) follow all the results. They are grouped by file; files are numbered in the rank
    order of their first passage.
    """
    if not results:
        return []
    # a page's other sections (search.per_page) come after every page's best one: more pages before more of one
    results = [*results, *(s for r in results for s in r.sections)]
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


def _label(result: SearchResult) -> str:
    """Where a passage is in its file: ``heading (page n)``, ``page n``, the heading, or ""."""
    if result.page is None:
        return result.heading
    return f"{result.heading} (page {result.page})" if result.heading else f"page {result.page}"


def _passage_text(result: SearchResult) -> str:
    """One passage under its file's number, for the LLM: ``— heading (page n)`` on a line of its own, then the text."""
    label, text = _label(result), result.text.strip()
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
    client: httpx2.AsyncClient | None = None,
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
            went silent for ``llm.timeout`` seconds, sent a malformed
            response, or did not finish its answer (cut short, after the
            pieces that came). The message says what to change.
    """
    if not sources:
        yield NO_RELEVANT
        return
    if llm is None or not llm.configured:
        for piece in _extractive(sources):
            yield piece
        return
    async with contextlib.aclosing(_stream_llm(build_messages(question, sources), llm, client)) as pieces:
        async for piece in pieces:
            yield piece


async def complete(messages: Sequence[dict[str, str]], llm: LLMSettings) -> str:
    """The whole text of one completion of ``messages`` (a short one, such as a rewritten search query),
    through the same client, checks and errors as an answer (:class:`LLMError`); ``llm.max_tokens`` caps it."""
    pieces: list[str] = []
    async with contextlib.aclosing(_stream_llm(messages, llm)) as stream:
        async for piece in stream:
            pieces.append(piece)
    return "".join(pieces)


def _extractive(sources: Sequence[Source]) -> list[str]:
    """The pieces of an answer that quotes the passages, for when no LLM is set: one per source, ``[n] rel_path``
    then each passage, each a paragraph of its own: ``— heading``, then its text, shown without the document's
    HTML comments (:func:`~mdrag.answering.quote.visible_text`)."""

    def quoted(r: SearchResult) -> str:
        label = _label(r)
        return "\n\n".join(p for p in (f"— {label}" if label else "", visible_text(r.text)) if p)

    return [NO_LLM_NOTE] + [
        "".join(f"\n\n{p}" for p in (f"[{s.number}] {s.title}", *filter(None, map(quoted, s.passages))))
        for s in sources
    ]


class _Call:
    """One chat completions request: its URL for messages, and redaction of the key."""

    def __init__(self, llm: LLMSettings) -> None:
        # The settings of this call.
        self.llm: LLMSettings = llm
        # Where the request goes, safe to show (no credentials).
        self.shown: str = redact_url(llm.url)

    def error(self, message: str) -> LLMError:
        """An LLMError whose text cannot hold the key (a server or library may echo it back)."""
        return LLMError(redact(message, self.llm.api_key))

    def check(self) -> None:
        """Raise LLMError for settings that cannot work."""
        try:
            parts = urllib.parse.urlsplit(self.llm.url)
        except ValueError:
            parts = urllib.parse.SplitResult("", "", "", "", "")
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise self.error(
                f"llm.base_url must be an http:// or https:// URL such as 'http://127.0.0.1:8000/v1', "
                f"got {redact_url(self.llm.base_url or '')!r}: set llm.base_url or MARKDOWN_QA_API_BASE_URL"
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

    def check_finish(self, reason: str | None, *, whole: bool) -> None:
        """Raise LLMError, after the text that came, when the answer that just ended is not whole.

        ``reason`` is the LLM's ``finish_reason``; None, for a stream (``whole``
        False), means it never said the answer was finished: the server closed
        the stream early (it crashed, was restarted, or a proxy cut it). A
        complete JSON response (``whole``) without one is taken as finished.
        """
        if reason is None and whole:
            return
        if reason is None:
            logger.warning("LLM at %s ended its stream without a finish reason: the answer is cut short", self.shown)
            raise self.error(
                f"{_CUT_SHORT}: the LLM at {self.shown} closed its stream without finishing the answer "
                f"(no finish_reason): ask again, and if it happens again check the LLM server's log"
            )
        if reason == "length":
            logger.warning("LLM at %s stopped at its token limit: the answer is cut short", self.shown)
            raise self.error(
                f'{_CUT_SHORT}: the LLM at {self.shown} reached its token limit (finish_reason "length"): '
                f"raise the server's limit on answer tokens (or its context size), or ask a narrower question"
            )
        if reason == "content_filter":
            logger.warning("LLM at %s stopped the answer with its content filter", self.shown)
            raise self.error(
                f"{_CUT_SHORT}: the LLM at {self.shown} stopped it with its content filter "
                f'(finish_reason "content_filter"): rephrase the question, or check the server\'s filter settings'
            )

    def malformed(self, what: str) -> LLMError:
        return self.error(
            f"the LLM at {self.shown} sent a malformed response ({what}): check that llm.base_url "
            f"points at an OpenAI-compatible /v1 API"
        )


async def _stream_llm(
    messages: Sequence[dict[str, str]], llm: LLMSettings, client: httpx2.AsyncClient | None = None
) -> AsyncGenerator[str, None]:
    """Stream the completion of ``messages`` from ``POST {base_url}/chat/completions`` through the openai client."""
    call = _Call(llm)
    call.check()
    logger.debug("Asking %s (model %s), %d messages", call.shown, llm.model, len(messages))
    started = time.monotonic()
    pieces = 0
    try:
        async with contextlib.AsyncExitStack() as stack:
            if client is None:
                client = await stack.enter_async_context(httpx2.AsyncClient(follow_redirects=False))
            api = openai.AsyncOpenAI(
                base_url=llm.url.removesuffix("/chat/completions"),
                api_key=llm.api_key or NO_KEY,
                max_retries=0,  # an answer fails at once; the user asks again
                timeout=llm.timeout,
                http_client=client,
            )
            raw = await api.chat.completions.with_raw_response.create(
                model=llm.model,
                messages=cast("Any", list(messages)),
                stream=True,
                max_tokens=llm.max_tokens if llm.max_tokens is not None else openai.omit,
                extra_headers=auth_headers(llm.api_key),
            )
            response = raw.http_response
            stack.push_async_callback(response.aclose)
            ctype = response.headers.get("content-type", "").split(";")[0].strip().lower()
            if ctype == "application/json":  # a server that does not stream
                text, reason = _parse_completion(call, await response.aread())
                if text:
                    pieces += 1
                    yield text
                call.check_finish(reason, whole=True)
            else:
                reason = None
                chunks = 0
                async with raw.parse() as stream:
                    async for chunk in stream:
                        chunks += 1
                        text, reason = _delta(chunk, reason)
                        if text:
                            pieces += 1
                            yield text
                if not chunks:
                    raise call.malformed(f"no server-sent events in a {ctype or 'untyped'} response")
                call.check_finish(reason, whole=False)
    except openai.APITimeoutError:
        logger.warning("LLM at %s timed out after %.1f s", call.shown, time.monotonic() - started)
        raise call.timed_out() from None
    except openai.APIStatusError as exc:
        raise _http_error(call, exc) from None
    except openai.APIConnectionError as exc:
        cause = exc.__cause__ or exc
        reason = str(cause) or type(cause).__name__
        if isinstance(cause, httpx2.ConnectError):
            raise call.error(
                f"cannot reach the LLM at {call.shown}: {reason}: check that it is running and that "
                f"llm.base_url (or MARKDOWN_QA_API_BASE_URL) is right"
            ) from None
        raise call.error(
            f"the connection to the LLM at {call.shown} failed ({type(cause).__name__}: {reason}): "
            f"check that it is running and that llm.base_url is right"
        ) from None
    except openai.APIError as exc:  # an {"error": ...} event in the stream
        reason = one_line(exc.message, call.llm.api_key)
        raise call.error(f"the LLM at {call.shown} reported an error: {reason}") from None
    except json.JSONDecodeError as exc:
        snippet = " ".join(redact(exc.doc, call.llm.api_key)[:80].split())  # redacted before it is cut
        raise call.malformed(f"an event is not JSON: {snippet!r}") from None
    logger.info("LLM at %s answered in %.2f s (%d pieces)", call.shown, time.monotonic() - started, pieces)


def _http_error(call: _Call, exc: openai.APIStatusError) -> LLMError:
    """The LLMError for a response whose status is not 2xx."""
    status = exc.status_code
    detail = server_message(exc.response.content[:MAX_ERROR_BODY], call.llm.api_key)
    said = f" (server said: {detail})" if detail else ""
    logger.warning("LLM at %s answered HTTP %d", call.shown, status)
    if status in (401, 403):
        return call.error(
            f"the LLM at {call.shown} rejected the API key (HTTP {status}): set llm.api_key or "
            f"MARKDOWN_QA_API_KEY{said}"
        )
    if 300 <= status < 400:
        location = redact_url(exc.response.headers.get("location", "")) or "another URL"
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


def _parse_completion(call: _Call, raw: bytes) -> tuple[str, str | None]:
    """The answer of a non-streaming response (``choices[0].message.content``) and its ``finish_reason``."""
    try:
        doc = json.loads(raw)
    except ValueError:
        raise call.malformed("not JSON") from None
    if not isinstance(doc, dict):
        raise call.malformed("not a JSON object")
    err = doc.get("error")
    if err is not None:  # an error sent with a 200 status
        if isinstance(err, dict):
            err = err.get("message", err)
        text = err if isinstance(err, str) else json.dumps(err)
        raise call.error(f"the LLM at {call.shown} reported an error: {one_line(text, call.llm.api_key)}")
    try:
        choice = doc["choices"][0]
        content = choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise call.malformed("no choices[0].message.content") from None
    reason = choice.get("finish_reason")
    reason = reason if isinstance(reason, str) else None
    if content is None:
        return "", reason
    if not isinstance(content, str):
        raise call.malformed("choices[0].message.content is not text")
    return content, reason


def _delta(chunk: ChatCompletionChunk, reason: str | None) -> tuple[str, str | None]:
    """The text of one streamed chunk (``choices[0].delta.content``), and the answer's finish reason
    so far: the chunk's ``finish_reason`` if it has one, else ``reason`` (that of an earlier chunk).

    Role-only, empty and usage-only chunks have no text; some servers send the
    ``message`` shape instead of ``delta`` when streaming.
    """
    if not chunk.choices:
        return "", reason
    first = chunk.choices[0]
    content: object = first.delta.content if first.delta is not None else None
    if content is None:
        message = (first.model_extra or {}).get("message")
        content = message.get("content") if isinstance(message, dict) else None
    return (content if isinstance(content, str) else ""), first.finish_reason or reason
