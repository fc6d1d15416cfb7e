"""Answering a question from an index: the answer policy, in one place for every front end.

:func:`plan` searches the index (any :class:`Retriever`: ``Index`` is one), decides whether
to answer at all and numbers the sources the answer is given
(:func:`mdrag.answering.generate.numbered_sources`). Its :class:`AnswerPlan` then streams the answer,
from the configured LLM or extractively (:func:`mdrag.answering.generate.answer_stream`): the answer's
``[n]`` is ``plan.sources[n - 1]``.

Who decides that the documents do not answer ("no relevant information") is
``answer.judge``. With ``llm`` (the default) and an LLM configured, the LLM
reads the passages: it is told to reply :data:`mdrag.answering.generate.DECLINE` when they
do not answer, and :meth:`AnswerPlan.stream` turns that reply into
:data:`mdrag.answering.generate.NO_RELEVANT` with no sources; only a question with no
result at all is refused before it is asked. A question's words and scores
cannot tell a missing fact on a page about the same subject ("How much does
the Apple Vision Pro cost?" finds the page on it, at 0.73, that lacks the
price): only reading can. Otherwise (``scores``, or no LLM configured: the
extractive answer reads nothing) :func:`mdrag.retrieval.relevance.refuse` decides before
any answer, with ``answer.min_score`` and ``answer.max_unknown``.

A follow-up question ("and how do I nest it?") comes with the earlier turns of its
conversation (``history``): the index is searched for
:func:`mdrag.answering.followup.search_query` (a standalone rewrite by the LLM, or the
previous question joined to it), the LLM answers the follow-up told the earlier
questions, and the sources and ``[n]`` are this answer's own.

The server runs :func:`plan` in a thread and forwards :meth:`AnswerPlan.stream`;
:func:`ask` (``Index.ask()``) does both synchronously.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from mdrag.answering.followup import Turn, in_context, search_query
from mdrag.answering.generate import (
    NO_RELEVANT,
    LLMSettings,
    Source,
    answer_stream,
    declined,
    llm_settings,
    numbered_sources,
)
from mdrag.config import Config
from mdrag.retrieval.relevance import TermStats, refuse
from mdrag.types import SearchResult

if TYPE_CHECKING:
    import httpx2

__all__ = ["Answer", "AnswerPlan", "Retriever", "Turn", "answer", "ask", "llm_settings", "plan"]

logger = logging.getLogger(__name__)


class Retriever(Protocol):
    """What answering a question reads from an index (:class:`mdrag.index.Index` is one)."""

    config: Config  # its settings: answer.*, llm.* and api.* decide the answer

    def search(self, query: str) -> list[SearchResult]:
        """The results for ``query`` under the index's search settings, best first."""
        ...

    def term_stats(self) -> TermStats:
        """The document frequencies of the index's words (:func:`mdrag.retrieval.relevance.refuse` reads them)."""
        ...


