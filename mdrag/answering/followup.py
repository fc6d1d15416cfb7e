"""Follow-up questions: what to search for when a question follows earlier turns of a conversation.

"How do I configure the menu?" then "and how do I nest it?": the second question
alone searches for "nest it" and finds nothing about menus. A front end passes the
earlier turns (:class:`Turn`: a question and the beginning of its answer) with the
question, and :func:`search_query` decides what the index is searched for:

* no history: the question itself;
* an LLM configured: :func:`rewrite_query`, one short completion that rewrites the
  follow-up into a standalone search query ("How do I nest menu entries?"), with a
  time limit (:data:`mdrag.knobs.REWRITE_TIMEOUT_S`) and a check of its reply; when
  it fails, the heuristic below, with a warning in the log;
* no LLM: :func:`joined_query`, the heuristic: the follow-up and the previous
  question searched together.

The answer itself is still to the follow-up (:func:`in_context` tells the LLM the
earlier questions), with its own sources: ``[n]`` is per answer. The server keeps
no conversation: each query carries its history, bounded (:func:`bounded`) by
:data:`mdrag.knobs.MAX_HISTORY_TURNS`, :data:`mdrag.knobs.MAX_HISTORY_ANSWER_CHARS`
and :data:`mdrag.knobs.MAX_HISTORY_CHARS`.

This module loads the OpenAI SDK only when it rewrites, so the clients that bound
their history with it (`mdrag ask`) stay light.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from mdrag.errors import LLMError
from mdrag.knobs import (
    MAX_HISTORY_ANSWER_CHARS,
    MAX_HISTORY_CHARS,
    MAX_HISTORY_TURNS,
    MAX_QUESTION_CHARS,
    REWRITE_MAX_CHARS,
    REWRITE_MAX_TOKENS,
    REWRITE_TIMEOUT_S,
)

if TYPE_CHECKING:
    from mdrag.config import Config

__all__ = [
    "REWRITE_PROMPT",
    "Turn",
    "bounded",
    "history_chars",
    "in_context",
    "joined_query",
    "rewrite_messages",
    "rewrite_query",
    "search_query",
]

logger = logging.getLogger(__name__)

REWRITE_PROMPT = (
    "You rewrite the last question of a conversation about a set of documents into a standalone search "
    "query for those documents. Use the earlier turns only to say what the question refers to (replace "
    "'it', 'that', 'this' and left-out subjects with what they mean); keep the question's own words, "
    "names and identifiers. If the question is already standalone, repeat it unchanged. Reply with the "
    "query only: one line, no quotes, no explanation, no answer."
)

_LABEL = re.compile(r"^(?:standalone\s+)?(?:search\s+)?query\s*:\s*", re.IGNORECASE)  # "Query: ..." a model may add
_QUOTES = "\"'`“”‘’"


@dataclass(frozen=True)
class Turn:
    """One earlier turn of a conversation: a question and the text of its answer."""

    question: str
    answer: str = ""  # the previous answer's text (may be "", e.g. a search-only turn)


def _cut(text: str, limit: int) -> str:
    """``text``, or its first characters and "…", in at most ``limit`` characters."""
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def history_chars(history: Sequence[Turn]) -> int:
    """The characters of a history's questions and answers together (what MAX_HISTORY_CHARS bounds)."""
    return sum(len(t.question) + len(t.answer) for t in history)


def bounded(history: Sequence[Turn]) -> list[Turn]:
    """The part of ``history`` that is read: its newest :data:`~mdrag.knobs.MAX_HISTORY_TURNS` turns with a
    question, each answer cut to its first :data:`~mdrag.knobs.MAX_HISTORY_ANSWER_CHARS` characters (and a
    question to :data:`~mdrag.knobs.MAX_QUESTION_CHARS`), then the oldest turns dropped until all fit in
    :data:`~mdrag.knobs.MAX_HISTORY_CHARS`. Front ends send this; the protocol refuses more."""
    turns = [
        Turn(_cut(t.question.strip(), MAX_QUESTION_CHARS), _cut(t.answer.strip(), MAX_HISTORY_ANSWER_CHARS))
        for t in history
        if t.question.strip()
    ][-MAX_HISTORY_TURNS:]
    while turns and history_chars(turns) > MAX_HISTORY_CHARS:
        if len(turns) == 1:  # only the newest turn is left: its answer goes, then its question is cut
            turn = turns[0]
            turns = [Turn(_cut(turn.question, MAX_HISTORY_CHARS), "")] if turn.answer else []
        else:
            turns = turns[1:]
    return turns


