"""Follow-up questions (issue 30 point 1): what a follow-up searches for (mdrag.answering.followup), with the
loopback stand-in LLM for the rewrite; then through `Index.ask`, the WebSocket server on real Hugo docs,
and `mdrag ask` at its prompt."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from mdrag.answering.followup import (
    REWRITE_PROMPT,
    Turn,
    bounded,
    history_chars,
    in_context,
    joined_query,
    rewrite_query,
    search_query,
)
from mdrag.config import Config, load_config
from mdrag.errors import LLMError
from mdrag.knobs import (
    MAX_HISTORY_ANSWER_CHARS,
    MAX_HISTORY_CHARS,
    MAX_HISTORY_TURNS,
    REWRITE_MAX_CHARS,
    REWRITE_MAX_TOKENS,
)
from tests.fake_llm import KEY, LLM

MENU = "How do I configure the menu?"
NEST = "and how do I nest it?"
NESTED = "How do I nest menu entries?"  # what the stand-in LLM answers to a rewrite request


def _llm_config(llm: LLM, **overrides: Any) -> Config:
    return load_config({"llm.base_url": llm.base_url, "llm.api_key": KEY, "llm.model": "m", **overrides})


# -- the heuristic and the bounds ---------------------------------------------------------------------------


def test_joined_query_searches_the_follow_up_with_the_previous_question_only() -> None:
    assert joined_query(NEST, []) == NEST
    history = [Turn("What is a taxonomy?", "A taxonomy groups content [1]."), Turn(MENU, "Define menus [1].")]
    assert joined_query(f"  {NEST} ", history) == f"{NEST} {MENU}"  # the follow-up first, then the last question
    assert joined_query(NEST, [Turn(MENU), Turn("  ", "an answer to no question")]) == f"{NEST} {MENU}"


def test_a_history_is_cut_to_its_newest_turns_and_its_bounds() -> None:
    many = [Turn(f"question {i}", f"answer {i}") for i in range(MAX_HISTORY_TURNS + 3)]
    kept = bounded(many)
    assert kept == many[-MAX_HISTORY_TURNS:]
    long = bounded([Turn(MENU, "x" * (MAX_HISTORY_ANSWER_CHARS * 3))])
    assert len(long[0].answer) <= MAX_HISTORY_ANSWER_CHARS + 1 and long[0].answer.endswith("…")
    big = [Turn("q" * 3000, "a" * MAX_HISTORY_ANSWER_CHARS) for _ in range(MAX_HISTORY_TURNS)]
    kept = bounded(big)
    assert kept and history_chars(kept) <= MAX_HISTORY_CHARS and len(kept) < len(big)
    assert kept[-1].question == big[-1].question  # the newest turn is the one kept
    assert bounded([Turn("q" * (MAX_HISTORY_CHARS * 2))])[0].question.startswith("q")


def test_without_an_llm_a_follow_up_searches_the_joined_query(llm: LLM) -> None:
    config = load_config({})
    assert search_query(NEST, [], config) == NEST
    assert search_query(NEST, [Turn(MENU, "Use the menus key [1].")], config) == f"{NEST} {MENU}"
    with pytest.raises(LLMError, match="no LLM is configured"):
        rewrite_query(NEST, [Turn(MENU)], config)
    assert llm.script.requests == []


# -- the rewrite, through the loopback stand-in LLM ---------------------------------------------------------


def test_with_an_llm_a_follow_up_is_rewritten_in_one_short_completion(llm: LLM) -> None:
    llm.script.rewrite = f'Query: "{NESTED}"'  # a label and quotes around it are taken off
    history = [Turn(MENU, "Define entries under menus.main [1].")]
    assert search_query(NEST, history, _llm_config(llm)) == NESTED
    (request,) = llm.script.requests
    body = request["body"]
    assert body["max_tokens"] == REWRITE_MAX_TOKENS and body["model"] == "m"
    assert request["headers"]["authorization"] == f"Bearer {KEY}"
    system, user = body["messages"]
    assert system["content"] == REWRITE_PROMPT
    assert f"Question: {MENU}\nAnswer: Define entries under menus.main [1]." in user["content"]
    assert f"Last question: {NEST}" in user["content"]
    assert search_query(NEST, [], _llm_config(llm)) == NEST and len(llm.script.requests) == 1  # alone: no rewrite


@pytest.mark.parametrize(
    ("fault", "why"),
    [
        ({"status": 500, "error_body": b'{"error": {"message": "model crashed"}}'}, "HTTP 500: model crashed"),
        ({"rewrite": "Here is the query:\nHow do I nest menus?"}, "not one line"),
        ({"rewrite": "   "}, "is empty"),
        ({"rewrite": "menu " * REWRITE_MAX_CHARS}, "too long"),
        ({"finish_reason": "length"}, "token limit"),
        ({"hang": "before_headers"}, "did not answer within 1 s"),
    ],
)
def test_a_failed_rewrite_falls_back_to_the_joined_query_with_a_warning(
    llm: LLM, caplog: pytest.LogCaptureFixture, fault: dict[str, Any], why: str
) -> None:
    for name, value in fault.items():
        setattr(llm.script, name, value)
    config = _llm_config(llm, **{"llm.timeout": 1})
    with pytest.raises(LLMError, match=why):
        rewrite_query(NEST, [Turn(MENU)], config)
    with caplog.at_level(logging.WARNING, logger="mdrag.answering.followup"):
        assert search_query(NEST, [Turn(MENU)], config) == f"{NEST} {MENU}"
    (warning,) = [r for r in caplog.records if r.name == "mdrag.answering.followup"]
    assert warning.levelno == logging.WARNING and why.split(":")[0] in warning.getMessage()
    assert KEY not in caplog.text


def test_the_rewrite_has_its_own_time_limit(llm: LLM) -> None:
    llm.script.hang = "before_headers"
    config = _llm_config(llm)  # llm.timeout 60 s: the rewrite's limit is shorter
    with pytest.raises(LLMError, match=r"did not rewrite the follow-up question within 0\.5 s"):
        rewrite_query(NEST, [Turn(MENU)], config, timeout=0.5)


def test_the_rewrite_runs_from_async_code(llm: LLM) -> None:
    """Called with an event loop running (a Jupyter cell), it asks from another thread."""
    llm.script.rewrite = NESTED

    async def from_async_code() -> str:
        return rewrite_query(NEST, [Turn(MENU)], _llm_config(llm))

    assert asyncio.run(from_async_code()) == NESTED


def test_the_answering_llm_is_told_the_earlier_questions_not_their_answers() -> None:
    assert in_context(NEST, []) == NEST
    told = in_context(NEST, [Turn(MENU, "Define entries [1].")])
    assert told.startswith(NEST) and f"- {MENU}" in told and "Define entries" not in told