@dataclass
class AnswerPlan:
    """How a question will be answered: decided before any answer text is produced, except that an
    LLM that finds no answer in its sources turns the plan into a refusal while it streams
    (:meth:`stream`): read ``refused`` and ``sources`` once the stream has ended."""

    question: str
    results: list[SearchResult]  # what the search found, best first (also when refused)
    refused: bool  # the answer is "no relevant information": nothing found, nothing relevant enough, or the LLM said so
    sources: list[Source]  # numbered sources the answer is given (none when refused): [n] is sources[n - 1]
    llm: LLMSettings  # who writes the answer; not configured: an extractive answer quotes the sources
    query: str = ""  # what was searched: the question, or for a follow-up mdrag.answering.followup.search_query
    history: tuple[Turn, ...] = ()  # the earlier turns the question follows (the LLM is told their questions)

    async def stream(self, client: httpx2.AsyncClient | None = None) -> AsyncGenerator[str, None]:
        """The answer's text, piece by piece (see :func:`mdrag.answering.generate.answer_stream`; ``client`` is
        an HTTP client to reuse). Raises LLMError when the LLM fails.

        An LLM answer is held back until its first characters show whether it is
        :data:`mdrag.answering.generate.DECLINE`; if so, the LLM is stopped, the answer is
        :data:`mdrag.answering.generate.NO_RELEVANT`, ``refused`` becomes True and ``sources`` empty.
        """
        held: list[str] | None = [] if self.llm.configured and self.sources else None
        asked = in_context(self.question, self.history)
        async with contextlib.aclosing(answer_stream(asked, self.sources, self.llm, client)) as pieces:
            async for piece in pieces:
                if held is None:
                    yield piece
                    continue
                held.append(piece)
                verdict = declined("".join(held))
                if verdict is None:
                    continue
                if verdict:
                    logger.info("The LLM found no answer in %d sources: no relevant information", len(self.sources))
                    self.refused, self.sources = True, []
                    yield NO_RELEVANT
                    return
                yield "".join(held)
                held = None
        if held:  # the whole answer was a beginning of the word ("NO"): it is what the LLM said
            yield "".join(held)


def plan(
    index: Retriever, question: str, results: Sequence[SearchResult] | None = None, history: Sequence[Turn] = ()
) -> AnswerPlan:
    """Plan the answer to ``question`` under ``index.config``; blocking (search, word counts, the
    rewrite of a follow-up): async code runs it in a thread.

    ``results``: what a search already found (default: ``index.search(query)``
    with the index's settings); ``[]`` answers "no relevant information" without
    touching the index. ``history``: the earlier turns of the conversation, oldest
    first; the query is then :func:`mdrag.answering.followup.search_query` (a
    standalone rewrite, or the previous question joined), and the question alone
    only when that finds nothing (a new subject after an unrelated turn).
    """
    config = index.config
    query = question if results is not None else search_query(question, history, config)
    found = list(index.search(query) if results is None else results)
    if not found and query != question:  # the history led nowhere: the question may stand on its own
        logger.info("A follow-up question searched with its history found nothing: searching it alone")
        query, found = question, list(index.search(question))
    llm = llm_settings(config)
    llm_judges = config["answer.judge"] == "llm" and llm.configured
    refused = not found or (
        not llm_judges
        and refuse(query, found, index.term_stats(), config["answer.min_score"], config["answer.max_unknown"])
    )
    sources = [] if refused else numbered_sources(found, llm)
    return AnswerPlan(question, found, refused, sources, llm, query, tuple(history))


@dataclass(frozen=True)
class Answer:
    """A whole answer: ``Index.ask()`` returns it."""

    question: str
    text: str  # the LLM's answer, the extractive one, or mdrag.answering.generate.NO_RELEVANT
    sources: list[Source]  # [n] in text is sources[n - 1]; empty when refused
    refused: bool  # "no relevant information": nothing found, nothing relevant enough, or the LLM said so
    results: list[SearchResult]  # what the search found, best first
    query: str = ""  # what was searched: the question, or for a follow-up its standalone query


def ask(
    index: Retriever, question: str, on_text: Callable[[str], None] | None = None, history: Sequence[Turn] = ()
) -> Answer:
    """Answer ``question`` from ``index``, synchronously; ``on_text`` is called with each piece of
    text as it arrives; ``history`` holds the earlier turns a follow-up question refers to (see
    :func:`plan`). Raises LLMError when the LLM fails (the message says what to change).

    Async code that should not wait here plans in a thread and iterates the stream itself:
    ``p = await asyncio.to_thread(plan, index, question)``, then ``async for piece in p.stream()``.
    """
    return answer(plan(index, question, history=history), on_text)


def answer(p: AnswerPlan, on_text: Callable[[str], None] | None = None) -> Answer:
    """The whole answer of a plan, synchronously (see :func:`ask`)."""
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
    return Answer(p.question, "".join(pieces), p.sources, p.refused, p.results, p.query)