def joined_query(question: str, history: Sequence[Turn]) -> str:
    """The heuristic without an LLM: the follow-up searched together with the previous question.

    Only the previous question: it names what the follow-up refers to, while older
    questions are as likely about another subject and each adds words that pull the
    search away from the follow-up's own; answers are left out for the same reason
    (they are long). The follow-up comes first, so its words are kept when a long
    query is cut to the embedding model's input length.
    """
    turns = bounded(history)
    question = question.strip()
    if not turns:
        return question
    return f"{question} {turns[-1].question}"


def rewrite_messages(question: str, history: Sequence[Turn]) -> list[dict[str, str]]:
    """The chat messages that ask for the standalone query: :data:`REWRITE_PROMPT`, then the turns and the question."""
    lines = []
    for t in bounded(history):
        lines.append(f"Question: {t.question}")
        if t.answer:
            lines.append(f"Answer: {t.answer}")
    conversation = "\n".join(lines) or "(none)"
    last = question.strip()
    user = f"Earlier turns, oldest first:\n{conversation}\n\nLast question: {last}\n\nStandalone search query:"
    return [{"role": "system", "content": REWRITE_PROMPT}, {"role": "user", "content": user}]


def _checked(reply: str) -> str:
    """The search query in the model's reply; LLMError when the reply is not one (empty, several lines, too long)."""
    text = _LABEL.sub("", reply.strip()).strip()
    if len(text) >= 2 and text[0] in _QUOTES and text[-1] in _QUOTES:
        text = text[1:-1].strip()
    if not text:
        raise LLMError("the LLM's rewrite of the follow-up question is empty")
    if "\n" in text or "\r" in text:
        raise LLMError("the LLM's rewrite of the follow-up question is not one line")
    if len(text) > REWRITE_MAX_CHARS:
        raise LLMError(f"the LLM's rewrite of the follow-up question is too long ({len(text)} characters)")
    return text


def rewrite_query(question: str, history: Sequence[Turn], config: Config, timeout: float | None = None) -> str:
    """One short LLM completion that rewrites the follow-up into a standalone search query; raises on failure
    or timeout.

    The LLM is the one that answers (``llm.*``, :func:`mdrag.answering.generate.llm_settings`);
    ``timeout`` is the most seconds the whole completion may take (default
    :data:`~mdrag.knobs.REWRITE_TIMEOUT_S`). Raises :class:`LLMError` when no LLM is configured,
    when it fails or does not finish in time, and when its reply is not a query (:func:`_checked`).
    Blocking: async code runs it in a thread (called from a running event loop, it runs in one itself).
    """
    from mdrag.answering.generate import complete, llm_settings  # loads the OpenAI SDK: only a rewrite needs it

    limit = REWRITE_TIMEOUT_S if timeout is None else timeout
    llm = llm_settings(config)
    if not llm.configured:
        raise LLMError("no LLM is configured to rewrite a follow-up question: set llm.base_url")
    llm = replace(llm, timeout=min(llm.timeout, limit), max_tokens=REWRITE_MAX_TOKENS)
    messages = rewrite_messages(question, history)

    async def rewrite() -> str:
        try:
            return await asyncio.wait_for(complete(messages, llm), limit)
        except TimeoutError:
            raise LLMError(f"the LLM did not rewrite the follow-up question within {limit:g} s") from None

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        reply = asyncio.run(rewrite())
    else:  # called from async code: its event loop waits while another thread asks
        with ThreadPoolExecutor(1, thread_name_prefix="mdrag-rewrite") as pool:
            reply = pool.submit(asyncio.run, rewrite()).result()
    return _checked(reply)


def search_query(question: str, history: Sequence[Turn], config: Config) -> str:
    """What to search for: the question itself without history; with an LLM configured the rewrite (falling
    back to :func:`joined_query` with a warning when it fails); without one :func:`joined_query`."""
    if not bounded(history):
        return question
    if not (config.effective("llm.base_url") or "").strip():  # no LLM (llm_settings(config).configured)
        return joined_query(question, history)
    try:
        query = rewrite_query(question, history, config)
    except LLMError as e:
        logger.warning("Could not rewrite a follow-up question (%s): searching with the previous question joined", e)
        return joined_query(question, history)
    logger.debug("Follow-up %r searched as %r", question, query)
    return query


def in_context(question: str, history: Sequence[Turn]) -> str:
    """The question as the answering LLM reads it: the follow-up, then the earlier questions it may refer to.

    The earlier answers are left out: their ``[n]`` cite other sources than this answer's.
    """
    turns = bounded(history)
    if not turns:
        return question
    earlier = "\n".join(f"- {t.question}" for t in turns)
    return f"{question.strip()}\n\n(This question follows earlier questions oldest first:\n{earlier})"
