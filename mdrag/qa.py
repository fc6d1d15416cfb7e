"""Answering a question from an index: the answer policy, in one place for every front end.

:func:`plan` searches the index, decides whether to answer at all (no result,
or none relevant enough by :func:`mdrag.relevance.refuse` with
``answer.min_score`` and ``answer.max_unknown``: "no relevant information", and
no LLM is asked) and numbers the sources the answer is given
(:func:`mdrag.answer.numbered_sources`). Its :class:`Plan` then streams the
answer, from the configured LLM or extractively (:func:`mdrag.answer.answer_stream`):
the answer's ``[n]`` is ``plan.sources[n - 1]``.

The server runs :func:`plan` in a thread and forwards :meth:`Plan.stream`;
:func:`ask` (``Index.ask()``) does both synchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from mdrag.answer import LLMSettings, Source, answer_stream, numbered_sources
from mdrag.config import Config
from mdrag.relevance import refuse
from mdrag.types import SearchResult

if TYPE_CHECKING:
    import httpx2

    from mdrag.index import Index

__all__ = ["SETTINGS", "Answer", "Plan", "ask", "llm_settings", "plan"]

#: The settings read at each question (a running server applies a change to them at once).
SETTINGS = frozenset(
    {
        "answer.min_score",
        "answer.max_unknown",
        "llm.base_url",
        "llm.api_key",
        "llm.model",
        "llm.timeout",
        "api.base_url",
        "api.api_key",
    }
)


def llm_settings(config: Config) -> LLMSettings:
    """The LLM that answers (``llm.*``, falling back to the shared ``api.*``); no base URL: none."""
    return LLMSettings(
        base_url=config["llm.base_url"] or config["api.base_url"],
        api_key=config["llm.api_key"] or config["api.api_key"],
        model=config["llm.model"],
        timeout=float(config["llm.timeout"]),
    )


@dataclass(frozen=True)
class Plan:
    """How a question will be answered: decided before any answer text is produced."""

    question: str
    results: list[SearchResult]  # what the search found, best first (also when refused)
    refused: bool  # the answer is "no relevant information": nothing found, or nothing relevant enough
    sources: list[Source]  # numbered sources the answer is given (none when refused): [n] is sources[n - 1]
    llm: LLMSettings  # who writes the answer; not configured: an extractive answer quotes the sources

    def stream(self, client: httpx2.AsyncClient | None = None) -> AsyncGenerator[str, None]:
        """The answer's text, piece by piece (see :func:`mdrag.answer.answer_stream`; ``client`` is
        an HTTP client to reuse). Raises LLMError when the LLM fails."""
        return answer_stream(self.question, self.sources, self.llm, client)


def plan(index: Index, question: str, results: Sequence[SearchResult] | None = None) -> Plan:
    """Plan the answer to ``question`` under ``index.config``; blocking (search, word counts):
    async code runs it in a thread.

    ``results``: what a search already found (default: ``index.search(question)``
    with the index's settings); ``[]`` answers "no relevant information" without
    touching the index.
    """
    config = index.config
    found = list(index.search(question) if results is None else results)
    refused = not found or refuse(
        question, found, index.term_stats(), config["answer.min_score"], config["answer.max_unknown"]
    )
    llm = llm_settings(config)
    return Plan(question, found, refused, [] if refused else numbered_sources(found, llm), llm)


@dataclass(frozen=True)
class Answer:
    """A whole answer: ``Index.ask()`` returns it."""

    question: str
    text: str  # the LLM's answer, the extractive one, or mdrag.answer.NO_RELEVANT
    sources: list[Source]  # [n] in text is sources[n - 1]; empty when refused
    refused: bool  # "no relevant information": nothing found, or nothing relevant enough
    results: list[SearchResult]  # what the search found, best first


def ask(index: Index, question: str, on_text: Callable[[str], None] | None = None) -> Answer:
    """Answer ``question`` from ``index``, synchronously; ``on_text`` is called with each piece of
    text as it arrives. Raises LLMError when the LLM fails (the message says what to change).

    Async code that should not wait here plans in a thread and iterates the stream itself:
    ``p = await asyncio.to_thread(plan, index, question)``, then ``async for piece in p.stream()``.
    """
    p = plan(index, question)
    pieces: list[str] = []

    async def collect() -> None:
        async with contextlib.aclosing(p.stream()) as stream:
            async for piece in stream:
                pieces.append(piece)
                if on_text is not None:
                    on_text(piece)

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        asyncio.run(collect())
    else:  # called from async code (a Jupyter cell): its event loop waits while another thread answers
        with ThreadPoolExecutor(1, thread_name_prefix="mdrag-ask") as pool:
            pool.submit(asyncio.run, collect()).result()
    return Answer(question, "".join(pieces), p.sources, p.refused, p.results)
